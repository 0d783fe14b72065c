#include "decide.h"

#include <stdio.h>
#include <string.h>

#include "rlheader.h"

/* The default hashing secret. Agents of one fleet must share the secret so
 * that they compute the same keys; it is not a security boundary (SipHash
 * with any key spreads and bounds keys), only a guard against crafted
 * collisions when operators set their own. */
static const uint8_t default_secret[16] = {
	0x73, 0x70, 0x6f, 0x61, 0x2d, 0x72, 0x61, 0x74,
	0x65, 0x6c, 0x69, 0x6d, 0x69, 0x74, 0x2d, 0x31,
};

void decide_config_defaults(struct decide_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->limits[0].quota = 100;
	cfg->limits[0].period_us = 60 * LIMIT_US_PER_S;
	cfg->limits[0].algo = LIMIT_TOKEN_BUCKET;
	cfg->nlimits = 1;
	snprintf(cfg->rule, sizeof(cfg->rule), "default");
	decide_set_identity(cfg, "api_key,user,ip");
	memcpy(cfg->secret, default_secret, sizeof(cfg->secret));
}

int decide_set_identity(struct decide_config *cfg, const char *list)
{
	char names[DECIDE_MAX_IDENTITY][DECIDE_NAME_MAX];
	size_t n = 0;
	const char *p = list;

	while (*p) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);

		if (len == 0 || len >= DECIDE_NAME_MAX || n == DECIDE_MAX_IDENTITY)
			return -1;
		memcpy(names[n], p, len);
		names[n][len] = '\0';
		n++;
		p += len;
		if (*p == ',' && *++p == '\0')
			return -1;
	}
	if (n == 0)
		return -1;
	memcpy(cfg->identity, names, sizeof(names));
	cfg->nidentity = n;
	return 0;
}

/* Empty values do not identify anyone: NULL, and empty strings (a missing
 * header arrives as an empty string or as NULL depending on the sample). */
static int data_is_empty(const struct spop_data *d)
{
	switch ((enum spop_type)d->type) {
	case SPOP_T_NULL:
		return 1;
	case SPOP_T_STR:
	case SPOP_T_BIN:
		return d->u.str.len == 0;
	case SPOP_T_BOOL:
	case SPOP_T_INT32:
	case SPOP_T_UINT32:
	case SPOP_T_INT64:
	case SPOP_T_UINT64:
	case SPOP_T_IPV4:
	case SPOP_T_IPV6:
		return 0;
	}
	return 1;
}

/* A request's weight from an integer argument: 1 when absent or not a
 * positive integer, capped at 2^32-1. */
static uint32_t cost_of(const struct spop_data *d)
{
	uint64_t v = 1;

	switch ((enum spop_type)d->type) {
	case SPOP_T_INT32:
		v = d->u.i32 > 0 ? (uint64_t)d->u.i32 : 1;
		break;
	case SPOP_T_UINT32:
		v = d->u.u32;
		break;
	case SPOP_T_INT64:
		v = d->u.i64 > 0 ? (uint64_t)d->u.i64 : 1;
		break;
	case SPOP_T_UINT64:
		v = d->u.u64;
		break;
	case SPOP_T_NULL:
	case SPOP_T_BOOL:
	case SPOP_T_IPV4:
	case SPOP_T_IPV6:
	case SPOP_T_STR:
	case SPOP_T_BIN:
		return 1;
	}
	if (v == 0)
		return 1;
	return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

void decide_prepare(const struct decide_config *cfg, struct spop_cursor args,
		    unsigned nargs, struct decide_query *q)
{
	struct spop_str name;
	struct spop_data val, best_val;
	size_t best = cfg->nidentity;
	char text[512];
	size_t tlen;

	memset(q, 0, sizeof(*q));
	best_val.type = SPOP_T_NULL;
	/* One pass over the arguments: keep the non-empty one that comes first
	 * in the identity order. Names match exactly (length and bytes). */
	q->cost = 1;
	for (unsigned i = 0; i < nargs && spop_kv_next(&args, &name, &val) == 1; i++) {
		if (cfg->cost_arg[0] && strlen(cfg->cost_arg) == name.len &&
		    memcmp(cfg->cost_arg, name.ptr, name.len) == 0)
			q->cost = cost_of(&val);
		for (size_t k = 0; k < best; k++) {
			if (strlen(cfg->identity[k]) == name.len &&
			    memcmp(cfg->identity[k], name.ptr, name.len) == 0) {
				if (!data_is_empty(&val)) {
					best = k;
					best_val = val;
				}
				break;
			}
		}
	}
	if (best < cfg->nidentity) {
		q->identity = cfg->identity[best];
		tlen = identity_text(&best_val, text, sizeof(text));
	} else {
		q->identity = "anonymous";
		tlen = 0;
		text[0] = '\0';
	}
	identity_hash(cfg->secret, q->identity, strlen(q->identity), text, tlen, q->key);
	identity_hex(q->key, q->key_hex);
	q->limits = cfg->limits;
	q->nlimits = cfg->nlimits;
	q->priority = DECIDE_DEFAULT_PRIORITY;
	q->rule = cfg->rule;
}

/* Policy names: the rule's name when it has one limit, else the rule's name
 * and the limit's period ("default-1m"), unique within the field. */
static void policy_name(const struct decide_query *q, size_t i, char *buf, size_t cap)
{
	char period[32];

	if (q->nlimits == 1) {
		snprintf(buf, cap, "%s", q->rule);
		return;
	}
	limit_format_period(q->limits[i].period_us, period, sizeof(period));
	snprintf(buf, cap, "%s-%s", q->rule, period);
}

/* Lists every limit of the query in the RateLimit-Policy value. */
static void put_policy(const struct decide_query *q, struct decide_decision *d)
{
	char name[DECIDE_NAME_MAX + 40];

	d->policy[0] = '\0';
	for (size_t i = 0; i < q->nlimits; i++) {
		int64_t w = limit_ceil_s(q->limits[i].period_us);

		policy_name(q, i, name, sizeof(name));
		if (rlheader_policy_append(d->policy, sizeof(d->policy), name,
					   q->limits[i].quota, w) < 0)
			break; /* keeps the items that fit */
	}
}

void decide_result(const struct decide_query *q, const struct limit_result *res,
		   int decider, struct decide_decision *d)
{
	const struct limit_result *r;
	char name[DECIDE_NAME_MAX + 40];

	memset(d, 0, sizeof(*d));
	d->priority = q->priority;
	d->rule = q->rule;
	if (q->nlimits == 0 || decider < 0 || (size_t)decider >= q->nlimits) {
		d->reason = DECIDE_OK;
		return;
	}
	r = &res[decider];
	d->counted = true;
	d->limit = (int64_t)r->limit;
	d->remaining = (int64_t)r->remaining;
	d->reset = limit_ceil_s(r->reset_us);
	if (r->allowed) {
		d->status = 0;
		d->reason = DECIDE_OK;
	} else {
		d->status = 429;
		d->reason = DECIDE_LIMITED;
		d->retry_after = limit_ceil_s(r->retry_after_us);
		if (d->retry_after < 1)
			d->retry_after = 1;
	}
	put_policy(q, d);
	policy_name(q, (size_t)decider, name, sizeof(name));
	rlheader_ratelimit(d->ratelimit, sizeof(d->ratelimit), name,
			   (uint64_t)d->remaining, d->reset);
}

void decide_degraded(const struct decide_query *q, struct decide_decision *d)
{
	memset(d, 0, sizeof(*d));
	d->priority = q->priority;
	d->rule = q->rule;
	d->reason = DECIDE_OK;
	d->degraded = true;
	if (q->nlimits > 0)
		d->limit = (int64_t)q->limits[0].quota;
	put_policy(q, d);
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

static void put_int(struct spop_wbuf *w, const char *name, int64_t v)
{
	struct spop_data d = spop_int64(v);

	spop_put_set_var(w, SPOP_SCOPE_TXN, name, strlen(name), &d);
}

static void put_str(struct spop_wbuf *w, const char *name, const char *v)
{
	struct spop_data d = spop_cstr(v);

	spop_put_set_var(w, SPOP_SCOPE_TXN, name, strlen(name), &d);
}

static void put_bool(struct spop_wbuf *w, const char *name, bool v)
{
	struct spop_data d = spop_bool(v);

	spop_put_set_var(w, SPOP_SCOPE_TXN, name, strlen(name), &d);
}

void decide_put_actions(struct spop_wbuf *w, const struct decide_decision *d)
{
	put_int(w, "status", d->status);
	put_int(w, "retry_after", d->retry_after);
	put_int(w, "limit", d->limit);
	if (d->counted) {
		put_int(w, "remaining", d->remaining);
		put_int(w, "reset", d->reset);
	}
	put_int(w, "priority", d->priority);
	put_str(w, "reason", decide_reason_str(d->reason));
	put_str(w, "rule", d->rule ? d->rule : "");
	if (d->policy[0])
		put_str(w, "policy", d->policy);
	if (d->ratelimit[0])
		put_str(w, "ratelimit", d->ratelimit);
	put_bool(w, "shadow", d->shadow);
	put_bool(w, "degraded", d->degraded);
}
