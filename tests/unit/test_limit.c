/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the limiter math on an injected clock (microseconds). */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "limit.h"

#define MS 1000LL
#define S LIMIT_US_PER_S
/* A realistic epoch, so nothing relies on time starting at 0. */
#define T0 (1700000000LL * S)

static struct limit_spec spec(uint64_t quota, int64_t period, uint64_t burst,
			      enum limit_algo algo)
{
	struct limit_spec s;

	memset(&s, 0, sizeof(s));
	s.quota = quota;
	s.period_us = period;
	s.burst = burst;
	s.algo = algo;
	return s;
}

/* One request: evaluates, commits when allowed, returns the result. */
static struct limit_result hit(const struct limit_spec *sp, struct limit_state *st,
			       int64_t now, uint32_t cost)
{
	struct limit_state next;
	struct limit_result r;

	limit_eval(sp, st, now, cost, &next, &r);
	if (!r.allowed && memcmp(&next, st, sizeof(next)) != 0) {
		/* only a bucket that owed more than its capacity: now empty */
		assert_int_equal(sp->algo, LIMIT_TOKEN_BUCKET);
		assert_true(next.a < st->a);
	}
	*st = next;
	return r;
}

/* ---- notation ------------------------------------------------------------ */

static void test_parse_ok(void **unused)
{
	static const struct {
		const char *s;
		uint64_t quota;
		int64_t period;
	} cases[] = {
		{"100/1m", 100, 60 * S},
		{"1000/1h", 1000, 3600 * S},
		{"20/10s", 20, 10 * S},
		{"5/500ms", 5, 500 * MS},
		{"10/s", 10, S},
		{"3/2d", 3, 2 * 86400 * S},
		{"7/m", 7, 60 * S},
		{"1/1ms", 1, MS},
		{"1/1000us", 1, MS},
		{"1099511627776/366d", 1ULL << 40, 366LL * 86400 * S},
		{"007/90s", 7, 90 * S},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct limit_spec sp;
		char err[128] = "";

		memset(&sp, 0xa5, sizeof(sp));
		assert_int_equal(limit_parse(cases[i].s, &sp, err, sizeof(err)), 0);
		assert_int_equal(sp.quota, cases[i].quota);
		assert_int_equal(sp.period_us, cases[i].period);
		assert_int_equal(sp.burst, 0);
		assert_int_equal(sp.algo, LIMIT_TOKEN_BUCKET);
		assert_string_equal(err, "");
	}
}

static void test_parse_errors(void **unused)
{
	static const struct {
		const char *s;
		const char *msg; /* a part of the message */
	} cases[] = {
		{"", "empty"},
		{"0/1m", "at least 1"},
		{"100", "missing period"},
		{"100/", "missing period"},
		{"100/0s", "at least 1ms"},
		{"5/500us", "at least 1ms"},
		{"100/1m ", "unexpected ' '"},
		{"100/1mx", "unknown period unit"},
		{"100/1m,20", "unexpected ',20'"},
		{"100/1m/2", "unexpected '/2'"},
		{"-5/1m", "negative quota"},
		{"5/-1m", "negative period"},
		{"+5/1m", "expected N/P"},
		{" 5/1m", "expected N/P"},
		{"1099511627777/1m", "quota over 1099511627776"},
		{"99999999999999999999999/1m", "quota over"},
		{"5/367d", "over 366d"},
		{"5/8785h", "over 366d"},
		{"5/99999999999999999999d", "over 366d"},
		{"5/1.5s", "unit"},
		{"5/10", "needs a unit"},
		{"5:1m", "unexpected ':'"},
		{"abc", "expected N/P"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct limit_spec sp, before;
		char err[128] = "";

		memset(&sp, 0x5a, sizeof(sp));
		before = sp;
		assert_int_equal(limit_parse(cases[i].s, &sp, err, sizeof(err)), -1);
		if (!strstr(err, cases[i].msg))
			fail_msg("'%s': message '%s' lacks '%s'", cases[i].s, err, cases[i].msg);
		assert_memory_equal(&sp, &before, sizeof(sp));
	}
	/* No room for a message is not a reason to crash. */
	{
		struct limit_spec sp;

		assert_int_equal(limit_parse("0/1m", &sp, NULL, 0), -1);
		assert_int_equal(limit_parse(NULL, &sp, NULL, 0), -1);
	}
}

static void test_parse_duration(void **unused)
{
	int64_t us = -7;

	assert_int_equal(limit_parse_duration("250ms", &us), 0);
	assert_int_equal(us, 250 * MS);
	assert_int_equal(limit_parse_duration("m", &us), 0);
	assert_int_equal(us, 60 * S);
	assert_int_equal(limit_parse_duration("2h", &us), 0);
	assert_int_equal(us, 7200 * S);
	assert_int_equal(limit_parse_duration("1d", &us), 0);
	assert_int_equal(us, 86400 * S);
	assert_int_equal(limit_parse_duration("0s", &us), 0);
	assert_int_equal(us, 0);
	assert_int_equal(limit_parse_duration("9223372036854775807us", &us), 0);
	assert_int_equal(us, INT64_MAX);
	us = 42;
	assert_int_equal(limit_parse_duration("9223372036854775808us", &us), -1);
	assert_int_equal(limit_parse_duration("106751992d", &us), -1);
	assert_int_equal(limit_parse_duration("", &us), -1);
	assert_int_equal(limit_parse_duration("5", &us), -1);
	assert_int_equal(limit_parse_duration("5x", &us), -1);
	assert_int_equal(limit_parse_duration("5min", &us), -1);
	assert_int_equal(limit_parse_duration("-1s", &us), -1);
	assert_int_equal(limit_parse_duration("1s ", &us), -1);
	assert_int_equal(limit_parse_duration(NULL, &us), -1);
	assert_int_equal(us, 42);
}

static void test_format_period(void **unused)
{
	static const struct {
		int64_t us;
		const char *s;
	} cases[] = {
		{60 * S, "1m"},       {3600 * S, "1h"},   {10 * S, "10s"},
		{500 * MS, "500ms"},  {90 * S, "90s"},    {86400 * S, "1d"},
		{2 * 86400 * S, "2d"}, {36 * 3600 * S, "36h"}, {1500 * MS, "1500ms"},
		{120 * 60 * S, "2h"}, {1500, "1500us"},   {0, "0us"},
	};
	char buf[32];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		limit_format_period(cases[i].us, buf, sizeof(buf));
		assert_string_equal(buf, cases[i].s);
	}
	limit_format_period(500 * MS, buf, 3);
	assert_string_equal(buf, "50");
}

static void test_ceil_s(void **unused)
{
	assert_int_equal(limit_ceil_s(0), 0);
	assert_int_equal(limit_ceil_s(-1), 0);
	assert_int_equal(limit_ceil_s(INT64_MIN), 0);
	assert_int_equal(limit_ceil_s(1), 1);
	assert_int_equal(limit_ceil_s(999999), 1);
	assert_int_equal(limit_ceil_s(S), 1);
	assert_int_equal(limit_ceil_s(S + 1), 2);
	assert_int_equal(limit_ceil_s(60 * S), 60);
	assert_int_equal(limit_ceil_s(INT64_MAX), INT64_MAX / S + 1);
}

/* ---- token bucket ------------------------------------------------------------ */

static void test_bucket_fresh(void **unused)
{
	struct limit_spec sp = spec(10, S, 0, LIMIT_TOKEN_BUCKET);
	struct limit_state st = {0, 0, 0};
	struct limit_result r;

	for (int i = 0; i < 10; i++) {
		r = hit(&sp, &st, T0, 1);
		assert_true(r.allowed);
		assert_int_equal(r.limit, 10);
		assert_int_equal(r.remaining, 9 - i);
		assert_int_equal(r.reset_us, (i + 1) * 100 * MS);
	}
	r = hit(&sp, &st, T0, 1);
	assert_false(r.allowed);
	assert_int_equal(r.remaining, 0);
	assert_int_equal(r.retry_after_us, 100 * MS);
	assert_int_equal(r.reset_us, S);
	assert_int_equal(st.a, T0 + S);
	assert_int_equal(st.b, 0);
}

static void test_bucket_refill(void **unused)
{
	struct limit_spec sp = spec(10, S, 0, LIMIT_TOKEN_BUCKET);
	struct limit_state st = {0, 0, 0};
	struct limit_result r;

	for (int i = 0; i < 10; i++)
		assert_true(hit(&sp, &st, T0, 1).allowed);
	/* Exactly one token every 100 ms, not a microsecond earlier. */
	for (int k = 1; k <= 30; k++) {
		int64_t due = T0 + k * 100 * MS;

		r = hit(&sp, &st, due - 1, 1);
		assert_false(r.allowed);
		assert_int_equal(r.retry_after_us, 1);
		r = hit(&sp, &st, due, 1);
		assert_true(r.allowed);
		assert_int_equal(r.remaining, 0);
		assert_int_equal(r.reset_us, S);
		r = hit(&sp, &st, due, 1);
		assert_false(r.allowed);
		assert_int_equal(r.retry_after_us, 100 * MS);
	}
	/* A long pause refills to capacity and no further. */
	r = hit(&sp, &st, T0 + 3600 * S, 1);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 9);
	assert_int_equal(r.reset_us, 100 * MS);
}

static void test_bucket_burst(void **unused)
{
	struct limit_spec sp = spec(10, S, 20, LIMIT_TOKEN_BUCKET);
	struct limit_state st = {0, 0, 0};
	struct limit_result r;

	for (int i = 0; i < 20; i++) {
		r = hit(&sp, &st, T0, 1);
		assert_true(r.allowed);
		assert_int_equal(r.limit, 10);
		assert_int_equal(r.remaining, 19 - i);
	}
	r = hit(&sp, &st, T0, 1);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 100 * MS);
	assert_int_equal(r.reset_us, 2 * S);
	/* Refills at 10 per second: one second later, 10 more and no more. */
	for (int i = 0; i < 10; i++)
		assert_true(hit(&sp, &st, T0 + S, 1).allowed);
	r = hit(&sp, &st, T0 + S, 1);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 100 * MS);
	/* Two seconds of silence fill all 20 again. */
	r = hit(&sp, &st, T0 + 4 * S, 1);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 19);
}

/* 3/1s: the emission interval is 333333.33... us. Token k after a drain is
 * due at exactly k/3 s; a bucket that rounds the interval per token drifts
 * by k microseconds, which this catches. */
static void test_bucket_rational_interval(void **unused)
{
	struct limit_spec sp = spec(3, S, 0, LIMIT_TOKEN_BUCKET);
	struct limit_state st = {0, 0, 0};
	struct limit_result r;

	for (int i = 0; i < 3; i++)
		assert_true(hit(&sp, &st, T0, 1).allowed);
	r = hit(&sp, &st, T0, 1);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 333334);
	assert_int_equal(limit_ceil_s(r.retry_after_us), 1);
	for (int64_t k = 1; k <= 3000; k++) {
		int64_t due = T0 + (k * S + 2) / 3; /* ceil(k * S / 3) */

		r = hit(&sp, &st, due - 1, 1);
		assert_false(r.allowed);
		assert_int_equal(r.retry_after_us, 1);
		r = hit(&sp, &st, due, 1);
		assert_true(r.allowed);
		assert_int_equal(r.remaining, 0);
	}
	/* The exact TAT: 1 s + 3000 intervals = 1001 s, no fraction left. */
	assert_int_equal(st.a, T0 + 1001 * S);
	assert_int_equal(st.b, 0);
}

/* Reference: a classic token bucket on exact integers, independent of GCRA:
 * level = tokens * period, refilled by quota per microsecond elapsed and
 * capped at capacity * period. */
struct ref_bucket {
	int64_t level, last, cap, quota, period;
};

static int ref_take(struct ref_bucket *b, int64_t now, int64_t cost)
{
	b->level += (now - b->last) * b->quota;
	if (b->level > b->cap * b->period)
		b->level = b->cap * b->period;
	b->last = now;
	if (b->level < cost * b->period)
		return 0;
	b->level -= cost * b->period;
	return 1;
}

/* The classic bug: whole tokens only, and last_refill = now on every call,
 * so requests closer together than one interval never refill anything. */
struct buggy_bucket {
	int64_t tokens, last, cap, interval;
};

static int buggy_take(struct buggy_bucket *b, int64_t now)
{
	b->tokens += (now - b->last) / b->interval;
	if (b->tokens > b->cap)
		b->tokens = b->cap;
	b->last = now;
	if (b->tokens < 1)
		return 0;
	b->tokens--;
	return 1;
}

/* Drains 10/1s at T0, then tries every `step` us for 2 s. Returns how many
 * passed; *ref and *buggy get the reference models' counts. */
static int spaced_attempts(int64_t step, int *ref, int *buggy)
{
	struct limit_spec sp = spec(10, S, 0, LIMIT_TOKEN_BUCKET);
	struct limit_state st = {0, 0, 0};
	struct ref_bucket rb = {10 * S, T0, 10, 10, S};
	struct buggy_bucket bb = {10, T0, 10, 100 * MS};
	int n = 0;

	*ref = 0;
	*buggy = 0;
	for (int i = 0; i < 10; i++) {
		assert_true(hit(&sp, &st, T0, 1).allowed);
		assert_int_equal(ref_take(&rb, T0, 1), 1);
		assert_int_equal(buggy_take(&bb, T0), 1);
	}
	assert_false(hit(&sp, &st, T0, 1).allowed);
	for (int64_t t = T0 + step; t <= T0 + 2 * S; t += step) {
		n += hit(&sp, &st, t, 1).allowed;
		*ref += ref_take(&rb, t, 1);
		*buggy += buggy_take(&bb, t);
	}
	return n;
}

static void test_bucket_last_refill_bug(void **unused)
{
	int ref, buggy;

	assert_int_equal(spaced_attempts(50 * MS, &ref, &buggy), 20);
	assert_int_equal(ref, 20);
	assert_int_equal(buggy, 0); /* what the bug does, so the test can tell */
	/* Attempts at 7 ms and 33 ms: the last attempt is before 2 s. */
	assert_int_equal(spaced_attempts(7 * MS, &ref, &buggy), 19);
	assert_int_equal(ref, 19);
	assert_int_equal(spaced_attempts(33 * MS, &ref, &buggy), 19);
	assert_int_equal(ref, 19);
	/* Odd spacings, and a rational interval, against the reference. */
	{
		static const int64_t steps[] = {1, 999, 33333, 70001, 99999, 100001, 250000};

		for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
			int n = spaced_attempts(steps[i], &ref, &buggy);

			assert_int_equal(n, ref);
		}
	}
	{
		struct limit_spec sp = spec(7, 3 * S, 5, LIMIT_TOKEN_BUCKET);
		struct limit_state st = {0, 0, 0};
		struct ref_bucket rb = {5 * 3 * S, T0, 5, 7, 3 * S};
		int n = 0, m = 0;

		for (int64_t t = T0; t <= T0 + 60 * S; t += 13 * MS + 7) {
			uint32_t cost = 1 + (uint32_t)((t / 7) % 3);

			n += hit(&sp, &st, t, cost).allowed;
			m += ref_take(&rb, t, cost);
		}
		assert_int_equal(n, m);
		assert_true(n > 50);
	}
}

static void test_bucket_cost(void **unused)
{
	struct limit_spec sp = spec(10, S, 0, LIMIT_TOKEN_BUCKET);
	struct limit_state st = {0, 0, 0};
	struct limit_result r;

	r = hit(&sp, &st, T0, 11);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, S); /* never: the period */
	assert_int_equal(r.reset_us, 0);
	r = hit(&sp, &st, T0, 4);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 6);
	assert_int_equal(r.reset_us, 400 * MS);
	r = hit(&sp, &st, T0, 4);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 2);
	r = hit(&sp, &st, T0, 4);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 200 * MS);
	assert_int_equal(r.reset_us, 800 * MS);
	r = hit(&sp, &st, T0 + 200 * MS, 4);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 0);
	/* A fresh key takes the whole capacity in one request. */
	st = (struct limit_state){0, 0, 0};
	r = hit(&sp, &st, T0, 10);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 0);
	assert_int_equal(r.reset_us, S);
}

static void test_bucket_peek_and_ttl(void **unused)
{
	struct limit_spec sp = spec(10, S, 0, LIMIT_TOKEN_BUCKET);
	struct limit_state st = {0, 0, 0}, next;
	struct limit_result r;

	limit_eval(&sp, &st, T0, 0, &next, &r);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 10);
	assert_int_equal(r.reset_us, 0);
	assert_int_equal(limit_ttl_us(&sp, &st, T0), 1);
	hit(&sp, &st, T0, 1);
	hit(&sp, &st, T0, 1);
	assert_int_equal(limit_ttl_us(&sp, &st, T0), 200 * MS);
	assert_int_equal(limit_ttl_us(&sp, &st, T0 + 150 * MS), 50 * MS);
	assert_int_equal(limit_ttl_us(&sp, &st, T0 + 10 * S), 1);
	limit_eval(&sp, &st, T0 + 50 * MS, 0, &next, &r);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 8); /* 8.5 tokens */
	assert_int_equal(r.reset_us, 150 * MS);
	/* Fractional TAT: 3/1s after one request is 333333 + 1/3 us. */
	sp = spec(3, S, 0, LIMIT_TOKEN_BUCKET);
	st = (struct limit_state){0, 0, 0};
	hit(&sp, &st, T0, 1);
	assert_int_equal(st.a, T0 + 333333);
	assert_int_equal(st.b, 1);
	assert_int_equal(limit_ttl_us(&sp, &st, T0), 333334);
}

/* ---- windows --------------------------------------------------------------------- */

static void test_fixed_window(void **unused)
{
	struct limit_spec sp = spec(3, S, 0, LIMIT_FIXED_WINDOW);
	struct limit_state st = {0, 0, 0};
	struct limit_result r;

	for (int i = 0; i < 3; i++) {
		r = hit(&sp, &st, T0 + 200 * MS, 1);
		assert_true(r.allowed);
		assert_int_equal(r.remaining, 2 - i);
		assert_int_equal(r.reset_us, 800 * MS);
	}
	assert_int_equal(st.a, T0);
	assert_int_equal(st.b, 3);
	r = hit(&sp, &st, T0 + 200 * MS, 1);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 800 * MS);
	assert_int_equal(r.reset_us, 800 * MS);
	r = hit(&sp, &st, T0 + S - 1, 1);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 1);
	assert_int_equal(limit_ttl_us(&sp, &st, T0 + 200 * MS), 800 * MS);
	/* The boundary resets the count: 3 more at once. */
	for (int i = 0; i < 3; i++) {
		r = hit(&sp, &st, T0 + S, 1);
		assert_true(r.allowed);
		assert_int_equal(r.remaining, 2 - i);
		assert_int_equal(r.reset_us, S);
	}
	assert_false(hit(&sp, &st, T0 + S, 1).allowed);
	/* Weighted cost, and a cost that can never pass. */
	r = hit(&sp, &st, T0 + 5 * S + 1, 2);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 1);
	r = hit(&sp, &st, T0 + 5 * S + 1, 2);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, S - 1);
	r = hit(&sp, &st, T0 + 5 * S + 1, 4);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, S);
	/* Peek on a fresh window. */
	{
		struct limit_state next;

		limit_eval(&sp, &st, T0 + 9 * S, 0, &next, &r);
		assert_true(r.allowed);
		assert_int_equal(r.remaining, 3);
		assert_int_equal(r.reset_us, 0);
	}
}

static void test_sliding_estimate(void **unused)
{
	struct limit_spec sp = spec(10, S, 0, LIMIT_SLIDING_WINDOW);
	/* Window [T0+10s, T0+11s): previous window had 10, current has 0. */
	struct limit_state st = {T0 + 9 * S, 10, 0}, next;
	struct limit_result r;
	static const struct {
		int64_t at;
		uint64_t remaining; /* floor(10 - 10 * (1 - e)) */
	} points[] = {
		{0, 0}, {100 * MS, 1}, {250 * MS, 2}, {500 * MS, 5}, {749999, 7},
		{750 * MS, 7}, {950 * MS, 9}, {S - 1, 9},
	};

	for (size_t i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
		limit_eval(&sp, &st, T0 + 10 * S + points[i].at, 0, &next, &r);
		assert_true(r.allowed);
		assert_int_equal(r.remaining, points[i].remaining);
		assert_int_equal(r.reset_us, S - points[i].at);
	}
	/* At 10.25 s the estimate is 7.5: two requests pass, not three. */
	r = hit(&sp, &st, T0 + 10 * S + 250 * MS, 1);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 1);
	assert_int_equal(r.reset_us, S + 750 * MS);
	r = hit(&sp, &st, T0 + 10 * S + 250 * MS, 1);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 0);
	r = hit(&sp, &st, T0 + 10 * S + 250 * MS, 1);
	assert_false(r.allowed);
	/* 10 * (1 - e) + 3 <= 10 from e = 0.3 s on. */
	assert_int_equal(r.retry_after_us, 50 * MS);
	assert_int_equal(r.reset_us, S + 750 * MS);
	r = hit(&sp, &st, T0 + 10 * S + 300 * MS - 1, 1);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 1);
	r = hit(&sp, &st, T0 + 10 * S + 300 * MS, 1);
	assert_true(r.allowed);
	assert_int_equal(st.a, T0 + 10 * S);
	assert_int_equal(st.b, 3);
	assert_int_equal(st.c, 10);
	assert_int_equal(limit_ttl_us(&sp, &st, T0 + 10 * S + 300 * MS), S + 700 * MS);
	/* Next window: 3 becomes the previous count, fully weighted at 0. */
	limit_eval(&sp, &st, T0 + 11 * S, 0, &next, &r);
	assert_int_equal(r.remaining, 7);
	limit_eval(&sp, &st, T0 + 11 * S + 500 * MS, 0, &next, &r);
	assert_int_equal(r.remaining, 8); /* 10 - 1.5 */
	/* Two windows later the key is fresh. */
	limit_eval(&sp, &st, T0 + 12 * S, 0, &next, &r);
	assert_int_equal(r.remaining, 10);
	assert_int_equal(r.reset_us, 0);
	assert_int_equal(limit_ttl_us(&sp, &st, T0 + 12 * S), 1);
}

static void test_sliding_retry(void **unused)
{
	struct limit_spec sp = spec(10, S, 0, LIMIT_SLIDING_WINDOW);
	struct limit_state st = {0, 0, 0}, saved;
	struct limit_result r;

	for (int i = 0; i < 10; i++)
		assert_true(hit(&sp, &st, T0, 1).allowed);
	saved = st;
	/* cur = 10 must fade in the next window to 10 * (1 - e) + 1 <= 10:
	 * e >= 0.1 s, so at T0 + 1.1 s. */
	r = hit(&sp, &st, T0, 1);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, S + 100 * MS);
	assert_int_equal(r.reset_us, 2 * S);
	assert_false(hit(&sp, &st, T0 + S + 100 * MS - 1, 1).allowed);
	assert_true(hit(&sp, &st, T0 + S + 100 * MS, 1).allowed);
	/* A cost of the whole quota waits until cur has faded completely. */
	st = saved;
	r = hit(&sp, &st, T0 + 400 * MS, 10);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 2 * S - 400 * MS);
	assert_false(hit(&sp, &st, T0 + 2 * S - 1, 10).allowed);
	assert_true(hit(&sp, &st, T0 + 2 * S, 10).allowed);
	/* More than the quota: never, so the period. */
	r = hit(&sp, &st, T0 + 2 * S, 11);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, S);
	/* Exactness against brute force: for assorted states and costs, the
	 * retry time passes and one microsecond earlier does not. */
	for (int64_t prev = 0; prev <= 10; prev += 2) {
		for (int64_t cur = 0; cur <= 10; cur++) {
			for (uint32_t cost = 1; cost <= 10; cost += 3) {
				struct limit_state s = {T0, cur, prev}, n2;
				int64_t now = T0 + 123457;

				limit_eval(&sp, &s, now, cost, &n2, &r);
				if (r.allowed)
					continue;
				assert_true(r.retry_after_us > 0);
				limit_eval(&sp, &s, now + r.retry_after_us, cost, &n2, &r);
				assert_true(r.allowed);
				limit_eval(&sp, &s, now, cost, &n2, &r);
				if (r.retry_after_us > 1) {
					limit_eval(&sp, &s, now + r.retry_after_us - 1, cost, &n2, &r);
					assert_false(r.allowed);
				}
			}
		}
	}
}

/* ---- range ------------------------------------------------------------------------ */

static void test_large_values(void **unused)
{
	const int64_t p = LIMIT_PERIOD_MAX_US;
	struct limit_spec sp = spec(LIMIT_QUOTA_MAX, p, 0, LIMIT_TOKEN_BUCKET);
	struct limit_state st = {0, 0, 0}, next;
	struct limit_result r;

	for (int i = 0; i < 256; i++) {
		r = hit(&sp, &st, T0, UINT32_MAX);
		assert_true(r.allowed);
	}
	assert_int_equal(r.remaining, 256);
	assert_int_equal(r.limit, LIMIT_QUOTA_MAX);
	r = hit(&sp, &st, T0, 257);
	assert_false(r.allowed);
	/* One interval: 31622400 s / 2^40 = 28.76 us, rounded up. */
	assert_int_equal(r.retry_after_us, 29);
	assert_int_equal(r.reset_us, p - 256 * p / (int64_t)LIMIT_QUOTA_MAX);
	assert_true(hit(&sp, &st, T0 + 29, 257).allowed);
	/* TAT = T0 + (2^40 + 1) intervals = T0 + p + 28.76 us. */
	assert_int_equal(limit_ttl_us(&sp, &st, T0 + 29), p);

	/* Windows at the same bounds. */
	sp.algo = LIMIT_SLIDING_WINDOW;
	st = (struct limit_state){0, 0, 0};
	r = hit(&sp, &st, T0, UINT32_MAX);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, LIMIT_QUOTA_MAX - UINT32_MAX);
	/* A full current window: the next one lets one request through once
	 * 1/2^40 of it has passed, 28.76 us rounded up. */
	st.b = (int64_t)LIMIT_QUOTA_MAX;
	r = hit(&sp, &st, T0, 1);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, (T0 / p) * p + p + 29 - T0);
	assert_false(hit(&sp, &st, T0 + r.retry_after_us - 1, 1).allowed);
	assert_true(hit(&sp, &st, T0 + r.retry_after_us, 1).allowed);
	sp.algo = LIMIT_FIXED_WINDOW;
	st = (struct limit_state){0, 0, 0};
	r = hit(&sp, &st, T0, UINT32_MAX);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, LIMIT_QUOTA_MAX - UINT32_MAX);

	/* Hand-built specs and junk states stay defined (UBSan runs this). */
	{
		static const int64_t times[] = {INT64_MIN, -1, 0, 1, T0, INT64_MAX};
		static const int64_t vals[] = {INT64_MIN, -5, 0, 7, INT64_MAX};
		struct limit_spec odd[] = {
			spec(UINT64_MAX, INT64_MAX, UINT64_MAX, LIMIT_TOKEN_BUCKET),
			spec(0, 0, 0, LIMIT_TOKEN_BUCKET),
			spec(UINT64_MAX, -5, 0, LIMIT_SLIDING_WINDOW),
			spec(1, INT64_MAX, 0, LIMIT_FIXED_WINDOW),
			spec(5, S, 0, (enum limit_algo)77),
		};

		for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
			for (size_t t = 0; t < sizeof(times) / sizeof(times[0]); t++)
				for (size_t a = 0; a < sizeof(vals) / sizeof(vals[0]); a++)
					for (size_t b = 0; b < sizeof(vals) / sizeof(vals[0]); b++) {
						struct limit_state js = {vals[a], vals[b], vals[4 - b]};

						limit_eval(&odd[i], &js, times[t], UINT32_MAX, &next, &r);
						assert_true(r.allowed || r.retry_after_us >= 1);
						assert_true(r.reset_us >= 0);
						limit_eval(&odd[i], &js, times[t], 1, &next, &r);
						assert_true(limit_ttl_us(&odd[i], &js, times[t]) >= 1);
					}
	}
}

/* The token bucket from its definition, in 128-bit arithmetic throughout
 * (limit.c takes 64-bit shortcuts where they are exact): in ticks of
 * 1/quota us, tat' = max(tat, now) + cost * P, allowed when
 * tat' - now <= cap * P, a tat past now + cap * P read as that (a bucket
 * owes at most its capacity). Figures within the notation's bounds. */
__extension__ typedef __int128 i128;

static i128 ceil_div(i128 a, i128 b) { return a > 0 ? (a + b - 1) / b : -((-a) / b); }
static i128 floor_div(i128 a, i128 b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

static void bucket_reference(const struct limit_spec *sp, const struct limit_state *st,
			     int64_t now, uint32_t cost, struct limit_state *next,
			     struct limit_result *r)
{
	i128 n = sp->quota, p = sp->period_us, cap = sp->burst ? sp->burst : sp->quota;
	i128 room = cap * p, q;
	i128 d = ((i128)st->a - now) * n + st->b, rel;

	if (d > 2 * room)
		d = 2 * room; /* a capacity in debt at most */
	rel = (d > 0 ? d : 0) + (i128)cost * p;

	memset(r, 0, sizeof(*r));
	*next = *st;
	r->limit = sp->quota;
	if ((i128)cost > cap || rel > room) {
		r->retry_after_us = (int64_t)((i128)cost > cap ? p : ceil_div(rel - room, n));
		r->reset_us = d > 0 ? (int64_t)ceil_div(d, n) : 0;
		if (((i128)st->a - now) * n + st->b > 2 * room) {
			/* (the figures here keep now + 2 * cap * P within int64) */
			next->a = (int64_t)(now + floor_div(2 * room, n));
			next->b = (int64_t)(2 * room - floor_div(2 * room, n) * n);
			next->c = 0;
		}
	} else {
		r->allowed = true;
		r->remaining = (uint64_t)floor_div(room - rel, p);
		r->reset_us = (int64_t)ceil_div(rel, n);
		q = floor_div(rel, n);
		next->a = (int64_t)(now + q);
		next->b = (int64_t)(rel - q * n);
		next->c = 0;
	}
	r->next_ttl_us = r->reset_us < 1 ? 1 : r->reset_us;
	if (!r->allowed && r->retry_after_us < 1)
		r->retry_after_us = 1;
	/* more_us: until a request of cost remaining + 1 passes, that is
	 * until d' + (remaining + 1) * P <= room, d' the TAT - now that
	 * stands after the decision; 0 when it passes now or never can. */
	{
		i128 k = (i128)r->remaining + 1, dd = r->allowed ? rel : (d > 0 ? d : 0);
		i128 t = ceil_div(dd + k * p - room, n);

		r->more_us = k > cap || t < 0 ? 0 : (int64_t)t;
	}
}

/* Random buckets, fresh, full, past and future, with quotas and periods
 * from the smallest to the largest, against the definition: the 64-bit
 * path and the 128-bit one give the same answers. */
static void test_bucket_against_definition(void **unused)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL;

	for (int i = 0; i < 200000; i++) {
		struct limit_spec sp;
		struct limit_state st, next, next_ref;
		struct limit_result r, ref;
		int64_t now;
		uint32_t cost;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		sp.quota = 1 + (x % 4 == 0 ? (x >> 8) % LIMIT_QUOTA_MAX : (x >> 8) % 2000);
		sp.period_us = LIMIT_PERIOD_MIN_US +
			       (int64_t)((x >> 20) % (x % 3 == 0 ? (uint64_t)LIMIT_PERIOD_MAX_US : 7200000000ULL));
		sp.burst = x % 5 == 0 ? 1 + (x >> 30) % (2 * sp.quota) : 0;
		sp.algo = LIMIT_TOKEN_BUCKET;
		now = (int64_t)((x >> 3) % (1ULL << 50));
		cost = x % 7 == 0 ? (uint32_t)(x >> 40) : (uint32_t)(x % 4);
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		st.c = 0;
		if (x % 4 == 0) {
			st.a = st.b = 0; /* fresh */
		} else {
			int64_t span = sp.period_us * (x % 8 == 1 ? 1000 : 3);

			st.a = now - span + (int64_t)((x >> 4) % (uint64_t)(2 * span + 1));
			st.b = (int64_t)((x >> 12) % sp.quota);
		}
		next = next_ref = (struct limit_state){-7, -7, -7};
		limit_eval(&sp, &st, now, cost, &next, &r);
		bucket_reference(&sp, &st, now, cost, &next_ref, &ref);
		assert_int_equal(r.allowed, ref.allowed);
		assert_int_equal(r.limit, ref.limit);
		assert_int_equal(r.remaining, ref.remaining);
		assert_int_equal(r.retry_after_us, ref.retry_after_us);
		assert_int_equal(r.reset_us, ref.reset_us);
		assert_int_equal(r.next_ttl_us, ref.next_ttl_us);
		assert_int_equal(r.more_us, ref.more_us);
		assert_memory_equal(&next, &next_ref, sizeof(next));
		/* What a store that returns remaining and reset (Redis) works
		 * out: the same, or 1 us more from the rounding of reset. */
		{
			int64_t m = limit_bucket_more_us(&sp, r.allowed, r.remaining, r.reset_us);

			assert_true(m == r.more_us || m == r.more_us + 1);
		}
	}
}

/* A clock that stepped back (Redis's after an NTP step, or a failover to a
 * server whose clock is behind): the bucket owes at most a capacity beyond
 * empty (the most a charge leaves, limit_settle). A 100/1m client that
 * used 2 tokens, then the clock an hour back: its bucket reads as a
 * capacity in debt, the next token 60.6 s away, not an hour. */
static void test_bucket_clock_stepped_back(void **unused)
{
	struct limit_spec sp = spec(100, 60 * S, 0, LIMIT_TOKEN_BUCKET);
	struct limit_state st = {0, 0, 0};
	struct limit_result r;
	int64_t now = T0 + 3600 * S;

	(void)unused;
	assert_true(hit(&sp, &st, now, 1).allowed);
	assert_true(hit(&sp, &st, now, 1).allowed);
	now = T0; /* an hour back */
	r = hit(&sp, &st, now, 1);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 60 * S + 600 * MS);
	assert_int_equal(r.reset_us, 120 * S);
	assert_int_equal(r.more_us, 60 * S + 600 * MS);
	assert_int_equal(r.next_ttl_us, 120 * S);
	/* the state that follows: a capacity in debt (which the library writes) */
	assert_int_equal(st.a, now + 120 * S);
	assert_int_equal(st.b, 0);
	r = hit(&sp, &st, now + 60 * S + 600 * MS, 1);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 0);
	/* a heavier request, and a burst: the capacity bounds the debt */
	sp = spec(100, 60 * S, 400, LIMIT_TOKEN_BUCKET);
	st = (struct limit_state){T0 + 86400 * S, 0, 0};
	r = hit(&sp, &st, T0, 5);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 243 * S);
	assert_int_equal(r.reset_us, 480 * S);
	/* the 128-bit path (quota x step past 2^63 ticks): the same bound */
	sp = spec(LIMIT_QUOTA_MAX, 3600 * S, 0, LIMIT_TOKEN_BUCKET);
	st = (struct limit_state){T0 + 366LL * 86400 * S, 0, 0};
	r = hit(&sp, &st, T0, 1);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 3600 * S + 1);
	assert_int_equal(r.reset_us, 7200 * S);
}

/* ---- a charge's settlement (limit_settle) ------------------------------------------ */

/* settles st in place; returns limit_settle's answer */
static int settle(const struct limit_spec *sp, struct limit_state *st, int64_t now, int64_t take,
		  int64_t delta)
{
	struct limit_state next = {-7, -7, -7};
	int rc = limit_settle(sp, st, now, take, delta, &next);

	if (rc)
		*st = next;
	else
		assert_int_equal(next.a, -7);
	return rc;
}

/* 10/1s: admitted at 1, the response says 15: 14 more are taken, the
 * bucket 5 in debt, and the next request waits 0.6 s (5 tokens, then its
 * own); a response of 100 leaves a capacity in debt at most (2 s). */
static void test_settle_bucket_more(void **unused)
{
	struct limit_spec sp = spec(10, S, 0, LIMIT_TOKEN_BUCKET);
	struct limit_state st = {0, 0, 0};
	struct limit_result r;

	(void)unused;
	assert_true(hit(&sp, &st, T0, 1).allowed);
	assert_int_equal(settle(&sp, &st, T0, T0, 14), 1);
	r = hit(&sp, &st, T0, 1);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 600 * MS);
	assert_int_equal(r.reset_us, 1500 * MS);
	/* at the moment it is due, it passes, and the bucket is empty */
	r = hit(&sp, &st, T0 + 600 * MS, 1);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 0);
	/* the debt's bound: a capacity beyond empty */
	st = (struct limit_state){0, 0, 0};
	assert_true(hit(&sp, &st, T0, 1).allowed);
	assert_int_equal(settle(&sp, &st, T0, T0, 99), 1);
	assert_int_equal(st.a, T0 + 2 * S);
	r = hit(&sp, &st, T0, 1);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 1100 * MS);
	/* read an hour later: full again, nothing owed */
	assert_true(hit(&sp, &st, T0 + 3600 * S, 10).allowed);
}

/* 10/1s: admitted at 5 (tat = t0 + 0.5 s), the response 100 ms later says
 * 2: 3 tokens (300 ms) go back less the 100 ms since the take, which the
 * bucket may have absorbed; once full again, nothing goes back. */
static void test_settle_bucket_less(void **unused)
{
	struct limit_spec sp = spec(10, S, 0, LIMIT_TOKEN_BUCKET);
	struct limit_state st = {0, 0, 0};

	(void)unused;
	assert_true(hit(&sp, &st, T0, 5).allowed);
	assert_int_equal(settle(&sp, &st, T0 + 100 * MS, T0, -3), 1);
	assert_int_equal(st.a, T0 + 300 * MS);
	assert_int_equal(st.b, 0);
	/* at t0 + 0.1 s: 10 less the 2 still in use */
	assert_int_equal(hit(&sp, &st, T0 + 100 * MS, 0).remaining, 8);
	/* given back past full: a fresh bucket, never more than the capacity */
	st = (struct limit_state){0, 0, 0};
	assert_true(hit(&sp, &st, T0, 5).allowed);
	assert_int_equal(settle(&sp, &st, T0, T0, -5), 1);
	assert_int_equal(hit(&sp, &st, T0, 0).remaining, 10);
	/* the bucket refilled since the take: nothing to give back */
	st = (struct limit_state){0, 0, 0};
	assert_true(hit(&sp, &st, T0, 5).allowed);
	assert_int_equal(settle(&sp, &st, T0 + 2 * S, T0, -5), 0);
	/* the refill since the take is more than what goes back */
	assert_true(hit(&sp, &st, T0 + 2 * S, 5).allowed);
	assert_int_equal(settle(&sp, &st, T0 + 2300 * MS, T0 + 2 * S, -2), 0);
}

/* A fixed window 10/1m: more is counted in the present window, up to
 * twice the quota; less goes back in the take's window only. */
static void test_settle_fixed(void **unused)
{
	struct limit_spec sp = spec(10, 60 * S, 0, LIMIT_FIXED_WINDOW);
	struct limit_state st = {0, 0, 0};
	int64_t w = T0 - T0 % (60 * S);
	struct limit_result r;

	(void)unused;
	assert_true(hit(&sp, &st, w + S, 1).allowed);
	assert_int_equal(settle(&sp, &st, w + 2 * S, w + S, 5), 1);
	assert_int_equal(hit(&sp, &st, w + 2 * S, 0).remaining, 4);
	assert_int_equal(settle(&sp, &st, w + 3 * S, w + S, 100), 1);
	assert_int_equal(st.b, 20);
	r = hit(&sp, &st, w + 3 * S, 1);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 57 * S);
	/* less, in the take's window: counted down, never below 0 */
	assert_int_equal(settle(&sp, &st, w + 4 * S, w + S, -15), 1);
	assert_int_equal(st.b, 5);
	assert_int_equal(settle(&sp, &st, w + 4 * S, w + S, -15), 1);
	assert_int_equal(st.b, 0);
	/* less, after the window rolled: the new window never counted it */
	assert_true(hit(&sp, &st, w + 59 * S, 3).allowed);
	assert_int_equal(settle(&sp, &st, w + 61 * S, w + 59 * S, -2), 0);
	/* more, after the window rolled: counted in the new one */
	assert_int_equal(settle(&sp, &st, w + 61 * S, w + 59 * S, 2), 1);
	assert_int_equal(hit(&sp, &st, w + 61 * S, 0).remaining, 8);
}

/* A sliding window 10/1m: less goes back in the window that counted the
 * take, the present one or the one before (where it still weighs). */
static void test_settle_sliding(void **unused)
{
	struct limit_spec sp = spec(10, 60 * S, 0, LIMIT_SLIDING_WINDOW);
	struct limit_state st = {0, 0, 0};
	int64_t w = T0 - T0 % (60 * S);

	(void)unused;
	assert_true(hit(&sp, &st, w + 30 * S, 8).allowed);
	/* half a window later the 8 weigh 4: 6 left; given back 6 of them in
	 * the window after, they weigh 1: 9 left */
	assert_int_equal(hit(&sp, &st, w + 90 * S, 0).remaining, 6);
	assert_int_equal(settle(&sp, &st, w + 90 * S, w + 30 * S, -6), 1);
	assert_int_equal(st.c, 2);
	assert_int_equal(hit(&sp, &st, w + 90 * S, 0).remaining, 9);
	/* two windows on, it counts nowhere: nothing goes back */
	assert_int_equal(settle(&sp, &st, w + 150 * S, w + 30 * S, -1), 0);
	/* more, up to twice the quota in the present window */
	assert_int_equal(settle(&sp, &st, w + 150 * S, w + 30 * S, 50), 1);
	assert_int_equal(st.b, 20);
	assert_false(hit(&sp, &st, w + 150 * S, 1).allowed);
}

/* What keeps each request as admitted, or holds no tokens, is not settled. */
static void test_settle_not_rates(void **unused)
{
	struct limit_state st = {0, 0, 0};
	struct limit_spec log = spec(10, S, 0, LIMIT_LOG);
	struct limit_spec conc = spec(10, S, 0, LIMIT_CONCURRENCY);
	struct limit_spec tb = spec(10, S, 0, LIMIT_TOKEN_BUCKET);

	(void)unused;
	assert_int_equal(settle(&log, &st, T0, T0, 3), 0);
	assert_int_equal(settle(&conc, &st, T0, T0, -3), 0);
	assert_int_equal(settle(&tb, &st, T0, T0, 0), 0);
}

/* ---- the leaky bucket as a meter ------------------------------------------------
 * A leaky bucket used as a meter holds water that drains continuously at
 * quota/period requests per microsecond, down to empty; it holds at most
 * the capacity (burst, or quota). A request of cost c conforms when, the
 * bucket drained up to now, level + c <= capacity; it then pours c in. A
 * refused request pours nothing. What is left for requests of cost 1 is
 * floor(capacity - level).
 *
 * The model below is written from that definition alone, with the water
 * level an exact fraction, so that it shares nothing with limit.c's ticks
 * and theoretical arrival times. Run side by side with limit_eval on
 * random timelines, it shows that the token bucket admits exactly the
 * requests a leaky bucket meter admits, which is why the rules file takes
 * `algorithm: leaky` as a synonym of `token`. */

/* A fraction num/den, den > 0, in lowest terms. The levels of a meter
 * have denominators that divide the period, so the sums below go through
 * their least common denominator (never over the period): no product
 * overflows 128 bits for the figures of the notation. */
struct frac {
	i128 num, den;
};

static i128 gcd128(i128 a, i128 b)
{
	if (a < 0)
		a = -a;
	while (b) {
		i128 t = a % b;

		a = b;
		b = t;
	}
	return a;
}

static i128 mul_checked(i128 a, i128 b)
{
	i128 r;

	assert_false(__builtin_mul_overflow(a, b, &r));
	return r;
}

static struct frac frac_make(i128 num, i128 den)
{
	i128 g = gcd128(num, den);

	if (g > 1) {
		num /= g;
		den /= g;
	}
	return (struct frac){num, den};
}

/* a + sign * b */
static struct frac frac_add(struct frac a, struct frac b, int sign)
{
	i128 g = gcd128(a.den, b.den), l = mul_checked(a.den / g, b.den);

	return frac_make(mul_checked(a.num, l / a.den) + sign * mul_checked(b.num, l / b.den), l);
}

/* floor(a) and ceil(a) */
static i128 frac_floor(struct frac a) { return floor_div(a.num, a.den); }
static i128 frac_ceil(struct frac a) { return ceil_div(a.num, a.den); }

struct meter {
	i128 quota, period, cap;
	struct frac level;    /* requests' worth of water */
	int64_t at;           /* the level is that of this time */
};

static void meter_init(struct meter *m, const struct limit_spec *sp, int64_t now)
{
	m->quota = sp->quota;
	m->period = sp->period_us;
	m->cap = sp->burst ? sp->burst : sp->quota;
	m->level = (struct frac){0, 1};
	m->at = now;
}

/* The water that leaked out from m->at to now; the bucket never goes
 * below empty. Time does not go back in a timeline. */
static void meter_drain(struct meter *m, int64_t now)
{
	assert_true(now >= m->at);
	m->level = frac_add(m->level, frac_make(mul_checked(now - m->at, m->quota), m->period), -1);
	if (m->level.num < 0)
		m->level = (struct frac){0, 1};
	m->at = now;
}

/* One request of weight `cost` at now: whether it conforms, what is left
 * for requests of cost 1 (0 when refused), the time until a refused
 * request would conform (when it can at all) and until the bucket is
 * empty, in whole microseconds rounded up (what limit.h promises). */
struct meter_answer {
	bool allowed;
	uint64_t remaining;
	int64_t retry_after_us, reset_us;
};

static struct meter_answer meter_offer(struct meter *m, int64_t now, uint32_t cost)
{
	struct meter_answer a = {0};
	struct frac poured;

	meter_drain(m, now);
	poured = frac_add(m->level, (struct frac){cost, 1}, 1);
	if (poured.num <= mul_checked(m->cap, poured.den)) {
		m->level = poured;
		a.allowed = true;
		a.remaining = (uint64_t)frac_floor(frac_add((struct frac){m->cap, 1}, m->level, -1));
	} else if ((i128)cost <= m->cap) {
		/* the excess leaks out at quota/period per microsecond */
		struct frac over = frac_add(poured, (struct frac){m->cap, 1}, -1);

		a.retry_after_us = (int64_t)frac_ceil(
			frac_make(mul_checked(over.num, m->period), mul_checked(over.den, m->quota)));
	}
	a.reset_us = (int64_t)frac_ceil(
		frac_make(mul_checked(m->level.num, m->period), mul_checked(m->level.den, m->quota)));
	return a;
}

static uint64_t xorshift64(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* A random duration of the kinds that matter to a bucket: none (a burst),
 * one microsecond, around the time one request drains (either side of
 * the moment a token comes back), anything within a period, or a long
 * gap that empties the bucket several times over. */
static int64_t random_gap(uint64_t *x, const struct limit_spec *sp)
{
	int64_t interval = sp->period_us / (int64_t)sp->quota;
	uint64_t r = xorshift64(x);

	if (interval < 1)
		interval = 1;
	switch (r % 10) {
	case 0:
	case 1:
	case 2:
		return 0;
	case 3:
		return 1;
	case 4:
		return interval - 1 + (int64_t)((r >> 8) % 3);
	case 5:
		return (int64_t)((r >> 8) % (uint64_t)interval) + 1;
	case 6:
		return interval * (int64_t)(1 + (r >> 8) % 4);
	case 7:
	case 8:
		return (int64_t)((r >> 8) % (uint64_t)sp->period_us);
	default:
		return sp->period_us * (int64_t)(1 + (r >> 8) % 40) + (int64_t)((r >> 20) % 1000);
	}
}

static uint32_t random_cost(uint64_t *x, uint64_t cap)
{
	uint64_t r = xorshift64(x);

	switch (r % 16) {
	case 0:
		return 0; /* a look: takes nothing */
	case 1:
	case 2:
		return (uint32_t)(2 + (r >> 8) % 4);
	case 3: /* about the capacity, heavier included */
		return cap + 2 > UINT32_MAX ? UINT32_MAX : (uint32_t)(cap - 1 + (r >> 8) % 4);
	case 4:
		return (uint32_t)(r >> 32);
	default:
		return 1;
	}
}

static void test_leaky_meter_is_token_bucket(void **unused)
{
	uint64_t x = 0x853c49e6748fea9bULL;
	uint64_t refused = 0, allowed = 0, brim = 0, near = 0;

	for (int tl = 0; tl < 3000; tl++) {
		struct limit_spec sp;
		struct limit_state st = {0, 0, 0};
		struct meter m;
		uint64_t r = xorshift64(&x), cap;
		int64_t now;
		int n;

		memset(&sp, 0, sizeof(sp));
		sp.algo = LIMIT_TOKEN_BUCKET;
		/* half small quotas, where every token shows; some up to 2^40 */
		if (r % 8 < 4)
			sp.quota = 1 + (r >> 8) % 20;
		else if (r % 8 < 6)
			sp.quota = 1 + (r >> 8) % 5000;
		else if (r % 8 < 7)
			sp.quota = 1 + (r >> 8) % 1000000;
		else
			sp.quota = 1 + (r >> 8) % LIMIT_QUOTA_MAX;
		r = xorshift64(&x);
		sp.period_us = LIMIT_PERIOD_MIN_US +
			       (int64_t)((r >> 4) % (r % 3 == 0 ? 10 * (uint64_t)S
						    : r % 3 == 1 ? 3600 * (uint64_t)S
						    : (uint64_t)(LIMIT_PERIOD_MAX_US - LIMIT_PERIOD_MIN_US)));
		r = xorshift64(&x);
		if (r % 2)
			sp.burst = 1 + (r >> 8) % (3 * sp.quota > LIMIT_QUOTA_MAX ? LIMIT_QUOTA_MAX
										  : 3 * sp.quota);
		cap = sp.burst ? sp.burst : sp.quota;
		now = T0 + (int64_t)((r >> 16) % (uint64_t)sp.period_us);
		meter_init(&m, &sp, now);
		n = 20 + (int)(xorshift64(&x) % 300);
		for (int i = 0; i < n; i++) {
			struct limit_state next;
			struct limit_result res;
			struct meter_answer want;
			uint32_t cost = random_cost(&x, cap);

			now += random_gap(&x, &sp);
			want = meter_offer(&m, now, cost);
			limit_eval(&sp, &st, now, cost, &next, &res);
			if (res.allowed != want.allowed || res.remaining != want.remaining)
				fail_msg("timeline %d, request %d: %llu/%lldus burst %llu, cost %u at "
					 "+%lldus: token bucket %s, remaining %llu; leaky meter %s, "
					 "remaining %llu",
					 tl, i, (unsigned long long)sp.quota, (long long)sp.period_us,
					 (unsigned long long)sp.burst, cost, (long long)(now - T0),
					 res.allowed ? "allows" : "refuses",
					 (unsigned long long)res.remaining,
					 want.allowed ? "allows" : "refuses",
					 (unsigned long long)want.remaining);
			assert_int_equal(res.limit, sp.quota);
			assert_int_equal(res.reset_us, want.reset_us);
			if (!res.allowed)
				/* over the capacity it can never pass: limit.h
				 * points at the period */
				assert_int_equal(res.retry_after_us,
						 cost > cap ? sp.period_us : want.retry_after_us);
			if (res.allowed)
				st = next;
			allowed += res.allowed;
			refused += !res.allowed;
			/* filled to the brim exactly; refused a microsecond
			 * early */
			brim += res.allowed && m.level.den == 1 && m.level.num == (i128)cap;
			near += !res.allowed && want.retry_after_us == 1;
		}
	}
	/* The timelines exercise both answers many times over, and the
	 * edges: a bucket filled to the brim exactly, a request refused one
	 * microsecond before it would conform. */
	assert_true(allowed > 100000);
	assert_true(refused > 50000);
	assert_true(brim > 1000);
	assert_true(near > 500);
}

/* ---- more quota: the RateLimit field's t (draft -10) -------------------------- */

/* A look (cost 0) at the state a decision left: what remains then. */
static uint64_t remaining_at(const struct limit_spec *sp, const struct limit_state *st,
			     int64_t now)
{
	struct limit_state next;
	struct limit_result r;

	limit_eval(sp, st, now, 0, &next, &r);
	return r.remaining;
}

static void test_more_bucket(void **unused)
{
	struct limit_spec sp = spec(10, 60 * S, 0, LIMIT_TOKEN_BUCKET);
	struct limit_state st = {0, 0, 0};
	struct limit_result r;

	/* A fresh bucket: nothing more can come. */
	r = hit(&sp, &st, T0, 0);
	assert_int_equal(r.remaining, 10);
	assert_int_equal(r.more_us, 0);
	/* One taken: 9 left, the 10th back in one interval (6 s), which is
	 * also when the bucket is full. */
	r = hit(&sp, &st, T0, 1);
	assert_int_equal(r.remaining, 9);
	assert_int_equal(r.more_us, 6 * S);
	assert_int_equal(r.reset_us, 6 * S);
	/* Emptied at once: 0 left, the next token in 6 s, full in 60 s. */
	for (int i = 0; i < 9; i++)
		r = hit(&sp, &st, T0, 1);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 0);
	assert_int_equal(r.more_us, 6 * S);
	assert_int_equal(r.reset_us, 60 * S);
	assert_int_equal(limit_ceil_s(r.more_us), 6);
	/* Refused 1 s later: the token comes 5 s on, when it passes. */
	r = hit(&sp, &st, T0 + S, 1);
	assert_false(r.allowed);
	assert_int_equal(r.more_us, 5 * S);
	assert_int_equal(r.retry_after_us, 5 * S);
	assert_int_equal(r.reset_us, 59 * S);
	/* A heavier request waits longer than more quota does. */
	r = hit(&sp, &st, T0 + S, 3);
	assert_false(r.allowed);
	assert_int_equal(r.more_us, 5 * S);
	assert_int_equal(r.retry_after_us, 17 * S);
	/* 3.5 tokens back at 21 s: one request leaves 2.5, so 2, and the 3rd
	 * whole token is half an interval away. */
	r = hit(&sp, &st, T0 + 21 * S, 1);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 2);
	assert_int_equal(r.more_us, 3 * S);
	assert_int_equal(r.reset_us, 45 * S);
	/* Refused with 2.5 tokens held (cost 3): a request of cost 1 passes
	 * now, so more quota is there now. */
	r = hit(&sp, &st, T0 + 21 * S, 3);
	assert_false(r.allowed);
	assert_int_equal(r.remaining, 0);
	assert_int_equal(r.more_us, 0);
	assert_int_equal(r.retry_after_us, 3 * S);
	/* Heavier than the capacity: the period, and more quota as usual. */
	r = hit(&sp, &st, T0 + 21 * S, 11);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 60 * S);
	assert_int_equal(r.more_us, 0);
	/* A rational interval (3 per second): rounded up, 333334 us. */
	sp = spec(3, S, 0, LIMIT_TOKEN_BUCKET);
	memset(&st, 0, sizeof(st));
	for (int i = 0; i < 3; i++)
		r = hit(&sp, &st, T0, 1);
	assert_int_equal(r.more_us, 333334);
	assert_int_equal(limit_bucket_more_us(&sp, r.allowed, r.remaining, r.reset_us), 333334);
	/* A burst: capacity 20 at 10 per minute, still 6 s per token. */
	sp = spec(10, 60 * S, 20, LIMIT_TOKEN_BUCKET);
	memset(&st, 0, sizeof(st));
	for (int i = 0; i < 20; i++)
		r = hit(&sp, &st, T0, 1);
	assert_int_equal(r.remaining, 0);
	assert_int_equal(r.more_us, 6 * S);
	assert_int_equal(r.reset_us, 120 * S);
	assert_int_equal(limit_bucket_more_us(&sp, true, 0, 120 * S), 6 * S);
	assert_int_equal(limit_bucket_more_us(&sp, true, 20, 0), 0);
	assert_int_equal(limit_bucket_more_us(&sp, false, 7, 114 * S), 0);
}

static void test_more_fixed(void **unused)
{
	struct limit_spec sp = spec(3, 10 * S, 0, LIMIT_FIXED_WINDOW);
	struct limit_state st = {0, 0, 0};
	struct limit_result r;
	int64_t w = T0; /* T0 is a multiple of 10 s */

	r = hit(&sp, &st, w + 4 * S, 0);
	assert_int_equal(r.more_us, 0); /* empty: nothing more to come */
	/* With the window's count at 1, more comes only with the next one. */
	r = hit(&sp, &st, w + 4 * S, 1);
	assert_int_equal(r.remaining, 2);
	assert_int_equal(r.more_us, 6 * S);
	/* Refused at the quota: the window's end, as Retry-After. */
	r = hit(&sp, &st, w + 4 * S, 2);
	r = hit(&sp, &st, w + 7 * S, 1);
	assert_false(r.allowed);
	assert_int_equal(r.more_us, 3 * S);
	assert_int_equal(r.retry_after_us, 3 * S);
	/* Refused with quota left (cost 2 of 1 left): 1 passes now. */
	st = (struct limit_state){w, 2, 0};
	r = hit(&sp, &st, w + 7 * S, 2);
	assert_false(r.allowed);
	assert_int_equal(r.more_us, 0);
}

static void test_more_sliding(void **unused)
{
	struct limit_spec sp = spec(10, S, 0, LIMIT_SLIDING_WINDOW);
	/* Previous window 10, current 0, at 250 ms: estimate 7.5. */
	struct limit_state st = {T0 + 9 * S, 10, 0};
	struct limit_result r;

	r = hit(&sp, &st, T0 + 10 * S + 250 * MS, 1);
	/* estimate 8.5: 1 left; 2 once 10 * (1 - e) + 1 <= 8, e = 0.3 s */
	assert_int_equal(r.remaining, 1);
	assert_int_equal(r.more_us, 50 * MS);
	r = hit(&sp, &st, T0 + 10 * S + 250 * MS, 1);
	assert_int_equal(r.remaining, 0);
	assert_int_equal(r.more_us, 50 * MS); /* 10 * (1 - e) + 2 <= 9 */
	r = hit(&sp, &st, T0 + 10 * S + 250 * MS, 1);
	assert_false(r.allowed);
	assert_int_equal(r.more_us, 50 * MS);
	assert_int_equal(r.retry_after_us, 50 * MS);
	/* Only the current window counted: nothing fades before it ends;
	 * then its 10 fade at 10 per second: one more at 1.1 s. */
	st = (struct limit_state){0, 0, 0};
	for (int i = 0; i < 10; i++)
		r = hit(&sp, &st, T0, 1);
	assert_int_equal(r.more_us, S + 100 * MS);
	assert_int_equal(r.reset_us, 2 * S);
}

/* For every algorithm, on assorted states, times and costs, more_us means
 * what limit.h says: a look at now + more_us finds remaining + 1 (1 when
 * refused), a look 1 us earlier does not; 0 only when the limit is full or,
 * when refused, already holds 1. */
static void test_more_definition(void **unused)
{
	static const enum limit_algo algos[] = {LIMIT_TOKEN_BUCKET, LIMIT_FIXED_WINDOW,
						 LIMIT_SLIDING_WINDOW};
	uint64_t x = 0x2545f4914f6cdd1dULL;

	for (int i = 0; i < 60000; i++) {
		struct limit_spec sp;
		struct limit_state st, next;
		struct limit_result r;
		int64_t now;
		uint64_t want;
		uint32_t cost;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		sp = spec(1 + x % 13, (1 + (x >> 8) % 3000) * MS, x % 5 == 0 ? 1 + (x >> 20) % 20 : 0,
			  algos[(x >> 30) % 3]);
		now = T0 + (int64_t)((x >> 32) % (uint64_t)(4 * sp.period_us));
		cost = (uint32_t)((x >> 40) % 4);
		memset(&st, 0, sizeof(st));
		/* some history first */
		for (int j = 0; j < (int)((x >> 44) % 16); j++) {
			uint32_t c = (uint32_t)((x >> (j + 2)) % 3);

			now += (int64_t)((x >> (2 * j)) % (uint64_t)(sp.period_us / 4 + 1));
			hit(&sp, &st, now, c);
		}
		limit_eval(&sp, &st, now, cost, &next, &r);
		if (r.allowed)
			st = next;
		want = r.remaining + 1;
		assert_true(r.more_us >= 0);
		if (r.more_us == 0) {
			if (r.allowed)
				assert_int_equal(remaining_at(&sp, &st, now),
						 sp.algo == LIMIT_TOKEN_BUCKET && sp.burst ? sp.burst
											   : sp.quota);
			else
				assert_true(remaining_at(&sp, &st, now) >= 1);
			continue;
		}
		assert_true(remaining_at(&sp, &st, now + r.more_us) >= want);
		assert_true(remaining_at(&sp, &st, now + r.more_us - 1) < want);
		if (!r.allowed && cost <= sp.quota)
			assert_true(r.more_us <= r.retry_after_us);
	}
}

/* ---- sliding log ------------------------------------------------------------------ */

/* A log as a store keeps it: what limit_log_eval() says to drop goes, the
 * request is recorded (an entry of the same time takes its weight). */
struct tlog {
	struct limit_log_entry e[LIMIT_LOG_QUOTA_MAX];
	size_t n;
};

static struct limit_result log_hit(const struct limit_spec *sp, struct tlog *l, int64_t now,
				   uint32_t cost)
{
	struct limit_log_step step;
	struct limit_result r;
	uint64_t total = 0;

	limit_log_eval(sp, l->e, l->n, now, cost, &step, &r);
	assert_true(step.keep <= l->n);
	if (!r.allowed || cost == 0)
		return r;
	memmove(l->e, l->e + step.keep, (l->n - step.keep) * sizeof(l->e[0]));
	l->n -= step.keep;
	assert_true(l->n == 0 || step.at >= l->e[l->n - 1].t);
	if (l->n > 0 && l->e[l->n - 1].t == step.at) {
		l->e[l->n - 1].cost += cost;
	} else {
		/* the bound: what is kept weighs at most the quota, so it
		 * never holds more entries than LIMIT_LOG_QUOTA_MAX */
		assert_true(l->n < LIMIT_LOG_QUOTA_MAX);
		l->e[l->n].t = step.at;
		l->e[l->n].cost = cost;
		l->n++;
	}
	for (size_t i = 0; i < l->n; i++)
		total += l->e[i].cost;
	assert_true(total <= r.limit);
	return r;
}

static void test_log_sequence(void **unused)
{
	struct limit_spec sp = spec(3, 60 * S, 0, LIMIT_LOG);
	struct tlog l = { .n = 0 };
	struct limit_result r;

	/* A fresh log: full, nothing to come. */
	r = log_hit(&sp, &l, T0, 0);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 3);
	assert_int_equal(r.reset_us, 0);
	assert_int_equal(r.more_us, 0);
	assert_int_equal(r.limit, 3);
	/* Spread over 40 s: each leaves 60 s after it came. */
	r = log_hit(&sp, &l, T0, 1);
	assert_int_equal(r.remaining, 2);
	assert_int_equal(r.reset_us, 60 * S);
	assert_int_equal(r.more_us, 60 * S);
	assert_int_equal(r.next_ttl_us, 60 * S);
	r = log_hit(&sp, &l, T0 + 20 * S, 1);
	assert_int_equal(r.remaining, 1);
	assert_int_equal(r.more_us, 40 * S);
	r = log_hit(&sp, &l, T0 + 40 * S, 1);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 0);
	assert_int_equal(r.reset_us, 60 * S);
	assert_int_equal(r.more_us, 20 * S);
	/* Refused until the first leaves, exactly. */
	r = log_hit(&sp, &l, T0 + 50 * S, 1);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 10 * S);
	assert_int_equal(r.more_us, 10 * S);
	assert_int_equal(r.reset_us, 50 * S);
	assert_int_equal(r.next_ttl_us, 50 * S);
	assert_false(log_hit(&sp, &l, T0 + 60 * S - 1, 1).allowed);
	r = log_hit(&sp, &l, T0 + 60 * S, 1);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 0);
	assert_int_equal(r.more_us, 20 * S);
	assert_int_equal(l.n, 3);
	/* A request of 2 waits for two to leave; more quota (1) comes with
	 * the first. */
	r = log_hit(&sp, &l, T0 + 61 * S, 2);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 39 * S);
	assert_int_equal(r.more_us, 19 * S);
	/* More than the quota: never, so the period. */
	r = log_hit(&sp, &l, T0 + 61 * S, 4);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 60 * S);
	/* Everything gone: full again, and its entries drop at the next
	 * request. */
	r = log_hit(&sp, &l, T0 + 200 * S, 0);
	assert_int_equal(r.remaining, 3);
	assert_int_equal(r.reset_us, 0);
	assert_int_equal(r.next_ttl_us, 1);
	r = log_hit(&sp, &l, T0 + 200 * S, 1);
	assert_int_equal(l.n, 1);
	assert_int_equal(r.remaining, 2);
}

/* What a fixed window lets through across its boundary, a log does not:
 * 5/10s, five requests just before a boundary of 10 s, five just after. */
static void test_log_against_fixed_window_edge(void **unused)
{
	struct limit_spec lg = spec(5, 10 * S, 0, LIMIT_LOG);
	struct limit_spec fw = spec(5, 10 * S, 0, LIMIT_FIXED_WINDOW);
	struct limit_state st = {0, 0, 0};
	struct tlog l = { .n = 0 };
	int through_log = 0, through_fixed = 0;
	struct limit_result r;

	assert_int_equal(T0 % (10 * S), 0);
	for (int i = 0; i < 10; i++) {
		/* 9.8 s to 9.88 s, then 10 s to 10.08 s */
		int64_t now = T0 + 9800 * MS + (i >= 5) * 120 * MS + i * 20 * MS;

		through_fixed += hit(&fw, &st, now, 1).allowed;
		r = log_hit(&lg, &l, now, 1);
		through_log += r.allowed;
		if (i == 5) /* the first leaves at 19.8 s */
			assert_int_equal(r.retry_after_us, T0 + 19800 * MS - now);
	}
	assert_int_equal(through_fixed, 10);
	assert_int_equal(through_log, 5);
}

/* Weighted requests, a clock that goes back, the quota's bound. */
static void test_log_weights_clock_bound(void **unused)
{
	struct limit_spec sp = spec(10, 60 * S, 0, LIMIT_LOG);
	struct tlog l = { .n = 0 };
	struct limit_result r;
	struct limit_log_step step;

	assert_int_equal(log_hit(&sp, &l, T0, 4).remaining, 6);
	assert_int_equal(log_hit(&sp, &l, T0 + 10 * S, 4).remaining, 2);
	r = log_hit(&sp, &l, T0 + 20 * S, 4);
	assert_false(r.allowed);
	assert_int_equal(r.retry_after_us, 40 * S);
	assert_int_equal(r.more_us, 0); /* a request of 1 passes now */
	assert_int_equal(r.reset_us, 50 * S);
	r = log_hit(&sp, &l, T0 + 20 * S, 2);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 0);
	/* a request of 1 passes once the first 4 leave */
	assert_int_equal(r.more_us, 40 * S);
	/* The clock goes back 5 s: the request is recorded at the newest
	 * entry's time, so the log stays in order; the entries ahead of now
	 * count. */
	l.n = 0;
	log_hit(&sp, &l, T0 + 5 * S, 3);
	limit_log_eval(&sp, l.e, l.n, T0, 2, &step, &r);
	assert_true(r.allowed);
	assert_int_equal(r.remaining, 5);
	assert_int_equal(step.at, T0 + 5 * S);
	assert_int_equal(r.reset_us, 65 * S);
	log_hit(&sp, &l, T0, 2);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.e[0].cost, 5);
	/* The quota is clamped to the bound: 2000 holds 1000. */
	sp.quota = 2000;
	l.n = 0;
	r = log_hit(&sp, &l, T0, 1);
	assert_int_equal(r.limit, LIMIT_LOG_QUOTA_MAX);
	assert_int_equal(r.remaining, LIMIT_LOG_QUOTA_MAX - 1);
	for (int i = 1; i < LIMIT_LOG_QUOTA_MAX; i++)
		assert_true(log_hit(&sp, &l, T0 + i, 1).allowed);
	assert_false(log_hit(&sp, &l, T0 + 2000, 1).allowed);
	assert_int_equal(l.n, LIMIT_LOG_QUOTA_MAX);
	/* limit_eval() on a log: an empty one, and *next is *st. */
	{
		struct limit_state st = {7, 8, 9}, next;

		sp.quota = 10;
		limit_eval(&sp, &st, T0, 3, &next, &r);
		assert_true(r.allowed);
		assert_int_equal(r.remaining, 7);
		assert_memory_equal(&next, &st, sizeof(st));
		assert_int_equal(limit_ttl_us(&sp, &st, T0), 1);
	}
	/* Extreme times and periods stay defined (UBSan runs this). */
	{
		static const int64_t times[] = {INT64_MIN, -1, 0, T0, INT64_MAX};
		struct limit_log_entry e[3];

		sp = spec(3, LIMIT_PERIOD_MAX_US, 0, LIMIT_LOG);
		for (size_t a = 0; a < 5; a++)
			for (size_t b = a; b < 5; b++)
				for (size_t t = 0; t < 5; t++) {
					e[0] = (struct limit_log_entry){times[a], 1};
					e[1] = (struct limit_log_entry){times[b], 1};
					e[2] = (struct limit_log_entry){times[b], 1};
					for (uint32_t c = 0; c < 5; c++) {
						limit_log_eval(&sp, e, 3, times[t], c, &step, &r);
						assert_true(r.allowed || r.retry_after_us >= 1);
						assert_true(r.reset_us >= 0 && r.more_us >= 0);
						assert_true(r.next_ttl_us >= 1);
					}
				}
	}
}

/* The log from its definition: the weight at time x is that of the
 * requests admitted at t with t + P > x, times made non-decreasing as the
 * log records them, and a request that has left the window when another is
 * admitted never counts again (which matters only to a clock that goes
 * back). Each time is found by trying every microsecond, on small
 * periods. */
struct adm {
	int64_t t;
	uint32_t c;
};

static uint64_t weight_at(const struct adm *a, size_t na, int64_t p, int64_t x)
{
	uint64_t w = 0;

	for (size_t i = 0; i < na; i++)
		if (a[i].t + p > x)
			w += a[i].c;
	return w;
}

/* The first d >= from with weight_at(now + d) + k <= q, or -1. */
static int64_t first_fit(const struct adm *a, size_t na, int64_t p, int64_t now, int64_t from,
			 uint64_t k, uint64_t q)
{
	for (int64_t d = from; d <= 4 * p + 16; d++)
		if (weight_at(a, na, p, now + d) + k <= q)
			return d;
	return -1;
}

static void test_log_against_definition(void **unused)
{
	uint64_t x = 0x853c49e6748fea9bULL;
	static struct adm adm[4096];

	for (int run = 0; run < 2000; run++) {
		struct limit_spec sp;
		struct tlog l = { .n = 0 };
		size_t na = 0;
		int64_t now, top;
		uint64_t q;
		int tally[2] = {0, 0};

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		q = 1 + x % 12;
		sp = spec(q, 1 + (int64_t)((x >> 8) % 60), 0, LIMIT_LOG);
		now = top = T0 + (int64_t)((x >> 20) % 1000);
		for (int step = 0; step < 80; step++) {
			struct limit_result r;
			uint32_t cost;
			uint64_t w, k;
			int64_t want;

			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			switch (x % 8) {
			case 0:
				break; /* the same microsecond */
			case 1:
				now = top - (int64_t)((x >> 8) % 6); /* the clock went back */
				break;
			case 2:
				now = top += 2 * sp.period_us + (int64_t)((x >> 8) % 7);
				break;
			default:
				now = top += (int64_t)((x >> 8) % (uint64_t)(sp.period_us / 3 + 2));
				break;
			}
			cost = x % 9 == 0 ? 0 : x % 3 ? 1 : (uint32_t)((x >> 30) % (q + 2));
			w = weight_at(adm, na, sp.period_us, now);
			r = log_hit(&sp, &l, now, cost);
			assert_int_equal(r.limit, q);
			assert_int_equal(r.allowed, cost <= q && w + cost <= q);
			tally[r.allowed]++;
			if (r.allowed && cost > 0) {
				int64_t at = na > 0 && adm[na - 1].t > now ? adm[na - 1].t : now;
				size_t kept = 0;

				/* what has left the window never counts again,
				 * though the clock go back */
				for (size_t i = 0; i < na; i++)
					if (adm[i].t + sp.period_us > now)
						adm[kept++] = adm[i];
				na = kept;
				assert_true(na < sizeof(adm) / sizeof(adm[0]));
				adm[na++] = (struct adm){at, cost};
				w += cost;
			}
			if (r.allowed) {
				assert_int_equal(r.remaining, q - w);
				assert_int_equal(r.retry_after_us, 0);
			} else {
				assert_int_equal(r.remaining, 0);
				want = cost > q ? sp.period_us
						: first_fit(adm, na, sp.period_us, now, 1, cost, q);
				assert_int_equal(r.retry_after_us, want);
			}
			/* reset: until the weight is 0; more: until a request of
			 * remaining + 1 passes, 0 when it never can */
			assert_int_equal(r.reset_us, first_fit(adm, na, sp.period_us, now, 0, q, q));
			k = r.remaining + 1;
			assert_int_equal(r.more_us,
					 k > q ? 0 : first_fit(adm, na, sp.period_us, now, 0, k, q));
			assert_int_equal(r.next_ttl_us, r.reset_us < 1 ? 1 : r.reset_us);
			if (!r.allowed && cost <= q)
				assert_true(r.more_us <= r.retry_after_us);
			/* what the log keeps weighs what is in the window */
			{
				struct adm kept[LIMIT_LOG_QUOTA_MAX];

				for (size_t i = 0; i < l.n; i++)
					kept[i] = (struct adm){l.e[i].t, l.e[i].cost};
				for (int64_t d = 0; d <= sp.period_us + 6; d += 3)
					assert_int_equal(weight_at(kept, l.n, sp.period_us, now + d),
							 weight_at(adm, na, sp.period_us, now + d));
			}
		}
		assert_true(tally[0] + tally[1] == 80);
	}
}

/* limit_refused_by: the refusing limit as given, negative times as 0, the
 * others allowing with their quota and nothing else known. */
static void test_refused_by(void **unused)
{
	struct limit_spec l[3];
	struct limit_result res[3];

	memset(l, 0, sizeof(l));
	l[0].quota = 10;
	l[1].quota = 20;
	l[2].quota = 30;
	memset(res, 0x5a, sizeof(res));
	limit_refused_by(res, l, 3, 1, 700, 900, -5);
	assert_true(res[0].allowed && res[2].allowed);
	assert_false(res[1].allowed);
	assert_int_equal(res[0].limit, 10);
	assert_int_equal(res[1].limit, 20);
	assert_int_equal(res[2].limit, 30);
	assert_int_equal(res[1].remaining, 0);
	assert_int_equal(res[1].retry_after_us, 700);
	assert_int_equal(res[1].reset_us, 900);
	assert_int_equal(res[1].more_us, 0);
	assert_int_equal(res[0].remaining, 0);
	assert_int_equal(res[2].retry_after_us, 0);
	assert_int_equal(res[2].reset_us, 0);
	limit_refused_by(res, l, 1, 0, 1, -1, 3);
	assert_false(res[0].allowed);
	assert_int_equal(res[0].reset_us, 0);
	assert_int_equal(res[0].more_us, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_ok),
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_parse_duration),
		cmocka_unit_test(test_format_period),
		cmocka_unit_test(test_ceil_s),
		cmocka_unit_test(test_refused_by),
		cmocka_unit_test(test_bucket_fresh),
		cmocka_unit_test(test_bucket_refill),
		cmocka_unit_test(test_bucket_burst),
		cmocka_unit_test(test_bucket_rational_interval),
		cmocka_unit_test(test_bucket_last_refill_bug),
		cmocka_unit_test(test_bucket_cost),
		cmocka_unit_test(test_bucket_peek_and_ttl),
		cmocka_unit_test(test_fixed_window),
		cmocka_unit_test(test_sliding_estimate),
		cmocka_unit_test(test_sliding_retry),
		cmocka_unit_test(test_large_values),
		cmocka_unit_test(test_bucket_against_definition),
		cmocka_unit_test(test_bucket_clock_stepped_back),
		cmocka_unit_test(test_settle_bucket_more),
		cmocka_unit_test(test_settle_bucket_less),
		cmocka_unit_test(test_settle_fixed),
		cmocka_unit_test(test_settle_sliding),
		cmocka_unit_test(test_settle_not_rates),
		cmocka_unit_test(test_leaky_meter_is_token_bucket),
		cmocka_unit_test(test_more_bucket),
		cmocka_unit_test(test_more_fixed),
		cmocka_unit_test(test_more_sliding),
		cmocka_unit_test(test_more_definition),
		cmocka_unit_test(test_log_sequence),
		cmocka_unit_test(test_log_against_fixed_window_edge),
		cmocka_unit_test(test_log_weights_clock_bound),
		cmocka_unit_test(test_log_against_definition),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
