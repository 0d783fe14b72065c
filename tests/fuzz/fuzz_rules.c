/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_rules.c: the rules loader over arbitrary bytes, then classification
 * of requests against whatever loaded.
 *
 * Loading must either fail with a message that names the file, or give
 * rules that keep every documented bound. Requests are built from fixed
 * values and from slices of the input itself (so values the file mentions
 * show up in requests), and every verdict must point into the rules and
 * stay in range. Any broken invariant calls abort(). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"
#include "shed.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond))                                                   \
			abort();                                               \
	} while (0)

#define NAME "fuzz.yaml"

static void check_rules(const struct rules *r)
{
	const struct rules_names *ids = rules_identity(r);
	const struct shed_config *sh = rules_shed(r);
	size_t n = rules_count(r);

	CHECK(n >= 1 && n <= RULES_TIERS_MAX + RULES_ENDPOINTS_MAX);
	for (size_t i = 0; i < n; i++) {
		const struct rule *x = rules_rule_at(r, i);
		size_t len = strnlen(x->name, sizeof(x->name));

		CHECK(len > 0 && len < sizeof(x->name));
		CHECK(x->index == i);
		CHECK(rules_find(r, x->name) == x); /* names are unique */
		CHECK(x->nlimits <= LIMIT_SET_MAX);
		CHECK(x->cost >= 1);
		for (size_t k = 0; k < x->nlimits; k++) {
			CHECK(x->limits[k].quota >= 1 && x->limits[k].quota <= LIMIT_QUOTA_MAX);
			CHECK(x->limits[k].period_us >= LIMIT_PERIOD_MIN_US);
			CHECK(x->limits[k].period_us <= LIMIT_PERIOD_MAX_US);
			CHECK(x->limits[k].burst <= LIMIT_QUOTA_MAX);
			/* periods differ within each part (the rule's own
			 * limits, each layer's) */
			for (size_t j = 0; j < k; j++)
				CHECK(x->part_of[j] != x->part_of[k] ||
				      x->limits[j].period_us != x->limits[k].period_us);
		}
		/* a rule's own limits, then each layer's, in stack order */
		CHECK(x->nown <= LIMIT_RULE_MAX && x->nstack <= RULES_STACK_MAX);
		CHECK(x->kind != RULES_KIND_LAYER || x->nstack == 0);
		{
			size_t k = x->nown;

			for (size_t j = 0; j < x->nown; j++)
				CHECK(x->part_of[j] == 0);
			for (size_t p = 0; p < x->nstack; p++) {
				const struct rule *l = x->stack[p];

				CHECK(l->kind == RULES_KIND_LAYER && rules_rule_at(r, l->index) == l);
				for (size_t j = 0; j < l->nown; j++, k++) {
					CHECK(x->part_of[k] == p + 1);
					CHECK(x->lidh[k] == l->lidh[j]);
				}
			}
			CHECK(k == x->nlimits);
		}
		for (size_t j = 0; x->scope == RULES_SCOPE_ARGS && j < x->nidk; j++)
			CHECK(x->idk[j] < rules_identity_names(r)->n);
	}
	CHECK(rules_rule_at(r, n) == NULL);
	CHECK(rules_default_tier(r)->kind != RULES_KIND_ENDPOINT);
	CHECK(ids->n >= 1 && ids->n <= RULES_IDENTITY_MAX);
	CHECK(rules_default_priority(r) >= 0 && rules_default_priority(r) <= 3);
	for (int p = 1; p < SHED_PRIORITIES; p++)
		CHECK(sh->threshold_bp[p] == SHED_NEVER ||
		      (sh->threshold_bp[p] >= 100 && sh->threshold_bp[p] <= SHED_FULL));
	CHECK(sh->ramp_bp >= 0 && sh->ramp_bp <= SHED_FULL);
	CHECK(strcmp(sh->in_use_arg, sh->free_arg) != 0);
}

static void check_verdict(const struct rules *r, const struct rules_args *a)
{
	struct rules_verdict v;
	size_t n = rules_count(r);

	rules_classify(r, a, &v);
	CHECK(v.rule && v.rule->index < n && rules_rule_at(r, v.rule->index) == v.rule);
	CHECK(v.tier && v.tier->kind != RULES_KIND_ENDPOINT &&
	      rules_rule_at(r, v.tier->index) == v.tier);
	CHECK(v.priority >= 0 && v.priority <= 3);
	CHECK(v.cost >= 1);
	CHECK(v.shadow == (rules_shadow(r) || v.rule->shadow));
	CHECK(v.on_failure == v.rule->on_failure);
	if (v.identity >= 0) {
		CHECK((size_t)v.identity < rules_identity(r)->n);
		CHECK(v.identity_val >= &a->a[0].val && v.identity_val <= &a->a[a->n - 1].val);
	} else {
		CHECK(v.identity == -1 && v.identity_val == NULL);
	}
	for (size_t p = 0; p < v.rule->nstack; p++) {
		int k = v.layer_identity[p];

		CHECK(k == RULES_ID_GLOBAL || k == -1 ||
		      (k >= 0 && (size_t)k < rules_identity_names(r)->n));
		CHECK((k >= 0) == (v.layer_val != NULL && v.layer_val[p] != NULL));
	}
	if (v.load_known)
		(void)shed_decide(rules_shed(r), v.priority, v.in_use, v.free_conns, 0x9e3779b9u);
}

static void add(struct rules_args *a, const char *name, const char *val, size_t len)
{
	struct spop_str n = {name, strlen(name)};
	struct spop_data d = spop_strn(val, len);

	rules_args_add(a, n, &d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = {"method", "path", "host", "tier", "test",
					    "x_team", "api_key", "cost", "weight", "plan"};
	char err[512];
	struct rules *r;
	struct rules_args a;
	struct spop_data d;
	struct spop_str n;

	memset(err, 'x', sizeof(err));
	r = rules_load_buffer((const char *)data, size, NAME, err, sizeof(err));
	CHECK(memchr(err, '\0', sizeof(err)) != NULL);
	if (!r) {
		CHECK(strncmp(err, NAME ":", strlen(NAME ":")) == 0);
		return 0;
	}
	CHECK(err[0] == '\0');
	check_rules(r);

	/* No arguments at all. */
	memset(&a, 0, sizeof(a));
	check_verdict(r, &a);
	/* A typical request. */
	add(&a, "method", "POST", 4);
	add(&a, "path", "/api/payments", 13);
	add(&a, "host", "API.example.com:443", 19);
	add(&a, "tier", "pro", 3);
	add(&a, "test", "1", 1);
	d = spop_int64(3);
	n.ptr = "be_in_use";
	n.len = 9;
	rules_args_add(&a, n, &d);
	d = spop_int64(1);
	n.ptr = "be_free";
	n.len = 7;
	rules_args_add(&a, n, &d);
	check_verdict(r, &a);
	/* Slices of the input as the values of every argument name, so that
	 * paths, hosts, tiers and values written in the file come up. */
	for (size_t off = 0, k = 0; off < size && k < 64; k++) {
		size_t len = (size - off) % 23 + 1;

		if (len > size - off)
			len = size - off;
		memset(&a, 0, sizeof(a));
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			add(&a, names[i], (const char *)data + off, len - (i % len));
		check_verdict(r, &a);
		off += len;
	}
	rules_release(r);
	return 0;
}
