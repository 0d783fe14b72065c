/* SPDX-License-Identifier: Apache-2.0 */
#include "decide.h"

#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "overrides.h"
#include "rlheader.h"
#include "settings.h"

/* ---- decisions ---------------------------------------------------------------- */

void decide_key(const struct rules *rules, const char *kind, const char *value, size_t vlen,
		const char *rule, uint8_t key[IDENTITY_KEY_LEN])
{
	identity_key(rules_secret(rules), kind, strlen(kind), value, vlen, rule, strlen(rule), key);
}

/* The arguments were checked by spop_msg_next(): decoding cannot fail. */
void decide_prepare(struct rules *rules, struct spop_cursor args, unsigned nargs,
		    uint32_t rnd, struct decide_query *q)
{
	struct rules_request req;

	rules_request_decode(rules, &req, &args, nargs);
	decide_prepare_request(rules, &req, rnd, q);
}

__attribute__((noinline)) uint64_t decide_request_id(const struct spop_data *d)
{
	char text[IDENTITY_RENDER_MAX];
	size_t len = 0;
	const char *s = identity_value(d, text, sizeof(text), &len);
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)s[i]) * 0x100000001b3ULL;
	return h ? h : 1;
}

/* The derived rule (rules_override) this thread's latest decision uses:
 * held until the thread's next one takes another, or decide_forget(). A
 * worker answers a decision before it makes the next, and a decision that
 * waits for the store takes a hold of its own (store.c): nothing that
 * points into the rule outlives its hold. */
static _Thread_local const struct rule *thread_held;

/* Takes r (held for the caller) as the thread's; the one before is given
 * back. */
static void hold_for_thread(const struct rule *r)
{
	const struct rule *old = thread_held;

	thread_held = r;
	rules_rule_unhold(old);
}

void decide_forget(void)
{
	hold_for_thread(NULL);
}

/* The rule with the client's own limit that v's override argument gives,
 * bounded by the rule's max_override; v's rule when the argument is not
 * a limit (or no room is left for another overridden limit). */
static __attribute__((noinline)) const struct rule *override_rule(struct rules *rules,
								   const struct rules_verdict *v)
{
	char text[IDENTITY_RENDER_MAX];
	size_t len = 0;
	const char *s = identity_value(v->override, text, sizeof(text), &len);
	struct limit_spec ov;
	const struct rule *r;

	if (rules_override_spec(v->rule, s, len, &ov) < 0)
		return v->rule;
	r = rules_override(rules, v->rule, &ov);
	if (!r)
		return v->rule;
	hold_for_thread(r);
	return r;
}

/* The key of each layer stacked on the rule, under the layer's identity. */
static __attribute__((noinline)) void layer_keys(const struct rules *rules,
						 const struct rules_verdict *v,
						 struct decide_query *q)
{
	char text[IDENTITY_RENDER_MAX];

	for (size_t p = 0; p < v->rule->nstack; p++) {
		const struct rule *l = v->rule->stack[p];
		const struct identity_prefix *pre;
		const char *value = text;
		size_t vlen = 0;

		if (v->layer_identity[p] == RULES_ID_GLOBAL) {
			pre = rules_global_prefix(rules);
		} else {
			pre = rules_identity_prefix(rules, v->layer_identity[p]);
			if (v->layer_identity[p] >= 0 && v->layer_val[p])
				value = identity_value(v->layer_val[p], text, sizeof(text), &vlen);
		}
		identity_key_from(pre, value, vlen, l->name, l->name_len, q->lkey[p]);
	}
}

void decide_prepare_request(struct rules *rules, const struct rules_request *req,
			    uint32_t rnd, struct decide_query *q)
{
	struct rules_verdict v;
	const struct rules_names *ids = rules_identity(rules);
	char text[IDENTITY_RENDER_MAX];
	const char *value = text;
	size_t vlen = 0;
	const char *kind;

	rules_classify_request(rules, req, &v);
	if (v.override)
		v.rule = override_rule(rules, &v);

	q->rules = rules;
	q->rule = v.rule;
	q->limits = v.rule->limits;
	q->nlimits = v.rule->nlimits;
	q->cost = v.cost;
	q->priority = v.priority;
	q->shadow = v.shadow;
	q->shed_shadow = v.shed_shadow;
	q->on_failure = v.on_failure;
	q->shed = false;
	q->load_known = v.load_known;
	q->in_use = v.in_use;
	q->free_conns = v.free_conns;
	if (v.load_known && q->priority > 0)
		q->shed = shed_decide(rules_shed(rules), q->priority, v.in_use,
				      v.free_conns, rnd);

	kind = v.identity >= 0 ? ids->name[v.identity] : IDENTITY_ANONYMOUS;
	q->identity = kind;
	/* the whole value is hashed, however long */
	if (v.identity >= 0 && v.identity_val)
		value = identity_value(v.identity_val, text, sizeof(text), &vlen);
	/* decide_key(), from the hash of "kind\0" the rules keep */
	identity_key_from(rules_identity_prefix(rules, v.identity), value, vlen, v.rule->name,
			  v.rule->name_len, q->key);
	if (v.rule->nstack)
		layer_keys(rules, &v, q);
	q->request_id = v.request_id ? decide_request_id(v.request_id) : 0;
	q->delayed_since_us = 0;
	q->flight = 0;
}

const struct rule *decide_override_rule(struct rules *rules, const struct overrides *o,
					int64_t now_ms, const uint8_t key[IDENTITY_KEY_LEN],
					const struct rule *rule)
{
	const struct override_entry *e = overrides_find(o, key, now_ms);
	const struct rule *base;
	struct limit_spec ov;

	if (!e)
		return NULL;
	/* the rule as the file has it (`rule` may be an argument's override) */
	base = rules_rule_at(rules, rule->index);
	if (!base || rules_override_clamp(base, &e->spec, &ov) < 0)
		return NULL;
	return rules_override(rules, base, &ov);
}

void decide_override(struct rules *rules, const struct overrides *o, int64_t now_ms,
		     struct decide_query *q)
{
	const struct rule *r = decide_override_rule(rules, o, now_ms, q->key, q->rule);

	if (!r)
		return;
	hold_for_thread(r);
	q->rule = r;
	q->limits = r->limits;
	q->nlimits = r->nlimits;
}

/* A decision's common part: rule, priority, policy. */
static void base(const struct decide_query *q, struct decide_decision *d)
{
	d->status = 0;
	d->retry_after = 0;
	d->limit = 0;
	d->remaining = 0;
	d->reset = 0;
	d->priority = q->priority;
	d->reason = DECIDE_OK;
	d->rule = q->rule->name;
	d->policy = q->rule->policy;
	d->rule_len = q->rule->name_len;
	d->policy_len = q->rule->policy_len;
	d->ratelimit[0] = '\0';
	d->ratelimit_len = 0;
	d->shadow = false;
	d->degraded = false;
	d->saturated = false;
	d->counted = false;
	d->near_limit = false;
	d->counters = q->rule->counters;
	d->place_len = 0;
	d->flight = q->flight;
	d->answer = (uint16_t)rules_answer(q->rules);
}

void decide_shed(const struct decide_query *q, struct decide_decision *d)
{
	const struct shed_config *sc = rules_shed(q->rules);

	base(q, d);
	d->reason = DECIDE_SHED;
	if (q->shed_shadow) {
		d->shadow = true;
		return;
	}
	d->status = 503;
	d->retry_after = limit_ceil_s(sc->retry_after_us);
	if (d->retry_after < 1)
		d->retry_after = 1;
}

/* A query shed in shadow mode went on to its limits: when they let it
 * through, the answer still says it would have been shed. */
static void shadow_shed(const struct decide_query *q, struct decide_decision *d)
{
	if (q->shed && q->shed_shadow && d->status == 0 && !d->shadow) {
		d->shadow = true;
		d->reason = DECIDE_SHED;
	}
}

/* "<rule>/<client key in hex>": the place an admitted request took. */
static void put_place(const struct decide_query *q, struct decide_decision *d)
{
	char hex[IDENTITY_HEX_LEN + 1];
	size_t n = q->rule->name_len;

	memcpy(d->place, q->rule->name, n);
	d->place[n++] = '/';
	identity_hex(q->key, hex);
	memcpy(d->place + n, hex, IDENTITY_HEX_LEN);
	d->place_len = (uint8_t)(n + IDENTITY_HEX_LEN);
}

/* The limit that speaks for an allowed request whose fewest remaining
 * are the concurrency limit's: the rate limit with the fewest left (the
 * RateLimit fields describe rates), or the concurrency limit when the rule
 * has no other. */
static int rate_decider(const struct decide_query *q, const struct limit_result *res, int decider)
{
	int best = -1;

	for (size_t i = 0; i < q->nlimits; i++)
		if (q->limits[i].algo < LIMIT_CONCURRENCY &&
		    (best < 0 || res[i].remaining < res[best].remaining))
			best = (int)i;
	return best < 0 ? decider : best;
}

/* Refused by the concurrency limit: 429 (reason concurrency), as many
 * places as the limit has, none left; retry after a place may have freed.
 * Refused by the penalty box: the rule's penalty status (429 or 403,
 * reason banned), the penalty's count as the limit, retry when the ban
 * ends. No RateLimit field: it describes rates, and the policy lists
 * neither. */
static void other_refused(const struct decide_query *q, const struct limit_result *r, bool ban,
			  struct decide_decision *d)
{
	d->counted = true;
	d->limit = ban ? (int64_t)q->rule->penalty.count.quota : (int64_t)r->limit;
	d->remaining = 0;
	d->reset = limit_ceil_s(r->reset_us);
	d->reason = ban ? DECIDE_BANNED : DECIDE_CONCURRENCY;
	if (q->shadow) {
		d->shadow = true;
	} else {
		d->status = ban ? q->rule->penalty.status : 429;
		d->retry_after = limit_ceil_s(r->retry_after_us);
		if (d->retry_after < 1)
			d->retry_after = 1;
	}
	shadow_shed(q, d);
}

/* decide_result() for a rule with a concurrency limit or a penalty: the
 * ban speaks when the client is in the box, whatever else refuses; a place
 * or a ban that refuses answers by itself (returns -1); an allowed request
 * names its place and is answered by its rate limit (the deciding
 * limit returned). */
static __attribute__((noinline)) int extras_decider(const struct decide_query *q,
						    const struct limit_result *res, int decider,
						    struct decide_decision *d)
{
	if (q->rule->penalty.ban && !res[q->rule->penalty.ban - 1].allowed)
		decider = q->rule->penalty.ban - 1;
	if (q->limits[decider].algo >= LIMIT_CONCURRENCY) {
		/* a place or a ban (neither is a rate) */
		if (!res[decider].allowed) {
			other_refused(q, &res[decider], q->limits[decider].algo == LIMIT_BAN, d);
			return -1;
		}
		decider = rate_decider(q, res, decider);
	}
	if (res[decider].allowed && ((q->rule->conc && q->request_id) ||
				     (q->rule->penalty.kind & RULES_PENALTY_RESPONSES)))
		put_place(q, d);
	return decider;
}

void decide_result(const struct decide_query *q, const struct limit_result *res,
		   int decider, struct decide_decision *d)
{
	const struct limit_result *r;
	int n;

	base(q, d);
	if (q->nlimits == 0 || decider < 0 || (size_t)decider >= q->nlimits) {
		shadow_shed(q, d);
		return;
	}
	/* a rule with places or a penalty box (most have neither) */
	if (q->rule->extras && (decider = extras_decider(q, res, decider, d)) < 0)
		return;
	r = &res[decider];
	d->counted = true;
	d->limit = (int64_t)r->limit;
	d->remaining = (int64_t)r->remaining;
	d->reset = limit_ceil_s(r->reset_us);
	if (r->allowed) {
		/* remaining < limit / 10 without rounding the tenth down (a
		 * quota under 10 still has a last tenth); remaining is at most
		 * a burst (LIMIT_QUOTA_MAX, 2^40): the product cannot wrap */
		d->near_limit = r->remaining * 10 < r->limit;
	} else {
		d->reason = DECIDE_LIMITED;
		if (q->rule->part_of[decider]) {
			/* a layer refused: the answer names it */
			const struct rule *l = decide_limit_rule(q, (size_t)decider);

			d->rule = l->name;
			d->rule_len = l->name_len;
			d->counters = l->counters;
		}
		if (q->shadow) {
			/* computed, counted and exported; nothing refused */
			d->shadow = true;
		} else {
			d->status = 429;
			d->retry_after = limit_ceil_s(r->retry_after_us);
			if (d->retry_after < 1)
				d->retry_after = 1;
		}
	}
	/* The field's t is the time until more quota (draft -10), not the
	 * reset (until full) that txn.rl.reset carries. */
	n = rlheader_ratelimit_named(d->ratelimit, sizeof(d->ratelimit),
				     q->rule->pname_sf[decider], q->rule->pname_sf_len[decider],
				     (uint64_t)d->remaining, limit_ceil_s(r->more_us));
	/* on overflow the value is "", and no variable is sent */
	d->ratelimit_len = n > 0 ? (uint16_t)n : 0;
	shadow_shed(q, d);
}

/* Without the store: forwarded or refused, marked degraded either way. */
static void degraded(const struct decide_query *q, struct decide_decision *d)
{
	base(q, d);
	d->degraded = true;
	if (q->nlimits > 0)
		d->limit = (int64_t)q->limits[0].quota;
}

void decide_open(const struct decide_query *q, struct decide_decision *d)
{
	degraded(q, d);
	shadow_shed(q, d);
}

void decide_closed(const struct decide_query *q, struct decide_decision *d)
{
	if (q->nlimits == 0) {
		decide_open(q, d);
		return;
	}
	degraded(q, d);
	d->reason = DECIDE_STORE_DOWN;
	if (q->shadow) {
		d->shadow = true;
		return;
	}
	d->status = 503;
	d->retry_after = 1;
}

/* Each reason and its text, written once for both users below. */
#define REASONS(X) \
	X(DECIDE_OK, "ok") X(DECIDE_LIMITED, "limited") X(DECIDE_SHED, "shed") \
	X(DECIDE_STORE_DOWN, "store_down") X(DECIDE_CONCURRENCY, "concurrency") \
	X(DECIDE_BANNED, "banned")

const char *decide_reason_str(enum decide_reason r)
{
#define REASON_STR(e, text) \
	case e: \
		return text;
	switch (r) {
		REASONS(REASON_STR)
	}
#undef REASON_STR
	return "ok";
}

/* A variable of the answer (txn scope: HAProxy reads txn.<prefix>.<name>):
 * its head, a static built at compile time where it is written (spop.h). */
#define VAR(name) \
	__extension__({ static const struct spop_var var_ = SPOP_VAR(SPOP_SCOPE_TXN, name); &var_; })

/* The reason as a variable (decide_reason_str): a constant each, copied in
 * a few moves. */
static inline __attribute__((always_inline)) uint8_t *put_reason(uint8_t *p,
								  enum decide_reason r)
{
#define REASON_PUT(e, text) \
	case e: \
		return spop_var_str_at(p, VAR("reason"), text, sizeof(text) - 1);
	switch (r) {
		REASONS(REASON_PUT)
	}
#undef REASON_PUT
	return spop_var_str_at(p, VAR("reason"), "ok", 2);
}

#define ACTIONS_MAX(strings) DECIDE_ACTIONS_MAX_WITH(strings)
#define ACTIONS_MAX_ALL DECIDE_ACTIONS_MAX

/* An UNSET-VAR of txn.<prefix>.status: the action of an answer that
 * carries no variable (HAProxy has none to unset; an ACK needs an
 * action). */
static uint8_t *put_unset_status(uint8_t *p)
{
	static const uint8_t act[] = { SPOP_ACT_UNSET_VAR, 2, SPOP_SCOPE_TXN, 6,
				       's', 't', 'a', 't', 'u', 's' };

	memcpy(p, act, sizeof(act));
	return p + sizeof(act);
}

/* The variables d's answer carries (SETTINGS_VAR_*), before those without
 * a value are left out. */
static inline uint16_t answer_vars(const struct decide_decision *d)
{
	unsigned a = d->answer, m;

	if (a == SETTINGS_ANSWER_FULL)
		return SETTINGS_VAR_ALL;
	if (!(a & SETTINGS_ANSWER_READ))
		return (uint16_t)(a | SETTINGS_VAR_PLACE);
	/* what the shipped rules read: the RateLimit headers always, the
	 * refusal's fields when refused, the marks of an unusual answer */
	m = SETTINGS_VAR_POLICY | SETTINGS_VAR_RATELIMIT | SETTINGS_VAR_PLACE |
	    (a & SETTINGS_VAR_PRIORITY);
	if (d->status)
		m |= SETTINGS_VAR_STATUS | SETTINGS_VAR_RETRY_AFTER | SETTINGS_VAR_REASON |
		     SETTINGS_VAR_RULE;
	if (d->shadow)
		m |= SETTINGS_VAR_SHADOW | SETTINGS_VAR_REASON | SETTINGS_VAR_RULE;
	if (d->degraded)
		m |= SETTINGS_VAR_DEGRADED | SETTINGS_VAR_REASON | SETTINGS_VAR_RULE;
	return (uint16_t)m;
}

/* Writes the actions at p, which has room for ACTIONS_MAX() of the
 * strings; returns their end. */
static uint8_t *put_actions_at(uint8_t *p, const struct decide_decision *d, const char *rule,
			       size_t rule_len, const char *policy, size_t policy_len)
{
	const uint8_t *start = p;
	unsigned m = answer_vars(d);

	if (m & SETTINGS_VAR_STATUS)
		p = spop_var_int64_at(p, VAR("status"), d->status);
	if (m & SETTINGS_VAR_RETRY_AFTER)
		p = spop_var_int64_at(p, VAR("retry_after"), d->retry_after);
	if (m & SETTINGS_VAR_LIMIT)
		p = spop_var_int64_at(p, VAR("limit"), d->limit);
	if (d->counted && (m & SETTINGS_VAR_REMAINING))
		p = spop_var_int64_at(p, VAR("remaining"), d->remaining);
	if (d->counted && (m & SETTINGS_VAR_RESET))
		p = spop_var_int64_at(p, VAR("reset"), d->reset);
	if (m & SETTINGS_VAR_PRIORITY)
		p = spop_var_int64_at(p, VAR("priority"), d->priority);
	if (m & SETTINGS_VAR_REASON)
		p = put_reason(p, d->reason);
	if (m & SETTINGS_VAR_RULE)
		p = spop_var_str_at(p, VAR("rule"), rule, rule_len);
	if (policy_len && (m & SETTINGS_VAR_POLICY))
		p = spop_var_str_at(p, VAR("policy"), policy, policy_len);
	if (d->ratelimit_len && (m & SETTINGS_VAR_RATELIMIT))
		p = spop_var_str_at(p, VAR("ratelimit"), d->ratelimit, d->ratelimit_len);
	if (d->place_len)
		p = spop_var_str_at(p, VAR("place"), d->place, d->place_len);
	if (m & SETTINGS_VAR_SHADOW)
		p = spop_var_bool_at(p, VAR("shadow"), d->shadow);
	if (m & SETTINGS_VAR_DEGRADED)
		p = spop_var_bool_at(p, VAR("degraded"), d->degraded);
	if (p == start)
		p = put_unset_status(p);
	return p;
}

void decide_put_actions(struct spop_wbuf *w, const struct decide_decision *d)
{
	const char *rule = d->rule ? d->rule : "";
	const char *policy = d->policy ? d->policy : "";
	size_t rule_len = d->rule ? d->rule_len : 0, policy_len = d->policy ? d->policy_len : 0;
	size_t max = ACTIONS_MAX(rule_len + policy_len + d->ratelimit_len + d->place_len);
	uint8_t tmp[ACTIONS_MAX_ALL];

	if (w->err)
		return;
	/* The room is checked once for all the actions. */
	if (max <= w->cap - w->len) {
		w->len = (size_t)(put_actions_at(w->buf + w->len, d, rule, rule_len, policy,
						 policy_len) - w->buf);
		return;
	}
	/* Near the end of the buffer: written aside, then copied if they
	 * fit (else w->err, as any writer). A decision's strings come from
	 * the rules, within their bounds. */
	if (max > sizeof(tmp)) {
		w->err = 1;
		return;
	}
	spop_put_bytes(w, tmp, (size_t)(put_actions_at(tmp, d, rule, rule_len, policy, policy_len) -
					tmp));
}
