/* SPDX-License-Identifier: Apache-2.0 */
/* rulestats.h: counters per rule, exported with the rule's name as label.
 *
 * Every rule name the agent has been given gets counters of its own, by
 * index (rule->counters), kept across reloads: a rule that a reload keeps
 * (by name) goes on counting where it was, wherever it moved in the file,
 * and a decision that finishes under the rules it started with (Redis
 * answering after a reload) counts to its rule's name. A rule that a
 * reload removes keeps its counters, unexported, and counts on from there
 * if a later reload brings it back.
 *
 * Each worker has an array of counters of its own, written by that worker
 * only with relaxed atomics (stats.h), and the metrics sum the arrays when
 * scraped: counting costs a decision an index and plain increments.
 * Indexes are given out, and the sums read, by the main thread only, which
 * also loads and publishes the rules: no lock anywhere.
 */
#ifndef RL_RULESTATS_H
#define RL_RULESTATS_H

#include <stddef.h>
#include <stdint.h>

#include "stats.h"

struct hll_window;
struct rules;

/* One rule's counters in one worker: a cache line, and two counted on
 * cold paths. */
struct rule_counters {
	counter_t decisions;
	counter_t limited;     /* status 429 */
	counter_t shadow;      /* would have been refused: forwarded by shadow mode */
	counter_t near_limit;  /* allowed, leaving under a tenth of the quota */
	counter_t shed[4];     /* status 503 by load, by priority (P0 never) */
	counter_t delayed;     /* held by the rule's delay, then answered */
	counter_t saturated;   /* decided by the local bucket: the store was late */
};

/* Names with counters: more than twice the rules one file may hold
 * (RULES_TIERS_MAX + RULES_ENDPOINTS_MAX), so that the counters of a name
 * that left the rules can always be taken back for a new name
 * (rulestats_assign). */
#define RULESTATS_NAMES 4096

struct rulestats;

/* The names and `nworkers` arrays of their counters, zeroed. NULL when out
 * of memory. */
struct rulestats *rulestats_new(int nworkers);
void rulestats_free(struct rulestats *rs);

/* Worker i's array of RULESTATS_NAMES counters (0 <= i < nworkers). */
struct rule_counters *rulestats_worker(struct rulestats *rs, int i);

/* Worker i's RULESTATS_NAMES windows of distinct clients (hll.h), by
 * counters index: NULL for a name never in the rules (or out of memory).
 * Worker i adds to them; the metrics merge them (rulestats_clients). */
struct hll_window *const *rulestats_sketches(struct rulestats *rs, int i);

/* The distinct clients the counters `counters` counted over the last 10
 * to 15 minutes up to now_us (the wall clock's, as the workers' loops
 * tell it), all workers merged: HyperLogLog's estimate, about 1.6%. */
double rulestats_clients(const struct rulestats *rs, uint32_t counters, int64_t now_us);

/* Gives each rule of `r` the counters of its name (rules_set_counters),
 * before the rules are published to the workers. A name never seen takes
 * free ones; when none are free, those of the name that left the rules
 * longest ago, whose counts then restart from zero for the new name (a
 * decision of the old name still in flight may land there: one or two
 * counts, against a name that just appeared). Main thread only. */
void rulestats_assign(struct rulestats *rs, struct rules *r);

/* The counter at `offset` in struct rule_counters of index `counters`,
 * summed over the workers. Main thread only. */
uint64_t rulestats_get(const struct rulestats *rs, uint32_t counters, size_t offset);

#endif
