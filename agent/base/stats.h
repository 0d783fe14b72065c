/* SPDX-License-Identifier: Apache-2.0 */
/* stats.h: counters written by one thread (their worker) and read by
 * another (the metrics endpoint). Relaxed atomics: no lock prefix on the
 * hot path (a plain load and store on x86), and no data race for readers. */
#ifndef RL_STATS_H
#define RL_STATS_H

#include <stdatomic.h>
#include <stdint.h>

typedef _Atomic uint64_t counter_t;

#define STAT_ADD(c, n)                                                        \
	atomic_store_explicit(&(c), atomic_load_explicit(&(c), memory_order_relaxed) + (n), \
			      memory_order_relaxed)
#define STAT_INC(c) STAT_ADD(c, 1)
#define STAT_GET(c) atomic_load_explicit(&(c), memory_order_relaxed)
#define STAT_SET(c, v) atomic_store_explicit(&(c), (v), memory_order_relaxed)

/* A latency histogram in the shape Prometheus wants: upper bounds in
 * microseconds (HIST_BOUNDS, the last bucket is +Inf), counts per bucket
 * (not cumulative: the metrics endpoint adds them up), their sum and count. */
#define HIST_BUCKETS 12
#define HIST_BOUNDS_US                                                        	{ 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000 }

struct hist {
	counter_t bucket[HIST_BUCKETS];
	counter_t sum_us;
	counter_t count;
};

/* The same for waits of seconds (a rule's delay, up to 30 s). */
#define HIST_LONG_BUCKETS 11
#define HIST_LONG_BOUNDS_US \
	{ 10000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, 30000000 }

struct hist_long {
	counter_t bucket[HIST_LONG_BUCKETS];
	counter_t sum_us;
	counter_t count;
};

static inline void hist_long_observe(struct hist_long *h, int64_t us)
{
	static const int64_t bound[HIST_LONG_BUCKETS - 1] = HIST_LONG_BOUNDS_US;
	int i = 0;

	if (us < 0)
		us = 0;
	while (i < HIST_LONG_BUCKETS - 1 && us > bound[i])
		i++;
	STAT_INC(h->bucket[i]);
	STAT_ADD(h->sum_us, (uint64_t)us);
	STAT_INC(h->count);
}

static inline void hist_observe(struct hist *h, int64_t us)
{
	static const int64_t bound[HIST_BUCKETS - 1] = HIST_BOUNDS_US;
	int i = 0;

	if (us < 0)
		us = 0;
	while (i < HIST_BUCKETS - 1 && us > bound[i])
		i++;
	STAT_INC(h->bucket[i]);
	STAT_ADD(h->sum_us, (uint64_t)us);
	STAT_INC(h->count);
}

#endif
