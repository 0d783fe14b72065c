/* SPDX-License-Identifier: Apache-2.0 */
/* rules_extras.c: what a rule may say besides its rates: `concurrency`
 * (requests in flight), `penalty` (the penalty box), `max_override`
 * (how far a client's own limit may go) and `lease` (tokens leased to busy
 * clients, store/lease.h). The first two add a limit to the rule's own,
 * after its rates, that the stores decide with them (limit.h:
 * LIMIT_CONCURRENCY, LIMIT_BAN). Part of the loader (rules_load.h);
 * docs/rules.md is the reference. */
#include "rules_load.h"

#include <string.h>

/* `concurrency` (and `max_duration`): one more limit, the last of the
 * rule's own (limit.h, LIMIT_CONCURRENCY). */
int rules_parse_concurrency(struct ctx *c, const char *where, yaml_node_t *vconc,
			    yaml_node_t *vmax, struct rule *rule)
{
	struct ys *y = &c->y;
	char sub[YS_PATH_MAX];
	long long n;
	int64_t dur = 30 * LIMIT_US_PER_S;
	struct limit_spec *l;

	if (vmax && !vconc)
		return ys_fail(y, vmax->start_mark, where,
			       "max_duration goes with concurrency");
	if (!vconc)
		return 0;
	ys_path_key(sub, where, "concurrency");
	if (ys_int(y, vconc, sub, 1, LIMIT_CONCURRENCY_MAX, &n) < 0)
		return -1;
	if (rule->nlimits == LIMIT_RULE_MAX)
		return ys_fail(y, vconc->start_mark, sub,
			       "no room for it: %d limits already", LIMIT_RULE_MAX);
	if (vmax) {
		ys_path_key(sub, where, "max_duration");
		if (ys_duration(y, vmax, sub, LIMIT_US_PER_S, 3600 * LIMIT_US_PER_S,
				"1s to 1h such as 30s", &dur) < 0)
			return -1;
	}
	l = &rule->limits[rule->nlimits++];
	memset(l, 0, sizeof(*l));
	l->quota = (uint64_t)n;
	l->period_us = dur;
	l->algo = LIMIT_CONCURRENCY;
	rule->conc = (uint8_t)rule->nlimits;
	return 0;
}

/* One status code of `penalty.responses`. */
static int status_item(struct ys *y, yaml_node_t *n, const char *where, size_t i, void *arg)
{
	struct rule_penalty *p = arg;
	long long st;

	if (ys_int(y, n, where, 100, 599, &st) < 0)
		return -1;
	for (size_t j = 0; j < i; j++)
		if (p->statuses[j] == st)
			return ys_fail(y, n->start_mark, where, "%lld is listed twice", st);
	p->statuses[i] = (uint16_t)st;
	p->nstatuses = (uint8_t)(i + 1);
	return 0;
}

int rules_parse_penalty(struct ctx *c, const char *where, yaml_node_t *map, struct rule *rule)
{
	struct ys *y = &c->y;
	enum { P_RESPONSES, P_REFUSALS, P_LIMIT, P_BAN, P_STATUS, P_N };
	static const char *const keys[P_N] = {"responses", "refusals", "limit", "ban", "status"};
	yaml_node_t *k[P_N], *v[P_N];
	char at[YS_PATH_MAX], sub[YS_PATH_MAX], msg[256];
	struct rule_penalty *p = &rule->penalty;
	struct limit_spec *l;
	const char *s;
	size_t len;
	bool refusals = false;
	long long st = 429;
	int64_t ban;

	ys_path_key(at, where, "penalty");
	if (ys_map_fields(y, map, at, keys, P_N, k, v) < 0)
		return -1;
	if (v[P_RESPONSES]) {
		ys_path_key(sub, at, "responses");
		if (ys_string_or_list(y, v[P_RESPONSES], sub, RULES_STATUSES_MAX, "statuses",
				      status_item, p) < 0)
			return -1;
		p->kind |= RULES_PENALTY_RESPONSES;
	}
	if (v[P_REFUSALS]) {
		ys_path_key(sub, at, "refusals");
		if (ys_bool(y, v[P_REFUSALS], sub, &refusals) < 0)
			return -1;
		if (refusals)
			p->kind |= RULES_PENALTY_REFUSALS;
	}
	if (!p->kind)
		return ys_fail(y, map->start_mark, at,
			       "count responses (responses: [401, 403]) or refusals (refusals: true)");
	if (!v[P_LIMIT])
		return ys_fail_missing(y, map, at, "limit", " (such as limit: 5/10m)");
	ys_path_key(sub, at, "limit");
	if (ys_text(y, v[P_LIMIT], sub, &s, &len) < 0)
		return -1;
	if (limit_parse(s, &p->count, msg, sizeof(msg)) < 0)
		return ys_fail(y, v[P_LIMIT]->start_mark, sub, "%s", msg);
	/* counted in a sliding window: "N in any P", closely */
	p->count.algo = LIMIT_SLIDING_WINDOW;
	if (!v[P_BAN])
		return ys_fail_missing(y, map, at, "ban", " (such as ban: 15m)");
	ys_path_key(sub, at, "ban");
	if (ys_duration(y, v[P_BAN], sub, LIMIT_US_PER_S, 30LL * 86400 * LIMIT_US_PER_S,
			"1s to 30d such as 15m", &ban) < 0)
		return -1;
	if (v[P_STATUS]) {
		static const char *const codes[] = {"429", "403"};
		int i = 0;

		ys_path_key(sub, at, "status");
		if (ys_word(y, v[P_STATUS], sub, codes, 2, "429 or 403", &i) < 0)
			return -1;
		st = i ? 403 : 429;
	}
	p->status = (uint16_t)st;
	if (rule->nlimits == LIMIT_RULE_MAX)
		return ys_fail(y, map->start_mark, at, "no room for it: %d limits already",
			       LIMIT_RULE_MAX);
	l = &rule->limits[rule->nlimits++];
	memset(l, 0, sizeof(*l));
	l->quota = 1;
	l->period_us = ban;
	l->algo = LIMIT_BAN;
	p->ban = (uint8_t)rule->nlimits;
	return 0;
}

int rules_parse_max_override(struct ctx *c, const char *where, yaml_node_t *n, struct rule *rule)
{
	struct ys *y = &c->y;
	char sub[YS_PATH_MAX], msg[256];
	const char *s;
	size_t len;

	ys_path_key(sub, where, "max_override");
	if (ys_text(y, n, sub, &s, &len) < 0)
		return -1;
	if (limit_parse(s, &rule->max_override, msg, sizeof(msg)) < 0)
		return ys_fail(y, n->start_mark, sub, "%s", msg);
	rule->has_max_override = true;
	return 0;
}

/* `lease: off`, `lease: 100ms` or `lease: { interval: 100ms, share: 10 }`:
 * *us -1 for off, else the interval (10ms to 1s); *share the percent of
 * a capacity a lease may hold (1 to 50), 0 when not given. */
int rules_parse_lease(struct ctx *c, const char *where, yaml_node_t *n, int64_t *us,
		      uint8_t *share)
{
	struct ys *y = &c->y;
	enum { L_INTERVAL, L_SHARE, L_N };
	static const char *const keys[L_N] = {"interval", "share"};
	static const char *const off[] = {"off"};
	yaml_node_t *k[L_N], *v[L_N];
	char at[YS_PATH_MAX], sub[YS_PATH_MAX];
	const char *expect = "10ms to 1s such as 100ms";
	long long pct;
	int i;

	ys_path_key(at, where, "lease");
	if (n->type == YAML_SCALAR_NODE && n->data.scalar.length == 3 &&
	    memcmp(n->data.scalar.value, "off", 3) == 0) {
		*us = -1;
		*share = 0;
		return ys_word(y, n, at, off, 1, "off", &i);
	}
	*share = 0;
	if (n->type != YAML_MAPPING_NODE)
		return ys_duration(y, n, at, RULES_LEASE_MIN_US, RULES_LEASE_MAX_US,
				   "10ms to 1s such as 100ms, or off", us);
	if (ys_map_fields(y, n, at, keys, L_N, k, v) < 0)
		return -1;
	if (!v[L_INTERVAL])
		return ys_fail_missing(y, n, at, "interval", " (such as interval: 100ms)");
	ys_path_key(sub, at, "interval");
	if (ys_duration(y, v[L_INTERVAL], sub, RULES_LEASE_MIN_US, RULES_LEASE_MAX_US, expect,
			us) < 0)
		return -1;
	if (v[L_SHARE]) {
		ys_path_key(sub, at, "share");
		if (ys_int(y, v[L_SHARE], sub, 1, RULES_LEASE_SHARE_MAX, &pct) < 0)
			return -1;
		*share = (uint8_t)pct;
	}
	return 0;
}
