/* SPDX-License-Identifier: Apache-2.0 */
/* The names of the Redis store's keys (redis_keys.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "rules_text.h"

#include "redis_keys.h"

/* The names of a client's keys in the shared store: fixed by the key's
 * bytes and the limit's name, whatever the host, so that every agent of a
 * fleet (and every version with the same layout) names them alike. */
static void test_key_names(void **state)
{
	struct rules *rules = rules_from_text("limits: [3/1h]");
	const struct rule *rule = rules_rule_at(rules, 0);
	struct redis_keys k;
	static const char digits[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	const struct limit_spec *l = &rule->limits[0];
	const struct limit_spec window = { 3, 3600000000, 0, LIMIT_FIXED_WINDOW };
	const struct limit_spec seventh = { 7, 1000000, 0, LIMIT_TOKEN_BUCKET };
	const struct limit_spec third = { 3, 1000000, 0, LIMIT_TOKEN_BUCKET };
	uint8_t bytes[IDENTITY_KEY_LEN], client[IDENTITY_KEY_LEN];
	char name[REDIS_KEY_NAME_MAX + 1], other[REDIS_KEY_NAME_MAX + 1];
	char tag[REDIS_KEY_TAG_MAX + 1];

	(void)state;
	redis_keys_defaults(&k);
	rules_set_limit_space(rules, REDIS_KEYS_LIMIT_SPACE);
	for (size_t i = 0; i < sizeof(bytes); i++) {
		bytes[i] = (uint8_t)i;
		client[i] = (uint8_t)(0x5a ^ (i * 37));
	}
	/* FNV-1a of "rl3:t3/3600000000/0", and the names it gives */
	assert_string_equal(rule->lid[0], "t3/3600000000/0");
	assert_true(rule->lidh[0] == 0x739d87530eb491f2ULL);
	assert_false(redis_key_packed(&k, l));
	assert_int_equal(redis_key_name(&k, bytes, rule->lidh[0], l, name), 14);
	assert_string_equal(name, "{AAEC}1Hyu3hE4");
	assert_int_equal(redis_key_name(&k, bytes, 0, NULL, name), 14);
	assert_string_equal(name, "{AAEC}m2VeRPkn");
	assert_int_equal(redis_key_tag(&k, bytes, tag), 6);
	assert_string_equal(tag, "{AAEC}");
	/* a client's keys share its tag; its limits' parts differ */
	redis_key_name(&k, client, rule->lidh[0], l, name);
	redis_key_name(&k, client, rule->lidh[0] ^ 1, l, other);
	redis_key_tag(&k, client, tag);
	assert_memory_equal(name, tag, 6);
	assert_memory_equal(other, tag, 6);
	assert_memory_not_equal(name + 6, other + 6, 8);
	/* no brace past the first, so the tag is the whole hash tag */
	for (size_t i = 1; i < 14; i++)
		assert_true(i == 5 || strchr(digits, name[i]));

	/* Packed buckets: a 12-bit tag for every key; a token bucket of
	 * n <= 3 named by its limit's set and its member there */
	k.packed = true;
	k.packed_bits = 12;
	assert_true(redis_key_packed(&k, l));
	assert_true(redis_key_packed(&k, &third));
	assert_false(redis_key_packed(&k, &seventh));
	assert_false(redis_key_packed(&k, &window));
	assert_false(redis_key_packed(&k, NULL));
	/* packed exactly when n = quota / gcd(quota, period) <= 3 */
	for (uint64_t quota = 1; quota <= 64; quota++) {
		static const int64_t periods[] = { 1, 2, 3, 7, 1000, 999, 1000000, 60000000,
						   3600000000, 86400000000, 140737488355327 };

		for (size_t i = 0; i < sizeof(periods) / sizeof(periods[0]); i++) {
			struct limit_spec t = { quota, periods[i], 0, LIMIT_TOKEN_BUCKET };
			uint64_t a = quota, b = (uint64_t)periods[i];

			while (b) {
				uint64_t r = a % b;

				a = b;
				b = r;
			}
			assert_int_equal(redis_key_packed(&k, &t), quota / a <= 3);
		}
	}
	assert_int_equal(redis_key_tag(&k, bytes, tag), 4);
	assert_string_equal(tag, "{AA}");
	assert_int_equal(redis_key_name(&k, bytes, rule->lidh[0], l, name), 23);
	assert_string_equal(name, "{AA}~c52HUw60CAkKCwwNDg");
	/* the key Redis holds: the set */
	assert_int_equal(redis_key_held_len(&k, l, 23), 13);
	assert_int_equal(redis_key_held_len(&k, &window, 14), 14);
	/* the same limit's set for another client of the tag */
	bytes[14] ^= 1;
	redis_key_name(&k, bytes, rule->lidh[0], l, other);
	assert_memory_equal(name, other, 13);
	assert_memory_not_equal(name, other, 23);
	bytes[14] ^= 1;
	assert_int_equal(redis_key_name(&k, bytes, rule->lidh[0], &window, name), 14);
	assert_string_equal(name, "{AA}1Hyu3hE4Bm");
	/* the overrides stay where they were */
	assert_int_equal(redis_overrides_key(false, name), 15);
	assert_string_equal(name, "{AAAA}overrides");
	/* and what routes by their tag finds them there */
	assert_int_equal(redis_key_tag(&k, redis_overrides_at, tag), 6);
	assert_string_equal(tag, "{AAAA}");
	/* fewer sets (--redis-packed-sets): the tag's top bits are the
	 * client's, the others 0; the rest of each name is the same */
	bytes[0] = bytes[1] = 0xff;
	redis_key_tag(&k, bytes, tag);
	assert_string_equal(tag, "{__}");
	k.packed = true;
	k.packed_bits = 8;
	redis_key_tag(&k, bytes, tag);
	assert_string_equal(tag, "{_w}");
	redis_key_name(&k, bytes, rule->lidh[0], l, other);
	assert_string_equal(other, "{_w}~c52HUw60CAkKCwwNDg");
	k.packed = true;
	k.packed_bits = 1;
	redis_key_tag(&k, bytes, tag);
	assert_string_equal(tag, "{gA}");
	k.packed = true;
	k.packed_bits = 0;
	assert_int_equal(redis_key_name(&k, bytes, rule->lidh[0], &window, name), 14);
	assert_string_equal(name, "{AA}1Hyu3hE4Bm");
	/* more sets than 4096: a tag of three digits, 18 bits */
	bytes[2] = 0xff;
	k.packed = true;
	k.packed_bits = 18;
	assert_int_equal(redis_key_tag(&k, bytes, tag), 5);
	assert_string_equal(tag, "{___}");
	assert_int_equal(redis_key_name(&k, bytes, rule->lidh[0], l, name), REDIS_KEY_NAME_MAX);
	assert_string_equal(name, "{___}~c52HUw60CAkKCwwNDg");
	assert_int_equal(redis_key_held_len(&k, l, REDIS_KEY_NAME_MAX), 14);
	assert_int_equal(redis_key_name(&k, bytes, rule->lidh[0], &window, name), 15);
	assert_string_equal(name, "{___}1Hyu3hE4Bm");
	k.packed = true;
	k.packed_bits = 16;
	redis_key_tag(&k, bytes, tag);
	assert_string_equal(tag, "{__8}");
	k.packed = true;
	k.packed_bits = 13;
	redis_key_tag(&k, bytes, tag);
	assert_string_equal(tag, "{__g}");
	bytes[2] = 2;
	/* (the wide tag keeps its 24 bits) */
	k.packed = false;
	k.packed_bits = 0;
	redis_key_tag(&k, bytes, tag);
	assert_string_equal(tag, "{__8C}");
	k.packed = false;
	k.packed_bits = REDIS_KEY_PACKED_BITS_DEFAULT;
	/* keys without an expiry: the limits of buckets, windows and logs
	 * that are not packed; requests in flight and bans keep theirs */
	{
		const struct limit_spec inflight = { 2, 30000000, 0, LIMIT_CONCURRENCY };
		const struct limit_spec ban = { 1, 30000000, 0, LIMIT_BAN };
		const struct limit_spec log = { 3, 1000000, 0, LIMIT_LOG };

		/* auto (the default): where the server evicts them */
		assert_int_equal(k.expiry, REDIS_EXPIRY_AUTO);
		assert_false(redis_key_expiry_dropped(&k, false));
		assert_true(redis_key_expiry_dropped(&k, true));
		assert_false(redis_key_unexpiring(&k, l, redis_key_expiry_dropped(&k, false)));
		assert_true(redis_key_unexpiring(&k, l, redis_key_expiry_dropped(&k, true)));
		k.expiry = REDIS_EXPIRY_ALWAYS;
		assert_false(redis_key_expiry_dropped(&k, true));
		k.expiry = REDIS_EXPIRY_NEVER;
		assert_true(redis_key_expiry_dropped(&k, false));
		assert_true(redis_key_unexpiring(&k, l, true));
		assert_true(redis_key_unexpiring(&k, &window, true));
		assert_true(redis_key_unexpiring(&k, &log, true));
		assert_false(redis_key_unexpiring(&k, &inflight, true));
		assert_false(redis_key_unexpiring(&k, &ban, true));
		assert_false(redis_key_unexpiring(&k, NULL, true));
		k.packed = true;
		k.packed_bits = REDIS_KEY_PACKED_BITS_DEFAULT;
		assert_false(redis_key_unexpiring(&k, l, true));
		assert_true(redis_key_unexpiring(&k, &window, true));
		k.packed = false;
		k.packed_bits = REDIS_KEY_PACKED_BITS_DEFAULT;
		k.expiry = REDIS_EXPIRY_AUTO;
		assert_false(redis_key_unexpiring(&k, &window, false));
	}
	assert_false(redis_key_packed(&k, l));
	rules_release(rules);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
