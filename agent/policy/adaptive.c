/* SPDX-License-Identifier: Apache-2.0 */
/* adaptive.c: a backend's concurrency limit from its latency (adaptive.h). */
#include "adaptive.h"

#include <math.h>
#include <string.h>

void adaptive_config_defaults(struct adaptive_config *c)
{
	memset(c, 0, sizeof(*c));
	c->target_us = 50000;
	c->min = 2;
	c->max = 1000;
	c->initial = 1000;
	c->timeout_us = 30 * 1000000LL;
	strcpy(c->backend_arg, "backend");
}

static double bounded(double v, const struct adaptive_config *c)
{
	double lo = c->min ? c->min : 1, hi = c->max >= lo ? c->max : lo;

	/* NaN compares false both ways: it becomes the floor */
	if (!(v >= lo))
		return lo;
	return v > hi ? hi : v;
}

void adaptive_init(struct adaptive_limit *a, const struct adaptive_config *c, int64_t now_us)
{
	memset(a, 0, sizeof(*a));
	a->limit = bounded(c->initial, c);
	a->window_start_us = now_us;
}

/* The window's verdict: the new limit from its mean latency. */
static void update(struct adaptive_limit *a, const struct adaptive_config *c)
{
	double mean = a->window_sum_us / a->window_n;
	double target = c->target_us > 0 ? (double)c->target_us : 1.0;
	double gradient, proposed;

	if (mean < 1.0)
		mean = 1.0;
	gradient = target / mean;
	if (gradient > 1.0)
		gradient = 1.0;
	if (gradient < ADAPTIVE_GRADIENT_MIN)
		gradient = ADAPTIVE_GRADIENT_MIN;
	proposed = a->limit * gradient;
	/* headroom to grow, only when the backend was kept busy */
	if (gradient < 1.0 || 2.0 * a->window_busiest >= a->limit)
		proposed += sqrt(a->limit);
	if (gradient >= 1.0 && proposed < a->limit)
		proposed = a->limit;
	a->limit = bounded(a->limit * (1.0 - ADAPTIVE_SMOOTHING) + proposed * ADAPTIVE_SMOOTHING,
			   c);
}

bool adaptive_sample(struct adaptive_limit *a, const struct adaptive_config *c,
		     int64_t latency_us, uint32_t inflight, int64_t now_us)
{
	bool closed = false;

	if (latency_us < 0)
		latency_us = 0;
	if (latency_us > ADAPTIVE_SAMPLE_MAX_US)
		latency_us = ADAPTIVE_SAMPLE_MAX_US;
	/* a clock read before the window began (another thread's) counts
	 * in this window */
	if (now_us - a->window_start_us >= ADAPTIVE_WINDOW_US && a->window_n > 0) {
		update(a, c);
		a->window_sum_us = 0;
		a->window_n = 0;
		a->window_busiest = 0;
		a->window_start_us = now_us;
		closed = true;
	} else if (a->window_n == 0) {
		a->window_start_us = now_us > a->window_start_us ? now_us : a->window_start_us;
	}
	a->window_sum_us += (double)latency_us;
	a->window_n++;
	if (inflight > a->window_busiest)
		a->window_busiest = inflight;
	return closed;
}

uint32_t adaptive_current(const struct adaptive_limit *a, const struct adaptive_config *c)
{
	double v = bounded(a->limit, c);

	return (uint32_t)(v + 0.5) < (c->min ? c->min : 1) ? (c->min ? c->min : 1)
							  : (uint32_t)(v + 0.5);
}

uint32_t adaptive_threshold(uint32_t limit, int priority)
{
	uint64_t l = limit;

	switch (priority) {
	case 3:
		return limit;
	case 2:
		l = (5 * l + 3) / 4;
		break;
	case 1:
		l = (3 * l + 1) / 2;
		break;
	default:
		return UINT32_MAX;
	}
	return l > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)l;
}
