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

#endif
