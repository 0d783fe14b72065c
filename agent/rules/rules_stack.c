/* SPDX-License-Identifier: Apache-2.0 */
/* rules_stack.c: the parts of the rules file that say what a request is
 * checked against: a rule's limits, the layers (rules that only apply
 * stacked on others, under an identity of their own) and each rule's
 * stack. Part of the loader (rules_load.h); docs/rules.md is the
 * reference of the format. */
#include "rules_load.h"

#include <stdio.h>
#include <string.h>

#include "alloc.h"

/* ---- limits -------------------------------------------------------------- */

static int parse_limit_long(struct ctx *c, yaml_node_t *map, const char *where,
			    struct limit_spec *out)
{
	struct ys *y = &c->y;
	enum { K_RATE, K_BURST, K_ALGO, K_N };
	static const char *const keys[K_N] = {"rate", "burst", "algorithm"};
	static const char *const algos[] = {"token", "sliding", "fixed", "log", "leaky"};
	/* leaky: a leaky bucket as a meter is the token bucket */
	static const enum limit_algo algo_of[] = {LIMIT_TOKEN_BUCKET, LIMIT_SLIDING_WINDOW,
						  LIMIT_FIXED_WINDOW, LIMIT_LOG,
						  LIMIT_TOKEN_BUCKET};
	yaml_node_t *k[K_N], *v[K_N];
	char sub[YS_PATH_MAX], msg[256];
	const char *s;
	size_t len;
	long long burst = 0;
	int algo = 0;

	if (ys_map_fields(y, map, where, keys, K_N, k, v) < 0)
		return -1;
	if (!v[K_RATE])
		return ys_fail_missing(y, map, where, "rate", " (such as rate: 100/1m)");
	ys_path_key(sub, where, "rate");
	if (ys_text(y, v[K_RATE], sub, &s, &len) < 0)
		return -1;
	if (limit_parse(s, out, msg, sizeof(msg)) < 0)
		return ys_fail(y, v[K_RATE]->start_mark, sub, "%s", msg);
	if (v[K_ALGO]) {
		ys_path_key(sub, where, "algorithm");
		if (ys_word(y, v[K_ALGO], sub, algos, 5, "token, leaky, sliding, fixed or log",
			    &algo) < 0)
			return -1;
		out->algo = algo_of[algo];
		/* a log keeps an entry per request in its window */
		if (out->algo == LIMIT_LOG && out->quota > LIMIT_LOG_QUOTA_MAX) {
			ys_path_key(sub, where, "rate");
			return ys_fail(y, v[K_RATE]->start_mark, sub,
				       "'%s': a log's quota is at most %d (it keeps every request "
				       "of its period; algorithm: sliding above)", s,
				       LIMIT_LOG_QUOTA_MAX);
		}
	}
	if (v[K_BURST]) {
		ys_path_key(sub, where, "burst");
		if (ys_int(y, v[K_BURST], sub, 1, (long long)LIMIT_QUOTA_MAX, &burst) < 0)
			return -1;
		if (out->algo != LIMIT_TOKEN_BUCKET)
			return ys_fail(y, k[K_BURST]->start_mark, sub,
				       "burst applies to the token bucket only (algorithm: token)");
		out->burst = (uint64_t)burst;
	}
	return 0;
}

int rules_parse_limits(struct ctx *c, yaml_node_t *seq, const char *where,
			struct rule *rule)
{
	struct ys *y = &c->y;
	char item[YS_PATH_MAX], msg[256];
	size_t count;

	if (seq->type != YAML_SEQUENCE_NODE)
		return ys_fail_type(y, seq, where, "a list of limits");
	count = ys_seq_len(seq);
	if (count > LIMIT_RULE_MAX)
		return ys_fail(y, seq->start_mark, where, "more than %d limits", LIMIT_RULE_MAX);
	for (size_t i = 0; i < count; i++) {
		yaml_node_t *n = ys_seq_item(y, seq, i);
		struct limit_spec *l = &rule->limits[i];

		ys_path_index(item, where, i);
		if (n->type == YAML_MAPPING_NODE) {
			if (parse_limit_long(c, n, item, l) < 0)
				return -1;
		} else {
			const char *s;
			size_t len;

			if (n->type != YAML_SCALAR_NODE || ys_is_null(n))
				return ys_fail_type(y, n, item, "a limit such as 100/1m");
			if (ys_text(y, n, item, &s, &len) < 0)
				return -1;
			if (limit_parse(s, l, msg, sizeof(msg)) < 0)
				return ys_fail(y, n->start_mark, item, "%s", msg);
		}
		/* Policy names are "<rule>-<period>": periods must differ. */
		for (size_t j = 0; j < i; j++) {
			if (rule->limits[j].period_us == l->period_us) {
				char period[32];

				limit_format_period(l->period_us, period, sizeof(period));
				return ys_fail(y, n->start_mark, item,
					       "a limit of period %s is already in this rule (limits[%zu])",
					       period, j);
			}
		}
		rule->nlimits = i + 1;
	}
	return 0;
}

/* ---- layers --------------------------------------------------------------- */

/* The index of an identity argument in r->idnames, added when new. */
static int intern_identity(struct ctx *c, yaml_node_t *n, const char *where, const char *name)
{
	struct rules_names *ids = &c->r->idnames;

	for (size_t k = 0; k < ids->n; k++)
		if (strcmp(ids->name[k], name) == 0)
			return (int)k;
	if (ids->n == RULES_IDENTITY_MAX)
		return ys_fail(&c->y, n->start_mark, where,
			       "more than %d identity arguments in all (the file's identity and the layers')",
			       RULES_IDENTITY_MAX);
	snprintf(ids->name[ids->n], RULES_NAME_MAX, "%s", name);
	return (int)ids->n++;
}

/* A layer's `identity`: global, or the arguments that name its clients. */
static int parse_scope(struct ctx *c, yaml_node_t *n, const char *where, struct rule *rule)
{
	struct rules_names names;

	if (n->type == YAML_SCALAR_NODE && ys_is(n, IDENTITY_GLOBAL)) {
		rule->scope = RULES_SCOPE_GLOBAL;
		return 0;
	}
	memset(&names, 0, sizeof(names));
	if (ys_string_or_list(&c->y, n, where, RULES_IDENTITY_MAX, "arguments",
			      rules_identity_item, &names) < 0)
		return -1;
	rule->scope = RULES_SCOPE_ARGS;
	for (size_t i = 0; i < names.n; i++) {
		int k = intern_identity(c, n, where, names.name[i]);

		if (k < 0)
			return -1;
		rule->idk[i] = (uint8_t)k;
	}
	rule->nidk = (uint8_t)names.n;
	return 0;
}

int rules_parse_layers(struct ctx *c, yaml_node_t *map)
{
	struct ys *y = &c->y;
	struct rules *r = c->r;
	enum { L_IDENTITY, L_LIMITS, L_N };
	static const char *const keys[L_N] = {"identity", "limits"};
	size_t count, base = r->nrules;
	void *p;

	if (ys_expect_mapping(y, map, "layers") < 0)
		return -1;
	count = ys_map_len(map);
	if (count > RULES_LAYERS_MAX)
		return ys_fail(y, map->start_mark, "layers", "more than %d layers",
			       RULES_LAYERS_MAX);
	if (count == 0)
		return 0;
	p = xrealloc(r->rule, (base + count) * sizeof(*r->rule));
	if (!p)
		return ys_fail_oom(y);
	r->rule = p;
	memset(r->rule + base, 0, count * sizeof(*r->rule));
	p = xrealloc(c->marks, (base + count) * sizeof(*c->marks));
	if (!p)
		return ys_fail_oom(y);
	c->marks = p;
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
	     pr++) {
		yaml_node_t *k = ys_node(y, pr->key), *v = ys_node(y, pr->value);
		size_t ri = r->nrules;
		struct rule *rule = &r->rule[ri];
		yaml_node_t *fk[L_N], *fv[L_N];
		char where[YS_PATH_MAX], sub[YS_PATH_MAX];

		if (ys_check_key(y, k, "layers") < 0 || rules_get_name(y, k, "layers", rule->name) < 0)
			return -1;
		ys_path_key(where, "layers", rule->name);
		if (rules_check_rule_name(c, ri, k->start_mark, where) < 0 ||
		    ys_map_fields(y, v, where, keys, L_N, fk, fv) < 0)
			return -1;
		rule->kind = RULES_KIND_LAYER;
		rule->index = (unsigned)ri;
		rule->on_failure = r->on_failure;
		rule->cost = 1;
		if (!fv[L_LIMITS])
			return ys_fail_missing(y, v, where, "limits", " (such as limits: [1000/1s])");
		ys_path_key(sub, where, "limits");
		if (rules_parse_limits(c, fv[L_LIMITS], sub, rule) < 0)
			return -1;
		if (rule->nlimits == 0)
			return ys_fail(y, fv[L_LIMITS]->start_mark, sub,
				       "a layer needs at least one limit");
		if (fv[L_IDENTITY]) {
			ys_path_key(sub, where, "identity");
			if (parse_scope(c, fv[L_IDENTITY], sub, rule) < 0)
				return -1;
		}
		r->nrules = ri + 1;
		r->nlayers++;
	}
	return 0;
}

/* ---- stacks ---------------------------------------------------------------- */

struct stack_arg {
	struct ctx *c;
	struct rule *rule;
};

static int stack_item(struct ys *y, yaml_node_t *n, const char *where, size_t i, void *arg)
{
	struct stack_arg *a = arg;
	struct rules *r = a->c->r;
	struct rule *rule = a->rule;
	char name[RULES_NAME_MAX], q[YS_PATH_MAX];
	const struct rule *layer = NULL;
	size_t total;

	(void)i;
	if (rules_get_name(y, n, where, name) < 0)
		return -1;
	for (size_t j = r->nrules - r->nlayers; j < r->nrules; j++)
		if (strcmp(r->rule[j].name, name) == 0)
			layer = &r->rule[j];
	if (!layer)
		return ys_fail(y, n->start_mark, where, "no layer named %s",
			       ys_quote(q, sizeof(q), name, strlen(name)));
	total = rule->nlimits;
	for (size_t j = 0; j < rule->nstack; j++) {
		if (rule->stack[j] == layer)
			return ys_fail(y, n->start_mark, where, "layer \"%s\" is listed twice", name);
		total += rule->stack[j]->nlimits;
	}
	total += layer->nlimits;
	if (total > LIMIT_SET_MAX)
		return ys_fail(y, n->start_mark, where,
			       "rule \"%s\" and its layers would have %zu limits; at most %d",
			       rule->name, total, LIMIT_SET_MAX);
	rule->stack[rule->nstack++] = layer;
	return 0;
}

int rules_resolve_stacks(struct ctx *c, yaml_node_t *deflt)
{
	struct rules *r = c->r;

	for (size_t i = 0; i < r->ntiers + r->neps; i++) {
		struct rule *rule = &r->rule[i];
		yaml_node_t *n = c->stack[i] ? c->stack[i] : deflt;
		struct stack_arg a = { c, rule };
		char where[YS_PATH_MAX], sub[YS_PATH_MAX];

		if (!n)
			continue;
		if (!c->stack[i])
			snprintf(where, sizeof(where), "stack");
		else if (rule->kind == RULES_KIND_ENDPOINT) {
			ys_path_index(sub, "endpoints", i - r->ntiers);
			ys_path_key(where, sub, "stack");
		} else {
			ys_path_key(sub, "tiers", rule->name);
			ys_path_key(where, sub, "stack");
		}
		/* stack: [] stacks nothing (and overrides the top-level one) */
		if (n->type == YAML_SEQUENCE_NODE && ys_seq_len(n) == 0)
			continue;
		if (ys_string_or_list(&c->y, n, where, RULES_STACK_MAX, "layers", stack_item,
				      &a) < 0)
			return -1;
	}
	return 0;
}
