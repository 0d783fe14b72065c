/* redis_encode.c: the bytes the decision library takes (redis_encode.h). */
#include "redis_encode.h"

#include "store.h"

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

size_t redis_limits_bytes(const struct limit_spec *limits, size_t nl, uint8_t *p)
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
		uint8_t kept = store_key_packed(l) ? 1 : store_key_unexpiring(l) ? 2 : 0;

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

