/* SPDX-License-Identifier: Apache-2.0 */
#include "redis_reply.h"

#include <string.h>

/* A small msgpack reader over [p, end), written for this one shape rather
 * than msgpack-c's unpacker: that one allocates by the element counts the
 * data announces (a 4-byte count of 2^32 asks for 128 GiB), while this
 * allocates nothing and walks only bytes that are there. Every step checks
 * `n > end - p` before reading; nesting is capped. */

#define DEPTH_MAX 8

struct rd {
	const uint8_t *p, *end;
};

static int need(struct rd *r, size_t n)
{
	return n <= (size_t)(r->end - r->p);
}

/* The big-endian integer of n bytes at p, n one of 1, 2, 4 or 8 (as
 * msgpack's widths are): whole expressions the compiler makes one load
 * and a byte swap of, where a loop over the bytes cost some 50
 * instructions for the 8 of each of a reply's numbers. */
static uint64_t be(const uint8_t *p, size_t n)
{
	switch (n) {
	case 1:
		return p[0];
	case 2:
		return (uint64_t)p[0] << 8 | p[1];
	case 4:
		return (uint64_t)p[0] << 24 | (uint64_t)p[1] << 16 | (uint64_t)p[2] << 8 | p[3];
	default:
		return (uint64_t)p[0] << 56 | (uint64_t)p[1] << 48 | (uint64_t)p[2] << 40 |
		       (uint64_t)p[3] << 32 | (uint64_t)p[4] << 24 | (uint64_t)p[5] << 16 |
		       (uint64_t)p[6] << 8 | p[7];
	}
}

/* Reads an array header. Returns 0 with *count, or -1. */
static int read_array(struct rd *r, uint32_t *count)
{
	uint8_t b;

	if (!need(r, 1))
		return -1;
	b = *r->p;
	if ((b & 0xf0) == 0x90) {
		*count = b & 0x0f;
		r->p++;
		return 0;
	}
	if (b == 0xdc || b == 0xdd) {
		size_t n = b == 0xdc ? 2 : 4;

		if (!need(r, 1 + n))
			return -1;
		*count = (uint32_t)be(r->p + 1, n);
		r->p += 1 + n;
		return 0;
	}
	return -1;
}

/* Reads an integer (or a whole double within 2^53). Returns 0 or -1. */
static int read_int(struct rd *r, int64_t *v)
{
	uint8_t b;
	static const uint8_t usize[4] = { 1, 2, 4, 8 };

	if (!need(r, 1))
		return -1;
	b = *r->p;
	if (b <= 0x7f || b >= 0xe0) {
		*v = (int8_t)b;
		if (b <= 0x7f)
			*v = b;
		r->p++;
		return 0;
	}
	if (b >= 0xcc && b <= 0xcf) {            /* uint 8..64 */
		size_t n = usize[b - 0xcc];
		uint64_t u;

		if (!need(r, 1 + n))
			return -1;
		u = be(r->p + 1, n);
		if (u > INT64_MAX)
			return -1;
		*v = (int64_t)u;
		r->p += 1 + n;
		return 0;
	}
	if (b >= 0xd0 && b <= 0xd3) {            /* int 8..64 */
		size_t n = usize[b - 0xd0];
		uint64_t u;

		if (!need(r, 1 + n))
			return -1;
		u = be(r->p + 1, n);
		/* sign-extend from n bytes */
		if (n < 8 && (u >> (8 * n - 1)) & 1)
			u |= ~(uint64_t)0 << (8 * n);
		memcpy(v, &u, sizeof(*v));
		r->p += 1 + n;
		return 0;
	}
	if (b == 0xcb) {                         /* float 64: Lua's numbers */
		uint64_t u;
		double d;

		if (!need(r, 9))
			return -1;
		u = be(r->p + 1, 8);
		memcpy(&d, &u, sizeof(d));
		if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0) ||
		    d != (double)(int64_t)d)
			return -1;
		*v = (int64_t)d;
		r->p += 9;
		return 0;
	}
	return -1;
}

/* Skips one object of any type. Returns 0 or -1. */
static int skip(struct rd *r, int depth)
{
	uint8_t b;
	uint64_t count = 0, len = 0;
	size_t hdr = 1;

	if (depth > DEPTH_MAX || !need(r, 1))
		return -1;
	b = *r->p;
	if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
		r->p++;
		return 0;
	}
	if ((b & 0xe0) == 0xa0) {                /* fixstr */
		len = b & 0x1f;
	} else if ((b & 0xf0) == 0x90 || (b & 0xf0) == 0x80) {
		count = (uint64_t)(b & 0x0f) * ((b & 0xf0) == 0x80 ? 2 : 1);
	} else {
		switch (b) {
		case 0xcc: case 0xd0: len = 1; break;
		case 0xcd: case 0xd1: len = 2; break;
		case 0xce: case 0xd2: case 0xca: len = 4; break;
		case 0xcf: case 0xd3: case 0xcb: len = 8; break;
		case 0xd4: len = 2; break;           /* fixext 1..16: type + data */
		case 0xd5: len = 3; break;
		case 0xd6: len = 5; break;
		case 0xd7: len = 9; break;
		case 0xd8: len = 17; break;
		case 0xc4: case 0xd9: case 0xc7:     /* 8-bit lengths */
			if (!need(r, 2))
				return -1;
			len = r->p[1] + (b == 0xc7 ? 1 : 0);
			hdr = 2;
			break;
		case 0xc5: case 0xda: case 0xc8:
			if (!need(r, 3))
				return -1;
			len = be(r->p + 1, 2) + (b == 0xc8 ? 1 : 0);
			hdr = 3;
			break;
		case 0xc6: case 0xdb: case 0xc9:
			if (!need(r, 5))
				return -1;
			len = be(r->p + 1, 4) + (b == 0xc9 ? 1 : 0);
			hdr = 5;
			break;
		case 0xdc: case 0xde:
			if (!need(r, 3))
				return -1;
			count = be(r->p + 1, 2) * (b == 0xde ? 2 : 1);
			hdr = 3;
			break;
		case 0xdd: case 0xdf:
			if (!need(r, 5))
				return -1;
			count = be(r->p + 1, 4) * (b == 0xdf ? 2 : 1);
			hdr = 5;
			break;
		default:
			return -1;
		}
	}
	if (!need(r, hdr + len))
		return -1;
	r->p += hdr + len;
	/* each element takes at least one byte: a count larger than what
	 * is left fails after at most that many steps */
	for (uint64_t i = 0; i < count; i++)
		if (skip(r, depth + 1) < 0)
			return -1;
	return 0;
}

/* A string (fixstr, str 8), or nil: *s NULL and *len 0. Returns 0 or -1. */
static int read_str_or_nil(struct rd *r, const char **s, uint32_t *len)
{
	uint8_t b;
	size_t hdr = 1, n;

	if (!need(r, 1))
		return -1;
	b = *r->p;
	if (b == 0xc0) {
		*s = NULL;
		*len = 0;
		r->p++;
		return 0;
	}
	if ((b & 0xe0) == 0xa0) {
		n = b & 0x1f;
	} else if (b == 0xd9 && need(r, 2)) {
		n = r->p[1];
		hdr = 2;
	} else {
		return -1;
	}
	if (n == 0 || !need(r, hdr + n))
		return -1;
	*s = (const char *)r->p + hdr;
	*len = (uint32_t)n;
	r->p += hdr + n;
	return 0;
}

/* A lease: [extra, v_1 .. v_nl], one value per limit. Returns 0 or -1. */
static int decode_lease(struct rd *r, struct redis_decision *d, uint32_t nl)
{
	uint32_t m;

	if (read_array(r, &m) < 0 || m != 1 + nl || read_int(r, &d->lease_extra) < 0 ||
	    d->lease_extra < 0)
		return -1;
	for (uint32_t j = 0; j < nl; j++)
		if (read_str_or_nil(r, &d->lval[j], &d->llen[j]) < 0)
			return -1;
	d->has_lease = 1;
	return 0;
}

/* One request's part: [allowed, decider, [[rem, retry, reset]...]] and,
 * when it asked for a lease, the lease. A part of another shape is
 * skipped and marked not ok. Returns -1 only when the data ends inside
 * it. */
static int decode_one(struct rd *r, struct redis_decision *d)
{
	struct rd save = *r;
	uint32_t n, nl;

	d->ok = 0;
	d->nvals = 0;
	d->has_lease = 0;
	d->lease_extra = 0;
	if (read_array(r, &n) < 0 || (n != 3 && n != 4) || read_int(r, &d->allowed) < 0 ||
	    read_int(r, &d->decider) < 0 || read_array(r, &nl) < 0 || nl > LIMIT_SET_MAX)
		goto bad;
	for (uint32_t j = 0; j < nl; j++) {
		uint32_t three;

		if (read_array(r, &three) < 0 || three != 3)
			goto bad;
		for (int k = 0; k < 3; k++)
			if (read_int(r, &d->vals[d->nvals++]) < 0)
				goto bad;
	}
	if (n == 4 && decode_lease(r, d, nl) < 0)
		goto bad;
	d->ok = 1;
	return 0;
bad:
	d->nvals = 0;
	d->has_lease = 0;
	*r = save;
	return skip(r, 1);
}

int redis_reply_msgpack(const char *data, size_t len, size_t n, struct redis_decision *out)
{
	struct rd r = { (const uint8_t *)data, (const uint8_t *)data + len };
	uint32_t top, count;
	int64_t now;

	if (read_array(&r, &top) < 0 || top != 2 || read_int(&r, &now) < 0 ||
	    read_array(&r, &count) < 0 || count != n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (decode_one(&r, &out[i]) < 0)
			return -1;
		out[i].now = now;
	}
	return 0;
}
