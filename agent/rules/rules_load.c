/* SPDX-License-Identifier: Apache-2.0 */
/* rules_load.c: the rules file (see rules.h and docs/rules.md): its
 * schema, its defaults, and the accessors of loaded rules.
 *
 * The file is read with the strict readers of yaml_strict.h: ys_open()
 * bounds the document, then a schema-driven walk reads only the keys it
 * knows, to a fixed depth, so aliases (shared nodes, possibly cyclic) can
 * neither loop nor blow up: every list the walk visits is capped. Each
 * parse function returns 0, or -1 with the message already in the
 * context; the first error stops the load and frees what was built. The
 * root's settings keys are read by settings.c, the match conditions by
 * rules_match.c, a rule's limits and layers by rules_stack.c, what it
 * says besides its rates by rules_extras.c.
 *
 * The loaded rules (rules_int.h) live in a few arrays plus an arena that
 * holds every string and list of match values, all freed at once by
 * rules_release(); nothing is written once rules_load_buffer() returns.
 */
#include "rules_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "rules_load.h"
#include "settings.h"

/* ---- the arena ----------------------------------------------------------- */

struct arena_block {
	struct arena_block *next;
	size_t used;
	size_t cap;
	alignas(max_align_t) unsigned char data[];
};

#define ARENA_BLOCK 4096

void *rules_arena_alloc(struct rules *r, size_t n)
{
	const size_t align = alignof(max_align_t);
	struct arena_block *b = r->arena;
	void *p;

	n = (n + align - 1) / align * align;
	if (n == 0)
		n = align;
	if (!b || n > b->cap - b->used) {
		size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;

		b = xmalloc(sizeof(*b) + cap);
		if (!b)
			return NULL;
		b->next = r->arena;
		b->used = 0;
		b->cap = cap;
		r->arena = b;
	}
	p = b->data + b->used;
	b->used += n;
	return p;
}

int rules_get_name(struct ys *y, yaml_node_t *n, const char *where, char out[RULES_NAME_MAX])
{
	return ys_name(y, n, where, out, RULES_NAME_MAX);
}

static int get_failure(struct ys *y, yaml_node_t *n, const char *where, enum rules_failure *out)
{
	static const char *const words[] = {"open", "closed", "local"};
	int i = 0;

	if (ys_word(y, n, where, words, 3, "open, closed or local", &i) < 0)
		return -1;
	*out = i == 0 ? RULES_FAIL_OPEN : i == 1 ? RULES_FAIL_CLOSED : RULES_FAIL_LOCAL;
	return 0;
}

/* ---- identity ------------------------------------------------------------ */

int rules_identity_item(struct ys *y, yaml_node_t *n, const char *where, size_t i, void *arg)
{
	struct rules_names *ids = arg;

	if (rules_get_name(y, n, where, ids->name[i]) < 0)
		return -1;
	for (size_t j = 0; j < i; j++)
		if (strcmp(ids->name[j], ids->name[i]) == 0)
			return ys_fail(y, n->start_mark, where, "\"%s\" is listed twice",
				       ids->name[i]);
	ids->n = i + 1;
	return 0;
}

/* The keys a tier and an endpoint share. */
enum { R_NAME, R_MATCH, R_LIMITS, R_SHADOW, R_FAILURE, R_COST, R_STACK, R_CONC, R_MAXDUR,
       R_PENALTY, R_MAXOV, R_LEASE, R_DELAY, R_CHARGE, R_N };
static const char *const rule_keys[R_N] = {"name", "match", "limits", "shadow",
					   "on_store_failure", "cost", "stack", "concurrency",
					   "max_duration", "penalty", "max_override", "lease",
					   "delay", "charge"};

static int parse_rule_common(struct ctx *c, yaml_node_t *body, const char *where,
			     yaml_node_t **v, struct rule *rule)
{
	struct ys *y = &c->y;
	char sub[YS_PATH_MAX];
	long long cost;

	rule->on_failure = c->r->on_failure;
	rule->lease_us = c->r->lease_us;
	rule->lease_share = c->r->lease_share;
	rule->cost = 1;
	if (!v[R_LIMITS])
		return ys_fail_missing(y, body, where, "limits", " (write limits: [] for no limit)");
	ys_path_key(sub, where, "limits");
	if (rules_parse_limits(c, v[R_LIMITS], sub, rule) < 0)
		return -1;
	if (v[R_SHADOW]) {
		ys_path_key(sub, where, "shadow");
		if (ys_bool(y, v[R_SHADOW], sub, &rule->shadow) < 0)
			return -1;
	}
	if (v[R_FAILURE]) {
		ys_path_key(sub, where, "on_store_failure");
		if (get_failure(y, v[R_FAILURE], sub, &rule->on_failure) < 0)
			return -1;
	}
	if (v[R_COST]) {
		ys_path_key(sub, where, "cost");
		if (ys_int(y, v[R_COST], sub, 1, UINT32_MAX, &cost) < 0)
			return -1;
		rule->cost = (uint32_t)cost;
	}
	if (v[R_LEASE] &&
	    rules_parse_lease(c, where, v[R_LEASE], &rule->lease_us, &rule->lease_share) < 0)
		return -1;
	if (v[R_DELAY]) {
		ys_path_key(sub, where, "delay");
		if (ys_duration(y, v[R_DELAY], sub, RULES_DELAY_MIN_US, RULES_DELAY_MAX_US,
				"1ms to 30s such as 500ms", &rule->delay_us) < 0)
			return -1;
	}
	c->stack[rule->index] = v[R_STACK];
	if (v[R_MAXOV] && rules_parse_max_override(c, where, v[R_MAXOV], rule) < 0)
		return -1;
	/* the ban before the concurrency limit: the latter is the last of the
	 * rule's own (the memory store decides it apart, inflight.h) */
	if (v[R_PENALTY] && rules_parse_penalty(c, where, v[R_PENALTY], rule) < 0)
		return -1;
	if (rules_parse_concurrency(c, where, v[R_CONC], v[R_MAXDUR], rule) < 0)
		return -1;
	return v[R_CHARGE] ? rules_parse_charge(c, where, v[R_CHARGE], v[R_STACK], v[R_LEASE], rule)
			   : 0;
}

int rules_check_rule_name(struct ctx *c, size_t i, yaml_mark_t mark, const char *where)
{
	struct ys *y = &c->y;
	struct rules *r = c->r;

	for (size_t j = 0; j < i; j++) {
		if (strcmp(r->rule[j].name, r->rule[i].name) != 0)
			continue;
		if (j == 0 && c->builtin)
			return ys_fail(y, mark, where,
				       "duplicate rule name \"%s\" (the built-in rule of a file without tiers)",
				       r->rule[i].name);
		return ys_fail(y, mark, where, "duplicate rule name \"%s\" (first at %zu:%zu)",
			       r->rule[i].name, c->marks[j].line + 1, c->marks[j].column + 1);
	}
	c->marks[i] = mark;
	return 0;
}

static void tier_list(struct ctx *c, char *buf, size_t cap)
{
	size_t o = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < c->r->ntiers && o < cap; i++)
		o += (size_t)snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", c->r->rule[i].name);
}

int rules_find_tier(struct ctx *c, yaml_node_t *n, const char *where, size_t *out)
{
	struct ys *y = &c->y;
	char q[YS_PATH_MAX], list[512];

	if (n->type != YAML_SCALAR_NODE || ys_is_null(n))
		return ys_fail_type(y, n, where, "a tier name");
	for (size_t i = 0; i < c->r->ntiers; i++) {
		if (ys_is(n, c->r->rule[i].name)) {
			*out = i;
			return 0;
		}
	}
	tier_list(c, list, sizeof(list));
	return ys_fail(y, n->start_mark, where, "no tier named %s (tiers: %s)",
		       ys_quote(q, sizeof(q), (const char *)n->data.scalar.value,
				n->data.scalar.length),
		       list);
}

/* ---- tiers --------------------------------------------------------------- */

static int set_builtin_rule(struct ctx *c)
{
	struct ys *y = &c->y;
	struct rules *r = c->r;
	struct rule *d;

	r->rule = xcalloc(1, sizeof(*r->rule));
	c->marks = xcalloc(1, sizeof(*c->marks));
	if (!r->rule || !c->marks)
		return ys_fail_oom(y);
	d = &r->rule[0];
	snprintf(d->name, sizeof(d->name), "%s", RULES_DEFAULT_RULE);
	d->kind = RULES_KIND_DEFAULT;
	d->limits[0].quota = 100;
	d->limits[0].period_us = 60 * LIMIT_US_PER_S;
	d->limits[0].algo = LIMIT_TOKEN_BUCKET;
	d->nlimits = 1;
	d->on_failure = r->on_failure;
	d->cost = 1;
	r->nrules = r->ntiers = 1;
	r->default_tier = 0;
	c->builtin = true;
	return 0;
}

static int parse_tiers(struct ctx *c, yaml_node_t *map)
{
	struct ys *y = &c->y;
	struct rules *r = c->r;
	yaml_node_t *def = NULL;
	yaml_node_pair_t *p;
	size_t count = 0;

	if (!map)
		return set_builtin_rule(c);
	if (ys_expect_mapping(y, map, "tiers") < 0)
		return -1;
	for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = ys_node(y, p->key);

		if (!ys_is(k, "argument") && !ys_is(k, "default"))
			count++;
	}
	if (count > RULES_TIERS_MAX)
		return ys_fail(y, map->start_mark, "tiers", "more than %d tiers", RULES_TIERS_MAX);
	if (count == 0)
		return ys_fail(y, map->start_mark, "tiers",
			       "no tier defined (a tier is a key such as free: { limits: [100/1m] })");
	r->rule = xcalloc(count, sizeof(*r->rule));
	c->marks = xcalloc(count, sizeof(*c->marks));
	if (!r->rule || !c->marks)
		return ys_fail_oom(y);
	for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = ys_node(y, p->key), *v = ys_node(y, p->value);
		char where[YS_PATH_MAX];

		if (ys_check_key(y, k, "tiers") < 0)
			return -1;
		/* Keys repeat at most once each before this stops, so the
		 * quadratic scan is bounded by the tier cap. */
		for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
			yaml_node_t *prev = ys_node(y, q->key);

			if (prev->data.scalar.length == k->data.scalar.length &&
			    memcmp(prev->data.scalar.value, k->data.scalar.value,
				   k->data.scalar.length) == 0) {
				char qs[YS_PATH_MAX];

				return ys_fail(y, k->start_mark, "tiers",
					       "duplicate key %s (first at %zu:%zu)",
					       ys_quote(qs, sizeof(qs),
							(const char *)k->data.scalar.value,
							k->data.scalar.length),
					       prev->start_mark.line + 1,
					       prev->start_mark.column + 1);
			}
		}
		if (ys_is(k, "argument")) {
			if (rules_get_name(y, v, "tiers.argument", r->tier_arg) < 0)
				return -1;
			continue;
		}
		if (ys_is(k, "default")) {
			def = v;
			continue;
		}
		{
			struct rule *rule = &r->rule[r->ntiers];
			yaml_node_t *fk[R_N], *fv[R_N];

			if (rules_get_name(y, k, "tiers", rule->name) < 0)
				return -1;
			ys_path_key(where, "tiers", rule->name);
			rule->kind = RULES_KIND_TIER;
			rule->index = (unsigned)r->ntiers;
			/* A tier is named by its key: no name, no match. */
			fk[R_NAME] = fv[R_NAME] = fk[R_MATCH] = fv[R_MATCH] = NULL;
			if (ys_map_fields(y, v, where, rule_keys + R_LIMITS, R_N - R_LIMITS,
					  fk + R_LIMITS, fv + R_LIMITS) < 0 ||
			    parse_rule_common(c, v, where, fv, rule) < 0)
				return -1;
			c->marks[r->ntiers] = k->start_mark;
			r->ntiers++;
			r->nrules = r->ntiers;
		}
	}
	if (def)
		return rules_find_tier(c, def, "tiers.default", &r->default_tier);
	if (r->ntiers > 1)
		return ys_fail_missing(y, map, "tiers", "default", " (required with more than one tier)");
	r->default_tier = 0;
	return 0;
}

/* ---- endpoints and priorities -------------------------------------------- */

static int parse_endpoints(struct ctx *c, yaml_node_t *seq)
{
	struct ys *y = &c->y;
	struct rules *r = c->r;
	size_t count;
	void *p;

	if (seq->type != YAML_SEQUENCE_NODE)
		return ys_fail_type(y, seq, "endpoints", "a list");
	count = ys_seq_len(seq);
	if (count > RULES_ENDPOINTS_MAX)
		return ys_fail(y, seq->start_mark, "endpoints", "more than %d endpoints",
			       RULES_ENDPOINTS_MAX);
	if (count == 0)
		return 0;
	p = xrealloc(r->rule, (r->ntiers + count) * sizeof(*r->rule));
	if (!p)
		return ys_fail_oom(y);
	r->rule = p;
	memset(r->rule + r->ntiers, 0, count * sizeof(*r->rule));
	p = xrealloc(c->marks, (r->ntiers + count) * sizeof(*c->marks));
	if (!p)
		return ys_fail_oom(y);
	c->marks = p;
	r->ep = xcalloc(count, sizeof(*r->ep));
	if (!r->ep)
		return ys_fail_oom(y);
	for (size_t i = 0; i < count; i++) {
		yaml_node_t *n = ys_seq_item(y, seq, i);
		size_t ri = r->ntiers + i;
		struct rule *rule = &r->rule[ri];
		yaml_node_t *k[R_N], *v[R_N];
		char where[YS_PATH_MAX], sub[YS_PATH_MAX];

		ys_path_index(where, "endpoints", i);
		if (ys_map_fields(y, n, where, rule_keys, R_N, k, v) < 0)
			return -1;
		if (!v[R_NAME])
			return ys_fail_missing(y, n, where, "name", "");
		ys_path_key(sub, where, "name");
		if (rules_get_name(y, v[R_NAME], sub, rule->name) < 0 ||
		    rules_check_rule_name(c, ri, v[R_NAME]->start_mark, sub) < 0)
			return -1;
		rule->kind = RULES_KIND_ENDPOINT;
		rule->index = (unsigned)ri;
		if (!v[R_MATCH])
			return ys_fail_missing(y, n, where, "match", "");
		ys_path_key(sub, where, "match");
		if (rules_parse_match(c, v[R_MATCH], sub, &r->ep[i]) < 0 ||
		    parse_rule_common(c, n, where, v, rule) < 0)
			return -1;
		r->nrules = ri + 1;
	}
	return 0;
}

static int parse_priorities(struct ctx *c, yaml_node_t *map)
{
	struct ys *y = &c->y;
	enum { K_DEFAULT, K_CLASSES, K_N };
	static const char *const keys[K_N] = {"default", "classes"};
	enum { C_PRIORITY, C_MATCH, C_N };
	static const char *const ckeys[C_N] = {"priority", "match"};
	struct rules *r = c->r;
	yaml_node_t *k[K_N], *v[K_N], *seq;
	long long num;
	size_t count;

	if (ys_map_fields(y, map, "priorities", keys, K_N, k, v) < 0)
		return -1;
	if (v[K_DEFAULT]) {
		if (ys_int(y, v[K_DEFAULT], "priorities.default", 0, 3, &num) < 0)
			return -1;
		r->default_priority = (int)num;
	}
	seq = v[K_CLASSES];
	if (!seq)
		return 0;
	if (seq->type != YAML_SEQUENCE_NODE)
		return ys_fail_type(y, seq, "priorities.classes", "a list");
	count = ys_seq_len(seq);
	if (count > RULES_CLASSES_MAX)
		return ys_fail(y, seq->start_mark, "priorities.classes", "more than %d classes",
			       RULES_CLASSES_MAX);
	if (count == 0)
		return 0;
	r->classes = xcalloc(count, sizeof(*r->classes));
	if (!r->classes)
		return ys_fail_oom(y);
	for (size_t i = 0; i < count; i++) {
		yaml_node_t *n = ys_seq_item(y, seq, i);
		yaml_node_t *ck[C_N], *cv[C_N];
		char where[YS_PATH_MAX], sub[YS_PATH_MAX];

		ys_path_index(where, "priorities.classes", i);
		if (ys_map_fields(y, n, where, ckeys, C_N, ck, cv) < 0)
			return -1;
		if (!cv[C_PRIORITY])
			return ys_fail_missing(y, n, where, "priority", "");
		if (!cv[C_MATCH])
			return ys_fail_missing(y, n, where, "match", "");
		ys_path_key(sub, where, "priority");
		if (ys_int(y, cv[C_PRIORITY], sub, 0, 3, &num) < 0)
			return -1;
		r->classes[i].priority = (int)num;
		ys_path_key(sub, where, "match");
		if (rules_parse_match(c, cv[C_MATCH], sub, &r->classes[i].m) < 0)
			return -1;
		r->nclasses = i + 1;
	}
	return 0;
}

/* ---- shedding ------------------------------------------------------------ */

/* "90%", "92.5%", "92.25%" or "off". */
static void fmt_bp(char *buf, size_t cap, int bp)
{
	if (bp == SHED_NEVER)
		snprintf(buf, cap, "off");
	else if (bp % 100 == 0)
		snprintf(buf, cap, "%d%%", bp / 100);
	else if (bp % 10 == 0)
		snprintf(buf, cap, "%d.%d%%", bp / 100, bp % 100 / 10);
	else
		snprintf(buf, cap, "%d.%02d%%", bp / 100, bp % 100);
}

static int parse_thresholds(struct ctx *c, yaml_node_t *map, struct shed_config *sc)
{
	struct ys *y = &c->y;
	static const char *const where = "shedding.thresholds";
	yaml_node_t *seen[SHED_PRIORITIES] = {NULL};
	yaml_node_pair_t *p;
	char q[YS_PATH_MAX];

	if (ys_expect_mapping(y, map, where) < 0)
		return -1;
	for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = ys_node(y, p->key), *v = ys_node(y, p->value);
		char sub[YS_PATH_MAX];
		int prio, bp;

		if (ys_check_key(y, k, where) < 0)
			return -1;
		if (ys_is(k, "0") || ys_is(k, "P0"))
			return ys_fail(y, k->start_mark, where, "P0 is never shed: remove this key");
		if (ys_is(k, "1") || ys_is(k, "P1"))
			prio = 1;
		else if (ys_is(k, "2") || ys_is(k, "P2"))
			prio = 2;
		else if (ys_is(k, "3") || ys_is(k, "P3"))
			prio = 3;
		else
			return ys_fail(y, k->start_mark, where,
				       "unknown priority %s (expected 1, 2 or 3)",
				       ys_quote(q, sizeof(q), (const char *)k->data.scalar.value,
						k->data.scalar.length));
		if (seen[prio])
			return ys_fail(y, k->start_mark, where,
				       "P%d is given twice (first at %zu:%zu)",
				       prio, seen[prio]->start_mark.line + 1,
				       seen[prio]->start_mark.column + 1);
		seen[prio] = k;
		snprintf(sub, sizeof(sub), "%s.%d", where, prio);
		if (ys_percent(y, v, sub, 100, SHED_FULL, true, &bp) < 0)
			return -1;
		sc->threshold_bp[prio] = bp == YS_OFF ? SHED_NEVER : bp;
	}
	/* A less important priority must go first: P1 >= P2 >= P3 ("off"
	 * counting as above 100%). An inversion is almost surely a typo. */
	for (int i = 2; i < SHED_PRIORITIES; i++) {
		int hi = sc->threshold_bp[i - 1], lo = sc->threshold_bp[i];
		long hv = hi == SHED_NEVER ? SHED_FULL + 1 : hi;
		long lv = lo == SHED_NEVER ? SHED_FULL + 1 : lo;

		if (lv > hv) {
			char a[16], b[16];

			fmt_bp(a, sizeof(a), lo);
			fmt_bp(b, sizeof(b), hi);
			return ys_fail(y, map->start_mark, where,
				       "P%d (%s) is shed later than P%d (%s): a less important priority must be shed first",
				       i, a, i - 1, b);
		}
	}
	return 0;
}

static int parse_shedding(struct ctx *c, yaml_node_t *map)
{
	struct ys *y = &c->y;
	enum { K_IN_USE, K_FREE, K_THRESHOLDS, K_RAMP, K_RETRY, K_SHADOW, K_ADAPTIVE, K_N };
	static const char *const keys[K_N] = {"in_use", "free", "thresholds",
					      "ramp", "retry_after", "shadow", "adaptive"};
	struct shed_config *sc = &c->r->shed;
	yaml_node_t *k[K_N], *v[K_N];

	if (ys_map_fields(y, map, "shedding", keys, K_N, k, v) < 0)
		return -1;
	if (v[K_IN_USE] && rules_get_name(y, v[K_IN_USE], "shedding.in_use", sc->in_use_arg) < 0)
		return -1;
	if (v[K_FREE] && rules_get_name(y, v[K_FREE], "shedding.free", sc->free_arg) < 0)
		return -1;
	if (strcmp(sc->in_use_arg, sc->free_arg) == 0)
		return ys_fail(y, (v[K_FREE] ? v[K_FREE] : v[K_IN_USE])->start_mark,
			       v[K_FREE] ? "shedding.free" : "shedding.in_use",
			       "in_use and free must be different arguments");
	if (v[K_THRESHOLDS] && parse_thresholds(c, v[K_THRESHOLDS], sc) < 0)
		return -1;
	if (v[K_RAMP] && ys_percent(y, v[K_RAMP], "shedding.ramp", 0, SHED_FULL, false,
				    &sc->ramp_bp) < 0)
		return -1;
	if (v[K_RETRY] && ys_duration(y, v[K_RETRY], "shedding.retry_after", LIMIT_US_PER_S,
				      3600 * LIMIT_US_PER_S, "1s to 1h such as 1s",
				      &sc->retry_after_us) < 0)
		return -1;
	if (v[K_SHADOW] && ys_bool(y, v[K_SHADOW], "shedding.shadow", &sc->shadow) < 0)
		return -1;
	if (v[K_ADAPTIVE] && rules_parse_adaptive(c, v[K_ADAPTIVE]) < 0)
		return -1;
	/* adaptive alone reads no load figures: none to check in traffic */
	if (v[K_ADAPTIVE] && !v[K_IN_USE] && !v[K_FREE] && !v[K_THRESHOLDS] && !v[K_RAMP])
		c->r->shedding_set = false;
	return 0;
}

/* ---- the file ------------------------------------------------------------ */

/* The hashing key. Agents of one fleet must share it so that they compute
 * the same Redis keys; SipHash under any key spreads and bounds keys. */
static const uint8_t default_secret[16] = {
	0x73, 0x70, 0x6f, 0x61, 0x2d, 0x72, 0x61, 0x74,
	0x65, 0x6c, 0x69, 0x6d, 0x69, 0x74, 0x2d, 0x31,
};

static void rules_init_defaults(struct rules *r, const char *name)
{
	atomic_init(&r->refs, 1);
	pthread_mutex_init(&r->ov_lock, NULL);
	atomic_init(&r->ov_epoch, 0);
	memcpy(r->secret, default_secret, sizeof(r->secret));
	snprintf(r->source, sizeof(r->source), "%s", name);
	settings_defaults(&r->settings);
	r->answer = r->settings.answer;
	snprintf(r->identity.name[0], RULES_NAME_MAX, "api_key");
	snprintf(r->identity.name[1], RULES_NAME_MAX, "user");
	snprintf(r->identity.name[2], RULES_NAME_MAX, "ip");
	r->identity.n = 3;
	r->idnames = r->identity;
	snprintf(r->tier_arg, sizeof(r->tier_arg), "tier");
	r->on_failure = RULES_FAIL_OPEN;
	r->default_priority = RULES_DEFAULT_PRIORITY;
	r->max_delayed = RULES_MAX_DELAYED_DEFAULT;
	shed_config_defaults(&r->shed);
	adaptive_config_defaults(&r->adaptive);
}

/* The root holds the settings' keys, then those of the rules: one
 * mapping, so that an unknown key lists them all. */
static int parse_root(struct ctx *c, yaml_node_t *root)
{
	struct ys *y = &c->y;
	enum { K_FAILURE, K_IDENTITY, K_SHADOW, K_COST, K_OVERRIDE, K_LIMITS, K_TIERS, K_ENDPOINTS,
	       K_LAYERS, K_STACK, K_PRIORITIES, K_SHEDDING, K_LEASE, K_PATHS, K_MAX_DELAYED, K_N };
	static const char *const rules_keys[K_N] = {
		"on_store_failure", "identity", "shadow", "cost_argument", "override_argument", "limits",
		"tiers", "endpoints", "layers", "stack", "priorities", "shedding", "lease", "paths",
		"max_delayed",
	};
	static const char *const paths_words[] = {"normalised", "raw"};
	int paths = 0;
	const char *keys[SETTINGS_NKEYS + K_N];
	yaml_node_t *all_k[SETTINGS_NKEYS + K_N], *all_v[SETTINGS_NKEYS + K_N];
	yaml_node_t **k = all_k + SETTINGS_NKEYS, **v = all_v + SETTINGS_NKEYS;
	struct rules *r = c->r;

	memcpy(keys, settings_keys, sizeof(settings_keys));
	memcpy(keys + SETTINGS_NKEYS, rules_keys, sizeof(rules_keys));
	if (ys_map_fields(y, root, "", keys, SETTINGS_NKEYS + K_N, all_k, all_v) < 0 ||
	    settings_parse(y, all_v, &r->settings) < 0)
		return -1;
	if (v[K_FAILURE] && get_failure(y, v[K_FAILURE], "on_store_failure", &r->on_failure) < 0)
		return -1;
	if (v[K_IDENTITY]) {
		struct rules_names ids;

		memset(&ids, 0, sizeof(ids));
		if (ys_string_or_list(y, v[K_IDENTITY], "identity", RULES_IDENTITY_MAX, "arguments",
				      rules_identity_item, &ids) < 0)
			return -1;
		r->identity = ids;
		r->idnames = ids;
		r->identity_set = true;
	}
	if (v[K_SHADOW] && ys_bool(y, v[K_SHADOW], "shadow", &r->shadow) < 0)
		return -1;
	/* (before the path conditions, which it checks) */
	if (v[K_PATHS] &&
	    ys_word(y, v[K_PATHS], "paths", paths_words, 2, "normalised or raw", &paths) < 0)
		return -1;
	r->paths_raw = paths == 1;
	if (v[K_MAX_DELAYED]) {
		long long n;

		if (ys_int(y, v[K_MAX_DELAYED], "max_delayed", 0, RULES_MAX_DELAYED_MAX, &n) < 0)
			return -1;
		r->max_delayed = (uint32_t)n;
	}
	if (v[K_LEASE] && rules_parse_lease(c, "", v[K_LEASE], &r->lease_us, &r->lease_share) < 0)
		return -1;
	if (v[K_COST] && rules_get_name(y, v[K_COST], "cost_argument", r->cost_arg) < 0)
		return -1;
	if (v[K_OVERRIDE] &&
	    rules_get_name(y, v[K_OVERRIDE], "override_argument", r->override_arg) < 0)
		return -1;
	if (v[K_LIMITS] && v[K_TIERS])
		return ys_fail(y, k[K_LIMITS]->start_mark, "limits",
			       "limits (the one rule \"default\" of every client) and tiers "
			       "exclude each other: put the limits in a tier");
	if (parse_tiers(c, v[K_TIERS]) < 0)
		return -1;
	r->tiers_set = v[K_TIERS] != NULL;
	r->shedding_set = v[K_SHEDDING] != NULL;
	if (!v[K_TIERS]) {
		/* the built-in rule "default" takes the file's lease too */
		r->rule[0].lease_us = r->lease_us;
		r->rule[0].lease_share = r->lease_share;
	}
	/* Without tiers, top-level limits replace those of the built-in
	 * rule "default" (the command line's --limit comes this way). */
	if (v[K_LIMITS]) {
		r->rule[0].nlimits = 0;
		memset(r->rule[0].limits, 0, sizeof(r->rule[0].limits));
		if (rules_parse_limits(c, v[K_LIMITS], "limits", &r->rule[0]) < 0)
			return -1;
	}
	if (v[K_ENDPOINTS] && parse_endpoints(c, v[K_ENDPOINTS]) < 0)
		return -1;
	r->neps = r->nrules - r->ntiers;
	if (v[K_LAYERS] && rules_parse_layers(c, v[K_LAYERS]) < 0)
		return -1;
	if (rules_resolve_stacks(c, v[K_STACK]) < 0)
		return -1;
	if (v[K_PRIORITIES] && parse_priorities(c, v[K_PRIORITIES]) < 0)
		return -1;
	if (v[K_SHEDDING] && parse_shedding(c, v[K_SHEDDING]) < 0)
		return -1;
	/* The default answer carries the priority when the file classifies
	 * requests (HAProxy's rules then read it). */
	r->answer = r->settings.answer;
	if ((r->answer & SETTINGS_ANSWER_READ) && v[K_PRIORITIES])
		r->answer |= SETTINGS_VAR_PRIORITY;
	return 0;
}

static void free_parts(struct rules *r)
{
	struct arena_block *b = r->arena;

	while (b) {
		struct arena_block *next = b->next;

		xfree(b);
		b = next;
	}
	rules_derived_free(r);
	pthread_mutex_destroy(&r->ov_lock);
	xfree(r->rule);
	xfree(r->ep);
	xfree(r->classes);
	xfree(r);
}

/* The lengths every answer would otherwise measure again (decide.c): a
 * rule's name, and its policy once rules_derive() has written it. */
static void measure_rules(struct rules *r)
{
	_Static_assert(RULES_NAME_MAX <= UINT8_MAX + 1 && RULES_POLICY_MAX <= UINT16_MAX + 1,
		       "the lengths fit their fields");
	for (size_t i = 0; i < r->nrules; i++) {
		r->rule[i].name_len = (uint8_t)strlen(r->rule[i].name);
		r->rule[i].policy_len = (uint16_t)strlen(r->rule[i].policy);
	}
}

struct rules *rules_load_buffer(const char *buf, size_t len, const char *name, char *err,
				size_t errlen)
{
	yaml_node_t *root;
	struct ctx c;
	struct rules *r = NULL;
	char dummy[1];
	int rc = -1;

	if (!err || errlen == 0) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	err[0] = '\0';
	if (!name)
		name = "(rules)";
	if (!buf)
		buf = "";
	if (len > RULES_FILE_MAX) {
		snprintf(err, errlen, "%s: larger than %u bytes", name, RULES_FILE_MAX);
		return NULL;
	}
	memset(&c, 0, sizeof(c));
	if (ys_open(&c.y, buf, len, name, err, errlen, &root) < 0)
		goto out;
	if (!root) {
		snprintf(err, errlen,
			 "%s: no settings (the file is empty or only comments); write {} to keep every default",
			 name);
		goto out;
	}
	r = xcalloc(1, sizeof(*r));
	if (!r) {
		ys_fail_oom(&c.y);
		goto out;
	}
	rules_init_defaults(r, name);
	c.r = r;
	rc = parse_root(&c, root);
	if (rc == 0) {
		sha256(buf, len, r->sha256);
		rules_derive(r);
		measure_rules(r);
	}
	xfree(c.marks);
out:
	ys_close(&c.y);
	if (rc < 0) {
		if (r)
			free_parts(r);
		return NULL;
	}
	err[0] = '\0';
	return r;
}

struct rules *rules_load(const char *path, char *err, size_t errlen)
{
	struct rules *r;
	struct stat st;
	char *buf;
	size_t len = 0;
	char dummy[1];
	int fd;

	if (!err || errlen == 0) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	/* Without O_NONBLOCK, opening a FIFO waits for a writer, forever:
	 * the kind of file is judged before anything can wait. A regular file
	 * is then read as usual (O_NONBLOCK means nothing to it, but off is
	 * what every filesystem expects). */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
		close(fd);
		return NULL;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		close(fd);
		return NULL;
	}
	fcntl(fd, F_SETFL, 0);
	if (st.st_size > (off_t)RULES_FILE_MAX) {
		snprintf(err, errlen, "%s: larger than %u bytes", path, RULES_FILE_MAX);
		close(fd);
		return NULL;
	}
	/* One byte more than the size, to notice a file that grows while it
	 * is read. */
	buf = xmalloc((size_t)st.st_size + 1);
	if (!buf) {
		snprintf(err, errlen, "%s: out of memory", path);
		close(fd);
		return NULL;
	}
	for (;;) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size + 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
			xfree(buf);
			close(fd);
			return NULL;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > (size_t)st.st_size) {
			snprintf(err, errlen, "%s: the file changed while it was read", path);
			xfree(buf);
			close(fd);
			return NULL;
		}
	}
	close(fd);
	r = rules_load_buffer(buf, len, path, err, errlen);
	xfree(buf);
	return r;
}

struct rules *rules_default(void)
{
	return rules_load_buffer("{}", 2, "(defaults)", NULL, 0);
}

void rules_acquire(struct rules *r)
{
	atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
}

void rules_release(struct rules *r)
{
	if (r && atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1)
		free_parts(r);
}

unsigned rules_refs(const struct rules *r) { return atomic_load(&((struct rules *)r)->refs); }

uint64_t rules_gen(const struct rules *r) { return r->gen; }
void rules_set_gen(struct rules *r, uint64_t gen) { r->gen = gen; }
void rules_set_counters(struct rules *r, size_t i, uint32_t counters) { r->rule[i].counters = counters; }
const uint8_t *rules_secret(const struct rules *r) { return r->secret; }
const struct identity_prefix *rules_identity_prefix(const struct rules *r, int k)
{
	/* k < 0 turns into a size_t past any idnames.n: one comparison */
	return &r->id_prefix[(size_t)k < r->idnames.n ? (size_t)k : RULES_IDENTITY_MAX];
}

/* ---- accessors ----------------------------------------------------------- */

const struct settings *rules_settings(const struct rules *r) { return &r->settings; }

const char *rules_source(const struct rules *r) { return r->source; }
const uint8_t *rules_sha256(const struct rules *r) { return r->sha256; }
const struct rules_names *rules_identity(const struct rules *r) { return &r->identity; }
const struct rules_names *rules_identity_names(const struct rules *r) { return &r->idnames; }
const struct identity_prefix *rules_global_prefix(const struct rules *r)
{
	return &r->id_prefix[RULES_IDENTITY_MAX + 1];
}
const char *rules_cost_argument(const struct rules *r) { return r->cost_arg; }
const char *rules_tier_argument(const struct rules *r) { return r->tier_arg; }

const struct rule *rules_default_tier(const struct rules *r)
{
	return &r->rule[r->default_tier];
}

bool rules_shadow(const struct rules *r) { return r->shadow; }

bool rules_paths_raw(const struct rules *r) { return r->paths_raw; }

uint32_t rules_max_delayed(const struct rules *r) { return r->max_delayed; }

bool rules_any_lease(const struct rules *r)
{
	for (size_t i = 0; i < r->nrules; i++)
		if (r->rule[i].lease_us > 0)
			return true;
	return false;
}
enum rules_failure rules_on_failure(const struct rules *r) { return r->on_failure; }
int rules_default_priority(const struct rules *r) { return r->default_priority; }
const struct shed_config *rules_shed(const struct rules *r) { return &r->shed; }
unsigned rules_answer(const struct rules *r) { return r->answer; }
size_t rules_count(const struct rules *r) { return r->nrules; }

const struct rule *rules_rule_at(const struct rules *r, size_t i)
{
	return i < r->nrules ? &r->rule[i] : NULL;
}

const struct rule *rules_find(const struct rules *r, const char *name)
{
	for (size_t i = 0; i < r->nrules; i++)
		if (strcmp(r->rule[i].name, name) == 0)
			return &r->rule[i];
	return NULL;
}

const char *rules_failure_str(enum rules_failure f)
{
	switch (f) {
	case RULES_FAIL_OPEN:
		return "open";
	case RULES_FAIL_CLOSED:
		return "closed";
	case RULES_FAIL_LOCAL:
		return "local";
	}
	return "open";
}

