/* SPDX-License-Identifier: Apache-2.0 */
/* hll.c: distinct clients over a sliding window (see hll.h). */
#include "hll.h"

#include <math.h>

void hll_window_init(struct hll_window *w)
{
	for (unsigned s = 0; s < HLL_SLOTS; s++) {
		atomic_store_explicit(&w->period[s], -1, memory_order_relaxed);
		for (unsigned i = 0; i < HLL_REGISTERS; i++)
			atomic_store_explicit(&w->reg[s][i], 0, memory_order_relaxed);
	}
}

void hll_turn(struct hll_window *w, int64_t period)
{
	unsigned s = (unsigned)(period % HLL_SLOTS);

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

double hll_estimate(const uint8_t reg[HLL_REGISTERS])
{
	const double m = HLL_REGISTERS;
	double sum = 0., e;
	unsigned zeros = 0;

	for (unsigned i = 0; i < HLL_REGISTERS; i++) {
		sum += ldexp(1., -(int)reg[i]);
		zeros += reg[i] == 0;
	}
	e = 0.7213 / (1. + 1.079 / m) * m * m / sum;
	/* small counts: linear counting on the empty registers is the more
	 * exact, up to about 2.5 registers a client */
	if (e <= 2.5 * m && zeros)
		e = m * log(m / zeros);
	return e;
}
