/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the SPOP codec: byte-exact vectors, round trips, truncation
 * at every offset and the HELLO rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "spop.h"

/* The 82 bytes of HAProxy's `option spop-check`. */
static const uint8_t hc_frame[] = {
	0x00, 0x00, 0x00, 0x4e, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
	0x12, 's', 'u', 'p', 'p', 'o', 'r', 't', 'e', 'd', '-', 'v', 'e', 'r',
	's', 'i', 'o', 'n', 's', 0x08, 0x03, '2', '.', '0',
	0x0e, 'm', 'a', 'x', '-', 'f', 'r', 'a', 'm', 'e', '-', 's', 'i', 'z', 'e',
	0x03, 0xfc, 0xf0, 0x06,
	0x0c, 'c', 'a', 'p', 'a', 'b', 'i', 'l', 'i', 't', 'i', 'e', 's', 0x08, 0x00,
	0x0b, 'h', 'e', 'a', 'l', 't', 'h', 'c', 'h', 'e', 'c', 'k', 0x11,
};

struct vec {
	uint64_t v;
	size_t n;
	uint8_t b[SPOP_VARINT_MAX];
};

static const struct vec varint_vectors[] = {
	{0, 1, {0x00}},
	{239, 1, {0xef}},
	{240, 2, {0xf0, 0x00}},
	{256, 2, {0xf0, 0x01}},
	{2287, 2, {0xff, 0x7f}},
	{2288, 3, {0xf0, 0x80, 0x00}},
	{16380, 3, {0xfc, 0xf0, 0x06}},
	{16384, 3, {0xf0, 0xf1, 0x06}},
	{65535, 3, {0xff, 0xf0, 0x1e}},
	{UINT32_MAX, 5, {0xff, 0xf0, 0xfe, 0xfe, 0x7e}},
	{UINT64_MAX, 10, {0xff, 0xf0, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0x0e}},
};

/* Smallest value that takes k bytes (k = 1..10), from the encoding's digit
 * ranges: 240 one-byte values, then 16 * 128^(k-1) values of k bytes. */
static uint64_t varint_min_len[SPOP_VARINT_MAX + 1];

static void init_boundaries(void)
{
	uint64_t count = 16 * 128; /* two-byte values */
	int k;

	varint_min_len[1] = 0;
	varint_min_len[2] = 240;
	for (k = 3; k <= SPOP_VARINT_MAX; k++) {
		varint_min_len[k] = varint_min_len[k - 1] + count;
		count <<= 7;
	}
}

static size_t expected_len(uint64_t v)
{
	size_t k;

	for (k = SPOP_VARINT_MAX; k > 1; k--)
		if (v >= varint_min_len[k])
			return k;
	return 1;
}

/* Fixed-seed xorshift64*, so failures reproduce. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1Dull;
}

/* Encodes v, decodes it back and checks the length and every prefix. */
static void check_varint(uint64_t v)
{
	uint8_t b[SPOP_VARINT_MAX + 4];
	const uint8_t *p;
	uint64_t out = 0;
	size_t n, i;

	memset(b, 0xAA, sizeof(b));
	n = spop_varint_encode(v, b);
	assert_int_equal(n, expected_len(v));
	assert_int_equal(b[n], 0xAA); /* wrote nothing past its length */
	p = b;
	assert_int_equal(spop_varint_decode(&p, b + n, &out), SPOP_OK);
	assert_true(out == v);
	assert_ptr_equal(p, b + n);
	for (i = 0; i < n; i++) {
		p = b;
		assert_int_equal(spop_varint_decode(&p, b + i, &out), SPOP_NEED_MORE);
		assert_ptr_equal(p, b);
	}
}

static void test_varint_vectors(void **state)
{
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(varint_vectors) / sizeof(varint_vectors[0]); i++) {
		const struct vec *t = &varint_vectors[i];
		uint8_t b[SPOP_VARINT_MAX];
		const uint8_t *p = t->b;
		uint64_t out = 0;

		memset(b, 0, sizeof(b));
		assert_int_equal(spop_varint_encode(t->v, b), t->n);
		assert_memory_equal(b, t->b, t->n);
		assert_int_equal(spop_varint_decode(&p, t->b + t->n, &out), SPOP_OK);
		assert_true(out == t->v);
		assert_ptr_equal(p, t->b + t->n);
		check_varint(t->v);
	}
}

static void test_varint_exhaustive(void **state)
{
	uint64_t v;

	(void)state;
	for (v = 0; v <= 300000; v++)
		check_varint(v);
}

static void test_varint_boundaries(void **state)
{
	int k, d;

	(void)state;
	assert_true(varint_min_len[2] == 240);
	assert_true(varint_min_len[3] == 2288);
	assert_true(varint_min_len[4] == 264432);
	for (k = 2; k <= SPOP_VARINT_MAX; k++) {
		for (d = -3; d <= 3; d++) {
			uint64_t v = varint_min_len[k] + (uint64_t)(int64_t)d;

			check_varint(v);
		}
		/* The last value of the previous length. */
		{
			uint8_t b[SPOP_VARINT_MAX];

			assert_int_equal(spop_varint_encode(varint_min_len[k] - 1, b),
					 (size_t)k - 1);
			assert_int_equal(spop_varint_encode(varint_min_len[k], b), (size_t)k);
		}
	}
	for (d = 0; d < 8; d++)
		check_varint(UINT64_MAX - (uint64_t)d);
	check_varint((uint64_t)INT64_MAX);
	check_varint((uint64_t)INT64_MIN);
}

static void test_varint_random(void **state)
{
	int i;

	(void)state;
	for (i = 0; i < 200000; i++) {
		uint64_t v = rng();
		unsigned bits = (unsigned)(rng() % 65);

		if (bits < 64)
			v &= ((uint64_t)1 << bits) - 1;
		check_varint(v);
	}
}

/* The encoder as it was written first, a count and a loop: the inline
 * writer must give the very same bytes (HAProxy reads them). */
static size_t varint_put_loop(uint64_t v, uint8_t *out)
{
	size_t n = 0;

	if (v < 240) {
		out[n++] = (uint8_t)v;
		return n;
	}
	out[n++] = (uint8_t)((v | 0xF0) & 0xFF);
	v = (v - 240) >> 4;
	while (v >= 128) {
		out[n++] = (uint8_t)((v | 0x80) & 0xFF);
		v = (v - 128) >> 7;
	}
	out[n++] = (uint8_t)v;
	return n;
}

static void check_same_as_loop(uint64_t v)
{
	static const struct spop_var var = SPOP_VAR(SPOP_SCOPE_TXN, "remaining");
	uint8_t want[SPOP_VARINT_MAX + 4], got[SPOP_VARINT_MAX + 4];
	uint8_t act[SPOP_VAR_INT64_MAX + 4], ref[SPOP_VAR_INT64_MAX + 4];
	size_t n, head = SPOP_VAR_HEAD_FIXED + sizeof("remaining") - 1;

	memset(want, 0xAA, sizeof(want));
	memset(got, 0xAA, sizeof(got));
	n = varint_put_loop(v, want);
	assert_ptr_equal(spop_varint_at(got, v), got + n);
	assert_memory_equal(got, want, sizeof(got));
	/* and as the value of an answer's variable */
	memset(act, 0xAA, sizeof(act));
	memset(ref, 0xAA, sizeof(ref));
	memcpy(ref, &var, head);
	ref[head] = SPOP_T_INT64;
	varint_put_loop(v, ref + head + 1);
	assert_ptr_equal(spop_var_int64_at(act, &var, (int64_t)v), act + head + 1 + n);
	assert_memory_equal(act, ref, sizeof(act));
}

static void test_varint_same_as_loop(void **state)
{
	int k, d, i;

	(void)state;
	for (i = 0; i < 70000; i++)
		check_same_as_loop((uint64_t)i);
	for (k = 2; k <= SPOP_VARINT_MAX; k++)
		for (d = -3; d <= 3; d++)
			check_same_as_loop(varint_min_len[k] + (uint64_t)(int64_t)d);
	for (k = 0; k < 64; k++)
		for (d = -2; d <= 2; d++)
			check_same_as_loop(((uint64_t)1 << k) + (uint64_t)(int64_t)d);
	for (d = 0; d < 8; d++)
		check_same_as_loop(UINT64_MAX - (uint64_t)d);
	check_same_as_loop(999999999);
	check_same_as_loop(1000000000);
	for (i = 0; i < 200000; i++) {
		uint64_t v = rng();
		unsigned bits = (unsigned)(rng() % 65);

		if (bits < 64)
			v &= ((uint64_t)1 << bits) - 1;
		check_same_as_loop(v);
	}
}

/* A string variable as spop_put_set_var() writes it, for every length
 * around the inline copy's steps: the same bytes, nothing past them. */
static void test_var_str_at(void **state)
{
	static const struct spop_var var = SPOP_VAR(SPOP_SCOPE_TXN, "ratelimit");
	char src[300];
	uint8_t got[SPOP_VAR_STR_MAX(300) + 8], want[SPOP_VAR_STR_MAX(300) + 8];
	size_t len;

	(void)state;
	for (len = 0; len < sizeof(src); len++)
		src[len] = (char)('a' + len % 26);
	for (len = 0; len <= 300; len++) {
		struct spop_wbuf w;
		struct spop_data d = spop_strn(src + 300 - len, len);
		uint8_t *end;

		memset(got, 0xAA, sizeof(got));
		memset(want, 0xAA, sizeof(want));
		spop_wbuf_init(&w, want, sizeof(want));
		spop_put_set_var(&w, SPOP_SCOPE_TXN, "ratelimit", 9, &d);
		assert_int_equal(w.err, 0);
		end = spop_var_str_at(got, &var, src + 300 - len, len);
		assert_int_equal((size_t)(end - got), w.len);
		assert_memory_equal(got, want, sizeof(got));
	}
}

static void test_varint_errors(void **state)
{
	static const uint8_t eleven[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
					 0xff, 0xff, 0xff, 0xff, 0x00};
	/* 2^64-1 plus 2^60: the last byte overflows the sum. */
	static const uint8_t over_add[] = {0xff, 0xf0, 0xfe, 0xfe, 0xfe,
					   0xfe, 0xfe, 0xfe, 0xfe, 0x0f};
	/* The 10th byte shifted by 60 loses bits. */
	static const uint8_t over_shift[] = {0xf0, 0x80, 0x80, 0x80, 0x80,
					     0x80, 0x80, 0x80, 0x80, 0x10};
	/* Bigger middle digits with the same last byte as 2^64-1. */
	static const uint8_t over_mid[] = {0xff, 0xff, 0xff, 0xff, 0xff,
					   0xff, 0xff, 0xff, 0xff, 0x0e};
	/* Smallest 10-byte varint, valid. */
	static const uint8_t ten_ok[] = {0xf0, 0x80, 0x80, 0x80, 0x80,
					 0x80, 0x80, 0x80, 0x80, 0x00};
	const uint8_t *p;
	uint64_t out = 12345;

	(void)state;
	p = eleven;
	assert_int_equal(spop_varint_decode(&p, eleven + sizeof(eleven), &out), SPOP_ERR);
	assert_ptr_equal(p, eleven);
	p = eleven; /* 10 bytes only, still a continuation: already too long */
	assert_int_equal(spop_varint_decode(&p, eleven + 10, &out), SPOP_ERR);
	p = eleven;
	assert_int_equal(spop_varint_decode(&p, eleven + 9, &out), SPOP_NEED_MORE);
	assert_ptr_equal(p, eleven);
	p = over_add;
	assert_int_equal(spop_varint_decode(&p, over_add + 10, &out), SPOP_ERR);
	assert_ptr_equal(p, over_add);
	p = over_shift;
	assert_int_equal(spop_varint_decode(&p, over_shift + 10, &out), SPOP_ERR);
	p = over_mid;
	assert_int_equal(spop_varint_decode(&p, over_mid + 10, &out), SPOP_ERR);
	assert_true(out == 12345); /* untouched on error */
	p = ten_ok;
	assert_int_equal(spop_varint_decode(&p, ten_ok + 10, &out), SPOP_OK);
	assert_true(out == varint_min_len[10]);
	p = ten_ok;
	assert_int_equal(spop_varint_decode(&p, ten_ok, &out), SPOP_NEED_MORE);
}

/* ---- typed data ---------------------------------------------------------- */

static void expect_data_bytes(const struct spop_data *d, const uint8_t *want, size_t n)
{
	uint8_t b[64];
	struct spop_wbuf w;

	spop_wbuf_init(&w, b, sizeof(b));
	spop_put_data(&w, d);
	assert_int_equal(w.err, 0);
	assert_int_equal(w.len, n);
	assert_memory_equal(b, want, n);
}

static void test_data_exact_bytes(void **state)
{
	static const uint8_t int64_m1[] = {0x04, 0xff, 0xf0, 0xfe, 0xfe, 0xfe, 0xfe,
					   0xfe, 0xfe, 0xfe, 0x0e};
	static const uint8_t int32_m1[] = {0x02, 0xff, 0xf0, 0xfe, 0xfe, 0xfe, 0xfe,
					   0xfe, 0xfe, 0xfe, 0x0e};
	static const uint8_t btrue[] = {0x11}, bfalse[] = {0x01}, null[] = {0x00};
	static const uint8_t ipv4[] = {0x06, 127, 0, 0, 1};
	static const uint8_t get[] = {0x08, 0x03, 'G', 'E', 'T'};
	static const uint8_t u32[] = {0x03, 0xfc, 0xf0, 0x06};
	static const uint8_t u64[] = {0x05, 0xef};
	static const uint8_t bin[] = {0x09, 0x02, 0x00, 0xff};
	static const uint8_t ipv6[] = {0x07, 0, 0, 0, 0, 0, 0, 0, 0,
				       0, 0, 0, 0, 0, 0, 0, 1};
	struct spop_data d;

	(void)state;
	d = spop_int64(-1);
	expect_data_bytes(&d, int64_m1, sizeof(int64_m1));
	d = spop_null();
	d.type = SPOP_T_INT32;
	d.u.i32 = -1;
	expect_data_bytes(&d, int32_m1, sizeof(int32_m1));
	d = spop_bool(1);
	expect_data_bytes(&d, btrue, 1);
	d = spop_bool(0);
	expect_data_bytes(&d, bfalse, 1);
	d = spop_bool(42); /* any non-zero is true */
	expect_data_bytes(&d, btrue, 1);
	d = spop_null();
	expect_data_bytes(&d, null, 1);
	d = spop_null();
	d.type = SPOP_T_IPV4;
	memcpy(d.u.ipv4, ipv4 + 1, 4);
	expect_data_bytes(&d, ipv4, sizeof(ipv4));
	d = spop_null();
	d.type = SPOP_T_IPV6;
	memcpy(d.u.ipv6, ipv6 + 1, 16);
	expect_data_bytes(&d, ipv6, sizeof(ipv6));
	d = spop_cstr("GET");
	expect_data_bytes(&d, get, sizeof(get));
	d = spop_uint32(16380);
	expect_data_bytes(&d, u32, sizeof(u32));
	d = spop_null();
	d.type = SPOP_T_UINT64;
	d.u.u64 = 239;
	expect_data_bytes(&d, u64, sizeof(u64));
	d = spop_null();
	d.type = SPOP_T_BIN;
	d.u.str.ptr = (const char *)bin + 2;
	d.u.str.len = 2;
	expect_data_bytes(&d, bin, sizeof(bin));
}

static void assert_data_equal(const struct spop_data *a, const struct spop_data *b)
{
	assert_int_equal(a->type, b->type);
	switch ((enum spop_type)a->type) {
	case SPOP_T_NULL:
		break;
	case SPOP_T_BOOL:
		assert_int_equal(a->u.boolean, b->u.boolean);
		break;
	case SPOP_T_INT32:
		assert_int_equal(a->u.i32, b->u.i32);
		break;
	case SPOP_T_UINT32:
		assert_true(a->u.u32 == b->u.u32);
		break;
	case SPOP_T_INT64:
		assert_true(a->u.i64 == b->u.i64);
		break;
	case SPOP_T_UINT64:
		assert_true(a->u.u64 == b->u.u64);
		break;
	case SPOP_T_IPV4:
		assert_memory_equal(a->u.ipv4, b->u.ipv4, 4);
		break;
	case SPOP_T_IPV6:
		assert_memory_equal(a->u.ipv6, b->u.ipv6, 16);
		break;
	case SPOP_T_STR:
	case SPOP_T_BIN:
		assert_int_equal(a->u.str.len, b->u.str.len);
		if (a->u.str.len)
			assert_memory_equal(a->u.str.ptr, b->u.str.ptr, a->u.str.len);
		break;
	default:
		fail();
	}
}

/* Encodes d, decodes it, compares, and checks every prefix is NEED_MORE. */
static void roundtrip_data(const struct spop_data *d)
{
	uint8_t b[512];
	struct spop_wbuf w;
	struct spop_data out;
	const uint8_t *p;
	size_t i;

	spop_wbuf_init(&w, b, sizeof(b));
	spop_put_data(&w, d);
	assert_int_equal(w.err, 0);
	p = b;
	assert_int_equal(spop_data_decode(&p, b + w.len, &out), SPOP_OK);
	assert_ptr_equal(p, b + w.len);
	assert_data_equal(d, &out);
	if (d->type == SPOP_T_STR || d->type == SPOP_T_BIN) {
		/* zero copy: the string points into the encoded bytes */
		assert_true((const uint8_t *)out.u.str.ptr > b);
		assert_ptr_equal((const uint8_t *)out.u.str.ptr + out.u.str.len, b + w.len);
	}
	for (i = 0; i < w.len; i++) {
		p = b;
		assert_int_equal(spop_data_decode(&p, b + i, &out), SPOP_NEED_MORE);
		assert_ptr_equal(p, b);
	}
}

static void test_data_roundtrip(void **state)
{
	static const int64_t i64s[] = {0, 1, -1, 239, 240, -240, 16380, INT64_MAX, INT64_MIN};
	static const int32_t i32s[] = {0, 1, -1, 2287, -2288, INT32_MAX, INT32_MIN};
	static const uint64_t u64s[] = {0, 239, 240, 2287, 2288, UINT32_MAX, UINT64_MAX};
	char big[300];
	struct spop_data d;
	size_t i;

	(void)state;
	d = spop_null();
	roundtrip_data(&d);
	d = spop_bool(0);
	roundtrip_data(&d);
	d = spop_bool(1);
	roundtrip_data(&d);
	for (i = 0; i < sizeof(i64s) / sizeof(i64s[0]); i++) {
		d = spop_int64(i64s[i]);
		roundtrip_data(&d);
	}
	for (i = 0; i < sizeof(i32s) / sizeof(i32s[0]); i++) {
		d = spop_null();
		d.type = SPOP_T_INT32;
		d.u.i32 = i32s[i];
		roundtrip_data(&d);
	}
	for (i = 0; i < sizeof(u64s) / sizeof(u64s[0]); i++) {
		d = spop_null();
		d.type = SPOP_T_UINT64;
		d.u.u64 = u64s[i];
		roundtrip_data(&d);
		d = spop_uint32((uint32_t)u64s[i]);
		roundtrip_data(&d);
	}
	d = spop_null();
	d.type = SPOP_T_IPV4;
	memcpy(d.u.ipv4, "\xc0\xa8\x01\xfe", 4);
	roundtrip_data(&d);
	d = spop_null();
	d.type = SPOP_T_IPV6;
	memcpy(d.u.ipv6, "\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\x01", 16);
	roundtrip_data(&d);
	d = spop_cstr("");
	roundtrip_data(&d);
	d = spop_cstr("/api/v1/items?id=7");
	roundtrip_data(&d);
	memset(big, 'x', sizeof(big)); /* a 2-byte length */
	d = spop_strn(big, sizeof(big));
	roundtrip_data(&d);
	d.type = SPOP_T_BIN;
	big[7] = '\0';
	roundtrip_data(&d);
}

static void test_data_decode_flags(void **state)
{
	uint8_t b[2];
	struct spop_data out;
	const uint8_t *p;
	unsigned t, f;

	(void)state;
	/* Unknown types 10..15, whatever the flags. */
	for (t = 10; t < 16; t++) {
		for (f = 0; f < 16; f++) {
			b[0] = (uint8_t)(f << 4 | t);
			b[1] = 0;
			p = b;
			assert_int_equal(spop_data_decode(&p, b + 2, &out), SPOP_ERR);
			assert_ptr_equal(p, b);
		}
	}
	/* BOOL: only 0x01 and 0x11. */
	for (f = 0; f < 16; f++) {
		b[0] = (uint8_t)(f << 4 | SPOP_T_BOOL);
		p = b;
		if (f == 0 || f == 1) {
			assert_int_equal(spop_data_decode(&p, b + 1, &out), SPOP_OK);
			assert_int_equal(out.type, SPOP_T_BOOL);
			assert_int_equal(out.u.boolean, (int)f);
			assert_ptr_equal(p, b + 1);
		} else {
			assert_int_equal(spop_data_decode(&p, b + 1, &out), SPOP_ERR);
			assert_ptr_equal(p, b);
		}
	}
	/* Other types ignore the flag nibble. */
	b[0] = 0x80 | SPOP_T_UINT32;
	b[1] = 0x05;
	p = b;
	assert_int_equal(spop_data_decode(&p, b + 2, &out), SPOP_OK);
	assert_int_equal(out.type, SPOP_T_UINT32);
	assert_int_equal(out.u.u32, 5);
	/* Empty input. */
	p = b;
	assert_int_equal(spop_data_decode(&p, b, &out), SPOP_NEED_MORE);
}

static void test_data_decode_casts(void **state)
{
	/* INT32 -1 as HAProxy sends it: the 64-bit sign extension. */
	static const uint8_t i32m1[] = {0x02, 0xff, 0xf0, 0xfe, 0xfe, 0xfe, 0xfe,
					0xfe, 0xfe, 0xfe, 0x0e};
	static const uint8_t str_long[] = {0x08, 0x05, 'a', 'b'};
	static const uint8_t str_badlen[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
					     0xff, 0xff, 0xff, 0xff, 0xff, 0x00};
	struct spop_data out;
	const uint8_t *p = i32m1;

	(void)state;
	assert_int_equal(spop_data_decode(&p, i32m1 + sizeof(i32m1), &out), SPOP_OK);
	assert_int_equal(out.type, SPOP_T_INT32);
	assert_int_equal(out.u.i32, -1);
	/* A length past the end is a valid prefix... */
	p = str_long;
	assert_int_equal(spop_data_decode(&p, str_long + sizeof(str_long), &out),
			 SPOP_NEED_MORE);
	/* ...a broken length varint is not. */
	p = str_badlen;
	assert_int_equal(spop_data_decode(&p, str_badlen + sizeof(str_badlen), &out),
			 SPOP_ERR);
}

static void test_name_decode(void **state)
{
	static const uint8_t n[] = {0x04, 'a', 'b', 'c', 'd', 'x'};
	static const uint8_t empty[] = {0x00};
	struct spop_str s;
	const uint8_t *p = n;

	(void)state;
	assert_int_equal(spop_name_decode(&p, n + sizeof(n), &s), SPOP_OK);
	assert_int_equal(s.len, 4);
	assert_ptr_equal(s.ptr, (const char *)n + 1);
	assert_ptr_equal(p, n + 5);
	p = n;
	assert_int_equal(spop_name_decode(&p, n + 4, &s), SPOP_NEED_MORE);
	assert_ptr_equal(p, n);
	p = empty;
	assert_int_equal(spop_name_decode(&p, empty + 1, &s), SPOP_OK);
	assert_int_equal(s.len, 0);
}

/* ---- frames -------------------------------------------------------------- */

static void test_healthcheck_decode(void **state)
{
	struct spop_frame f;
	struct spop_hello h;
	int st = -7;

	(void)state;
	assert_int_equal(sizeof(hc_frame), 82);
	assert_int_equal(spop_frame_peek(hc_frame, sizeof(hc_frame), 16384, &f, &st),
			 SPOP_OK);
	assert_int_equal(st, SPOP_ST_NORMAL);
	assert_int_equal(f.len, 78);
	assert_int_equal(f.type, SPOP_FRAME_HAPROXY_HELLO);
	assert_int_equal(f.flags, SPOP_FLAG_FIN);
	assert_true(f.stream_id == 0 && f.frame_id == 0);
	assert_ptr_equal(f.payload, hc_frame + 11);
	assert_int_equal(f.payload_len, 71);

	st = -7;
	assert_int_equal(spop_hello_parse(f.payload, f.payload_len, &h, &st), 0);
	assert_int_equal(st, SPOP_ST_NORMAL);
	assert_int_equal(h.healthcheck, 1);
	assert_int_equal(h.max_frame_size, 16380);
	assert_int_equal(h.capabilities.len, 0);
	assert_int_equal(h.has_version, 1);
	assert_int_equal(h.has_max_frame_size, 1);
	assert_int_equal(h.has_capabilities, 1);
	assert_int_equal(h.supported_versions.len, 3);
	assert_memory_equal(h.supported_versions.ptr, "2.0", 3);
	assert_null(h.engine_id.ptr);
}

static void test_healthcheck_encode(void **state)
{
	uint8_t b[128];
	struct spop_wbuf w;

	(void)state;
	spop_wbuf_init(&w, b, sizeof(b));
	assert_int_equal(spop_encode_haproxy_hello(&w, 16380, "", 1, NULL), 0);
	assert_int_equal(w.err, 0);
	assert_int_equal(w.len, sizeof(hc_frame));
	assert_memory_equal(b, hc_frame, sizeof(hc_frame));
	/* NULL capabilities are the empty string too. */
	spop_wbuf_init(&w, b, sizeof(b));
	assert_int_equal(spop_encode_haproxy_hello(&w, 16380, NULL, 1, NULL), 0);
	assert_memory_equal(b, hc_frame, sizeof(hc_frame));
	/* One byte short: the frame does not fit. */
	spop_wbuf_init(&w, b, sizeof(hc_frame) - 1);
	assert_int_equal(spop_encode_haproxy_hello(&w, 16380, "", 1, NULL), -1);
	assert_int_equal(w.err, 1);
}

/* A NOTIFY: stream 5, frame 1, one "check-rate" message with 5 args. */
static size_t build_notify(uint8_t *b, size_t cap, uint64_t sid, uint64_t fid)
{
	struct spop_wbuf w;
	struct spop_data d;
	size_t start;

	spop_wbuf_init(&w, b, cap);
	start = spop_frame_begin(&w, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, sid, fid);
	spop_put_name(&w, "check-rate", 10);
	spop_put_u8(&w, 5);
	spop_put_name(&w, "ip", 2);
	d = spop_null();
	d.type = SPOP_T_IPV4;
	memcpy(d.u.ipv4, "\x0a\x00\x00\x07", 4);
	spop_put_data(&w, &d);
	spop_put_name(&w, "method", 6);
	d = spop_cstr("GET");
	spop_put_data(&w, &d);
	spop_put_name(&w, "path", 4);
	d = spop_cstr("/login");
	spop_put_data(&w, &d);
	spop_put_name(&w, "api_key", 7);
	d = spop_null();
	spop_put_data(&w, &d);
	spop_put_name(&w, "be_in_use", 9);
	d = spop_int64(-1);
	spop_put_data(&w, &d);
	assert_int_equal(spop_frame_end(&w, start, 16384), 0);
	return w.len;
}

static void test_notify_truncation(void **state)
{
	uint8_t b[256];
	struct spop_frame f;
	struct spop_str name, k;
	struct spop_data v;
	struct spop_cursor c, args;
	unsigned nargs = 0;
	size_t n, i;
	int st;

	(void)state;
	n = build_notify(b, sizeof(b), 5, 1);
	assert_int_equal(spop_frame_peek(b, n, 16384, &f, &st), SPOP_OK);
	assert_int_equal(f.len, n - 4);
	assert_int_equal(f.type, SPOP_FRAME_NOTIFY);
	assert_true(f.stream_id == 5 && f.frame_id == 1);
	for (i = 0; i < n; i++) {
		st = -7;
		assert_int_equal(spop_frame_peek(b, i, 16384, &f, &st), SPOP_NEED_MORE);
		assert_int_equal(st, SPOP_ST_NORMAL);
		if (i >= 4)
			assert_int_equal(f.len, n - 4);
	}
	/* Trailing bytes of the next frame do not matter. */
	memset(b + n, 0xee, 10);
	assert_int_equal(spop_frame_peek(b, n + 10, 16384, &f, &st), SPOP_OK);
	assert_int_equal(f.len, n - 4);

	/* And the payload iterates as one message of five arguments. */
	c.p = f.payload;
	c.end = f.payload + f.payload_len;
	assert_int_equal(spop_msg_next(&c, &name, &nargs, &args), 1);
	assert_int_equal(name.len, 10);
	assert_memory_equal(name.ptr, "check-rate", 10);
	assert_int_equal(nargs, 5);
	assert_int_equal(spop_kv_next(&args, &k, &v), 1);
	assert_memory_equal(k.ptr, "ip", 2);
	assert_int_equal(v.type, SPOP_T_IPV4);
	assert_memory_equal(v.u.ipv4, "\x0a\x00\x00\x07", 4);
	assert_int_equal(spop_kv_next(&args, &k, &v), 1);
	assert_int_equal(v.type, SPOP_T_STR);
	assert_memory_equal(v.u.str.ptr, "GET", 3);
	assert_int_equal(spop_kv_next(&args, &k, &v), 1);
	assert_int_equal(v.u.str.len, 6);
	assert_int_equal(spop_kv_next(&args, &k, &v), 1);
	assert_int_equal(k.len, 7);
	assert_int_equal(v.type, SPOP_T_NULL);
	assert_int_equal(spop_kv_next(&args, &k, &v), 1);
	assert_int_equal(v.type, SPOP_T_INT64);
	assert_true(v.u.i64 == -1);
	assert_int_equal(spop_kv_next(&args, &k, &v), 0);
	assert_int_equal(spop_msg_next(&c, &name, &nargs, &args), 0);
}

static void put_len(uint8_t *b, uint32_t len)
{
	b[0] = (uint8_t)(len >> 24);
	b[1] = (uint8_t)(len >> 16);
	b[2] = (uint8_t)(len >> 8);
	b[3] = (uint8_t)len;
}

static void test_frame_peek_limits(void **state)
{
	uint8_t b[64];
	struct spop_frame f;
	uint32_t len;
	int st;

	(void)state;
	/* Too big, seen from the 4 length bytes alone. */
	put_len(b, 16385);
	st = -7;
	assert_int_equal(spop_frame_peek(b, 4, 16384, &f, &st), SPOP_ERR);
	assert_int_equal(st, SPOP_ST_TOO_BIG);
	put_len(b, UINT32_MAX);
	assert_int_equal(spop_frame_peek(b, 4, 16384, &f, &st), SPOP_ERR);
	assert_int_equal(st, SPOP_ST_TOO_BIG);
	/* Too big wins over too small when the limit itself is tiny. */
	put_len(b, 3);
	assert_int_equal(spop_frame_peek(b, 4, 2, &f, &st), SPOP_ERR);
	assert_int_equal(st, SPOP_ST_TOO_BIG);
	/* Exactly the limit is fine: need more. */
	put_len(b, 16384);
	st = -7;
	assert_int_equal(spop_frame_peek(b, 4, 16384, &f, &st), SPOP_NEED_MORE);
	assert_int_equal(st, SPOP_ST_NORMAL);
	assert_int_equal(f.len, 16384);
	/* Under the smallest header. */
	for (len = 0; len < SPOP_FRAME_HDR_MIN; len++) {
		memset(b, 0, sizeof(b));
		put_len(b, len);
		assert_int_equal(spop_frame_peek(b, 4, 16384, &f, &st), SPOP_ERR);
		assert_int_equal(st, SPOP_ST_INVALID);
	}
	/* Smallest frame: 7 bytes, empty payload. */
	memset(b, 0, sizeof(b));
	put_len(b, 7);
	b[4] = SPOP_FRAME_ACK;
	b[8] = 1;
	b[9] = 9;
	b[10] = 3;
	assert_int_equal(spop_frame_peek(b, 11, 7, &f, &st), SPOP_OK);
	assert_int_equal(f.type, SPOP_FRAME_ACK);
	assert_int_equal(f.flags, 1);
	assert_true(f.stream_id == 9 && f.frame_id == 3);
	assert_int_equal(f.payload_len, 0);
	assert_ptr_equal(f.payload, b + 11);
	/* Stream-id varint cut by the frame's end: invalid, not need-more. */
	b[9] = 0xf0;
	b[10] = 0x80;
	assert_int_equal(spop_frame_peek(b, sizeof(b), 16384, &f, &st), SPOP_ERR);
	assert_int_equal(st, SPOP_ST_INVALID);
	/* Frame-id varint cut by the frame's end. */
	b[9] = 0x01;
	b[10] = 0xf5;
	assert_int_equal(spop_frame_peek(b, sizeof(b), 16384, &f, &st), SPOP_ERR);
	assert_int_equal(st, SPOP_ST_INVALID);
	/* An 11-byte stream-id inside a long enough frame. */
	memset(b, 0, sizeof(b));
	put_len(b, 20);
	b[4] = SPOP_FRAME_NOTIFY;
	memset(b + 9, 0xff, 10);
	b[19] = 0x00;
	assert_int_equal(spop_frame_peek(b, 24, 16384, &f, &st), SPOP_ERR);
	assert_int_equal(st, SPOP_ST_INVALID);
	/* A NULL status pointer is allowed. */
	assert_int_equal(spop_frame_peek(b, 24, 16384, &f, NULL), SPOP_ERR);
	assert_int_equal(spop_frame_peek(b, 0, 16384, &f, NULL), SPOP_NEED_MORE);
}

static void test_frame_pipelined(void **state)
{
	uint8_t b[1024];
	struct spop_frame f;
	size_t n = 0, off = 0;
	uint64_t i;
	int st;

	(void)state;
	for (i = 0; i < 4; i++)
		n += build_notify(b + n, sizeof(b) - n, 2 * i + 1, 1);
	for (i = 0; i < 4; i++) {
		assert_int_equal(spop_frame_peek(b + off, n - off, 16384, &f, &st), SPOP_OK);
		assert_true(f.stream_id == 2 * i + 1);
		off += 4 + f.len;
	}
	assert_int_equal(off, n);
	assert_int_equal(spop_frame_peek(b + off, 0, 16384, &f, &st), SPOP_NEED_MORE);
}

/* ---- lists --------------------------------------------------------------- */

static void test_kv_iteration(void **state)
{
	static const uint8_t kv[] = {0x01, 'a', 0x11, 0x02, 'b', 'c', 0x03, 0xef, 0x00, 0x00};
	static const uint8_t cut[] = {0x01, 'a', 0x03, 0xf0};
	static const uint8_t nodata[] = {0x01, 'a'};
	struct spop_cursor c;
	struct spop_str k;
	struct spop_data v;

	(void)state;
	c.p = kv;
	c.end = kv;
	assert_int_equal(spop_kv_next(&c, &k, &v), 0);
	c.end = kv + sizeof(kv);
	assert_int_equal(spop_kv_next(&c, &k, &v), 1);
	assert_int_equal(k.len, 1);
	assert_int_equal(v.type, SPOP_T_BOOL);
	assert_int_equal(v.u.boolean, 1);
	assert_int_equal(spop_kv_next(&c, &k, &v), 1);
	assert_memory_equal(k.ptr, "bc", 2);
	assert_int_equal(v.u.u32, 239);
	assert_int_equal(spop_kv_next(&c, &k, &v), 1); /* empty name, NULL */
	assert_int_equal(k.len, 0);
	assert_int_equal(v.type, SPOP_T_NULL);
	assert_int_equal(spop_kv_next(&c, &k, &v), 0);
	assert_ptr_equal(c.p, kv + sizeof(kv));

	c.p = cut;
	c.end = cut + sizeof(cut);
	assert_int_equal(spop_kv_next(&c, &k, &v), -1);
	assert_ptr_equal(c.p, cut);
	c.p = nodata;
	c.end = nodata + sizeof(nodata);
	assert_int_equal(spop_kv_next(&c, &k, &v), -1);
}

static void test_msg_iteration(void **state)
{
	/* "a" with 0 args, then "bb" with 2 args. */
	static const uint8_t msgs[] = {0x01, 'a', 0x00,
				       0x02, 'b', 'b', 0x02,
				       0x01, 'x', 0x03, 0x07,
				       0x01, 'y', 0x00};
	static const uint8_t too_few[] = {0x01, 'a', 0x02, 0x01, 'x', 0x00};
	static const uint8_t no_nargs[] = {0x01, 'a'};
	static const uint8_t bad_arg[] = {0x01, 'a', 0x01, 0x01, 'x', 0x0c};
	static const uint8_t cut_name[] = {0x05, 'a'};
	struct spop_cursor c, args;
	struct spop_str name, k;
	struct spop_data v;
	unsigned nargs = 99;

	(void)state;
	c.p = msgs;
	c.end = msgs; /* zero messages */
	assert_int_equal(spop_msg_next(&c, &name, &nargs, &args), 0);
	c.end = msgs + sizeof(msgs);
	assert_int_equal(spop_msg_next(&c, &name, &nargs, &args), 1);
	assert_int_equal(name.len, 1);
	assert_int_equal(nargs, 0);
	assert_int_equal(spop_kv_next(&args, &k, &v), 0);
	assert_ptr_equal(c.p, msgs + 3);
	assert_int_equal(spop_msg_next(&c, &name, &nargs, &args), 1);
	assert_memory_equal(name.ptr, "bb", 2);
	assert_int_equal(nargs, 2);
	assert_int_equal(spop_kv_next(&args, &k, &v), 1);
	assert_int_equal(v.u.u32, 7);
	assert_int_equal(spop_kv_next(&args, &k, &v), 1);
	assert_int_equal(v.type, SPOP_T_NULL);
	assert_int_equal(spop_kv_next(&args, &k, &v), 0);
	assert_int_equal(spop_msg_next(&c, &name, &nargs, &args), 0);

	c.p = too_few;
	c.end = too_few + sizeof(too_few);
	assert_int_equal(spop_msg_next(&c, &name, &nargs, &args), -1);
	assert_ptr_equal(c.p, too_few);
	c.p = no_nargs;
	c.end = no_nargs + sizeof(no_nargs);
	assert_int_equal(spop_msg_next(&c, &name, &nargs, &args), -1);
	c.p = bad_arg;
	c.end = bad_arg + sizeof(bad_arg);
	assert_int_equal(spop_msg_next(&c, &name, &nargs, &args), -1);
	c.p = cut_name;
	c.end = cut_name + sizeof(cut_name);
	assert_int_equal(spop_msg_next(&c, &name, &nargs, &args), -1);
}

/* ---- encoders ------------------------------------------------------------ */

static void test_wbuf_sticky(void **state)
{
	uint8_t b[8];
	struct spop_wbuf w;
	size_t start;

	(void)state;
	memset(b, 0, sizeof(b));
	spop_wbuf_init(&w, b, sizeof(b));
	spop_put_u32be(&w, 0x01020304);
	assert_int_equal(w.len, 4);
	assert_memory_equal(b, "\x01\x02\x03\x04", 4);
	spop_put_bytes(&w, "abcdefgh", 5); /* does not fit */
	assert_int_equal(w.err, 1);
	assert_int_equal(w.len, 4);
	spop_put_u8(&w, 0x55); /* would fit, but the error is sticky */
	assert_int_equal(w.err, 1);
	assert_int_equal(w.len, 4);
	assert_int_equal(b[4], 0);
	spop_put_varint(&w, 1);
	assert_int_equal(w.len, 4);

	/* A frame that overflows the buffer fails at its end. */
	spop_wbuf_init(&w, b, sizeof(b));
	start = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, 1, 1);
	assert_int_equal(start, 0);
	assert_int_equal(w.err, 1);
	assert_int_equal(spop_frame_end(&w, start, 16384), -1);

	/* A frame over max_frame fails and poisons the buffer. */
	{
		uint8_t big[64];

		spop_wbuf_init(&w, big, sizeof(big));
		start = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, 1, 1);
		spop_put_bytes(&w, "0123456789", 10);
		assert_int_equal(w.err, 0);
		assert_int_equal(spop_frame_end(&w, start, 16), -1);
		assert_int_equal(w.err, 1);
		spop_wbuf_init(&w, big, sizeof(big));
		start = spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, 1, 1);
		spop_put_bytes(&w, "0123456789", 10);
		assert_int_equal(spop_frame_end(&w, start, 17), 0);
		assert_memory_equal(big, "\x00\x00\x00\x11\x67\x00\x00\x00\x01\x01\x01", 11);
	}
	/* Unknown data types cannot be written. */
	{
		uint8_t big[16];
		struct spop_data d = spop_null();

		d.type = 12;
		spop_wbuf_init(&w, big, sizeof(big));
		spop_put_data(&w, &d);
		assert_int_equal(w.err, 1);
	}
}

static void test_actions(void **state)
{
	static const uint8_t set[] = {0x01, 0x03, 0x02, 0x05, 'l', 'i', 'm', 'i', 't',
				      0x04, 0xf0, 0x01};
	static const uint8_t unset[] = {0x02, 0x02, 0x03, 0x02, 'o', 'k'};
	uint8_t b[32];
	struct spop_wbuf w;
	struct spop_data d = spop_int64(256);

	(void)state;
	spop_wbuf_init(&w, b, sizeof(b));
	spop_put_set_var(&w, SPOP_SCOPE_TXN, "limit", 5, &d);
	assert_int_equal(w.len, sizeof(set));
	assert_memory_equal(b, set, sizeof(set));
	spop_wbuf_init(&w, b, sizeof(b));
	spop_put_unset_var(&w, SPOP_SCOPE_REQ, "ok", 2);
	assert_int_equal(w.len, sizeof(unset));
	assert_memory_equal(b, unset, sizeof(unset));
}

/* One variable written both ways: through a compile-time head, and field by
 * field with spop_put_set_var(). With room for every byte the two must be
 * identical; with any less, both must refuse (w->err) and write nothing
 * past the capacity. */
static void check_var_both_ways(const struct spop_var *var, const char *name,
				const struct spop_data *d)
{
	static uint8_t a[8192], b[8192];
	struct spop_wbuf wa, wb;
	size_t full;

	spop_wbuf_init(&wb, b, sizeof(b));
	spop_put_set_var(&wb, SPOP_SCOPE_TXN, name, strlen(name), d);
	assert_int_equal(wb.err, 0);
	full = wb.len;
	for (size_t cap = 0; cap <= full; cap++) {
		memset(a, 0xAA, sizeof(a));
		spop_wbuf_init(&wa, a, cap);
		if (d->type == SPOP_T_INT64)
			spop_put_var_int64(&wa, var, d->u.i64);
		else if (d->type == SPOP_T_STR)
			spop_put_var_str(&wa, var, d->u.str.ptr, d->u.str.len);
		else
			spop_put_var_bool(&wa, var, d->u.boolean);
		assert_int_equal(wa.err, cap < full);
		assert_true(wa.len <= cap);
		assert_int_equal(a[cap], 0xAA);
		if (cap == full) {
			assert_int_equal(wa.len, full);
			assert_memory_equal(a, b, full);
		}
	}
	/* an error is sticky */
	spop_wbuf_init(&wa, a, sizeof(a));
	wa.err = 1;
	spop_put_var_bool(&wa, var, 1);
	spop_put_var_int64(&wa, var, 1);
	spop_put_var_str(&wa, var, "x", 1);
	assert_int_equal(wa.len, 0);
}

static void test_var_heads(void **state)
{
	static const struct spop_var status = SPOP_VAR(SPOP_SCOPE_TXN, "status");
	static const struct spop_var longest =
		SPOP_VAR(SPOP_SCOPE_TXN, "a-name-of-thirty-two-characters!");
	static const int64_t ints[] = { 0, 1, 239, 240, 241, 2287, 2288, 264431, 264432,
					-1, INT64_MIN, INT64_MAX, 429, 3600 };
	static char text[5000];
	static const size_t lens[] = { 0, 1, 16, 239, 240, 2287, 2288, sizeof(text) };
	struct spop_data d;

	(void)state;
	assert_int_equal(longest.name_len, SPOP_VAR_NAME_MAX);
	memset(text, 'x', sizeof(text));
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
		d = spop_int64(ints[i]);
		check_var_both_ways(&status, "status", &d);
		check_var_both_ways(&longest, "a-name-of-thirty-two-characters!", &d);
	}
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		d = spop_strn(text, lens[i]);
		check_var_both_ways(&status, "status", &d);
	}
	d = spop_bool(0);
	check_var_both_ways(&status, "status", &d);
	d = spop_bool(1);
	check_var_both_ways(&longest, "a-name-of-thirty-two-characters!", &d);
}

static void test_agent_hello(void **state)
{
	static const uint8_t want[] = {
		0x00, 0x00, 0x00, 0x40, 0x65, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
		0x07, 'v', 'e', 'r', 's', 'i', 'o', 'n', 0x08, 0x03, '2', '.', '0',
		0x0e, 'm', 'a', 'x', '-', 'f', 'r', 'a', 'm', 'e', '-', 's', 'i', 'z', 'e',
		0x03, 0xfc, 0xf0, 0x06,
		0x0c, 'c', 'a', 'p', 'a', 'b', 'i', 'l', 'i', 't', 'i', 'e', 's',
		0x08, 0x0a, 'p', 'i', 'p', 'e', 'l', 'i', 'n', 'i', 'n', 'g',
	};
	uint8_t b[128];
	struct spop_wbuf w;
	struct spop_frame f;
	int st;

	(void)state;
	assert_int_equal(sizeof(want), 4 + 0x40);
	spop_wbuf_init(&w, b, sizeof(b));
	assert_int_equal(spop_encode_agent_hello(&w, 16380, "pipelining", 16380), 0);
	assert_int_equal(w.len, sizeof(want));
	assert_memory_equal(b, want, sizeof(want));
	assert_int_equal(spop_frame_peek(b, w.len, 16380, &f, &st), SPOP_OK);
	assert_int_equal(f.type, SPOP_FRAME_AGENT_HELLO);
	assert_int_equal(f.flags, 0x00000001);
	/* frame_limit bounds it: 64 bytes do not fit in 63. */
	spop_wbuf_init(&w, b, sizeof(b));
	assert_int_equal(spop_encode_agent_hello(&w, 16380, "pipelining", 63), -1);
	spop_wbuf_init(&w, b, sizeof(b));
	assert_int_equal(spop_encode_agent_hello(&w, 16380, "pipelining", 64), 0);
}

static void test_disconnects(void **state)
{
	static const uint8_t want[] = {
		0x00, 0x00, 0x00, 0x26, 0x66, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
		0x0b, 's', 't', 'a', 't', 'u', 's', '-', 'c', 'o', 'd', 'e', 0x03, 0x03,
		0x07, 'm', 'e', 's', 's', 'a', 'g', 'e', 0x08, 0x07,
		't', 'o', 'o', ' ', 'b', 'i', 'g',
	};
	uint8_t b[128];
	struct spop_wbuf w;
	struct spop_frame f;
	struct spop_cursor c;
	struct spop_str k;
	struct spop_data v;
	int st;

	(void)state;
	assert_int_equal(sizeof(want), 4 + 0x26);
	spop_wbuf_init(&w, b, sizeof(b));
	assert_int_equal(spop_encode_agent_disconnect(&w, SPOP_ST_TOO_BIG, "too big", 16384),
			 0);
	assert_int_equal(w.len, sizeof(want));
	assert_memory_equal(b, want, sizeof(want));

	/* HAProxy's side, with the default message. */
	spop_wbuf_init(&w, b, sizeof(b));
	assert_int_equal(spop_encode_haproxy_disconnect(&w, SPOP_ST_TIMEOUT, NULL), 0);
	assert_int_equal(spop_frame_peek(b, w.len, 16384, &f, &st), SPOP_OK);
	assert_int_equal(f.type, SPOP_FRAME_HAPROXY_DISCONNECT);
	assert_int_equal(f.flags, SPOP_FLAG_FIN);
	c.p = f.payload;
	c.end = f.payload + f.payload_len;
	assert_int_equal(spop_kv_next(&c, &k, &v), 1);
	assert_int_equal(v.type, SPOP_T_UINT32);
	assert_int_equal(v.u.u32, SPOP_ST_TIMEOUT);
	assert_int_equal(spop_kv_next(&c, &k, &v), 1);
	assert_int_equal(v.u.str.len, strlen("a timeout occurred"));
	assert_memory_equal(v.u.str.ptr, "a timeout occurred", v.u.str.len);
	assert_int_equal(spop_kv_next(&c, &k, &v), 0);
}

static void test_haproxy_hello_engine(void **state)
{
	uint8_t b[256];
	struct spop_wbuf w;
	struct spop_frame f;
	struct spop_hello h;
	int st;

	(void)state;
	spop_wbuf_init(&w, b, sizeof(b));
	assert_int_equal(spop_encode_haproxy_hello(&w, 65536, "pipelining,async", 0,
						   "3c4e0f9a-engine"), 0);
	assert_int_equal(spop_frame_peek(b, w.len, 16384, &f, &st), SPOP_OK);
	assert_int_equal(spop_hello_parse(f.payload, f.payload_len, &h, &st), 0);
	assert_int_equal(h.healthcheck, 0);
	assert_int_equal(h.max_frame_size, 65536);
	assert_int_equal(h.capabilities.len, 16);
	assert_memory_equal(h.capabilities.ptr, "pipelining,async", 16);
	assert_int_equal(h.engine_id.len, 15);
	assert_memory_equal(h.engine_id.ptr, "3c4e0f9a-engine", 15);
}

/* ---- HELLO parsing ------------------------------------------------------- */

enum { K_VER = 1, K_MFS = 2, K_CAP = 4 };

/* Builds a HELLO payload with the chosen standard keys, then `extra`. */
static size_t hello_payload(uint8_t *b, size_t cap, unsigned keys, const char *version,
			    const struct spop_data *mfs, void (*extra)(struct spop_wbuf *))
{
	struct spop_wbuf w;
	struct spop_data d;

	spop_wbuf_init(&w, b, cap);
	if (extra)
		extra(&w);
	if (keys & K_VER) {
		spop_put_name(&w, "supported-versions", 18);
		d = spop_cstr(version);
		spop_put_data(&w, &d);
	}
	if (keys & K_MFS) {
		spop_put_name(&w, "max-frame-size", 14);
		spop_put_data(&w, mfs);
	}
	if (keys & K_CAP) {
		spop_put_name(&w, "capabilities", 12);
		d = spop_cstr("pipelining");
		spop_put_data(&w, &d);
	}
	assert_int_equal(w.err, 0);
	return w.len;
}

static int parse_status(unsigned keys, const char *version, struct spop_data mfs,
			void (*extra)(struct spop_wbuf *), struct spop_hello *h)
{
	uint8_t b[256];
	size_t n = hello_payload(b, sizeof(b), keys, version, &mfs, extra);
	int st = -7, rc;

	rc = spop_hello_parse(b, n, h, &st);
	assert_int_equal(rc, st == SPOP_ST_NORMAL ? 0 : -1);
	return st;
}

static void put_prefix_keys(struct spop_wbuf *w)
{
	struct spop_data d = spop_uint32(300);

	spop_put_name(w, "max-frame-size-x", 16);
	spop_put_data(w, &d);
	spop_put_name(w, "max-frame-siz", 13);
	spop_put_data(w, &d);
	d = spop_cstr("2.0");
	spop_put_name(w, "version", 7);
	spop_put_data(w, &d);
	spop_put_name(w, "supported-versions2", 19);
	spop_put_data(w, &d);
}

static void put_unknown_keys(struct spop_wbuf *w)
{
	struct spop_data d = spop_int64(-5);

	spop_put_name(w, "x-future", 8);
	spop_put_data(w, &d);
	d = spop_null();
	d.type = SPOP_T_IPV6;
	spop_put_name(w, "", 0);
	spop_put_data(w, &d);
	d = spop_bool(1);
	spop_put_name(w, "healthcheckx", 12);
	spop_put_data(w, &d);
}

static void put_engine_int(struct spop_wbuf *w)
{
	struct spop_data d = spop_int64(7);

	spop_put_name(w, "engine-id", 9);
	spop_put_data(w, &d);
	d = spop_int64(1);
	spop_put_name(w, "healthcheck", 11);
	spop_put_data(w, &d);
}

static void test_hello_parse_rules(void **state)
{
	struct spop_hello h;
	struct spop_data d;
	const unsigned all = K_VER | K_MFS | K_CAP;

	(void)state;
	assert_int_equal(parse_status(all, "2.0", spop_uint32(16380), NULL, &h),
			 SPOP_ST_NORMAL);
	assert_int_equal(h.max_frame_size, 16380);
	assert_int_equal(h.healthcheck, 0);
	assert_memory_equal(h.capabilities.ptr, "pipelining", 10);
	/* Missing keys, in the order the statuses are checked. */
	assert_int_equal(parse_status(0, "2.0", spop_uint32(16380), NULL, &h),
			 SPOP_ST_NO_VERSION);
	assert_int_equal(parse_status(K_MFS | K_CAP, "2.0", spop_uint32(16380), NULL, &h),
			 SPOP_ST_NO_VERSION);
	assert_int_equal(parse_status(K_VER | K_CAP, "2.0", spop_uint32(16380), NULL, &h),
			 SPOP_ST_NO_FRAME_SIZE);
	assert_int_equal(parse_status(K_VER, "1.0", spop_uint32(16380), NULL, &h),
			 SPOP_ST_NO_FRAME_SIZE);
	assert_int_equal(parse_status(K_VER | K_MFS, "2.0", spop_uint32(16380), NULL, &h),
			 SPOP_ST_NO_CAPABILITIES);
	/* Versions. */
	assert_int_equal(parse_status(all, "1.0", spop_uint32(16380), NULL, &h),
			 SPOP_ST_BAD_VERSION);
	assert_int_equal(parse_status(all, "2.0.1", spop_uint32(16380), NULL, &h),
			 SPOP_ST_BAD_VERSION);
	assert_int_equal(parse_status(all, "1.0, 2.0", spop_uint32(16380), NULL, &h),
			 SPOP_ST_NORMAL);
	/* Bad version is reported before a bad frame size. */
	assert_int_equal(parse_status(all, "3.0", spop_uint32(10), NULL, &h),
			 SPOP_ST_BAD_VERSION);
	/* Frame sizes. */
	assert_int_equal(parse_status(all, "2.0", spop_uint32(255), NULL, &h),
			 SPOP_ST_BAD_FRAME_SIZE);
	assert_int_equal(parse_status(all, "2.0", spop_uint32(256), NULL, &h),
			 SPOP_ST_NORMAL);
	assert_int_equal(h.max_frame_size, 256);
	assert_int_equal(parse_status(all, "2.0", spop_uint32(UINT32_MAX), NULL, &h),
			 SPOP_ST_NORMAL);
	assert_true(h.max_frame_size == UINT32_MAX);
	assert_int_equal(parse_status(all, "2.0", spop_int64(16380), NULL, &h),
			 SPOP_ST_NORMAL);
	assert_int_equal(h.max_frame_size, 16380);
	assert_int_equal(parse_status(all, "2.0", spop_int64(-1), NULL, &h),
			 SPOP_ST_BAD_FRAME_SIZE);
	assert_int_equal(parse_status(all, "2.0", spop_int64((int64_t)UINT32_MAX + 1), NULL,
				      &h),
			 SPOP_ST_BAD_FRAME_SIZE);
	d = spop_null();
	d.type = SPOP_T_UINT64;
	d.u.u64 = 1ull << 32 | 16380; /* must not be read as 16380 */
	assert_int_equal(parse_status(all, "2.0", d, NULL, &h), SPOP_ST_BAD_FRAME_SIZE);
	d = spop_null();
	d.type = SPOP_T_INT32;
	d.u.i32 = -16380;
	assert_int_equal(parse_status(all, "2.0", d, NULL, &h), SPOP_ST_BAD_FRAME_SIZE);
	d.u.i32 = 16380;
	assert_int_equal(parse_status(all, "2.0", d, NULL, &h), SPOP_ST_NORMAL);
	assert_int_equal(parse_status(all, "2.0", spop_cstr("16380"), NULL, &h),
			 SPOP_ST_BAD_FRAME_SIZE);
	assert_int_equal(parse_status(all, "2.0", spop_null(), NULL, &h),
			 SPOP_ST_BAD_FRAME_SIZE);
	/* Prefix and look-alike keys are not matched. */
	assert_int_equal(parse_status(K_VER | K_CAP, "2.0", spop_uint32(0), put_prefix_keys,
				      &h),
			 SPOP_ST_NO_FRAME_SIZE);
	assert_int_equal(parse_status(K_MFS | K_CAP, "2.0", spop_uint32(16380),
				      put_prefix_keys, &h),
			 SPOP_ST_NO_VERSION);
	/* Unknown keys are skipped. */
	assert_int_equal(parse_status(all, "2.0", spop_uint32(16380), put_unknown_keys, &h),
			 SPOP_ST_NORMAL);
	assert_int_equal(h.healthcheck, 0);
	/* Optional keys of the wrong type are ignored. */
	assert_int_equal(parse_status(all, "2.0", spop_uint32(16380), put_engine_int, &h),
			 SPOP_ST_NORMAL);
	assert_null(h.engine_id.ptr);
	assert_int_equal(h.healthcheck, 0);
}

static void test_hello_parse_broken(void **state)
{
	uint8_t b[256];
	struct spop_hello h;
	struct spop_data mfs = spop_uint32(16380);
	size_t n = hello_payload(b, sizeof(b), K_VER | K_MFS | K_CAP, "2.0", &mfs, NULL);
	size_t i;
	int st;

	(void)state;
	/* Every truncation of a valid payload is invalid or misses a key,
	 * and never passes. */
	for (i = 0; i < n; i++) {
		st = -7;
		assert_int_equal(spop_hello_parse(b, i, &h, &st), -1);
		assert_true(st == SPOP_ST_INVALID || st == SPOP_ST_NO_VERSION ||
			    st == SPOP_ST_NO_FRAME_SIZE || st == SPOP_ST_NO_CAPABILITIES);
	}
	/* Cut in the middle of the first key: invalid. */
	assert_int_equal(spop_hello_parse(b, 5, &h, &st), -1);
	assert_int_equal(st, SPOP_ST_INVALID);
	/* An unknown type byte. */
	b[19] = 0x0d;
	assert_int_equal(spop_hello_parse(b, n, &h, &st), -1);
	assert_int_equal(st, SPOP_ST_INVALID);
	/* Empty payload. */
	assert_int_equal(spop_hello_parse(b, 0, &h, &st), -1);
	assert_int_equal(st, SPOP_ST_NO_VERSION);
	assert_int_equal(spop_hello_parse(NULL, 0, &h, &st), -1);
	assert_int_equal(st, SPOP_ST_NO_VERSION);
}

static void test_version_supported(void **state)
{
	static const char *yes[] = {"2.0", " 2.0", "2.0 ", "1.0,2.0", "1.0 , 2.0 ",
				    "2.0,", ",2.0", "\t2.0\t,3.0", "2.1,2.0,1.0"};
	static const char *no[] = {"", "2", "2.00", "12.0", "2.0.1", "1.0", "2 .0",
				   ",,", "2.0x", " ", "20"};
	struct spop_str s;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		s.ptr = yes[i];
		s.len = strlen(yes[i]);
		assert_int_equal(spop_version_supported(s), 1);
	}
	for (i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		s.ptr = no[i];
		s.len = strlen(no[i]);
		assert_int_equal(spop_version_supported(s), 0);
	}
	/* Not NUL-terminated: "2.0" followed by garbage beyond len. */
	s.ptr = "2.05";
	s.len = 3;
	assert_int_equal(spop_version_supported(s), 1);
	s.len = 2;
	assert_int_equal(spop_version_supported(s), 0);
	s.ptr = NULL;
	s.len = 0;
	assert_int_equal(spop_version_supported(s), 0);
}

static void test_status_str(void **state)
{
	(void)state;
	assert_string_equal(spop_status_str(0), "normal");
	assert_string_equal(spop_status_str(1), "I/O error");
	assert_string_equal(spop_status_str(2), "a timeout occurred");
	assert_string_equal(spop_status_str(3), "frame is too big");
	assert_string_equal(spop_status_str(4), "invalid frame received");
	assert_string_equal(spop_status_str(5), "version value not found");
	assert_string_equal(spop_status_str(6), "max-frame-size value not found");
	assert_string_equal(spop_status_str(7), "capabilities value not found");
	assert_string_equal(spop_status_str(8), "unsupported version");
	assert_string_equal(spop_status_str(9), "max-frame-size too big or too small");
	assert_string_equal(spop_status_str(10), "payload fragmentation is not supported");
	assert_string_equal(spop_status_str(11), "invalid interlaced frames");
	assert_string_equal(spop_status_str(12), "frame-id not found");
	assert_string_equal(spop_status_str(13), "resource allocation error");
	assert_string_equal(spop_status_str(99), "an unknown error occurred");
	assert_string_equal(spop_status_str(14), "an unknown error occurred");
	assert_string_equal(spop_status_str(-1), "an unknown error occurred");
	assert_string_equal(spop_status_str(100000), "an unknown error occurred");
}

static void test_constructors(void **state)
{
	struct spop_data d;

	(void)state;
	d = spop_null();
	assert_int_equal(d.type, SPOP_T_NULL);
	d = spop_bool(7);
	assert_int_equal(d.type, SPOP_T_BOOL);
	assert_int_equal(d.u.boolean, 1);
	d = spop_int64(INT64_MIN);
	assert_int_equal(d.type, SPOP_T_INT64);
	assert_true(d.u.i64 == INT64_MIN);
	d = spop_uint32(0xdeadbeef);
	assert_int_equal(d.type, SPOP_T_UINT32);
	assert_true(d.u.u32 == 0xdeadbeef);
	d = spop_strn("abc", 2);
	assert_int_equal(d.type, SPOP_T_STR);
	assert_int_equal(d.u.str.len, 2);
	d = spop_cstr("hello");
	assert_int_equal(d.u.str.len, 5);
	assert_memory_equal(d.u.str.ptr, "hello", 5);
	d = spop_cstr(NULL);
	assert_int_equal(d.u.str.len, 0);
	assert_non_null(d.u.str.ptr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_varint_vectors),
		cmocka_unit_test(test_varint_exhaustive),
		cmocka_unit_test(test_varint_boundaries),
		cmocka_unit_test(test_varint_random),
		cmocka_unit_test(test_varint_same_as_loop),
		cmocka_unit_test(test_var_str_at),
		cmocka_unit_test(test_varint_errors),
		cmocka_unit_test(test_data_exact_bytes),
		cmocka_unit_test(test_data_roundtrip),
		cmocka_unit_test(test_data_decode_flags),
		cmocka_unit_test(test_data_decode_casts),
		cmocka_unit_test(test_name_decode),
		cmocka_unit_test(test_healthcheck_decode),
		cmocka_unit_test(test_healthcheck_encode),
		cmocka_unit_test(test_notify_truncation),
		cmocka_unit_test(test_frame_peek_limits),
		cmocka_unit_test(test_frame_pipelined),
		cmocka_unit_test(test_kv_iteration),
		cmocka_unit_test(test_msg_iteration),
		cmocka_unit_test(test_wbuf_sticky),
		cmocka_unit_test(test_actions),
		cmocka_unit_test(test_var_heads),
		cmocka_unit_test(test_agent_hello),
		cmocka_unit_test(test_disconnects),
		cmocka_unit_test(test_haproxy_hello_engine),
		cmocka_unit_test(test_hello_parse_rules),
		cmocka_unit_test(test_hello_parse_broken),
		cmocka_unit_test(test_version_supported),
		cmocka_unit_test(test_status_str),
		cmocka_unit_test(test_constructors),
	};

	init_boundaries();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
