/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the RateLimit-Policy / RateLimit field values
 * (draft-ietf-httpapi-ratelimit-headers-10 syntax). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <inttypes.h>
#include <stdio.h>

#include "limit.h"
#include "rlheader.h"

static void test_policy(void **unused)
{
	char buf[128];

	assert_int_equal(rlheader_policy(buf, sizeof(buf), "default", 100, 60), 20);
	assert_string_equal(buf, "\"default\";q=100;w=60");
	assert_int_equal(rlheader_policy(buf, sizeof(buf), "burst", 1, 1), 15);
	assert_string_equal(buf, "\"burst\";q=1;w=1");
	/* No window: w is optional and must be non-zero when present. */
	assert_int_equal(rlheader_policy(buf, sizeof(buf), "quota", 10000, 0), 15);
	assert_string_equal(buf, "\"quota\";q=10000");
	rlheader_policy(buf, sizeof(buf), "quota", 10000, -3);
	assert_string_equal(buf, "\"quota\";q=10000");
	rlheader_policy(buf, sizeof(buf), "", 0, 31622400);
	assert_string_equal(buf, "\"\";q=0;w=31622400");
	rlheader_policy(buf, sizeof(buf), NULL, 5, 1);
	assert_string_equal(buf, "\"\";q=5;w=1");
	/* sf-integers stop at 15 digits. */
	rlheader_policy(buf, sizeof(buf), "big", UINT64_MAX, INT64_MAX);
	assert_string_equal(buf, "\"big\";q=999999999999999;w=999999999999999");
	rlheader_policy(buf, sizeof(buf), "big", 999999999999999ULL, 1);
	assert_string_equal(buf, "\"big\";q=999999999999999;w=1");
	rlheader_policy(buf, sizeof(buf), "big", 1ULL << 40, 1);
	assert_string_equal(buf, "\"big\";q=1099511627776;w=1");
}

static void test_ratelimit(void **unused)
{
	char buf[128];

	assert_int_equal(rlheader_ratelimit(buf, sizeof(buf), "default", 42, 17), 19);
	assert_string_equal(buf, "\"default\";r=42;t=17");
	rlheader_ratelimit(buf, sizeof(buf), "default", 0, 0);
	assert_string_equal(buf, "\"default\";r=0;t=0");
	rlheader_ratelimit(buf, sizeof(buf), "default", 999, -1);
	assert_string_equal(buf, "\"default\";r=999");
	rlheader_ratelimit(buf, sizeof(buf), "pro-1m", UINT64_MAX, 3600);
	assert_string_equal(buf, "\"pro-1m\";r=999999999999999;t=3600");
}

/* t from the limiter's more_us on an injected clock (draft -10: until more
 * quota, not until full): 10/1m emptied at once, then 1 us and 6 s on. */
static void test_ratelimit_t_is_more_quota(void **unused)
{
	struct limit_spec sp = {10, 60 * LIMIT_US_PER_S, 0, LIMIT_TOKEN_BUCKET};
	struct limit_state st = {0, 0, 0}, next;
	struct limit_result r;
	const int64_t t0 = 1700000000LL * LIMIT_US_PER_S;
	char buf[64];

	for (int i = 0; i < 10; i++) {
		limit_eval(&sp, &st, t0, 1, &next, &r);
		st = next;
	}
	rlheader_ratelimit(buf, sizeof(buf), "default", r.remaining, limit_ceil_s(r.more_us));
	assert_string_equal(buf, "\"default\";r=0;t=6");
	limit_eval(&sp, &st, t0 + 1, 0, &next, &r);
	rlheader_ratelimit(buf, sizeof(buf), "default", r.remaining, limit_ceil_s(r.more_us));
	assert_string_equal(buf, "\"default\";r=0;t=6"); /* 5.999999 s, rounded up */
	limit_eval(&sp, &st, t0 + 6 * LIMIT_US_PER_S, 0, &next, &r);
	rlheader_ratelimit(buf, sizeof(buf), "default", r.remaining, limit_ceil_s(r.more_us));
	assert_string_equal(buf, "\"default\";r=1;t=6");
}

static void test_escaping(void **unused)
{
	char buf[128];

	rlheader_policy(buf, sizeof(buf), "a\"b\\c", 1, 2);
	assert_string_equal(buf, "\"a\\\"b\\\\c\";q=1;w=2");
	/* Controls, DEL and non-ASCII bytes are dropped; space and ~ kept. */
	rlheader_ratelimit(buf, sizeof(buf), "x\r\ny\tz\x7f\x80\xff~ !", 1, 2);
	assert_string_equal(buf, "\"xyz~ !\";r=1;t=2");
	rlheader_ratelimit(buf, sizeof(buf), "caf\xc3\xa9", 1, 2);
	assert_string_equal(buf, "\"caf\";r=1;t=2");
}

static void test_overflow(void **unused)
{
	char buf[32];
	/* "\"default\";q=100;w=60" is 20 bytes: it needs a 21-byte buffer. */
	for (size_t cap = 1; cap < 21; cap++) {
		memset(buf, 'x', sizeof(buf));
		assert_int_equal(rlheader_policy(buf, cap, "default", 100, 60), -1);
		assert_int_equal(buf[0], '\0');
		for (size_t i = cap; i < sizeof(buf); i++)
			assert_int_equal(buf[i], 'x');
	}
	assert_int_equal(rlheader_policy(buf, 21, "default", 100, 60), 20);
	assert_string_equal(buf, "\"default\";q=100;w=60");
	memset(buf, 'x', sizeof(buf));
	assert_int_equal(rlheader_ratelimit(buf, 19, "default", 42, 17), -1);
	assert_int_equal(buf[0], '\0');
	assert_int_equal(rlheader_ratelimit(buf, 20, "default", 42, 17), 19);
	/* An escape that does not fit fails as a whole. */
	assert_int_equal(rlheader_policy(buf, 5, "\"\"", 1, 0), -1);
	assert_string_equal(buf, "");
	/* Empty buffer: nothing to write into, not even the NUL. */
	buf[0] = 'q';
	assert_int_equal(rlheader_policy(buf, 0, "a", 1, 1), -1);
	assert_int_equal(rlheader_ratelimit(buf, 0, "a", 1, 1), -1);
	assert_int_equal(rlheader_policy_append(buf, 0, "a", 1, 1), -1);
	assert_int_equal(buf[0], 'q');
	assert_int_equal(rlheader_policy(NULL, 10, "a", 1, 1), -1);
}

static void test_append(void **unused)
{
	char buf[64];

	buf[0] = '\0';
	assert_int_equal(rlheader_policy_append(buf, sizeof(buf), "permin", 50, 60), 18);
	assert_string_equal(buf, "\"permin\";q=50;w=60");
	assert_int_equal(rlheader_policy_append(buf, sizeof(buf), "perhr", 1000, 3600), 41);
	assert_string_equal(buf, "\"permin\";q=50;w=60, \"perhr\";q=1000;w=3600");
	/* A third that does not fit leaves the two that did. */
	assert_int_equal(rlheader_policy_append(buf, sizeof(buf), "perday", 10000, 86400), -1);
	assert_string_equal(buf, "\"permin\";q=50;w=60, \"perhr\";q=1000;w=3600");
	/* Exactly full: 41 + 2 + 20 = 63 bytes and the NUL. */
	assert_int_equal(rlheader_policy_append(buf, sizeof(buf), "abcdefgh", 10, 60), 63);
	assert_string_equal(buf,
			    "\"permin\";q=50;w=60, \"perhr\";q=1000;w=3600, \"abcdefgh\";q=10;w=60");
	/* Not a string within cap: nothing to keep. */
	memset(buf, 'x', sizeof(buf));
	assert_int_equal(rlheader_policy_append(buf, sizeof(buf), "a", 1, 1), -1);
	assert_int_equal(buf[0], '\0');
	/* Appending to what rlheader_policy wrote. */
	rlheader_policy(buf, sizeof(buf), "burst", 100, 60);
	assert_int_equal(rlheader_policy_append(buf, sizeof(buf), "daily", 1000, 86400), 42);
	assert_string_equal(buf, "\"burst\";q=100;w=60, \"daily\";q=1000;w=86400");
}

/* rlheader_ratelimit_named() with a name from rlheader_name() gives what
 * rlheader_ratelimit() gives: the same value, or the same -1 and empty
 * string when it does not fit. */
static void test_named(void **unused)
{
	static const char *const names[] = { "default", "pro-1m", "", "a\"b\\c",
					     "x\r\ny\tz\x7f\x80~ !", "caf\xc3\xa9" };
	static const uint64_t remaining[] = { 0, 42, 999999999, UINT64_MAX };
	static const int64_t reset[] = { -1, 0, 17, 3600 };
	char sf[64], a[64], b[64];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		int len = rlheader_name(sf, sizeof(sf), names[i]);

		assert_true(len >= 2 && (size_t)len < RLHEADER_NAME_MAX(strlen(names[i])));
		for (size_t r = 0; r < sizeof(remaining) / sizeof(remaining[0]); r++) {
			for (size_t t = 0; t < sizeof(reset) / sizeof(reset[0]); t++) {
				for (size_t cap = 0; cap <= sizeof(a); cap++) {
					int ra, rb;

					memset(a, 'x', sizeof(a));
					memset(b, 'x', sizeof(b));
					ra = rlheader_ratelimit(a, cap, names[i], remaining[r], reset[t]);
					rb = rlheader_ratelimit_named(b, cap, sf, (size_t)len,
								      remaining[r], reset[t]);
					assert_int_equal(ra, rb);
					/* the value (or the empty string of a value
					 * that did not fit), and nothing past cap */
					if (cap > 0)
						assert_string_equal(a, b);
					assert_memory_equal(a + cap, b + cap, sizeof(a) - cap);
				}
			}
		}
	}
	/* Too small for the name itself. */
	assert_int_equal(rlheader_name(sf, 5, "default"), -1);
	assert_string_equal(sf, "");
}

/* Numbers of every length, on both sides of each power of ten, written as
 * printf writes them (capped at 15 digits). */
static void test_digits(void **unused)
{
	char got[96], want[96];
	uint64_t p = 1;

	for (int k = 0; k <= 19; k++, p *= 10) {
		for (int64_t d = -1; d <= 1; d++) {
			uint64_t v = p + (uint64_t)d, c;

			if (k == 0 && d < 0)
				v = 0;
			c = v > 999999999999999ULL ? 999999999999999ULL : v;
			snprintf(want, sizeof(want), "\"n\";r=%" PRIu64 ";t=%" PRIu64, c, c);
			assert_int_equal(rlheader_ratelimit_named(got, sizeof(got), "\"n\"", 3, v,
								  (int64_t)(v > INT64_MAX ? INT64_MAX : v)),
					 (int)strlen(want));
			assert_string_equal(got, want);
		}
	}
}

/* Every small number (one digit has a path of its own) and random ones
 * of every length, as printf writes them, through both writers. */
static void check_rt(uint64_t r, int64_t t)
{
	char got[96], want[96];
	uint64_t c = r > 999999999999999ULL ? 999999999999999ULL : r;
	int64_t ct = t > 999999999999999LL ? 999999999999999LL : t;

	if (t >= 0)
		snprintf(want, sizeof(want), "\"n\";r=%" PRIu64 ";t=%" PRId64, c, ct);
	else
		snprintf(want, sizeof(want), "\"n\";r=%" PRIu64, c);
	assert_int_equal(rlheader_ratelimit_named(got, sizeof(got), "\"n\"", 3, r, t),
			 (int)strlen(want));
	assert_string_equal(got, want);
	assert_int_equal(rlheader_ratelimit(got, sizeof(got), "n", r, t), (int)strlen(want));
	assert_string_equal(got, want);
}

static void test_digits_all(void **unused)
{
	uint64_t x = 0x9E3779B97F4A7C15ULL;

	for (uint64_t v = 0; v <= 20000; v++) {
		check_rt(v, (int64_t)v);
		check_rt(v, -1);
	}
	check_rt(UINT64_MAX, INT64_MAX);
	for (int i = 0; i < 100000; i++) {
		uint64_t v;

		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		v = x * 0x2545F4914F6CDD1DULL;
		v >>= (unsigned)(x % 64);
		check_rt(v, (int64_t)(v >> 1));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_policy),
		cmocka_unit_test(test_ratelimit),
		cmocka_unit_test(test_ratelimit_t_is_more_quota),
		cmocka_unit_test(test_escaping),
		cmocka_unit_test(test_overflow),
		cmocka_unit_test(test_append),
		cmocka_unit_test(test_named),
		cmocka_unit_test(test_digits),
		cmocka_unit_test(test_digits_all),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
