/* SPDX-License-Identifier: Apache-2.0 */
/* hll.c: distinct clients over a sliding window (see hll.h). */
#include "hll.h"

#include <math.h>

void hll_window_init(struct hll_window *w)
{
	w->now_period = -1;
	w->now_slot = 0;
	for (unsigned s = 0; s < HLL_SLOTS; s++) {
		atomic_store_explicit(&w->period[s], -1, memory_order_relaxed);
		for (unsigned i = 0; i < HLL_REGISTERS; i++)
			atomic_store_explicit(&w->reg[s][i], 0, memory_order_relaxed);
	}
}

void hll_turn(struct hll_window *w, int64_t period)
{
	unsigned s = (unsigned)(period % HLL_SLOTS);

	w->now_period = period;
	w->now_slot = s;
	if (atomic_load_explicit(&w->period[s], memory_order_relaxed) == period)
		return; /* back to a period after a clock stepped back, say */
	/* marked empty first: a merge meanwhile leaves it out */
	atomic_store_explicit(&w->period[s], -1, memory_order_relaxed);
	for (unsigned i = 0; i < HLL_REGISTERS; i++)
		atomic_store_explicit(&w->reg[s][i], 0, memory_order_relaxed);
	atomic_store_explicit(&w->period[s], period, memory_order_release);
}

void hll_merge(const struct hll_window *w, int64_t now_us, uint8_t out[HLL_REGISTERS])
{
	int64_t period = now_us / HLL_SLOT_US;

	for (unsigned s = 0; s < HLL_SLOTS; s++) {
		int64_t p = atomic_load_explicit(&w->period[s], memory_order_acquire);

		if (p < 0 || p > period || period - p >= HLL_SLOTS)
			continue;
		for (unsigned i = 0; i < HLL_REGISTERS; i++) {
			uint8_t r = atomic_load_explicit(&w->reg[s][i], memory_order_relaxed);

			if (r > out[i])
				out[i] = r;
		}
	}
}

/* Ertl's corrections ("New cardinality estimation algorithms for
 * HyperLogLog sketches", 2017) for the registers at 0 (sigma) and at the
 * largest rank (tau): an estimate without bias from 0 to far beyond any
 * count of clients, with no table and no switch between estimators. */
static double sigma(double x)
{
	double y = 1., z = x, before;

	if (x >= 1.)
		return INFINITY;
	do {
		x *= x;
		before = z;
		z += x * y;
		y += y;
	} while (z != before);
	return z;
}

static double tau(double x)
{
	double y = 1., z = 1. - x, before;

	if (x <= 0. || x >= 1.)
		return 0.;
	do {
		x = sqrt(x);
		before = z;
		y *= 0.5;
		z -= (1. - x) * (1. - x) * y;
	} while (z != before);
	return z / 3.;
}

double hll_estimate(const uint8_t reg[HLL_REGISTERS])
{
	enum { Q = 64 - HLL_BITS }; /* ranks go from 0 to Q + 1 */
	const double m = HLL_REGISTERS;
	unsigned c[Q + 2] = { 0 };
	double z;

	for (unsigned i = 0; i < HLL_REGISTERS; i++)
		c[reg[i] <= Q + 1 ? reg[i] : Q + 1]++;
	if (c[0] == HLL_REGISTERS)
		return 0.;
	z = m * tau(1. - c[Q + 1] / m);
	for (int k = Q; k >= 1; k--)
		z = 0.5 * (z + c[k]);
	z += m * sigma(c[0] / m);
	return m * m / (2. * M_LN2 * z);
}
