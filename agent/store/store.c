/* SPDX-License-Identifier: Apache-2.0 */
/* store.c: the part of every store that is the same for all backends: the
 * life of a query (submitted, decided now or later, answered), and the
 * rule's failure mode when the shared store cannot decide. */
#include "store.h"

#include <string.h>

#include "alloc.h"
#include "charge.h"
#include "clock.h"
#include "delay.h"
#include "log.h"
#include "inflight.h"
#include "memstore.h"
#include "overrides.h"

int store_init(struct store *st, const struct store_ops *ops, size_t mem_max_keys)
{
	st->ops = ops;
	atomic_init(&st->reset_epoch, 0);
	st->mem = memstore_new(mem_max_keys);
	st->flights = inflight_new(mem_max_keys);
	return st->mem && st->flights ? 0 : -1;
}

void store_free(struct store *st)
{
	if (!st)
		return;
	if (st->ops->free)
		st->ops->free(st);
	memstore_free(st->mem);
	inflight_free(st->flights);
	overrides_release(st->ov);
	xfree(st);
}

struct store_worker *store_worker_new(struct store *st, struct ev_loop *loop, int idx,
				      store_answer_fn *answer, void *priv)
{
	struct store_worker *sw = xcalloc(1, sizeof(*sw));

	if (!sw) {
		log_err("worker %d: out of memory for its store", idx);
		return NULL;
	}
	sw->st = st;
	sw->loop = loop;
	sw->idx = idx;
	sw->answer = answer;
	sw->priv = priv;
	if (st->ops->worker_init && st->ops->worker_init(sw) < 0) {
		log_err("worker %d: cannot set up the %s store", idx, st->ops->name);
		xfree(sw);
		return NULL;
	}
	sw->next = st->workers;
	st->workers = sw;
	return sw;
}

void store_worker_awaited(struct store_worker *sw, store_awaited_fn *awaited)
{
	sw->awaited = awaited;
}

void store_worker_free(struct store_worker *sw)
{
	struct store_worker **pp;

	if (!sw)
		return;
	for (pp = &sw->st->workers; *pp; pp = &(*pp)->next)
		if (*pp == sw) {
			*pp = sw->next;
			break;
		}
	/* the requests held are answered first: their refusals */
	delay_free(sw->delays);
	sw->delays = NULL;
	if (sw->st->ops->worker_free)
		sw->st->ops->worker_free(sw);
	xfree(sw);
}

bool store_shared(const struct store *st)
{
	return st->ops->shared;
}

/* struct store_stats holds counters only (struct hist and struct
 * lease_stats too): summed as an array of them. */
_Static_assert(sizeof(struct store_stats) % sizeof(counter_t) == 0, "counters only");

static void stats_add(struct store_stats *to, const struct store_stats *from)
{
	counter_t *t = (counter_t *)to;
	const counter_t *f = (const counter_t *)from;

	for (size_t i = 0; i < sizeof(*to) / sizeof(counter_t); i++)
		STAT_ADD(t[i], STAT_GET(f[i]));
}

void store_get_stats(struct store *st, struct store_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (const struct store_worker *sw = st->workers; sw; sw = sw->next)
		stats_add(out, &sw->stats);
}

void store_mem_stats(const struct store *st, struct memstore_stats *out)
{
	memstore_get_stats(st->mem, out);
}

/* limits[i] for i in [0, n) but `skip` (-1: none), each under its key, in
 * the memory store; results in res at the limits' own indexes. */
static int mem_limits(struct memstore *mem, const struct decide_query *q,
		      const struct limit_spec *limits, int skip, int64_t now_us,
		      struct limit_result *res)
{
	const uint8_t *keys[LIMIT_SET_MAX];
	struct limit_spec ls[LIMIT_SET_MAX];
	struct limit_result rs[LIMIT_SET_MAX];
	size_t n = 0;
	int d;

	if (skip < 0 && !q->rule->nstack)
		return memstore_check(mem, q->key, limits, q->nlimits, now_us, q->cost, res);
	for (size_t j = 0; j < q->nlimits; j++) {
		if ((int)j == skip)
			continue;
		keys[n] = decide_limit_key(q, j);
		ls[n++] = limits[j];
	}
	if (n == 0)
		return -1;
	d = memstore_check_keys(mem, keys, ls, n, now_us, q->cost, rs);
	if (d < 0)
		return d;
	/* back to the limits' own indexes */
	for (size_t j = 0, k = 0; j < q->nlimits; j++)
		if ((int)j != skip)
			res[j] = rs[k++];
	return skip >= 0 && d >= skip ? d + 1 : d;
}

int store_mem_check(struct store *st, const struct decide_query *q,
		    const struct limit_spec *limits, int64_t now_us, struct limit_result *res)
{
	struct inflight_hold h;
	int j, d;

	if (!q->rule->conc)
		return mem_limits(st->mem, q, limits, -1, now_us, res);
	/* A concurrency limit: its client's places locked while the other
	 * limits decide, all or nothing (inflight.h). */
	j = q->rule->conc - 1;
	if (!q->request_id) {
		/* no id: no place can be given back; not counted */
		limit_eval(&limits[j], &(struct limit_state){0}, now_us, 0, &(struct limit_state){0},
			   &res[j]);
		d = mem_limits(st->mem, q, limits, j, now_us, res);
		return d == -1 ? j : d;
	}
	if (inflight_begin(st->flights, q->key, q->rule->lidh[j], q->request_id, &limits[j],
			   now_us, &res[j], &h) < 0) {
		/* no place to keep one more request: counted with the memory
		 * store's own, and left to the failure mode */
		memstore_count_full(st->mem, q->key);
		return MEMSTORE_NO_ROOM;
	}
	if (!res[j].allowed) {
		/* nothing taken from the others: they report nothing */
		for (size_t i = 0; i < q->nlimits; i++)
			if ((int)i != j)
				limit_eval(&limits[i], &(struct limit_state){0}, now_us, 0,
					   &(struct limit_state){0}, &res[i]);
		inflight_end(&h, false);
		return j;
	}
	d = mem_limits(st->mem, q, limits, j, now_us, res);
	if (d == MEMSTORE_NO_ROOM) {
		inflight_end(&h, false);
		return d;
	}
	if (d == -1) { /* the concurrency limit alone */
		inflight_end(&h, true);
		return j;
	}
	inflight_end(&h, res[d].allowed);
	return d;
}

/* The memory store's penalty: the events in a sliding window under a
 * key of their own (the client's, turned by the counter's name), the ban
 * in the rule's ban limit. */
static void mem_penalize(struct store *st, const struct rule *rule,
			 const uint8_t key[IDENTITY_KEY_LEN])
{
	const struct rule_penalty *p = &rule->penalty;
	const struct limit_spec *ban = &rule->limits[p->ban - 1];
	uint8_t ckey[IDENTITY_KEY_LEN];
	struct limit_result res;
	struct limit_state banned = { 0, 0, 0 };
	int64_t now = clock_now_us();

	memcpy(ckey, key, IDENTITY_KEY_LEN);
	for (int i = 0; i < 8; i++)
		ckey[8 + i] ^= (uint8_t)(p->count_lidh >> (8 * i));
	if (memstore_check(st->mem, ckey, &p->count, 1, now, 1, &res) == MEMSTORE_NO_ROOM)
		return;
	if (res.allowed && res.remaining > 0)
		return;
	banned.a = now + ban->period_us;
	memstore_put(st->mem, key, p->ban - 1u, ban, &banned, now, ban->period_us);
}

void store_penalize(struct store_worker *sw, const struct rule *rule,
		    const uint8_t key[IDENTITY_KEY_LEN])
{
	if (!rule->penalty.kind)
		return;
	STAT_INC(sw->stats.penalty_events);
	if (sw->st->ops->penalize)
		sw->st->ops->penalize(sw, rule, key);
	else
		mem_penalize(sw->st, rule, key);
}

/* A refusal by the rule's own rates or places counts for a penalty on
 * refusals (a refusal in the box does not lengthen it); one by a layer
 * stacked on the rule does not: a layer's bucket is shared (by every
 * client, or an address's), and another client who spent it must not put
 * this one in the box. The rule's own limits come first in res[]
 * (rules.h: nown), each evaluated on its own: the refusal counts when one
 * of them refused, whichever limit the answer names. */
static __attribute__((noinline)) void count_refusal_of(struct store_worker *sw,
							 const struct decide_query *q,
							 const struct limit_result *res,
							 const struct decide_decision *d)
{
	size_t j;

	if (!(q->rule->penalty.kind & RULES_PENALTY_REFUSALS) || !d->status || d->degraded ||
	    (d->reason != DECIDE_LIMITED && d->reason != DECIDE_CONCURRENCY))
		return;
	for (j = 0; j < q->rule->nown && j < q->nlimits; j++)
		if (!res[j].allowed && q->limits[j].algo != LIMIT_BAN)
			break;
	if (j < q->rule->nown && j < q->nlimits)
		store_penalize(sw, q->rule, q->key);
}

/* ---- a rule's delay ------------------------------------------------------------ */

/* The time until every limit that refused q would let it pass. */
static int64_t wait_of(const struct decide_query *q, const struct limit_result *res)
{
	int64_t w = 0;

	for (size_t j = 0; j < q->nlimits; j++)
		if (!res[j].allowed && res[j].retry_after_us > w)
			w = res[j].retry_after_us;
	return w;
}

/* Queues q's answer d, made later, saying how long q was held. */
static void answer_later(struct store_worker *sw, const struct decide_query *q,
			 const struct store_ref *ref, struct decide_decision *d)
{
	d->delayed_us = 0;
	if (q->delayed_since_us) {
		d->delayed_us = clock_now_us() - q->delayed_since_us;
		if (d->delayed_us < 1)
			d->delayed_us = 1;
	}
	sw->answer(sw->priv, ref, d);
}

static void on_due(void *priv, const struct decide_query *q, const struct store_ref *ref,
		   bool late, int64_t retry_us);

/* Holds q, which its rates refused (d), when its rule has a delay and it
 * would pass within what is left of it (the whole delay, less the time
 * it was held already), fewer than max_delayed being held: it is decided
 * again then (on_due). `refs`: the query was not pending, and takes its
 * references to the rules here (a pending one's go with it). Returns 1
 * when held, 0 when d is the answer. */
static int hold(struct store_worker *sw, const struct decide_query *q,
		const struct store_ref *ref, const struct limit_result *res,
		const struct decide_decision *d, bool refs)
{
	struct decide_query h;
	int64_t now, wait, budget;

	if (d->reason != DECIDE_LIMITED || d->status != 429)
		return 0;
	now = clock_now_us();
	wait = wait_of(q, res);
	budget = q->rule->delay_us - (q->delayed_since_us ? now - q->delayed_since_us : 0);
	if (wait <= 0 || wait > budget)
		return 0;
	if (!sw->delays && !(sw->delays = delay_new(sw->loop, on_due, sw)))
		return 0;
	h = *q;
	if (!h.delayed_since_us)
		h.delayed_since_us = now > 0 ? now : 1;
	if (delay_add(sw->delays, &h, ref, now, wait, rules_max_delayed(q->rules)) < 0) {
		STAT_INC(sw->stats.delay_full);
		return 0;
	}
	STAT_SET(sw->stats.delayed_held, delay_count(sw->delays));
	if (refs) {
		rules_acquire(q->rules);
		rules_rule_hold(q->rule);
	}
	return 1;
}

/* What a decision of a rule with extras does besides answering: held by
 * the rule's delay (returns 1), or counted for its penalty. */
static __attribute__((noinline)) int extras_after(struct store_worker *sw,
						  const struct decide_query *q,
						  const struct store_ref *ref,
						  const struct limit_result *res,
						  struct decide_decision *d, bool refs,
						  int64_t take_us)
{
	if (q->rule->delay_us && hold(sw, q, ref, res, d, refs))
		return 1;
	count_refusal_of(sw, q, res, d);
	store_charge_place(sw, q, res, d, take_us);
	return 0;
}

/* After the store decided q (d) at take_us (the store's clock, 0 when
 * unknown): 1 when its rule's delay holds it, the answer then coming
 * later. Inline: most rules have no extras. */
static inline int after_decision(struct store_worker *sw, const struct decide_query *q,
				 const struct store_ref *ref, const struct limit_result *res,
				 struct decide_decision *d, bool refs, int64_t take_us)
{
	if (q->rule->extras)
		return extras_after(sw, q, ref, res, d, refs, take_us);
	return 0;
}

void store_without(struct store *st, const struct decide_query *q, struct decide_decision *d)
{
	struct limit_result res[LIMIT_SET_MAX];
	int decider;

	switch (q->on_failure) {
	case RULES_FAIL_LOCAL:
		/* (the memory store is this agent's memory: what found no room
		 * there would find none again, and be counted twice) */
		if (q->nlimits > 0 && st->ops->shared) {
			decider = store_mem_check(st, q, q->rule->local, clock_now_us(), res);
			if (decider == MEMSTORE_NO_ROOM)
				break; /* no room to count it: forwarded */
			decide_result(q, res, decider, d);
			d->degraded = true;
			return;
		}
		break;
	case RULES_FAIL_CLOSED:
		decide_closed(q, d);
		return;
	case RULES_FAIL_OPEN:
		break;
	}
	decide_open(q, d);
}

void store_saturated(struct store *st, const struct decide_query *q, struct decide_decision *d)
{
	struct limit_result res[LIMIT_SET_MAX];
	int decider;

	if (q->nlimits > 0) {
		decider = store_mem_check(st, q, q->rule->local, clock_now_us(), res);
		if (decider != MEMSTORE_NO_ROOM) {
			decide_result(q, res, decider, d);
			d->degraded = true;
			d->saturated = true;
			return;
		}
	}
	decide_open(q, d);
	d->saturated = true;
}

int store_submit(struct store_worker *sw, const struct decide_query *q,
		 const struct store_ref *ref, struct decide_decision *d)
{
	struct limit_result res[LIMIT_SET_MAX];
	int decider = -1;

	if (q->nlimits == 0) {
		decide_result(q, NULL, -1, d);
		return 1;
	}
	switch (sw->st->ops->check(sw, q, ref, res, &decider)) {
	case STORE_DECIDED:
		decide_result(q, res, decider, d);
		return !after_decision(sw, q, ref, res, d, true, 0);
	case STORE_PENDING:
		/* The backend keeps a copy of q, which points into the rules
		 * (and into the rule made for an override): they must outlive
		 * a reload, and the rule the thread's next decision, until the
		 * answer. */
		rules_acquire(q->rules);
		rules_rule_hold(q->rule);
		return 0;
	case STORE_UNAVAILABLE:
		break;
	}
	store_without(sw->st, q, d);
	return 1;
}

void store_complete(struct store_worker *sw, const struct decide_query *q,
		    const struct store_ref *ref, const struct limit_result *res, int decider)
{
	store_complete_at(sw, q, ref, res, decider, 0);
}

void store_complete_at(struct store_worker *sw, const struct decide_query *q,
		       const struct store_ref *ref, const struct limit_result *res, int decider,
		       int64_t take_us)
{
	struct decide_decision d;
	struct rules *rules = q->rules;
	const struct rule *rule = q->rule;

	if (res) {
		decide_result(q, res, decider, &d);
		if (after_decision(sw, q, ref, res, &d, false, take_us))
			return; /* held again: its references with it */
	} else if (decider == STORE_SATURATED) {
		store_saturated(sw->st, q, &d);
	} else {
		store_without(sw->st, q, &d);
	}
	answer_later(sw, q, ref, &d);
	rules_rule_unhold(rule);
	rules_release(rules);
}

/* A held query is due: decided again by the store, as if it came now
 * (store_complete answers it, or holds it again while its delay lasts).
 * late: the worker's store goes first; refused as it was, with the time
 * it still had to wait. */
static void on_due(void *priv, const struct decide_query *q, const struct store_ref *ref,
		   bool late, int64_t retry_us)
{
	struct store_worker *sw = priv;
	struct limit_result res[LIMIT_SET_MAX];
	struct decide_decision d;
	int decider = -1;

	STAT_SET(sw->stats.delayed_held, delay_count(sw->delays));
	if (!late && sw->awaited && !sw->awaited(sw->priv, ref)) {
		/* nobody waits for it: refused as it was, taking nothing */
		STAT_INC(sw->stats.delay_gone);
		late = true;
		retry_us = 1;
	}
	if (late) {
		limit_refused_by(res, q->limits, q->nlimits, 0, retry_us, retry_us, retry_us);
		decide_result(q, res, 0, &d);
		answer_later(sw, q, ref, &d);
		rules_rule_unhold(q->rule);
		rules_release(q->rules);
		return;
	}
	switch (sw->st->ops->check(sw, q, ref, res, &decider)) {
	case STORE_DECIDED:
		store_complete(sw, q, ref, res, decider);
		return;
	case STORE_PENDING:
		return; /* the backend's store_complete() */
	case STORE_UNAVAILABLE:
		break;
	}
	store_complete(sw, q, ref, NULL, -1);
}

int store_response(struct store_worker *sw, const struct rules *rules, const char *place,
		   size_t len, uint64_t id, int status)
{
	struct charge_place cp;
	const uint8_t *key = cp.key;
	const struct rule *rule;

	/* "<rule>/<key>", or a charge's with its fields after them */
	if (charge_parse_place(place, len, &cp) < 0)
		return -1;
	rule = rules_find(rules, cp.rule);
	if (!rule)
		return 0;
	if (rule->conc && id) {
		/* the local failure mode's places, then the store's own */
		inflight_release(sw->st->flights, key, rule->lidh[rule->conc - 1], id);
		if (sw->st->ops->release)
			sw->st->ops->release(sw, rule, rule->conc - 1, key, id);
	}
	if (status && (rule->penalty.kind & RULES_PENALTY_RESPONSES)) {
		for (size_t i = 0; i < rule->penalty.nstatuses; i++)
			if (rule->penalty.statuses[i] == status)
				store_penalize(sw, rule, key);
	}
	return 0;
}

void store_rules_changed(struct store_worker *sw)
{
	if (sw->st->ops->rules_changed)
		sw->st->ops->rules_changed(sw);
}

/* "{TTTT}": the top 24 bits of the client's key in URL-safe base64 */
static void admin_label(const uint8_t key[IDENTITY_KEY_LEN], char *buf)
{
	static const char digit[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	uint32_t t = (uint32_t)key[0] << 16 | (uint32_t)key[1] << 8 | key[2];

	buf[0] = '{';
	for (int i = 0; i < 4; i++)
		buf[1 + i] = digit[(t >> (18 - 6 * i)) & 63];
	buf[5] = '}';
	buf[6] = '\0';
}

void store_admin(struct store *st, struct store_admin *a)
{
	a->error[0] = '\0';
	a->status = 0;
	for (size_t i = 0; i < a->n; i++)
		admin_label(a->item[i].key, a->item[i].label);
	st->ops->admin(st, a);
}

void store_admin_done(struct store *st, struct store_admin *a)
{
	/* a reset, or an override (a refusal cached before may no longer
	 * hold): every worker forgets the refusals it cached */
	if ((a->reset || a->override) && !a->error[0])
		atomic_fetch_add(&st->reset_epoch, 1);
	a->done(a);
}

const char *store_limit_space(const struct store *st)
{
	return st->limit_space ? st->limit_space : "";
}

uint64_t store_reset_epoch(const struct store *st)
{
	return atomic_load_explicit(&st->reset_epoch, memory_order_relaxed);
}
