/* Unit tests of the cluster client's pure parts: key slots against what
 * Redis 7.0 computes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "alloc.h"
#include "redis_cluster.h"

/* ---- key slots ---------------------------------------------------------- */

/* CRC16-CCITT (XMODEM) a bit at a time, straight from its definition. */
static uint16_t crc16_bitwise(const unsigned char *p, size_t n)
{
	uint16_t crc = 0;

	for (size_t i = 0; i < n; i++) {
		crc ^= (uint16_t)(p[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = crc & 0x8000 ? (uint16_t)(crc << 1) ^ 0x1021 : (uint16_t)(crc << 1);
	}
	return crc;
}

/* The check value of the CRC-16/XMODEM catalogue, which Redis's cluster
 * specification quotes; 0x31c3 < 16384, so the slot is the whole CRC. */
static void test_crc16_check_value(void **unused)
{
	assert_int_equal(crc16_bitwise((const unsigned char *)"123456789", 9), 0x31c3);
	assert_int_equal(redis_cluster_slot("123456789", 9), 0x31c3);
}

/* Every one- and two-byte key reaches every table entry, and the second
 * byte mixes the first one's high bits in. None has a tag: a tag needs a
 * byte between '{' and '}'. */
static void test_crc16_short_keys(void **unused)
{
	unsigned char k[2];

	for (unsigned a = 0; a < 256; a++) {
		k[0] = (unsigned char)a;
		assert_int_equal(redis_cluster_slot((char *)k, 1), crc16_bitwise(k, 1) & 0x3fff);
		for (unsigned b = 0; b < 256; b++) {
			k[1] = (unsigned char)b;
			assert_int_equal(redis_cluster_slot((char *)k, 2), crc16_bitwise(k, 2) & 0x3fff);
		}
	}
}

/* Keys and the slot `CLUSTER KEYSLOT` gave for them on redis-server 7.0.15. */
static const struct {
	const char *key;
	size_t len;
	uint16_t slot;
} slot_vectors[] = {
#define K(s) s, sizeof(s) - 1
	{ K(""), 0 }, { K("k596"), 0 }, { K("k10322"), 16383 }, { K("123456789"), 12739 },
	{ K("foo"), 12182 }, { K("bar"), 5061 }, { K("a"), 15495 }, { K("key"), 12539 },
	{ K("user:1000"), 1649 }, { K("rl:v1:login:1.2.3.4"), 3821 },
	/* tags: the first '{' and the first '}' after it; a '}' before the
	 * '{' does not count */
	{ K("{user1000}.following"), 3443 }, { K("{user1000}.followers"), 3443 },
	{ K("rl:{tenant-7}:ip:10.0.0.1"), 4260 }, { K("foo{bar}{zap}"), 5061 },
	{ K("{a}"), 15495 }, { K("x{a}y"), 15495 }, { K("}{a}"), 15495 }, { K("{a}}"), 15495 },
	{ K("{ }"), 9314 },
	/* empty tags hash the whole key */
	{ K("foo{}{bar}"), 8363 }, { K("{}"), 15257 }, { K("{}a"), 10875 }, { K("a{}"), 6082 },
	{ K("{}}"), 14790 },
	/* nested and unclosed braces: "{bar", "{", "{a" are tags */
	{ K("foo{{bar}}zap"), 4015 }, { K("{{}}"), 4092 }, { K("{{a}}"), 10276 },
	{ K("{"), 4092 }, { K("}"), 12090 }, { K("}{"), 12793 }, { K("{a"), 10276 },
	{ K("a}"), 5921 },
	/* binary bytes; the second key's tag is one NUL byte */
	{ K("\x00"), 0 }, { K("\xff\xfe\x00{\x00}"), 0 }, { K("{\xff}"), 7920 },
	{ K("a\x00" "b"), 8383 }, { K("\r\n"), 5910 },
#undef K
};

static void test_slot_vectors(void **unused)
{
	for (size_t i = 0; i < sizeof(slot_vectors) / sizeof(slot_vectors[0]); i++) {
		/* an exact-size copy, so reading past the key would show */
		char *k = xmalloc(slot_vectors[i].len ? slot_vectors[i].len : 1);

		memcpy(k, slot_vectors[i].key, slot_vectors[i].len);
		if (redis_cluster_slot(k, slot_vectors[i].len) != slot_vectors[i].slot)
			fail_msg("key %zu: slot %u, want %u", i,
				 redis_cluster_slot(k, slot_vectors[i].len), slot_vectors[i].slot);
		xfree(k);
	}
}

/* Long keys, from the same server: 256 bytes 0..255, 300 'x', and a tag of
 * 300 'y' followed by "z". */
static void test_slot_long_keys(void **unused)
{
	char k[302];

	for (int i = 0; i < 256; i++)
		k[i] = (char)i;
	assert_int_equal(redis_cluster_slot(k, 256), 16155);
	memset(k, 'x', 300);
	assert_int_equal(redis_cluster_slot(k, 300), 11216);
	k[0] = '{';
	memset(k + 1, 'y', 300);
	k[301] = '}';
	assert_int_equal(redis_cluster_slot(k, 302), 10942);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc16_check_value),
		cmocka_unit_test(test_crc16_short_keys),
		cmocka_unit_test(test_slot_vectors),
		cmocka_unit_test(test_slot_long_keys),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
