/* SPDX-License-Identifier: Apache-2.0 */
/* store_memory.c: the in-memory store, this agent's buckets alone (memstore.h
 * holds them, shared by the workers). Every decision is made at once. */
#include "store.h"

#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "inflight.h"
#include "memstore.h"
#include "overrides.h"

static enum store_outcome mem_check(struct store_worker *sw, const struct decide_query *q,
				    const struct store_ref *ref, struct limit_result *res,
				    int *decider)
{
	/* (one key: memstore_check at once, the common case) */
	if (q->rule->simple)
		*decider = memstore_check(sw->st->mem, q->key, q->limits, q->nlimits,
					  clock_now_us(), q->cost, res);
	else
		*decider = store_mem_check(sw->st, q, q->limits, clock_now_us(), res);
	/* full of clients it refuses: the failure mode decides */
	return *decider == MEMSTORE_NO_ROOM ? STORE_UNAVAILABLE : STORE_DECIDED;
}

/* An override set or removed: the store's set with these clients'
 * entries replaced or gone, and the entries past their end left out,
 * handed to the holder. A set that would hold more than OVERRIDES_MAX is
 * refused (409). */
static void mem_override(struct store *st, struct store_admin *a)
{
	size_t n = overrides_count(st->ov), m = 0;
	struct override_entry *e = xcalloc(n + a->nov + 1, sizeof(*e));
	int64_t now = clock_wall_ms();
	struct overrides *o;

	if (!e) {
		snprintf(a->error, sizeof(a->error), "out of memory");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		const struct override_entry *x = overrides_at(st->ov, i);
		size_t k;

		if (x->expires_ms && x->expires_ms <= now)
			continue;
		for (k = 0; k < a->nov; k++)
			if (memcmp(a->ov[k].key, x->key, IDENTITY_KEY_LEN) == 0)
				break;
		if (k == a->nov)
			e[m++] = *x;
	}
	if (!a->ov_remove && m + a->nov > OVERRIDES_MAX) {
		snprintf(a->error, sizeof(a->error), "at most %d operator overrides are kept, and "
			 "%zu are: DELETE some, or let those with a ttl end", OVERRIDES_MAX, m);
		a->status = 409;
		xfree(e);
		return;
	}
	for (size_t k = 0; !a->ov_remove && k < a->nov; k++)
		e[m++] = a->ov[k];
	o = overrides_new(e, m);
	xfree(e);
	if (!o) {
		snprintf(a->error, sizeof(a->error), "out of memory");
		return;
	}
	overrides_release(st->ov);
	st->ov = o;
	if (st->on_overrides) {
		overrides_acquire(o);
		st->on_overrides(st->on_overrides_priv, o);
	}
}

/* For each rule: its limits with what they hold now, or with reset, how
 * many entries were dropped; or an override set or removed. */
static void mem_admin(struct store *st, struct store_admin *a)
{
	if (a->override) {
		mem_override(st, a);
		store_admin_done(st, a);
		return;
	}
	for (size_t i = 0; i < a->n; i++) {
		struct store_admin_item *it = &a->item[i];
		const struct rule *rule = it->rule;
		struct limit_result res[LIMIT_SET_MAX];

		if (a->reset) {
			it->found = STORE_ADMIN_DELETED;
			it->deleted = (int64_t)(memstore_reset(st->mem, it->key) +
						inflight_reset(st->flights, it->key));
			continue;
		}
		it->found = STORE_ADMIN_STATE;
		if (rule->nown == 0)
			continue;
		/* weight 0: a look that takes nothing */
		memstore_check(st->mem, it->key, rule->limits, rule->nown, clock_now_us(), 0, res);
		for (size_t k = 0; k < rule->nown; k++) {
			if (rule->limits[k].algo == LIMIT_CONCURRENCY) {
				it->limit[k].in_flight = inflight_look(st->flights, it->key,
								       rule->lidh[k], clock_now_us());
				continue;
			}
			it->limit[k].remaining = res[k].remaining;
			it->limit[k].reset_us = res[k].reset_us;
		}
	}
	store_admin_done(st, a);
}

static const struct store_ops mem_ops = {
	.name = "memory",
	.shared = false,
	.check = mem_check,
	.admin = mem_admin,
};

struct store *store_memory_new(size_t max_keys)
{
	struct store *st = xcalloc(1, sizeof(*st));

	if (!st)
		return NULL;
	if (store_init(st, &mem_ops, max_keys) < 0) {
		xfree(st);
		return NULL;
	}
	return st;
}
