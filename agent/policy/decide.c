#include "decide.h"

#include <stdio.h>
#include <string.h>

#include "alloc.h"
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
			  strlen(v.rule->name), q->key);
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
	d->ratelimit[0] = '\0';
	d->shadow = false;
	d->degraded = false;
	d->counted = false;
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
	rlheader_ratelimit_named(d->ratelimit, sizeof(d->ratelimit), q->rule->pname_sf[decider],
				 q->rule->pname_sf_len[decider], (uint64_t)d->remaining, d->reset);
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

/* A variable of the answer (txn scope: HAProxy reads txn.<prefix>.<name>):
 * its head, a static built at compile time where it is written (spop.h). */
#define VAR(name) \
	__extension__({ static const struct spop_var var_ = SPOP_VAR(SPOP_SCOPE_TXN, name); &var_; })

static inline __attribute__((always_inline)) void
put_str(struct spop_wbuf *w, const struct spop_var *var, const char *val)
{
	spop_put_var_str(w, var, val, strlen(val));
}

void decide_put_actions(struct spop_wbuf *w, const struct decide_decision *d)
{
	spop_put_var_int64(w, VAR("status"), d->status);
	spop_put_var_int64(w, VAR("retry_after"), d->retry_after);
	spop_put_var_int64(w, VAR("limit"), d->limit);
	if (d->counted) {
		spop_put_var_int64(w, VAR("remaining"), d->remaining);
		spop_put_var_int64(w, VAR("reset"), d->reset);
	}
	spop_put_var_int64(w, VAR("priority"), d->priority);
	put_str(w, VAR("reason"), decide_reason_str(d->reason));
	put_str(w, VAR("rule"), d->rule ? d->rule : "");
	if (d->policy && d->policy[0])
		put_str(w, VAR("policy"), d->policy);
	if (d->ratelimit[0])
		put_str(w, VAR("ratelimit"), d->ratelimit);
	spop_put_var_bool(w, VAR("shadow"), d->shadow);
	spop_put_var_bool(w, VAR("degraded"), d->degraded);
}
