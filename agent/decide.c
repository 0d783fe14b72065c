#include "decide.h"

#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "rlheader.h"
#include "settings.h"

/* The hashing key. Agents of one fleet must share it so that they compute
 * the same Redis keys; SipHash under any key spreads and bounds keys. */
static const uint8_t default_secret[16] = {
	0x73, 0x70, 0x6f, 0x61, 0x2d, 0x72, 0x61, 0x74,
	0x65, 0x6c, 0x69, 0x6d, 0x69, 0x74, 0x2d, 0x31,
};

/* ---- ruleset ---------------------------------------------------------------- */

/* Policy names: the rule's name when it has one limit, else the rule's name
 * and the limit's period ("free-1m"); the loader keeps periods distinct
 * within a rule, so names are unique within the field. */
static void derive_rule(const struct rules_rule *r, int agents, struct ruleset_rule *out)
{
	static const char algo[] = { 't', 's', 'f' };
	char period[32];

	out->policy[0] = '\0';
	for (size_t i = 0; i < r->nlimits; i++) {
		struct limit_spec *l = &out->local[i];

		if (r->nlimits == 1) {
			snprintf(out->pname[i], sizeof(out->pname[i]), "%s", r->name);
		} else {
			limit_format_period(r->limits[i].period_us, period, sizeof(period));
			snprintf(out->pname[i], sizeof(out->pname[i]), "%s-%s", r->name, period);
		}
		if (rlheader_policy_append(out->policy, sizeof(out->policy), out->pname[i],
					   r->limits[i].quota,
					   limit_ceil_s(r->limits[i].period_us)) < 0) {
			/* keeps the items that fit */
		}
		snprintf(out->lid[i], sizeof(out->lid[i]), "%c%llu/%lld/%llu",
			 algo[r->limits[i].algo <= 2 ? r->limits[i].algo : 0],
			 (unsigned long long)r->limits[i].quota, (long long)r->limits[i].period_us,
			 (unsigned long long)r->limits[i].burst);
		/* The local policy shares the limit among the agents; each
		 * keeps at least one request per period. */
		*l = r->limits[i];
		l->quota = r->limits[i].quota / (uint64_t)agents;
		if (l->quota == 0)
			l->quota = 1;
		if (l->burst) {
			l->burst /= (uint64_t)agents;
			if (l->burst == 0)
				l->burst = 1;
		}
	}
}

struct ruleset *ruleset_new(struct rules *rules, uint64_t gen)
{
	struct ruleset *rs = xcalloc(1, sizeof(*rs));
	const struct settings *st = rules_settings(rules);

	if (!rs) {
		rules_free(rules);
		return NULL;
	}
	rs->rules = rules;
	rs->gen = gen;
	atomic_init(&rs->refs, 1);
	memcpy(rs->secret, default_secret, sizeof(rs->secret));
	rs->agents = st->has_agents && st->agents > 0 ? st->agents : 1;
	rs->nrules = rules_count(rules);
	rs->rule = xcalloc(rs->nrules ? rs->nrules : 1, sizeof(*rs->rule));
	if (!rs->rule) {
		rules_free(rules);
		xfree(rs);
		return NULL;
	}
	for (size_t i = 0; i < rs->nrules; i++) {
		const struct rules_rule *r = rules_rule_at(rules, i);

		derive_rule(r, rs->agents, &rs->rule[r->index]);
	}
	return rs;
}

void ruleset_acquire(struct ruleset *rs)
{
	atomic_fetch_add_explicit(&rs->refs, 1, memory_order_relaxed);
}

void ruleset_release(struct ruleset *rs)
{
	if (!rs)
		return;
	if (atomic_fetch_sub_explicit(&rs->refs, 1, memory_order_acq_rel) == 1) {
		rules_free(rs->rules);
		xfree(rs->rule);
		xfree(rs);
	}
}

/* ---- decisions ---------------------------------------------------------------- */

void decide_key(const struct ruleset *rs, const char *kind, const char *value, size_t vlen,
		const char *rule, uint8_t key[IDENTITY_KEY_LEN])
{
	identity_key(rs->secret, kind, strlen(kind), value, vlen, rule, strlen(rule), key);
}

void decide_prepare(struct ruleset *rs, struct spop_cursor args, unsigned nargs,
		    uint32_t rnd, struct decide_query *q)
{
	struct rules_args a;
	struct rules_verdict v;
	const struct rules_names *ids = rules_identity(rs->rules);
	char text[512];
	size_t tlen;
	const char *kind;

	a.n = 0;
	rules_args_from_kv(&a, args, nargs);
	rules_classify(rs->rules, &a, &v);

	q->rs = rs;
	q->rule = v.rule;
	q->limits = v.rule->limits;
	q->nlimits = v.rule->nlimits;
	q->cost = v.cost;
	q->priority = v.priority;
	q->shadow = v.shadow;
	q->shed_shadow = v.shed_shadow;
	q->on_failure = v.on_failure;
	q->shed = false;
	if (v.load_known && q->priority > 0)
		q->shed = shed_decide(rules_shed(rs->rules), q->priority, v.in_use,
				      v.free_conns, rnd);

	kind = v.identity >= 0 ? ids->name[v.identity] : "anonymous";
	q->identity = kind;
	tlen = v.identity >= 0 && v.identity_val ? identity_text(v.identity_val, text, sizeof(text))
						 : 0;
	decide_key(rs, kind, text, tlen, v.rule->name, q->key);
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
	d->policy = q->rs->rule[q->rule->index].policy;
	d->ratelimit[0] = '\0';
	d->shadow = false;
	d->degraded = false;
	d->counted = false;
}

void decide_shed(const struct decide_query *q, struct decide_decision *d)
{
	const struct shed_config *sc = rules_shed(q->rs->rules);

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

void decide_result(const struct decide_query *q, const struct limit_result *res,
		   int decider, struct decide_decision *d)
{
	const struct limit_result *r;

	base(q, d);
	if (q->nlimits == 0 || decider < 0 || (size_t)decider >= q->nlimits) {
		shadow_shed(q, d);
		return;
	}
	r = &res[decider];
	d->counted = true;
	d->limit = (int64_t)r->limit;
	d->remaining = (int64_t)r->remaining;
	d->reset = limit_ceil_s(r->reset_us);
	if (!r->allowed) {
		d->reason = DECIDE_LIMITED;
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
	rlheader_ratelimit(d->ratelimit, sizeof(d->ratelimit),
			   q->rs->rule[q->rule->index].pname[decider], (uint64_t)d->remaining,
			   d->reset);
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

const char *decide_reason_str(enum decide_reason r)
{
	switch (r) {
	case DECIDE_OK:
		return "ok";
	case DECIDE_LIMITED:
		return "limited";
	case DECIDE_SHED:
		return "shed";
	case DECIDE_STORE_DOWN:
		return "store_down";
	}
	return "ok";
}

static void put_int(struct spop_wbuf *w, const char *name, size_t len, int64_t v)
{
	struct spop_data d;

	d.type = SPOP_T_INT64;
	d.u.i64 = v;
	spop_put_set_var(w, SPOP_SCOPE_TXN, name, len, &d);
}

static void put_str(struct spop_wbuf *w, const char *name, size_t len, const char *v)
{
	struct spop_data d;

	d.type = SPOP_T_STR;
	d.u.str.ptr = v;
	d.u.str.len = strlen(v);
	spop_put_set_var(w, SPOP_SCOPE_TXN, name, len, &d);
}

static void put_bool(struct spop_wbuf *w, const char *name, size_t len, bool v)
{
	struct spop_data d;

	d.type = SPOP_T_BOOL;
	d.u.boolean = v;
	spop_put_set_var(w, SPOP_SCOPE_TXN, name, len, &d);
}

#define NAME(s) s, sizeof(s) - 1

void decide_put_actions(struct spop_wbuf *w, const struct decide_decision *d)
{
	put_int(w, NAME("status"), d->status);
	put_int(w, NAME("retry_after"), d->retry_after);
	put_int(w, NAME("limit"), d->limit);
	if (d->counted) {
		put_int(w, NAME("remaining"), d->remaining);
		put_int(w, NAME("reset"), d->reset);
	}
	put_int(w, NAME("priority"), d->priority);
	put_str(w, NAME("reason"), decide_reason_str(d->reason));
	put_str(w, NAME("rule"), d->rule ? d->rule : "");
	if (d->policy && d->policy[0])
		put_str(w, NAME("policy"), d->policy);
	if (d->ratelimit[0])
		put_str(w, NAME("ratelimit"), d->ratelimit);
	put_bool(w, NAME("shadow"), d->shadow);
	put_bool(w, NAME("degraded"), d->degraded);
}
