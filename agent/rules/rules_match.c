/* SPDX-License-Identifier: Apache-2.0 */
/* rules_match.c: the `match` conditions of endpoints and priority classes
 * (method, path, host, tier, args): their values checked and kept in the
 * rules' arena, in the form classification compares (rules_classify.c).
 * Part of the loader (rules_load.h); docs/rules.md is the reference. */
#include "rules_load.h"

#include <string.h>

#include "urlpath.h"

enum val_kind { V_METHOD, V_PATH, V_HOST, V_ARG };

struct values_arg {
	struct ctx *c;
	struct rules_cond *out;
	enum val_kind kind;
	size_t count;
};

/* A byte of an HTTP method (RFC 9110 tchar). */
static bool tchar(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

static int value_item(struct ys *y, yaml_node_t *n, const char *where, size_t i, void *arg)
{
	struct values_arg *va = arg;
	struct ctx *c = va->c;
	struct rules_value *mv = &va->out->v[i];
	const char *s;
	size_t len;
	char q[YS_PATH_MAX], *copy;

	if (ys_text(y, n, where, &s, &len) < 0)
		return -1;
	ys_quote(q, sizeof(q), s, len);
	switch (va->kind) {
	case V_METHOD:
		for (size_t j = 0; j < len; j++) {
			if (s[j] >= 'a' && s[j] <= 'z') {
				char up[40];
				size_t m = len < sizeof(up) - 1 ? len : sizeof(up) - 1;

				for (size_t u = 0; u < m; u++)
					up[u] = (s[u] >= 'a' && s[u] <= 'z') ? (char)(s[u] - 32) : s[u];
				up[m] = '\0';
				return ys_fail(y, n->start_mark, where,
					       "%s: methods are case-sensitive, write \"%s\"", q, up);
			}
			if (!tchar(s[j]))
				return ys_fail(y, n->start_mark, where, "%s: not a method name", q);
		}
		if (len == 0)
			return ys_fail(y, n->start_mark, where, "%s: not a method name", q);
		break;
	case V_PATH:
		if (len == 0 || s[0] != '/')
			return ys_fail(y, n->start_mark, where, "%s: a path starts with \"/\"", q);
		if (len > RULES_PATH_MAX)
			return ys_fail(y, n->start_mark, where, "longer than %d bytes", RULES_PATH_MAX);
		if (!c->r->paths_raw) {
			/* A value the normal form of no path can equal would
			 * never match: say which one the operator meant. */
			char nf[RULES_PATH_MAX], qn[YS_PATH_MAX];
			size_t nlen = urlpath_normalise(s, len, nf, sizeof(nf));

			if (nlen != len || memcmp(nf, s, len) != 0) {
				ys_quote(qn, sizeof(qn), nf, nlen);
				return ys_fail(y, n->start_mark, where,
					       "%s: paths are matched normalised, write %s "
					       "(or paths: raw)", q, qn);
			}
		}
		if (len + 1 > c->r->path_cap)
			c->r->path_cap = (uint16_t)(len + 1);
		break;
	case V_HOST:
		if (len == 0)
			return ys_fail(y, n->start_mark, where, "%s: not a host name", q);
		for (size_t j = 0; j < len; j++)
			if ((unsigned char)s[j] <= ' ' || s[j] == '/' || (unsigned char)s[j] >= 0x7f)
				return ys_fail(y, n->start_mark, where, "%s: not a host name", q);
		break;
	case V_ARG:
		break;
	}
	copy = rules_arena_alloc(c->r, len + 1);
	if (!copy)
		return ys_fail_oom(y);
	memcpy(copy, s, len);
	copy[len] = '\0';
	if (va->kind == V_HOST) {
		/* Hosts compare ignoring ASCII case: keep them in lower case. */
		for (size_t j = 0; j < len; j++)
			if (copy[j] >= 'A' && copy[j] <= 'Z')
				copy[j] = (char)(copy[j] + 32);
		mv->port = rules_host_noport(copy, len) != len;
	}
	mv->ptr = copy;
	mv->len = len;
	va->out->n = i + 1;
	return 0;
}

static int parse_values(struct ctx *c, yaml_node_t *n, const char *where, enum val_kind kind,
			struct rules_cond *out)
{
	struct ys *y = &c->y;
	struct values_arg va = {c, out, kind, 0};

	out->v = rules_arena_alloc(c->r, ys_list_count(n, RULES_VALUES_MAX) * sizeof(*out->v));
	if (!out->v)
		return ys_fail_oom(y);
	return ys_string_or_list(y, n, where, RULES_VALUES_MAX, "values", value_item, &va);
}

struct tiers_arg {
	struct ctx *c;
	struct rules_match *m;
};

static int tier_item(struct ys *y, yaml_node_t *n, const char *where, size_t i, void *arg)
{
	struct tiers_arg *ta = arg;
	struct rules_match *m = ta->m;
	size_t t;

	if (rules_find_tier(ta->c, n, where, &t) < 0)
		return -1;
	m->tiers[i] = (unsigned)t;
	m->ntiers = i + 1;
	return 0;
}

static int parse_match_args(struct ctx *c, yaml_node_t *map, const char *where, struct rules_match *m)
{
	struct ys *y = &c->y;
	yaml_node_pair_t *p;
	size_t count, i = 0;

	if (ys_expect_mapping(y, map, where) < 0)
		return -1;
	count = ys_map_len(map);
	if (count == 0)
		return ys_fail(y, map->start_mark, where, "empty mapping");
	if (count > RULES_MATCH_ARGS_MAX)
		return ys_fail(y, map->start_mark, where, "more than %d arguments",
			       RULES_MATCH_ARGS_MAX);
	m->args = rules_arena_alloc(c->r, count * sizeof(*m->args));
	if (!m->args)
		return ys_fail_oom(y);
	for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++, i++) {
		yaml_node_t *k = ys_node(y, p->key), *v = ys_node(y, p->value);
		struct rules_arg_cond *a = &m->args[i];
		char sub[YS_PATH_MAX];

		if (ys_check_key(y, k, where) < 0 || rules_get_name(y, k, where, a->name) < 0)
			return -1;
		for (size_t j = 0; j < i; j++) {
			if (strcmp(m->args[j].name, a->name) == 0) {
				yaml_node_t *prev;

				prev = ys_node(y, map->data.mapping.pairs.start[j].key);

				return ys_fail(y, k->start_mark, where,
					       "duplicate key \"%s\" (first at %zu:%zu)", a->name,
					       prev->start_mark.line + 1, prev->start_mark.column + 1);
			}
		}
		a->name_len = strlen(a->name);
		ys_path_key(sub, where, a->name);
		if (parse_values(c, v, sub, V_ARG, &a->c) < 0)
			return -1;
		m->nargs = i + 1;
	}
	return 0;
}

int rules_parse_match(struct ctx *c, yaml_node_t *map, const char *where, struct rules_match *m)
{
	struct ys *y = &c->y;
	enum { K_METHOD, K_PATH, K_HOST, K_TIER, K_ARGS, K_N };
	static const char *const keys[K_N] = {"method", "path", "host", "tier", "args"};
	yaml_node_t *k[K_N], *v[K_N];
	char sub[YS_PATH_MAX];

	memset(m, 0, sizeof(*m));
	if (ys_map_fields(y, map, where, keys, K_N, k, v) < 0)
		return -1;
	if (!v[K_METHOD] && !v[K_PATH] && !v[K_HOST] && !v[K_TIER] && !v[K_ARGS])
		return ys_fail(y, map->start_mark, where,
			       "no condition (expected one or more of: method, path, host, tier, args)");
	if (v[K_METHOD]) {
		ys_path_key(sub, where, "method");
		if (parse_values(c, v[K_METHOD], sub, V_METHOD, &m->method) < 0)
			return -1;
	}
	if (v[K_PATH]) {
		ys_path_key(sub, where, "path");
		if (parse_values(c, v[K_PATH], sub, V_PATH, &m->path) < 0)
			return -1;
	}
	if (v[K_HOST]) {
		ys_path_key(sub, where, "host");
		if (parse_values(c, v[K_HOST], sub, V_HOST, &m->host) < 0)
			return -1;
	}
	if (v[K_TIER]) {
		struct tiers_arg ta = {c, m};

		ys_path_key(sub, where, "tier");
		m->tiers = rules_arena_alloc(c->r, ys_list_count(v[K_TIER], RULES_VALUES_MAX) *
				       sizeof(*m->tiers));
		if (!m->tiers)
			return ys_fail_oom(y);
		if (ys_string_or_list(y, v[K_TIER], sub, RULES_VALUES_MAX, "values", tier_item,
				      &ta) < 0)
			return -1;
	}
	if (v[K_ARGS]) {
		ys_path_key(sub, where, "args");
		if (parse_match_args(c, v[K_ARGS], sub, m) < 0)
			return -1;
	}
	return 0;
}

