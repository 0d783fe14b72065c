/* SPDX-License-Identifier: Apache-2.0 */
/* adaptive.h: a backend's concurrency limit from its latency. Pure: no
 * I/O, no clock of its own, no lock; the caller passes the time and keeps
 * one struct adaptive_limit per backend under its own lock.
 *
 * The algorithm is a gradient one after Netflix's Gradient2, with the
 * operator's target latency where Gradient2 keeps a learned long-term
 * average (docs/rules.md, "Adaptive shedding", says why). Samples (the
 * time from a request's check-rate to its release) are gathered over a
 * window of ADAPTIVE_WINDOW_US; at the first sample past the window, the
 * window's mean latency m gives
 *
 *     gradient = clamp(target / m, ADAPTIVE_GRADIENT_MIN, 1)
 *     proposed = limit * gradient + sqrt(limit)
 *     limit    = limit * (1 - ADAPTIVE_SMOOTHING) + proposed * ADAPTIVE_SMOOTHING
 *
 * bounded by min and max. sqrt(limit) is the headroom that lets the limit
 * grow while latency is at or under target; it grows only when the
 * window saw at least half the limit in flight (a backend that is not
 * kept busy says nothing about how much more it can take).
 *
 * Shedding by priority (adaptive_threshold): P3 when the requests in
 * flight reach the limit, P2 at 5/4 of it, P1 at 3/2 of it, P0 never.
 */
#ifndef RL_ADAPTIVE_H
#define RL_ADAPTIVE_H

#include <stdbool.h>
#include <stdint.h>

#include "shed.h"

#define ADAPTIVE_WINDOW_US 100000       /* 100 ms */
#define ADAPTIVE_SMOOTHING 0.2
#define ADAPTIVE_GRADIENT_MIN 0.5
#define ADAPTIVE_SAMPLE_MAX_US 3600000000LL /* a longer sample counts as 1 h */
#define ADAPTIVE_LIMIT_MAX 1000000      /* the largest min or max */

struct adaptive_config {
	bool set;                        /* shedding.adaptive is in the rules */
	int64_t target_us;               /* latency above which the limit falls */
	uint32_t min;                    /* 1 <= min <= max */
	uint32_t max;                    /* <= ADAPTIVE_LIMIT_MAX */
	uint32_t initial;                /* the limit a backend starts at */
	int64_t timeout_us;              /* a request not released by then is
					  * dropped, counted as a sample this long */
	char backend_arg[SHED_ARG_MAX];  /* argument that names the backend */
};

/* Not set; target 50 ms, min 2, max 1000, initial = max, timeout 30 s,
 * argument "backend". */
void adaptive_config_defaults(struct adaptive_config *c);

struct adaptive_limit {
	double limit;
	int64_t window_start_us;
	double window_sum_us;            /* the window's samples */
	uint32_t window_n;
	uint32_t window_busiest;         /* most in flight the window saw */
};

/* A backend first seen at now_us: its limit is c->initial. */
void adaptive_init(struct adaptive_limit *a, const struct adaptive_config *c, int64_t now_us);

/* One sample: a request of latency_us (any value: negative counts as 0,
 * over ADAPTIVE_SAMPLE_MAX_US as that) ended at now_us, while `inflight`
 * requests (itself included) were in flight. Returns true when the
 * window closed and the limit was computed anew. */
bool adaptive_sample(struct adaptive_limit *a, const struct adaptive_config *c,
		     int64_t latency_us, uint32_t inflight, int64_t now_us);

/* The limit now, a whole number within [c->min, c->max]. */
uint32_t adaptive_current(const struct adaptive_limit *a, const struct adaptive_config *c);

/* How many requests in flight shed a request of this priority under
 * limit: limit for P3, ceil(5/4 limit) for P2, ceil(3/2 limit) for P1,
 * UINT32_MAX (never) for P0 and out-of-range priorities. */
uint32_t adaptive_threshold(uint32_t limit, int priority);

#endif
