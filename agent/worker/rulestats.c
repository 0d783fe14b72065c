#include "rulestats.h"

#include <string.h>

#include "alloc.h"
#include "rules.h"

#define FIELDS (sizeof(struct rule_counters) / sizeof(counter_t))

struct rulestats {
	int nworkers;
	size_t nused;              /* slots [0, nused) have a name */
	uint64_t epoch;            /* assignments so far */
	char name[RULESTATS_SLOTS][RULES_NAME_MAX];
	uint64_t seen[RULESTATS_SLOTS];  /* the last assignment that named it */
	/* What a slot had counted when a new name took it over: its counts
	 * are the sums less these. */
	uint64_t base[RULESTATS_SLOTS][FIELDS];
	struct rule_counters **worker;
};

struct rulestats *rulestats_new(int nworkers)
{
	struct rulestats *rs = xcalloc(1, sizeof(*rs));

	if (!rs)
		return NULL;
	rs->nworkers = nworkers;
	rs->worker = xcalloc((size_t)nworkers, sizeof(*rs->worker));
	if (!rs->worker) {
		xfree(rs);
		return NULL;
	}
	/* Pages of slots that no rule uses are never touched: a large
	 * calloc maps zero pages lazily. */
	for (int i = 0; i < nworkers; i++) {
		rs->worker[i] = xcalloc(RULESTATS_SLOTS, sizeof(struct rule_counters));
		if (!rs->worker[i]) {
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
	for (int i = 0; i < rs->nworkers; i++)
		xfree(rs->worker[i]);
	xfree(rs->worker);
	xfree(rs);
}

struct rule_counters *rulestats_worker(struct rulestats *rs, int i)
{
	return rs->worker[i];
}

static uint64_t sum(const struct rulestats *rs, uint32_t slot, size_t field)
{
	uint64_t s = 0;

	for (int i = 0; i < rs->nworkers; i++)
		s += STAT_GET(((counter_t *)&rs->worker[i][slot])[field]);
	return s;
}

uint64_t rulestats_get(const struct rulestats *rs, uint32_t slot, size_t offset)
{
	size_t field = offset / sizeof(counter_t);

	return sum(rs, slot, field) - rs->base[slot][field];
}

/* The slot named `name`, or -1. Linear: a reload compares at most
 * RULESTATS_SLOTS short names per rule, a few milliseconds at worst. */
static long find(const struct rulestats *rs, const char *name)
{
	for (size_t s = 0; s < rs->nused; s++)
		if (strcmp(rs->name[s], name) == 0)
			return (long)s;
	return -1;
}

/* A slot for a new name: a free one, else the one whose name left the
 * rules longest ago (none of this assignment's names: they were all
 * marked seen first), its counts restarted. */
static uint32_t take(struct rulestats *rs)
{
	uint32_t best = 0;

	if (rs->nused < RULESTATS_SLOTS)
		return (uint32_t)rs->nused++;
	for (uint32_t s = 1; s < RULESTATS_SLOTS; s++)
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
	/* Names already known first, so that no slot of this file's names
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
		memcpy(rs->name[s], rule->name, sizeof(rs->name[s]));
		rs->seen[s] = rs->epoch;
		rules_set_counters(r, i, s);
	}
}
