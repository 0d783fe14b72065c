/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the adaptive concurrency limit on an injected clock: it
 * falls on a latency step, recovers, keeps its bounds, and survives
 * samples of 0 and of any size. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "adaptive.h"

#define MS 1000LL

static struct adaptive_config cfg(uint32_t min, uint32_t max)
{
	struct adaptive_config c;

	adaptive_config_defaults(&c);
	c.set = true;
	c.target_us = 50 * MS;
	c.min = min;
	c.max = max;
	c.initial = max;
	return c;
}

/* Feeds `seconds` of traffic: every 10 ms, a request of latency_us ends
 * with `busy` in flight. Returns the clock after. */
static int64_t run(struct adaptive_limit *a, const struct adaptive_config *c, int64_t now,
		   double seconds, int64_t latency_us, uint32_t busy)
{
	int64_t end = now + (int64_t)(seconds * 1e6);

	for (; now < end; now += 10 * MS)
		adaptive_sample(a, c, latency_us, busy, now);
	return now;
}

static void test_defaults(void **unused)
{
	struct adaptive_config c;

	adaptive_config_defaults(&c);
	assert_false(c.set);
	assert_int_equal(c.target_us, 50 * MS);
	assert_int_equal(c.min, 2);
	assert_int_equal(c.max, 1000);
	assert_int_equal(c.initial, 1000);
	assert_int_equal(c.timeout_us, 30000 * MS);
	assert_string_equal(c.backend_arg, "backend");
}

/* 10 ms under a 50 ms target keeps the limit at max; a step to 300 ms
 * brings it to min within 5 s (about 3 s by the constants). */
static void test_falls_on_step(void **unused)
{
	struct adaptive_config c = cfg(2, 200);
	struct adaptive_limit a;
	int64_t now = 1000 * MS;

	adaptive_init(&a, &c, now);
	now = run(&a, &c, now, 2, 10 * MS, 150);
	assert_int_equal(adaptive_current(&a, &c), 200);
	now = run(&a, &c, now, 1, 300 * MS, 150);
	assert_true(adaptive_current(&a, &c) < 100);
	now = run(&a, &c, now, 4, 300 * MS, 150);
	/* towards the fixed point at gradient 0.5, 1 / (1 - 0.5)^2 = 4 */
	assert_true(adaptive_current(&a, &c) <= 10);
	now = run(&a, &c, now, 30, 300 * MS, 150);
	assert_int_equal(adaptive_current(&a, &c), 4);
	(void)now;
}

/* Back at 10 ms with the backend kept busy, the limit climbs back to max;
 * not busy (under half the limit in flight), it stays. */
static void test_recovers(void **unused)
{
	struct adaptive_config c = cfg(2, 200);
	struct adaptive_limit a, idle;
	int64_t now = 0;
	uint32_t low;

	adaptive_init(&a, &c, now);
	now = run(&a, &c, now, 6, 300 * MS, 150);
	/* one sample closes the last window of 300 ms */
	adaptive_sample(&a, &c, 10 * MS, 1, now + ADAPTIVE_WINDOW_US);
	low = adaptive_current(&a, &c);
	assert_true(low <= 10);
	idle = a;
	run(&idle, &c, now, 30, 10 * MS, 1);
	assert_int_equal(adaptive_current(&idle, &c), low);
	for (int s = 0; s < 60 && adaptive_current(&a, &c) < 200; s++)
		now = run(&a, &c, now, 1, 10 * MS, adaptive_current(&a, &c));
	assert_int_equal(adaptive_current(&a, &c), 200);
}

/* A latency a little above target settles between the bounds, lower
 * the further above target it is. */
static void test_settles_by_latency(void **unused)
{
	struct adaptive_config c = cfg(1, 100000);
	struct adaptive_limit near, far;

	adaptive_init(&near, &c, 0);
	adaptive_init(&far, &c, 0);
	run(&near, &c, 0, 120, 55 * MS, 100000);
	run(&far, &c, 0, 120, 70 * MS, 100000);
	/* fixed points 1 / (1 - g)^2: g = 50/55 -> 121, 50/70 -> 12.25 */
	assert_in_range(adaptive_current(&near, &c), 110, 135);
	assert_in_range(adaptive_current(&far, &c), 10, 15);
}

static void test_bounds(void **unused)
{
	struct adaptive_config c = cfg(20, 50);
	struct adaptive_limit a;
	int64_t now = 0;

	adaptive_init(&a, &c, now);
	assert_int_equal(adaptive_current(&a, &c), 50);
	now = run(&a, &c, now, 10, 5000 * MS, 50);
	assert_int_equal(adaptive_current(&a, &c), 20);
	now = run(&a, &c, now, 10, 1 * MS, 50);
	assert_int_equal(adaptive_current(&a, &c), 50);
	/* an initial limit out of bounds starts at the bound */
	c.initial = 5;
	adaptive_init(&a, &c, now);
	assert_int_equal(adaptive_current(&a, &c), 20);
}

/* Samples of 0, negative, INT64_MAX and INT64_MIN, a clock that goes
 * back, and in-flight counts at UINT32_MAX leave a finite limit in
 * bounds. */
static void test_extreme_samples(void **unused)
{
	struct adaptive_config c = cfg(2, ADAPTIVE_LIMIT_MAX);
	struct adaptive_limit a;
	int64_t lat[] = {0, -1, INT64_MAX, INT64_MIN, 1, ADAPTIVE_SAMPLE_MAX_US + 1};
	int64_t now = 0;

	adaptive_init(&a, &c, now);
	for (int round = 0; round < 2000; round++) {
		now += (round % 7 == 3) ? -50 * MS : 60 * MS;
		adaptive_sample(&a, &c, lat[round % 6], round % 2 ? UINT32_MAX : 0, now);
		assert_true(isfinite(a.limit));
		assert_in_range(adaptive_current(&a, &c), 2, ADAPTIVE_LIMIT_MAX);
	}
	/* only zeros: the mean is floored at 1 us, no division by zero */
	adaptive_init(&a, &c, 0);
	now = run(&a, &c, 0, 5, 0, UINT32_MAX);
	assert_true(isfinite(a.limit));
	assert_int_equal(adaptive_current(&a, &c), ADAPTIVE_LIMIT_MAX);
	/* only the longest: to the fixed point at the gradient's floor */
	now = run(&a, &c, now, 60, INT64_MAX, UINT32_MAX);
	assert_int_equal(adaptive_current(&a, &c), 4);
	/* a target of 0 (never written by the rules) does not divide by 0 */
	c.target_us = 0;
	run(&a, &c, now, 1, 10 * MS, 10);
	assert_true(isfinite(a.limit));
}

/* The window: samples within 100 ms of the first do not move the limit. */
static void test_window(void **unused)
{
	struct adaptive_config c = cfg(2, 200);
	struct adaptive_limit a;

	adaptive_init(&a, &c, 0);
	assert_false(adaptive_sample(&a, &c, 300 * MS, 10, 1 * MS));
	assert_false(adaptive_sample(&a, &c, 300 * MS, 10, 99 * MS));
	assert_int_equal(adaptive_current(&a, &c), 200);
	assert_true(adaptive_sample(&a, &c, 300 * MS, 10, 101 * MS));
	assert_true(adaptive_current(&a, &c) < 200);
}

static void test_thresholds(void **unused)
{
	assert_int_equal(adaptive_threshold(10, 3), 10);
	assert_int_equal(adaptive_threshold(10, 2), 13);
	assert_int_equal(adaptive_threshold(10, 1), 15);
	assert_int_equal(adaptive_threshold(10, 0), UINT32_MAX);
	assert_int_equal(adaptive_threshold(10, 4), UINT32_MAX);
	assert_int_equal(adaptive_threshold(10, -1), UINT32_MAX);
	assert_int_equal(adaptive_threshold(1, 2), 2);
	assert_int_equal(adaptive_threshold(1, 1), 2);
	assert_int_equal(adaptive_threshold(UINT32_MAX, 1), UINT32_MAX - 1);
	for (uint32_t l = 1; l < 2000; l++)
		assert_true(adaptive_threshold(l, 3) <= adaptive_threshold(l, 2) &&
			    adaptive_threshold(l, 2) <= adaptive_threshold(l, 1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_falls_on_step),
		cmocka_unit_test(test_recovers),
		cmocka_unit_test(test_settles_by_latency),
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_extreme_samples),
		cmocka_unit_test(test_window),
		cmocka_unit_test(test_thresholds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
