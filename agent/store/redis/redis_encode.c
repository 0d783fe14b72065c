/* SPDX-License-Identifier: Apache-2.0 */
/* redis_encode.c: the bytes the decision library takes (redis_encode.h). */
#include "redis_encode.h"

#include <string.h>


/* v in n bytes, most significant first */
void redis_put_be(uint8_t *p, uint64_t v, int n)
{
	for (int i = n - 1; i >= 0; i--) {
		p[i] = (uint8_t)v;
		v >>= 8;
	}
}

/* v in msgpack's shortest form for a non-negative integer; returns the
 * length (at most 9) */
size_t redis_mp_uint(uint8_t *p, uint64_t v)
{
	if (v < 128) {
		p[0] = (uint8_t)v;
		return 1;
	}
	if (v < 256) {
		p[0] = 0xcc;
		p[1] = (uint8_t)v;
		return 2;
	}
	if (v < 65536) {
		p[0] = 0xcd;
		redis_put_be(p + 1, v, 2);
		return 3;
	}
	if (v < 4294967296ULL) {
		p[0] = 0xce;
		redis_put_be(p + 1, v, 4);
		return 5;
	}
	p[0] = 0xcf;
	redis_put_be(p + 1, v, 8);
	return 9;
}

size_t redis_limits_bytes(const struct redis_keys *k, const struct limit_spec *limits, size_t nl,
			  bool dropped, uint8_t *p)
{
	size_t n = 0;

	if (nl < 16) {
		p[n++] = (uint8_t)(0x90 + nl);
	} else {
		p[n++] = 0xdc;
		redis_put_be(p + n, nl, 2);
		n += 2;
	}
	for (size_t j = 0; j < nl; j++) {
		const struct limit_spec *l = &limits[j];

		/* kept: 1 packed, 2 without an expiry, 0 (left out) keys */
		uint8_t kept = redis_key_packed(k, l) ? 1 : redis_key_unexpiring(k, l, dropped) ? 2 : 0;

		p[n++] = kept ? 0x95 : 0x94;
		n += redis_mp_uint(p + n, (uint64_t)l->algo);
		n += redis_mp_uint(p + n, l->quota);
		n += redis_mp_uint(p + n, (uint64_t)l->period_us);
		n += redis_mp_uint(p + n, l->burst);
		if (kept)
			p[n++] = kept;
	}
	return n;
}

static size_t digits(size_t v)
{
	size_t n = 1;

	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

/* "<c><v>\r\n" */
static size_t put_head(char *p, char c, size_t v)
{
	size_t n = digits(v);

	p[0] = c;
	for (size_t i = n; i > 0; i--) {
		p[i] = (char)('0' + v % 10);
		v /= 10;
	}
	p[n + 1] = '\r';
	p[n + 2] = '\n';
	return n + 3;
}

size_t redis_resp_len(size_t argc, const size_t *argvlen)
{
	size_t n = 3 + digits(argc);

	for (size_t i = 0; i < argc; i++)
		n += 3 + digits(argvlen[i]) + argvlen[i] + 2;
	return n;
}

size_t redis_resp_put(char *out, size_t argc, const char *const *argv, const size_t *argvlen)
{
	size_t n = put_head(out, '*', argc);

	for (size_t i = 0; i < argc; i++) {
		n += put_head(out + n, '$', argvlen[i]);
		memcpy(out + n, argv[i], argvlen[i]);
		n += argvlen[i];
		out[n++] = '\r';
		out[n++] = '\n';
	}
	return n;
}
