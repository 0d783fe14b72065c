/* SPDX-License-Identifier: Apache-2.0 */
/* store_charge.c: charging what the response says (`charge: response`,
 * decide/charge.h), the same for every store: the place an admitted
 * request takes, and its settlement by the response's cost. A store with
 * ops->charge (Redis) settles there, once, never retried; the memory
 * store here, limit by limit (memstore_settle). */
#include "store.h"

#include "charge.h"
#include "clock.h"
#include "memstore.h"

/* Every limit of q took its cost: nothing refused it (not even in shadow
 * mode), and the store, not a failure mode, decided. */
static bool taken(const struct decide_query *q, const struct limit_result *res,
		  const struct decide_decision *d)
{
	if (d->degraded || d->status)
		return false;
	for (size_t j = 0; j < q->nlimits; j++)
		if (!res[j].allowed)
			return false;
	return true;
}

void store_charge_place(struct store_worker *sw, const struct decide_query *q,
			const struct limit_result *res, struct decide_decision *d,
			int64_t take_us)
{
	if (!q->rule->charge || !taken(q, res, d))
		return;
	if (take_us <= 0) {
		/* the memory store's clock; a shared store without its own
		 * (a local answer): nothing to settle */
		if (sw->st->ops->shared)
			return;
		take_us = clock_now_us();
	}
	charge_put_place(q, take_us, d);
}

/* The memory store's settlement: each of the rule's own limits. */
static void mem_settle(struct store *st, const struct rule *rule,
		       const uint8_t key[IDENTITY_KEY_LEN], int64_t take_us, int64_t delta)
{
	int64_t now = clock_now_us();

	for (size_t j = 0; j < rule->nown; j++)
		memstore_settle(st->mem, key, (unsigned)j, &rule->limits[j], now, take_us, delta);
}

int store_settle(struct store_worker *sw, const struct rules *rules, const char *place,
		 size_t len, const struct spop_data *cost)
{
	struct charge_place cp;
	const struct rule *rule;
	uint64_t actual;
	int64_t delta;

	if (charge_parse_place(place, len, &cp) != 1)
		return 0;
	if (charge_parse_cost(cost, &actual) < 0) {
		STAT_INC(sw->stats.charge_invalid);
		return -1;
	}
	rule = rules_find(rules, cp.rule);
	/* a reload that changed the rule's limits, or an override's
	 * limits: the estimate was taken from others */
	if (!rule || !rule->charge || charge_limits_id(rule) != cp.limits) {
		STAT_INC(sw->stats.charge_stale);
		return -1;
	}
	STAT_INC(sw->stats.charge_settlements);
	delta = (int64_t)actual - (int64_t)cp.estimate;
	if (delta == 0)
		return 1;
	if (delta > 0)
		STAT_ADD(sw->stats.charge_taken, (uint64_t)delta);
	else
		STAT_ADD(sw->stats.charge_given, (uint64_t)-delta);
	if (sw->st->ops->charge)
		sw->st->ops->charge(sw, rule, cp.key, cp.take_us, delta);
	else
		mem_settle(sw->st, rule, cp.key, cp.take_us, delta);
	return 1;
}
