/* SPDX-License-Identifier: Apache-2.0 */
/* Distinct clients over a sliding window (hll.h), on an injected clock. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hll.h"

#define MIN (60LL * 1000000)

/* splitmix64: uniform 64-bit values, as identity keys are */
static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Counts client h seen at now (µs). */
static void add(struct hll_window *w, uint64_t h, int64_t now)
{
	hll_add(w, h, hll_period(now));
}

static double count(const struct hll_window *w, int64_t now)
{
	uint8_t reg[HLL_REGISTERS] = { 0 };

	hll_merge(w, now, reg);
	return hll_estimate(reg);
}

static struct hll_window *window(void)
{
	struct hll_window *w = malloc(sizeof(*w));

	assert_non_null(w);
	hll_window_init(w);
	return w;
}

/* Nothing counted: 0. One client counted a thousand times: 1. Distinct
 * clients from 10 to a million: within 5% (the standard error is 1.6%;
 * the figures are fixed by the seeds). */
static void test_accuracy(void **state)
{
	static const uint64_t sizes[] = { 10, 100, 1000, 5000, 10000, 20000, 100000, 1000000 };
	struct hll_window *w = window();
	int64_t now = 1000 * MIN;

	(void)state;
	assert_true(count(w, now) == 0.);
	for (int i = 0; i < 1000; i++)
		add(w, mix(42), now);
	assert_true(fabs(count(w, now) - 1.) < 0.01);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		double e;

		hll_window_init(w);
		for (uint64_t c = 0; c < sizes[k]; c++) {
			add(w, mix(c * 7919 + k), now);
			add(w, mix(c * 7919 + k), now); /* seen twice: one client */
		}
		e = count(w, now);
		print_message("%llu clients: %.0f\n", (unsigned long long)sizes[k], e);
		assert_true(fabs(e - (double)sizes[k]) <= 0.05 * (double)sizes[k]);
	}
	free(w);
}

/* The window slides: clients seen in one 5-minute period count for 10 to
 * 15 minutes, then no more; a client seen again counts again; clients
 * spread over three periods count once each. */
static void test_window(void **state)
{
	struct hll_window *w = window();
	int64_t t0 = 2000 * MIN; /* the start of a period */
	double e;

	(void)state;
	for (uint64_t c = 0; c < 3000; c++)
		add(w, mix(c), t0 + MIN);
	assert_true(fabs(count(w, t0 + 4 * MIN) - 3000.) < 150.);
	assert_true(fabs(count(w, t0 + 14 * MIN) - 3000.) < 150.);
	assert_true(count(w, t0 + 15 * MIN) == 0.);
	/* a merge at an earlier time than the sketch's period leaves it out */
	assert_true(count(w, t0 - MIN) == 0.);

	/* 2000 in each of three periods, half of them the same clients */
	hll_window_init(w);
	for (int p = 0; p < 3; p++)
		for (uint64_t c = 0; c < 2000; c++)
			add(w, mix(c < 1000 ? c : c + 1000 * (uint64_t)p + 1000000),
				t0 + p * 5 * MIN + 2 * MIN);
	e = count(w, t0 + 12 * MIN);
	assert_true(fabs(e - 4000.) < 200.);
	/* a period later the first's own clients are gone, and the window
	 * comes round: that sketch is cleared by the next addition */
	e = count(w, t0 + 16 * MIN);
	assert_true(fabs(e - 3000.) < 150.);
	add(w, mix(99999999), t0 + 16 * MIN);
	assert_true(fabs(count(w, t0 + 16 * MIN) - 3001.) < 150.);
	assert_true(fabs(count(w, t0 + 21 * MIN) - 2001.) < 100.);
	free(w);
}

/* Ranks stay within a byte whatever the hash (the guard bit): a hash of
 * zero bits after the index counts as the longest run. */
static void test_extremes(void **state)
{
	struct hll_window *w = window();
	uint8_t reg[HLL_REGISTERS] = { 0 };

	(void)state;
	add(w, 0, 0);
	add(w, ~0ull, 0);
	add(w, 1ull << (64 - HLL_BITS), 0);
	hll_merge(w, 0, reg);
	assert_int_equal(reg[0], 64 - HLL_BITS + 1);
	assert_int_equal(reg[HLL_REGISTERS - 1], 1);
	assert_int_equal(reg[1], 64 - HLL_BITS + 1);
	assert_true(fabs(hll_estimate(reg) - 3.) < 0.1);
	free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accuracy),
		cmocka_unit_test(test_window),
		cmocka_unit_test(test_extremes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
