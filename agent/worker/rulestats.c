/* SPDX-License-Identifier: Apache-2.0 */
#include "rulestats.h"

#include <string.h>

#include "alloc.h"
#include "hll.h"
#include "rules.h"

#define FIELDS (sizeof(struct rule_counters) / sizeof(counter_t))

struct rulestats {
	int nworkers;
	size_t nused;              /* counters [0, nused) have a name */
	uint64_t epoch;            /* assignments so far */
	char name[RULESTATS_NAMES][RULES_NAME_MAX];
	uint64_t seen[RULESTATS_NAMES];  /* the last assignment that named it */
	/* What counters had counted when a new name took them over: their counts
	 * are the sums less these. */
	uint64_t base[RULESTATS_NAMES][FIELDS];
	struct rule_counters **worker;
	/* each worker's distinct clients by name (RULESTATS_NAMES pointers),
	 * made for a name when it first comes into the rules */
	struct hll_window ***sketch;
};

struct rulestats *rulestats_new(int nworkers)
{
	struct rulestats *rs = xcalloc(1, sizeof(*rs));

	if (!rs)
		return NULL;
	rs->nworkers = nworkers;
	rs->worker = xcalloc((size_t)nworkers, sizeof(*rs->worker));
	rs->sketch = xcalloc((size_t)nworkers, sizeof(*rs->sketch));
	if (!rs->worker || !rs->sketch) {
		xfree(rs->worker);
		xfree(rs->sketch);
		xfree(rs);
		return NULL;
	}
	/* Pages of counters that no rule uses are never touched: a large
	 * calloc maps zero pages lazily. */
	for (int i = 0; i < nworkers; i++) {
		rs->worker[i] = xcalloc(RULESTATS_NAMES, sizeof(struct rule_counters));
		rs->sketch[i] = xcalloc(RULESTATS_NAMES, sizeof(*rs->sketch[i]));
		if (!rs->worker[i] || !rs->sketch[i]) {
			rulestats_free(rs);
			return NULL;
		}
	}
	return rs;
}

void rulestats_free(struct rulestats *rs)
{
	if (!rs)
		return;
	for (int i = 0; i < rs->nworkers; i++) {
		xfree(rs->worker[i]);
		for (size_t s = 0; rs->sketch[i] && s < RULESTATS_NAMES; s++)
			xfree(rs->sketch[i][s]);
		xfree(rs->sketch[i]);
	}
	xfree(rs->worker);
	xfree(rs->sketch);
	xfree(rs);
}

struct rule_counters *rulestats_worker(struct rulestats *rs, int i)
{
	return rs->worker[i];
}

struct hll_window *const *rulestats_sketches(struct rulestats *rs, int i)
{
	return rs->sketch[i];
}

double rulestats_clients(const struct rulestats *rs, uint32_t counters, int64_t now_us)
{
	uint8_t reg[HLL_REGISTERS] = { 0 };

	for (int i = 0; i < rs->nworkers; i++)
		if (rs->sketch[i][counters])
			hll_merge(rs->sketch[i][counters], now_us, reg);
	return hll_estimate(reg);
}

/* Each worker's window of distinct clients for the counters s, made
 * empty: for a name new to them. One that cannot be made stays NULL (its
 * clients are not counted). */
static void sketches_for(struct rulestats *rs, uint32_t s)
{
	for (int i = 0; i < rs->nworkers; i++) {
		if (!rs->sketch[i][s])
			rs->sketch[i][s] = xmalloc(sizeof(struct hll_window));
		if (rs->sketch[i][s])
			hll_window_init(rs->sketch[i][s]);
	}
}

static uint64_t sum(const struct rulestats *rs, uint32_t counters, size_t field)
{
	uint64_t s = 0;

	for (int i = 0; i < rs->nworkers; i++)
		s += STAT_GET(((counter_t *)&rs->worker[i][counters])[field]);
	return s;
}

uint64_t rulestats_get(const struct rulestats *rs, uint32_t counters, size_t offset)
{
	size_t field = offset / sizeof(counter_t);

	return sum(rs, counters, field) - rs->base[counters][field];
}

/* The index of the counters named `name`, or -1. Linear: a reload compares at most
 * RULESTATS_NAMES short names per rule, a few milliseconds at worst. */
static long find(const struct rulestats *rs, const char *name)
{
	for (size_t s = 0; s < rs->nused; s++)
		if (strcmp(rs->name[s], name) == 0)
			return (long)s;
	return -1;
}

/* Counters for a new name: free ones, else those whose name left the
 * rules longest ago (none of this assignment's names: they were all
 * marked seen first), its counts restarted. */
static uint32_t take(struct rulestats *rs)
{
	uint32_t best = 0;

	if (rs->nused < RULESTATS_NAMES)
		return (uint32_t)rs->nused++;
	for (uint32_t s = 1; s < RULESTATS_NAMES; s++)
		if (rs->seen[s] < rs->seen[best])
			best = s;
	for (size_t f = 0; f < FIELDS; f++)
		rs->base[best][f] = sum(rs, best, f);
	return best;
}

void rulestats_assign(struct rulestats *rs, struct rules *r)
{
	size_t n = rules_count(r);

	rs->epoch++;
	/* Names already known first, so that no counters of this file's names
	 * can be taken for another of them. */
	for (size_t i = 0; i < n; i++) {
		long s = find(rs, rules_rule_at(r, i)->name);

		if (s >= 0) {
			rs->seen[s] = rs->epoch;
			rules_set_counters(r, i, (uint32_t)s);
		}
	}
	for (size_t i = 0; i < n; i++) {
		const struct rule *rule = rules_rule_at(r, i);
		uint32_t s;

		if (rs->seen[rule->counters] == rs->epoch &&
		    strcmp(rs->name[rule->counters], rule->name) == 0)
			continue;
		s = take(rs);
		sketches_for(rs, s);
		memcpy(rs->name[s], rule->name, sizeof(rs->name[s]));
		rs->seen[s] = rs->epoch;
		rules_set_counters(r, i, s);
	}
}
