/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of client identity: SipHash-2-4-128, text forms, keys. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "identity.h"

static const uint8_t key00_0f[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static void unhex(const char *hex, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned v;

		assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

/* Key 00..0f, message 00 01 .. (len - 1). Lengths 0-4 and 15 are the
 * reference implementation's published vectors (vectors_sip128); the
 * others were computed with an independent Python implementation that
 * reproduces those published ones. */
static void test_siphash128_vectors(void **unused)
{
	static const struct {
		size_t len;
		const char *hex;
	} vec[] = {
		{0, "a3817f04ba25a8e66df67214c7550293"},
		{1, "da87c1d86b99af44347659119b22fc45"},
		{2, "8177228da4a45dc7fca38bdef60affe4"},
		{3, "9c70b60c5267a94e5f33b6b02985ed51"},
		{4, "f88164c12d9c8faf7d0f6e7c7bcd5579"},
		{7, "a1f1ebbed8dbc153c0b84aa61ff08239"},
		{8, "3b62a9ba6258f5610f83e264f31497b4"},
		{9, "264499060ad9baabc47f8b02bb6d71ed"},
		{15, "5493e99933b0a8117e08ec0f97cfc3d9"},
		{16, "6ee2a4ca67b054bbfd3315bf85230577"},
		{17, "473d06e8738db89854c066c47ae47740"},
		{63, "5150d1772f50834a503e069a973fbd7c"},
	};
	uint8_t msg[64], out[16], want[16];

	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)i;
	for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
		unhex(vec[i].hex, want, 16);
		identity_siphash128(key00_0f, msg, vec[i].len, out);
		assert_memory_equal(out, want, 16);
	}
	identity_siphash128(key00_0f, NULL, 0, out);
	unhex(vec[0].hex, want, 16);
	assert_memory_equal(out, want, 16);
}

/* identity_key is SipHash over "kind\0value\0rule" (the reference vectors
 * above pin SipHash itself), fed in pieces: every split point must give
 * the one-shot hash, whatever the lengths (no truncation). */
static void test_identity_key(void **unused)
{
	static uint8_t buf[1200];
	uint8_t out[16], want[16];
	static const size_t vlens[] = { 0, 1, 7, 8, 9, 40, 511, 512, 513, 1000 };

	for (size_t k = 0; k <= 20; k += 3) {
		for (size_t vi = 0; vi < sizeof(vlens) / sizeof(vlens[0]); vi++) {
			for (size_t r = 0; r <= 17; r += 4) {
				size_t v = vlens[vi], n = k + 1 + v + 1 + r;

				for (size_t j = 0; j < n; j++)
					buf[j] = (uint8_t)(j * 37 + k * 11 + v + r + 1);
				buf[k] = 0;
				buf[k + 1 + v] = 0;
				identity_siphash128(key00_0f, buf, n, want);
				identity_key(key00_0f, (const char *)buf, k, (const char *)buf + k + 1,
					     v, (const char *)buf + k + 1 + v + 1, r, out);
				assert_memory_equal(out, want, 16);
			}
		}
	}
	/* Kind, rule and secret each matter: the same value under two kinds
	 * is two clients; two rules of one client are two keys. */
	{
		uint8_t a[16], b[16];
		uint8_t other[16];

		identity_key(key00_0f, "ip", 2, "x", 1, "r", 1, a);
		identity_key(key00_0f, "user", 4, "x", 1, "r", 1, b);
		assert_memory_not_equal(a, b, 16);
		identity_key(key00_0f, "ip", 2, "x", 1, "s", 1, b);
		assert_memory_not_equal(a, b, 16);
		memcpy(other, key00_0f, 16);
		other[15] ^= 1;
		identity_key(other, "ip", 2, "x", 1, "r", 1, b);
		assert_memory_not_equal(a, b, 16);
	}
	/* Values that differ after byte 511 are different clients. */
	{
		uint8_t a[16], b[16];

		memset(buf, 'a', 600);
		identity_key(key00_0f, "api_key", 7, (const char *)buf, 600, "r", 1, a);
		buf[599] = 'b';
		identity_key(key00_0f, "api_key", 7, (const char *)buf, 600, "r", 1, b);
		assert_memory_not_equal(a, b, 16);
	}
}

static struct spop_data data_of(uint8_t type)
{
	struct spop_data d;

	memset(&d, 0, sizeof(d));
	d.type = type;
	return d;
}

static void expect_text(const struct spop_data *d, const char *want)
{
	char buf[128];

	memset(buf, 'x', sizeof(buf));
	assert_int_equal(identity_text(d, buf, sizeof(buf)), strlen(want));
	assert_string_equal(buf, want);
}

static void test_identity_text(void **unused)
{
	struct spop_data d;

	d = data_of(SPOP_T_IPV4);
	memcpy(d.u.ipv4, "\xc0\xa8\x01\x02", 4);
	expect_text(&d, "192.168.1.2");
	memcpy(d.u.ipv4, "\x00\x00\x00\x00", 4);
	expect_text(&d, "0.0.0.0");
	d = data_of(SPOP_T_IPV6);
	memcpy(d.u.ipv6, "\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x01", 16);
	expect_text(&d, "2001:db8::1");
	memcpy(d.u.ipv6, "\0\0\0\0\0\0\0\0\0\0\xff\xff\x01\x02\x03\x04", 16);
	expect_text(&d, "::ffff:1.2.3.4");
	d = data_of(SPOP_T_INT32);
	d.u.i32 = -5;
	expect_text(&d, "-5");
	d = data_of(SPOP_T_UINT32);
	d.u.u32 = UINT32_MAX;
	expect_text(&d, "4294967295");
	d = data_of(SPOP_T_INT64);
	d.u.i64 = INT64_MIN;
	expect_text(&d, "-9223372036854775808");
	d = data_of(SPOP_T_UINT64);
	d.u.u64 = UINT64_MAX;
	expect_text(&d, "18446744073709551615");
	d = data_of(SPOP_T_BOOL);
	d.u.boolean = 1;
	expect_text(&d, "true");
	d.u.boolean = 0;
	expect_text(&d, "false");
	d = data_of(SPOP_T_NULL);
	expect_text(&d, "");
	expect_text(NULL, "");
	d = data_of(12); /* no such type */
	expect_text(&d, "");
	d = data_of(SPOP_T_STR);
	d.u.str.ptr = "abc";
	d.u.str.len = 3;
	expect_text(&d, "abc");
	d.u.str.ptr = NULL;
	d.u.str.len = 5;
	expect_text(&d, "");
	/* Binary: raw bytes, a 0 byte included. */
	{
		char buf[16];

		d = data_of(SPOP_T_BIN);
		d.u.str.ptr = "a\0b";
		d.u.str.len = 3;
		assert_int_equal(identity_text(&d, buf, sizeof(buf)), 3);
		assert_memory_equal(buf, "a\0b\0", 4);
	}
}

/* identity_value: strings and binaries whole, in place; other types
 * rendered as identity_text renders them. */
static void test_identity_value(void **unused)
{
	static char big[5000];
	char buf[IDENTITY_RENDER_MAX];
	struct spop_data d;
	const char *v;
	size_t len;

	memset(big, 'x', sizeof(big));
	d.type = SPOP_T_STR;
	d.u.str.ptr = big;
	d.u.str.len = sizeof(big);
	v = identity_value(&d, buf, sizeof(buf), &len);
	assert_ptr_equal(v, big);
	assert_int_equal(len, sizeof(big));
	d.type = SPOP_T_INT64;
	d.u.i64 = -42;
	v = identity_value(&d, buf, sizeof(buf), &len);
	assert_ptr_equal(v, buf);
	assert_int_equal(len, 3);
	assert_memory_equal(v, "-42", 3);
	v = identity_value(NULL, buf, sizeof(buf), &len);
	assert_int_equal(len, 0);
}

static void test_identity_text_truncation(void **unused)
{
	struct spop_data d = data_of(SPOP_T_STR);
	char buf[8];

	d.u.str.ptr = "abcdefghij";
	d.u.str.len = 10;
	memset(buf, 'x', sizeof(buf));
	assert_int_equal(identity_text(&d, buf, 4), 3);
	assert_memory_equal(buf, "abc\0xxxx", 8);
	assert_int_equal(identity_text(&d, buf, 1), 0);
	assert_int_equal(buf[0], '\0');
	buf[0] = 'q';
	assert_int_equal(identity_text(&d, buf, 0), 0);
	assert_int_equal(buf[0], 'q');
	assert_int_equal(identity_text(&d, buf, sizeof(buf)), 7);
	assert_string_equal(buf, "abcdefg");
	d = data_of(SPOP_T_IPV6);
	memcpy(d.u.ipv6, "\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x01", 16);
	assert_int_equal(identity_text(&d, buf, 5), 4);
	assert_string_equal(buf, "2001");
	d = data_of(SPOP_T_UINT64);
	d.u.u64 = UINT64_MAX;
	assert_int_equal(identity_text(&d, buf, sizeof(buf)), 7);
	assert_string_equal(buf, "1844674");
}

static void test_identity_hex(void **unused)
{
	uint8_t key[IDENTITY_KEY_LEN];
	char hex[IDENTITY_HEX_LEN + 2];

	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)(i * 0x11 + 0x0a);
	memset(hex, 'x', sizeof(hex));
	identity_hex(key, hex);
	assert_string_equal(hex, "0a1b2c3d4e5f708192a3b4c5d6e7f809");
	assert_int_equal(hex[IDENTITY_HEX_LEN + 1], 'x');
}

/* identity_key_from() continues a prefix without changing it: one prefix
 * serves every client of a kind. */
static void test_identity_prefix(void **unused)
{
	static const char *const kinds[] = { "", "ip", "user", "api_key", "anonymous",
					     "a-name-of-thirty-one-characters" };
	static const char *const values[] = { "", "x", "1234567", "12345678", "123456789",
					      "key-000123", "2001:db8::1" };
	uint8_t out[16], want[16];

	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		struct identity_prefix p, copy;

		identity_prefix_init(&p, key00_0f, kinds[k], strlen(kinds[k]));
		copy = p;
		for (size_t v = 0; v < sizeof(values) / sizeof(values[0]); v++) {
			identity_key_from(&p, values[v], strlen(values[v]), "default", 7, out);
			identity_key(key00_0f, kinds[k], strlen(kinds[k]), values[v],
				     strlen(values[v]), "default", 7, want);
			assert_memory_equal(out, want, 16);
		}
		assert_memory_equal(&p, &copy, sizeof(p));
	}
}

/* SipHash-2-4-128 as the paper writes it, one byte at a time: a second,
 * independent statement of the hash that identity keys must keep. */
#define REF_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define REF_ROUND(v0, v1, v2, v3)                                                       \
	do {                                                                            \
		v0 += v1; v1 = REF_ROTL(v1, 13); v1 ^= v0; v0 = REF_ROTL(v0, 32);       \
		v2 += v3; v3 = REF_ROTL(v3, 16); v3 ^= v2;                              \
		v0 += v3; v3 = REF_ROTL(v3, 21); v3 ^= v0;                              \
		v2 += v1; v1 = REF_ROTL(v1, 17); v1 ^= v2; v2 = REF_ROTL(v2, 32);       \
	} while (0)

static void ref_siphash128(const uint8_t key[16], const uint8_t *in, size_t len,
			   uint8_t out[16])
{
	uint64_t k0 = 0, k1 = 0, v0, v1, v2, v3, m = 0, r;
	size_t i;

	for (i = 0; i < 8; i++) {
		k0 |= (uint64_t)key[i] << (8 * i);
		k1 |= (uint64_t)key[8 + i] << (8 * i);
	}
	v0 = 0x736f6d6570736575ULL ^ k0;
	v1 = 0x646f72616e646f6dULL ^ k1 ^ 0xee;
	v2 = 0x6c7967656e657261ULL ^ k0;
	v3 = 0x7465646279746573ULL ^ k1;
	for (i = 0; i < len; i++) {
		m |= (uint64_t)in[i] << (8 * (i % 8));
		if (i % 8 == 7) {
			v3 ^= m;
			REF_ROUND(v0, v1, v2, v3);
			REF_ROUND(v0, v1, v2, v3);
			v0 ^= m;
			m = 0;
		}
	}
	m |= (uint64_t)(len & 0xff) << 56;
	v3 ^= m;
	REF_ROUND(v0, v1, v2, v3);
	REF_ROUND(v0, v1, v2, v3);
	v0 ^= m;
	v2 ^= 0xee;
	for (i = 0; i < 4; i++)
		REF_ROUND(v0, v1, v2, v3);
	r = v0 ^ v1 ^ v2 ^ v3;
	for (i = 0; i < 8; i++)
		out[i] = (uint8_t)(r >> (8 * i));
	v1 ^= 0xdd;
	for (i = 0; i < 4; i++)
		REF_ROUND(v0, v1, v2, v3);
	r = v0 ^ v1 ^ v2 ^ v3;
	for (i = 0; i < 8; i++)
		out[8 + i] = (uint8_t)(r >> (8 * i));
}

/* Fixed-seed xorshift64*, so failures reproduce. */
static uint64_t rng(void)
{
	static uint64_t x = 0x9E3779B97F4A7C15ULL;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	return x * 0x2545F4914F6CDD1DULL;
}

/* One key from a prefix against the reference over "kind\0value\0rule"
 * laid out whole, and against the streaming hash. value and rule end
 * their buffers, so that a sanitizer sees any read past them. */
static void check_key_from(const char *kind, size_t klen, size_t vlen, size_t rlen)
{
	static uint8_t vbuf[300], rbuf[300], all[700];
	const char *value = (const char *)vbuf + sizeof(vbuf) - vlen;
	const char *rule = (const char *)rbuf + sizeof(rbuf) - rlen;
	struct identity_prefix p;
	uint8_t got[16], want[16], stream[16];
	size_t n = 0;

	for (size_t i = 0; i < sizeof(vbuf); i++) {
		vbuf[i] = (uint8_t)rng();
		rbuf[i] = (uint8_t)rng();
	}
	memcpy(all + n, kind, klen);
	n += klen;
	all[n++] = 0;
	memcpy(all + n, value, vlen);
	n += vlen;
	all[n++] = 0;
	memcpy(all + n, rule, rlen);
	n += rlen;
	ref_siphash128(key00_0f, all, n, want);
	identity_siphash128(key00_0f, all, n, stream);
	assert_memory_equal(stream, want, 16);
	identity_prefix_init(&p, key00_0f, kind, klen);
	identity_key_from(&p, value, vlen, rule, rlen, got);
	assert_memory_equal(got, want, 16);
}

/* identity_key_from() hashes short parts in one pass and streams long
 * ones: both give the key of the reference, bit for bit, for every
 * number of bytes the prefix leaves pending and lengths 0..300. */
static void test_identity_key_one_pass(void **unused)
{
	static const char kind[] = "a-kind-of-sixteen-bytes";
	static const size_t rl[] = { 0, 1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 40, 300 };

	for (size_t k = 0; k <= 16; k++) {
		for (size_t v = 0; v <= 41; v++)
			for (size_t r = 0; r < sizeof(rl) / sizeof(rl[0]); r++)
				check_key_from(kind, k, v, rl[r]);
		for (int i = 0; i < 300; i++)
			check_key_from(kind, k, (size_t)(rng() % 301), (size_t)(rng() % 301));
	}
	/* A NULL part is an empty one, as before. */
	{
		struct identity_prefix p;
		uint8_t a[16], b[16];

		identity_prefix_init(&p, key00_0f, "ip", 2);
		identity_key_from(&p, NULL, 5, "r", 1, a);
		identity_key_from(&p, "", 0, "r", 1, b);
		assert_memory_equal(a, b, 16);
		identity_key_from(&p, "x", 1, NULL, 3, a);
		identity_key_from(&p, "x", 1, "", 0, b);
		assert_memory_equal(a, b, 16);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_siphash128_vectors),
		cmocka_unit_test(test_identity_key),
		cmocka_unit_test(test_identity_prefix),
		cmocka_unit_test(test_identity_key_one_pass),
		cmocka_unit_test(test_identity_text),
		cmocka_unit_test(test_identity_value),
		cmocka_unit_test(test_identity_text_truncation),
		cmocka_unit_test(test_identity_hex),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
