/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_frame.c: the whole SPOP decoder surface over arbitrary bytes.
 *
 * The input is read as a stream of frames, twice: with our own frame limit
 * and with the smallest one we accept. Each complete frame's payload is
 * decoded as a HAPROXY-HELLO, a LIST-OF-MESSAGES and a KV-LIST; every item
 * decoded is written back with the encoders and decoded again, and must
 * come back equal. The raw input also goes straight through the item
 * decoders, so inputs need not be framed to reach them. Any broken
 * invariant calls abort(). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond))                                                   \
			abort();                                               \
	} while (0)

static int data_equal(const struct spop_data *a, const struct spop_data *b)
{
	if (a->type != b->type)
		return 0;
	switch ((enum spop_type)a->type) {
	case SPOP_T_NULL:
		return 1;
	case SPOP_T_BOOL:
		return a->u.boolean == b->u.boolean;
	case SPOP_T_INT32:
		return a->u.i32 == b->u.i32;
	case SPOP_T_UINT32:
		return a->u.u32 == b->u.u32;
	case SPOP_T_INT64:
		return a->u.i64 == b->u.i64;
	case SPOP_T_UINT64:
		return a->u.u64 == b->u.u64;
	case SPOP_T_IPV4:
		return memcmp(a->u.ipv4, b->u.ipv4, 4) == 0;
	case SPOP_T_IPV6:
		return memcmp(a->u.ipv6, b->u.ipv6, 16) == 0;
	case SPOP_T_STR:
	case SPOP_T_BIN:
		return a->u.str.len == b->u.str.len &&
		       (a->u.str.len == 0 ||
			memcmp(a->u.str.ptr, b->u.str.ptr, a->u.str.len) == 0);
	default:
		return 0;
	}
}

static int in_region(const void *ptr, size_t len, const uint8_t *lo, const uint8_t *hi)
{
	const uint8_t *p = ptr;

	return p >= lo && p <= hi && len <= (size_t)(hi - p);
}

/* Re-encodes one decoded KV item (the value alone when name is NULL) and
 * checks that it decodes back to the same name and value, consuming
 * exactly what was written. For all types but INT32/UINT32 (whose cast may
 * drop bits) and values whose flag nibble was set, the bytes must also be
 * the original ones, since the varint encoding is one-to-one. */
static void roundtrip_kv(const struct spop_str *name, const struct spop_data *val,
			 const uint8_t *orig, size_t orig_len)
{
	static uint8_t buf[32768]; /* two items of a 16384-byte frame fit */
	struct spop_wbuf w;
	struct spop_str n2;
	struct spop_data v2;
	const uint8_t *p, *vstart;

	/* Raw inputs can hold items bigger than any frame: skip those. */
	if ((name && name->len > sizeof(buf) / 2) ||
	    ((val->type == SPOP_T_STR || val->type == SPOP_T_BIN) &&
	     val->u.str.len > sizeof(buf) / 2 - 64))
		return;
	spop_wbuf_init(&w, buf, sizeof(buf));
	if (name)
		spop_put_name(&w, name->ptr, name->len);
	vstart = buf + w.len;
	spop_put_data(&w, val);
	CHECK(!w.err);
	p = buf;
	if (name) {
		CHECK(spop_name_decode(&p, buf + w.len, &n2) == SPOP_OK);
		CHECK(n2.len == name->len);
		CHECK(n2.len == 0 || memcmp(n2.ptr, name->ptr, n2.len) == 0);
	}
	CHECK(p == vstart);
	CHECK(spop_data_decode(&p, buf + w.len, &v2) == SPOP_OK);
	CHECK(p == buf + w.len);
	CHECK(data_equal(val, &v2));
	if (orig && val->type != SPOP_T_INT32 && val->type != SPOP_T_UINT32) {
		size_t skip = name ? (size_t)(vstart - buf) : 0;

		CHECK(orig_len == w.len);
		/* Name bytes and everything after the type byte are exact. */
		CHECK(memcmp(orig, buf, skip) == 0);
		CHECK((orig[skip] & 0x0F) == buf[skip]
		      || (val->type == SPOP_T_BOOL && orig[skip] == buf[skip]));
		CHECK(memcmp(orig + skip + 1, buf + skip + 1, w.len - skip - 1) == 0);
	}
}

static void check_kv_list(const uint8_t *p, size_t len)
{
	struct spop_cursor c = {p, p + len};
	struct spop_str k;
	struct spop_data v;
	int rc;

	for (;;) {
		const uint8_t *before = c.p;

		rc = spop_kv_next(&c, &k, &v);
		if (rc != 1) {
			CHECK(c.p == before);
			CHECK(rc == 0 ? c.p == c.end : rc == -1);
			break;
		}
		CHECK(c.p > before && c.p <= c.end);
		CHECK(in_region(k.ptr, k.len, before, c.p));
		if (v.type == SPOP_T_STR || v.type == SPOP_T_BIN)
			CHECK(in_region(v.u.str.ptr, v.u.str.len, before, c.p));
		roundtrip_kv(&k, &v, before, (size_t)(c.p - before));
	}
}

static void check_messages(const uint8_t *p, size_t len)
{
	struct spop_cursor c = {p, p + len}, args;
	struct spop_str name, k;
	struct spop_data v;
	unsigned nargs, i;
	int rc;

	for (;;) {
		const uint8_t *before = c.p;

		rc = spop_msg_next(&c, &name, &nargs, &args);
		if (rc != 1) {
			CHECK(c.p == before);
			CHECK(rc == 0 ? c.p == c.end : rc == -1);
			break;
		}
		CHECK(nargs <= 255);
		CHECK(in_region(name.ptr, name.len, before, c.p));
		CHECK(args.end == c.p && args.p <= args.end && args.p > before);
		/* Arguments were checked by spop_msg_next: exactly nargs,
		 * none can fail. */
		for (i = 0; i < nargs; i++) {
			const uint8_t *a = args.p;

			CHECK(spop_kv_next(&args, &k, &v) == 1);
			roundtrip_kv(&k, &v, a, (size_t)(args.p - a));
		}
		CHECK(spop_kv_next(&args, &k, &v) == 0);
	}
}

static void check_hello(const uint8_t *p, size_t len)
{
	struct spop_hello h;
	int st = -7, rc;

	rc = spop_hello_parse(p, len, &h, &st);
	CHECK(rc == 0 || rc == -1);
	CHECK((rc == 0) == (st == SPOP_ST_NORMAL));
	if (rc == 0) {
		CHECK(h.has_version && h.has_max_frame_size && h.has_capabilities);
		CHECK(h.max_frame_size >= SPOP_MIN_FRAME_SIZE);
		CHECK(spop_version_supported(h.supported_versions));
		CHECK(in_region(h.supported_versions.ptr, h.supported_versions.len, p, p + len));
		CHECK(in_region(h.capabilities.ptr, h.capabilities.len, p, p + len));
		CHECK(h.healthcheck == 0 || h.healthcheck == 1);
		if (h.engine_id.ptr)
			CHECK(in_region(h.engine_id.ptr, h.engine_id.len, p, p + len));
	} else {
		CHECK(st == SPOP_ST_INVALID || st == SPOP_ST_NO_VERSION ||
		      st == SPOP_ST_NO_FRAME_SIZE || st == SPOP_ST_NO_CAPABILITIES ||
		      st == SPOP_ST_BAD_VERSION || st == SPOP_ST_BAD_FRAME_SIZE);
	}
	CHECK(spop_status_str(st) != NULL);
}

/* Reads frames one after the other under a frame limit. */
static void check_stream(const uint8_t *data, size_t size, uint32_t max_frame)
{
	size_t off = 0;

	while (off < size) {
		struct spop_frame f;
		int st = -7, rc;

		rc = spop_frame_peek(data + off, size - off, max_frame, &f, &st);
		if (rc == SPOP_NEED_MORE) {
			CHECK(st == SPOP_ST_NORMAL);
			break;
		}
		if (rc == SPOP_ERR) {
			CHECK(st == SPOP_ST_TOO_BIG || st == SPOP_ST_INVALID);
			break;
		}
		CHECK(rc == SPOP_OK && st == SPOP_ST_NORMAL);
		CHECK(f.len >= SPOP_FRAME_HDR_MIN && f.len <= max_frame);
		CHECK(f.len <= size - off - 4);
		CHECK(f.payload >= data + off + 4 + SPOP_FRAME_HDR_MIN);
		CHECK(f.payload + f.payload_len == data + off + 4 + f.len);
		/* One byte less is a valid prefix, never a frame. */
		{
			struct spop_frame g;

			CHECK(spop_frame_peek(data + off, 4 + (size_t)f.len - 1, max_frame,
					      &g, &st) == SPOP_NEED_MORE);
		}
		check_hello(f.payload, f.payload_len);
		check_messages(f.payload, f.payload_len);
		check_kv_list(f.payload, f.payload_len);
		off += 4 + (size_t)f.len;
	}
}

/* Decodes a varint at each of the first offsets; every value read must
 * re-encode to the very same bytes. */
static void check_varints(const uint8_t *data, size_t size)
{
	size_t off;

	for (off = 0; off < size && off < 64; off++) {
		const uint8_t *p = data + off;
		uint8_t b[SPOP_VARINT_MAX];
		uint64_t v;
		int rc = spop_varint_decode(&p, data + size, &v);

		if (rc == SPOP_OK) {
			size_t n = spop_varint_encode(v, b);

			CHECK(p == data + off + n);
			CHECK(memcmp(b, data + off, n) == 0);
		} else {
			CHECK(p == data + off);
			CHECK(rc == SPOP_NEED_MORE ? size - off < SPOP_VARINT_MAX : rc == SPOP_ERR);
		}
	}
}

/* Walks the raw input as a sequence of typed data items. */
static void check_items(const uint8_t *data, size_t size)
{
	const uint8_t *p = data, *end = data + size;

	while (p != end) {
		const uint8_t *before = p;
		struct spop_data v;

		if (spop_data_decode(&p, end, &v) != SPOP_OK) {
			CHECK(p == before);
			break;
		}
		CHECK(p > before && p <= end);
		roundtrip_kv(NULL, &v, before, (size_t)(p - before));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct spop_str s;

	if (size == 0)
		return 0;
	check_stream(data, size, SPOP_OWN_FRAME_SIZE);
	check_stream(data, size, SPOP_MIN_FRAME_SIZE);
	check_hello(data, size);
	check_messages(data, size);
	check_kv_list(data, size);
	check_items(data, size);
	check_varints(data, size);
	s.ptr = (const char *)data;
	s.len = size;
	(void)spop_version_supported(s);
	return 0;
}
