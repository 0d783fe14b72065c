/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the load-shedding math: thresholds, ramp probabilities at
 * exact points, P0, missing and extreme load figures. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "shed.h"

#define ALL (UINT64_C(1) << 32)

static struct shed_config cfg(int ramp_bp)
{
	struct shed_config c;

	shed_config_defaults(&c);
	c.ramp_bp = ramp_bp;
	return c;
}

static void test_defaults(void **unused)
{
	struct shed_config c;

	memset(&c, 0x55, sizeof(c));
	shed_config_defaults(&c);
	assert_int_equal(c.threshold_bp[0], SHED_NEVER);
	assert_int_equal(c.threshold_bp[1], 9000);
	assert_int_equal(c.threshold_bp[2], 8000);
	assert_int_equal(c.threshold_bp[3], 7000);
	assert_int_equal(c.ramp_bp, 0);
	assert_int_equal(c.retry_after_us, 1000000);
	assert_string_equal(c.in_use_arg, "be_in_use");
	assert_string_equal(c.free_arg, "be_free");
	assert_false(c.shadow);
}

static void test_load(void **unused)
{
	assert_true(shed_load(0, 0) == -1.0);
	assert_true(shed_load(-1, 5) == -1.0);
	assert_true(shed_load(5, -1) == -1.0);
	assert_true(shed_load(3, 1) == 0.75);
	assert_true(shed_load(0, 10) == 0.0);
	assert_true(shed_load(10, 0) == 1.0);
	assert_true(shed_load(INT64_MAX, INT64_MAX) == 0.5);
}

/* Ramp 0: shed exactly from the threshold on, whatever the random. */
static void test_hard_cut(void **unused)
{
	struct shed_config c = cfg(0);

	/* P1 at 90% */
	assert_int_equal(shed_chance(&c, 1, 89, 11), 0);
	assert_false(shed_decide(&c, 1, 89, 11, 0));
	assert_int_equal(shed_chance(&c, 1, 90, 10), ALL);
	assert_true(shed_decide(&c, 1, 90, 10, UINT32_MAX));
	assert_true(shed_decide(&c, 1, 9, 1, 0));
	/* P2 at 80%: 4 busy of 5 is exactly 80%; 399 of 500 is 79.8%. */
	assert_int_equal(shed_chance(&c, 2, 79, 21), 0);
	assert_int_equal(shed_chance(&c, 2, 80, 20), ALL);
	assert_int_equal(shed_chance(&c, 2, 4, 1), ALL);
	assert_int_equal(shed_chance(&c, 2, 399, 101), 0);
	/* P3 at 70% */
	assert_int_equal(shed_chance(&c, 3, 69, 31), 0);
	assert_int_equal(shed_chance(&c, 3, 70, 30), ALL);
	assert_int_equal(shed_chance(&c, 3, 7, 3), ALL);
	/* Over 100% busy cannot be, but a full backend sheds every P1-P3. */
	for (int p = 1; p <= 3; p++)
		assert_true(shed_decide(&c, p, 10, 0, UINT32_MAX));
	/* Idle backend: nothing shed. */
	for (int p = 0; p <= 3; p++)
		assert_false(shed_decide(&c, p, 0, 10, 0));
}

static void test_p0_never(void **unused)
{
	struct shed_config c = cfg(5000);

	/* Even a config that puts a threshold at index 0 does not shed P0. */
	c.threshold_bp[0] = 100;
	assert_int_equal(shed_chance(&c, 0, 1000, 0), 0);
	assert_false(shed_decide(&c, 0, 1000, 0, 0));
	assert_false(shed_decide(&c, 0, INT64_MAX, 0, 0));
}

static void test_out_of_range_priority(void **unused)
{
	struct shed_config c = cfg(0);

	assert_int_equal(shed_chance(&c, -1, 100, 0), 0);
	assert_int_equal(shed_chance(&c, 4, 100, 0), 0);
	assert_int_equal(shed_chance(&c, INT_MAX, 100, 0), 0);
	assert_int_equal(shed_chance(&c, INT_MIN, 100, 0), 0);
}

/* Ramp 10% under P2's 80%: probability 0 at 70%, 1 at 80%, linear in
 * between; checked at exact points with the randoms on each side. */
static void test_ramp_exact_points(void **unused)
{
	struct shed_config c = cfg(1000);

	/* 70%: start of the ramp, never. */
	assert_int_equal(shed_chance(&c, 2, 70, 30), 0);
	assert_false(shed_decide(&c, 2, 70, 30, 0));
	/* 72.5%: a quarter. */
	assert_int_equal(shed_chance(&c, 2, 725, 275), ALL / 4);
	assert_true(shed_decide(&c, 2, 725, 275, (uint32_t)(ALL / 4 - 1)));
	assert_false(shed_decide(&c, 2, 725, 275, (uint32_t)(ALL / 4)));
	/* 75%: half. */
	assert_int_equal(shed_chance(&c, 2, 75, 25), ALL / 2);
	assert_true(shed_decide(&c, 2, 3, 1, 0x7fffffffu));
	assert_false(shed_decide(&c, 2, 3, 1, 0x80000000u));
	/* 79.99%: floor(0.999 * 2^32) = 4290672328. */
	assert_int_equal(shed_chance(&c, 2, 7999, 2001), 4290672328u);
	assert_true(shed_decide(&c, 2, 7999, 2001, 4290672327u));
	assert_false(shed_decide(&c, 2, 7999, 2001, 4290672328u));
	/* 80%: always. */
	assert_int_equal(shed_chance(&c, 2, 80, 20), ALL);
	assert_true(shed_decide(&c, 2, 80, 20, UINT32_MAX));
	/* Below the ramp: never. */
	assert_int_equal(shed_chance(&c, 2, 69, 31), 0);
	/* The same load with P1 (90%, ramp from 80%) is not shed, with P3
	 * (70%) always. */
	assert_int_equal(shed_chance(&c, 1, 75, 25), 0);
	assert_int_equal(shed_chance(&c, 3, 75, 25), ALL);
	/* P1 at 85%: half way from 80% to 90%. */
	assert_int_equal(shed_chance(&c, 1, 85, 15), ALL / 2);
}

/* A ramp wider than the threshold starts at load 0. */
static void test_ramp_clamped_at_zero(void **unused)
{
	struct shed_config c = cfg(8000);

	assert_int_equal(shed_chance(&c, 3, 0, 10), 0);
	assert_int_equal(shed_chance(&c, 3, 35, 65), ALL / 2); /* 35% of 70% */
	assert_int_equal(shed_chance(&c, 3, 70, 30), ALL);
	c.ramp_bp = SHED_FULL;
	assert_int_equal(shed_chance(&c, 2, 40, 60), ALL / 2); /* 40% of 80% */
}

static void test_threshold_100_and_never(void **unused)
{
	struct shed_config c = cfg(0);

	c.threshold_bp[1] = SHED_FULL;
	assert_int_equal(shed_chance(&c, 1, 99, 1), 0);
	assert_int_equal(shed_chance(&c, 1, 100, 0), ALL);
	c.threshold_bp[1] = SHED_NEVER;
	assert_int_equal(shed_chance(&c, 1, 100, 0), 0);
	/* Hand-built values out of range: above 100% can never be reached,
	 * a negative ramp is no ramp. */
	c.threshold_bp[2] = SHED_FULL + 1;
	assert_int_equal(shed_chance(&c, 2, 100, 0), 0);
	c.threshold_bp[3] = -5;
	assert_int_equal(shed_chance(&c, 3, 100, 0), 0);
	c.threshold_bp[3] = 7000;
	c.ramp_bp = -1000;
	assert_int_equal(shed_chance(&c, 3, 69, 31), 0);
	assert_int_equal(shed_chance(&c, 3, 70, 30), ALL);
	c.ramp_bp = SHED_FULL * 3;
	assert_int_equal(shed_chance(&c, 3, 35, 65), ALL / 2);
}

/* Missing or meaningless figures never shed. */
static void test_unknown_load(void **unused)
{
	struct shed_config c = cfg(1000);

	assert_false(shed_decide(&c, 3, 0, 0, 0));
	assert_false(shed_decide(&c, 3, 10, -1, 0));  /* be_conn_free without maxconn */
	assert_false(shed_decide(&c, 3, -1, 10, 0));
	assert_false(shed_decide(&c, 3, INT64_MIN, INT64_MIN, 0));
	assert_int_equal(shed_chance(&c, 3, -1, 0), 0);
}

/* No overflow at the extremes: 50% of 2 * INT64_MAX connections. */
static void test_extremes(void **unused)
{
	struct shed_config c = cfg(3000);

	assert_int_equal(shed_chance(&c, 3, INT64_MAX, INT64_MAX), 1431655765u); /* (50-40)/30 */
	assert_int_equal(shed_chance(&c, 1, INT64_MAX, INT64_MAX), 0);
	assert_int_equal(shed_chance(&c, 1, INT64_MAX, 0), ALL);
	assert_int_equal(shed_chance(&c, 1, 0, INT64_MAX), 0);
	assert_int_equal(shed_chance(&c, 3, INT64_MAX - 1, 1), ALL);
}

/* shed_decide is random < shed_chance, and chance grows with the load. */
static void test_monotonic(void **unused)
{
	struct shed_config c = cfg(2500);
	uint64_t prev = 0;

	for (int64_t busy = 0; busy <= 1000; busy++) {
		uint64_t ch = shed_chance(&c, 2, busy, 1000 - busy);

		assert_true(ch >= prev);
		assert_true(ch <= ALL);
		if (ch < ALL)
			assert_false(shed_decide(&c, 2, busy, 1000 - busy, (uint32_t)ch));
		if (ch > 0)
			assert_true(shed_decide(&c, 2, busy, 1000 - busy, (uint32_t)(ch - 1)));
		prev = ch;
	}
	assert_int_equal(prev, ALL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_load),
		cmocka_unit_test(test_hard_cut),
		cmocka_unit_test(test_p0_never),
		cmocka_unit_test(test_out_of_range_priority),
		cmocka_unit_test(test_ramp_exact_points),
		cmocka_unit_test(test_ramp_clamped_at_zero),
		cmocka_unit_test(test_threshold_100_and_never),
		cmocka_unit_test(test_unknown_load),
		cmocka_unit_test(test_extremes),
		cmocka_unit_test(test_monotonic),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
