/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the rules file (loading, every error message) and of the
 * classification of requests.
 *
 * Error cases live in tests/unit/rules/err-*.yaml; the first line of each
 * says the exact message expected, "FILE" standing for the file's path:
 *     # expect: FILE:4:25: tiers.pro.limits[1]: '10/0s': period must be at least 1ms
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "addr.h"
#include "alloc.h"
#include "rules.h"
#include "settings.h"
#include "spop.h"

#define S LIMIT_US_PER_S
#define FIXTURES "tests/unit/rules"
#define EXAMPLE "examples/rules.yaml"
/* The number of err-*.yaml fixtures: a lost file must not pass unseen. */
#define ERR_FIXTURES 149

static char err[1024];

/* An address as the file would write it. */
static const char *addr_str(const struct addr *a)
{
	static char buf[ADDR_HOST_MAX + 16];

	return addr_format(a, buf, sizeof(buf));
}

static struct rules *load(const char *yaml)
{
	struct rules *r = rules_load_buffer(yaml, strlen(yaml), "t.yaml", err, sizeof(err));

	if (!r)
		fail_msg("unexpected error: %s", err);
	assert_string_equal(err, "");
	return r;
}

static void load_fails(const char *yaml, const char *expected)
{
	struct rules *r = rules_load_buffer(yaml, strlen(yaml), "t.yaml", err, sizeof(err));

	assert_null(r);
	assert_string_equal(err, expected);
}

/* ---- arguments ---------------------------------------------------------------- */

static void add(struct rules_args *a, const char *name, struct spop_data d)
{
	struct spop_str n = {name, strlen(name)};

	assert_int_equal(rules_args_add(a, n, &d), 0);
}

static struct spop_data str(const char *s) { return spop_cstr(s); }

static struct spop_data bin(const char *s)
{
	struct spop_data d = spop_cstr(s);

	d.type = SPOP_T_BIN;
	return d;
}

/* A request: method, path, host (NULL: absent), then name/value string
 * pairs ending with NULL. */
static void req(struct rules_args *a, const char *method, const char *path, const char *host, ...)
{
	va_list ap;
	const char *name;

	memset(a, 0, sizeof(*a));
	if (method)
		add(a, "method", str(method));
	if (path)
		add(a, "path", str(path));
	if (host)
		add(a, "host", str(host));
	va_start(ap, host);
	while ((name = va_arg(ap, const char *)) != NULL)
		add(a, name, str(va_arg(ap, const char *)));
	va_end(ap);
}

static struct rules_verdict classify(const struct rules *r, const struct rules_args *a)
{
	struct rules_verdict v;

	memset(&v, 0x5a, sizeof(v));
	rules_classify(r, a, &v);
	return v;
}

static const char *rule_of(const struct rules *r, const struct rules_args *a)
{
	static char name[RULES_NAME_MAX];
	struct rules_verdict v = classify(r, a);

	snprintf(name, sizeof(name), "%s", v.rule->name);
	return name;
}

static void test_args_get(void **unused)
{
	struct rules_args a;
	struct spop_str n;
	struct spop_data d = spop_int64(1);
	char names[RULES_ARGS_MAX + 1][16];

	memset(&a, 0, sizeof(a));
	add(&a, "ip", str("first"));
	add(&a, "ip", str("second"));
	add(&a, "ipx", str("x"));
	assert_string_equal(rules_args_get(&a, "ip")->u.str.ptr, "first");
	assert_string_equal(rules_args_get(&a, "ipx")->u.str.ptr, "x");
	assert_null(rules_args_get(&a, "i"));
	assert_null(rules_args_get(&a, "IP"));
	assert_null(rules_args_get(&a, "ipxy"));
	assert_null(rules_args_get(&a, ""));

	/* Beyond RULES_ARGS_MAX arguments are ignored. */
	memset(&a, 0, sizeof(a));
	for (int i = 0; i <= RULES_ARGS_MAX; i++) {
		snprintf(names[i], sizeof(names[i]), "a%d", i);
		n.ptr = names[i];
		n.len = strlen(names[i]);
		assert_int_equal(rules_args_add(&a, n, &d), i < RULES_ARGS_MAX ? 0 : -1);
	}
	assert_int_equal(a.n, RULES_ARGS_MAX);
	assert_non_null(rules_args_get(&a, "a63"));
	assert_null(rules_args_get(&a, "a64"));
}

static void test_args_from_kv(void **unused)
{
	uint8_t buf[4096];
	struct spop_wbuf w;
	struct spop_cursor c;
	struct rules_args a;
	struct spop_data d;
	char name[16];

	spop_wbuf_init(&w, buf, sizeof(buf));
	for (int i = 0; i < 70; i++) {
		snprintf(name, sizeof(name), "k%d", i);
		spop_put_name(&w, name, strlen(name));
		d = spop_int64(i);
		spop_put_data(&w, &d);
	}
	assert_false(w.err);
	c.p = buf;
	c.end = buf + w.len;
	rules_args_from_kv(&a, c, 70);
	assert_int_equal(a.n, RULES_ARGS_MAX);
	assert_int_equal(rules_args_get(&a, "k0")->u.i64, 0);
	assert_int_equal(rules_args_get(&a, "k63")->u.i64, 63);
	assert_null(rules_args_get(&a, "k64"));
	/* Fewer items than announced: stops at the end. */
	rules_args_from_kv(&a, c, 0);
	assert_int_equal(a.n, 0);
	c.end = buf;
	rules_args_from_kv(&a, c, 5);
	assert_int_equal(a.n, 0);
}

/* ---- requests decoded from a message -------------------------------------------- */

/* Whether two argument values carry the same thing (they live in different
 * places: one decoded into a rules_args, one into a rules_request). */
static bool same_value(const struct spop_data *a, const struct spop_data *b)
{
	if (!a || !b)
		return a == b;
	if (a->type != b->type)
		return false;
	if (a->type == SPOP_T_STR || a->type == SPOP_T_BIN)
		return a->u.str.len == b->u.str.len &&
		       memcmp(a->u.str.ptr, b->u.str.ptr, a->u.str.len) == 0;
	/* other types live in the union itself, zeroed around them */
	return memcmp(&a->u, &b->u, sizeof(a->u)) == 0;
}

static uint32_t rnd_state = 12345;

static uint32_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 17;
	rnd_state ^= rnd_state << 5;
	return rnd_state;
}

/* A random argument list in the shape HAProxy sends, with the names the
 * rules below read, near misses of them, repeats and fillers. */
static unsigned random_message(struct spop_wbuf *w)
{
	static const char *const names[] = {
		"ip", "method", "path", "host", "api_key", "user", "tier", "plan", "cost",
		"be_in_use", "be_free", "test", "x", "a-name-of-thirty-one-characters",
		/* near misses: one byte off, first or last or in between */
		"", "ipx", "i", "iq", "y", "API_KEY", "api_kez", "user ", "usEr", "tieR",
		"plaN", "be_in_usE", "be_freE", "ce_free", "a-name-of-thirty-one-characterS",
		"pat", "pathx",
	};
	static const char *const texts[] = {
		"", "GET", "POST", "/api/search", "/api/search/x", "/API/%53earch", "//x/../api/search",
		"api.example.com",
		"API.example.com:8443", "k1", "k2", "pro", "gold", "1", "17", "x",
	};
	unsigned n = rnd() % 12;

	if (rnd() % 8 == 0)
		n += RULES_ARGS_MAX - 4 + rnd() % 8; /* around RULES_ARGS_MAX */
	for (unsigned i = 0; i < n; i++) {
		const char *name = names[rnd() % (sizeof(names) / sizeof(names[0]))];
		struct spop_data d;

		switch (rnd() % 8) {
		case 0:
			d = spop_null();
			break;
		case 1:
			d = spop_int64((int64_t)(rnd() % 200) - 20);
			break;
		case 2:
			d = spop_uint32(rnd());
			break;
		case 3:
			d = spop_bool(rnd() % 2);
			break;
		case 4:
			d = spop_null();
			d.type = SPOP_T_IPV4;
			d.u.ipv4[0] = 10;
			d.u.ipv4[3] = (uint8_t)(rnd() % 3);
			break;
		default:
			d = spop_cstr(texts[rnd() % (sizeof(texts) / sizeof(texts[0]))]);
			if (rnd() % 4 == 0)
				d.type = SPOP_T_BIN;
			break;
		}
		spop_put_name(w, name, strlen(name));
		spop_put_data(w, &d);
	}
	return n;
}

/* The identity, tier and load figures of a request by their definitions
 * (rules.h), the arguments found with rules_args_get()'s plain scan: a
 * check of the classifier's name lookup that does not rest on it. */
static bool is_empty(const struct spop_data *d)
{
	return d->type == SPOP_T_NULL ||
	       ((d->type == SPOP_T_STR || d->type == SPOP_T_BIN) && d->u.str.len == 0);
}

static void check_by_definition(const struct rules *r, const struct rules_args *a,
				const struct rules_verdict *v)
{
	const struct rules_names *ids = rules_identity(r);
	const struct shed_config *sh = rules_shed(r);
	const struct spop_data *d, *id_val = NULL;
	const struct rule *tier = rules_default_tier(r);
	struct rules_args only;
	struct rules_verdict load;
	int id = -1;

	for (size_t k = 0; k < ids->n && id < 0; k++) {
		d = rules_args_get(a, ids->name[k]);
		if (d && !is_empty(d)) {
			id = (int)k;
			id_val = d;
		}
	}
	assert_int_equal(v->identity, id);
	assert_true(same_value(v->identity_val, id_val));
	d = rules_args_get(a, rules_tier_argument(r));
	if (d && (d->type == SPOP_T_STR || d->type == SPOP_T_BIN) && d->u.str.len > 0 &&
	    d->u.str.len < RULES_NAME_MAX) {
		char name[RULES_NAME_MAX];
		const struct rule *t;

		memcpy(name, d->u.str.ptr, d->u.str.len);
		name[d->u.str.len] = '\0';
		t = strlen(name) == d->u.str.len ? rules_find(r, name) : NULL;
		if (t && t->kind == RULES_KIND_TIER)
			tier = t;
	}
	assert_ptr_equal(v->tier, tier);
	/* The load figures: those of a request holding only the arguments
	 * of those names, where no lookup can pick another. */
	memset(&only, 0, sizeof(only));
	if ((d = rules_args_get(a, sh->in_use_arg)) != NULL)
		add(&only, sh->in_use_arg, *d);
	if ((d = rules_args_get(a, sh->free_arg)) != NULL)
		add(&only, sh->free_arg, *d);
	load = classify(r, &only);
	assert_int_equal(v->load_known, load.load_known);
	if (load.load_known) {
		assert_int_equal(v->in_use, load.in_use);
		assert_int_equal(v->free_conns, load.free_conns);
	}
}

/* rules_request_decode() reads the message once and keeps only what the
 * rules read; classifying it must give what classifying every decoded
 * argument gives, whatever the message, and it must refuse exactly the
 * broken ones. */
static void test_request_decode(void **unused)
{
	static const char *const files[] = {
		"{}",
		"cost_argument: cost\n"
		"identity: [api_key, tier, user, ip]\n"
		"tiers: { argument: tier, default: free, free: { limits: [\"5/1m\"] },\n"
		"         pro: { limits: [\"50/1m\"] }, gold: { limits: [] } }\n"
		"endpoints:\n"
		"  - { name: search, match: { method: POST, path: /api/search }, limits: [\"2/1m\"] }\n"
		"  - { name: apihost, match: { host: api.example.com }, limits: [] }\n"
		"priorities: { default: 1, classes: [ { priority: 3, match: { tier: [gold] } } ] }\n"
		"shedding: { in_use: x, free: be_free }\n",
		"identity: [user, a-name-of-thirty-one-characters]\n"
		"tiers: { argument: plan, default: free, free: { limits: [\"5/1m\"] }, pro: { limits: [] } }\n"
		"endpoints:\n"
		"  - { name: t, match: { args: { test: [\"1\", \"true\", \"10.0.0.2\"] } }, limits: [] }\n",
	};

	for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
		struct rules *r = load(files[f]);

		for (int round = 0; round < 3000; round++) {
			static uint8_t buf[8192];
			static struct rules_args a;
			static struct rules_request q;
			struct rules_verdict va, vq;
			struct spop_wbuf w;
			struct spop_cursor c, cq;
			unsigned n;

			spop_wbuf_init(&w, buf, sizeof(buf));
			n = random_message(&w);
			assert_false(w.err);
			c.p = buf;
			c.end = buf + w.len;
			rules_args_from_kv(&a, c, n);
			va = classify(r, &a);
			cq = c;
			assert_int_equal(rules_request_decode(r, &q, &cq, n), 0);
			assert_ptr_equal(cq.p, c.end);
			memset(&vq, 0x5a, sizeof(vq));
			rules_classify_request(r, &q, &vq);
			assert_ptr_equal(vq.rule, va.rule);
			assert_ptr_equal(vq.tier, va.tier);
			assert_int_equal(vq.priority, va.priority);
			assert_int_equal(vq.shadow, va.shadow);
			assert_int_equal(vq.shed_shadow, va.shed_shadow);
			assert_int_equal(vq.on_failure, va.on_failure);
			assert_int_equal(vq.cost, va.cost);
			assert_int_equal(vq.identity, va.identity);
			assert_true(same_value(vq.identity_val, va.identity_val));
			assert_int_equal(vq.load_known, va.load_known);
			if (va.load_known) {
				assert_int_equal(vq.in_use, va.in_use);
				assert_int_equal(vq.free_conns, va.free_conns);
			}
			check_by_definition(r, &a, &vq);
			/* Cut anywhere, or announcing one more item: broken. */
			if (w.len > 0) {
				cq.p = buf;
				cq.end = buf + rnd() % w.len;
				assert_int_equal(rules_request_decode(r, &q, &cq, n), -1);
			}
			cq = c;
			assert_int_equal(rules_request_decode(r, &q, &cq, n + 1), -1);
		}
		rules_release(r);
	}
}

/* ---- defaults ----------------------------------------------------------------- */

static void check_defaults(const struct rules *r)
{
	const struct settings *s = rules_settings(r);
	const struct rule *d;
	const struct shed_config *sh;
	struct rules_args a;
	struct rules_verdict v;

	assert_false(s->has_listen || s->has_threads || s->has_store || s->has_address ||
		     s->has_user || s->has_password || s->has_timeout || s->has_agents);
	assert_string_equal(addr_str(&s->listen), "127.0.0.1:12345");
	assert_int_equal(s->threads, 0);
	assert_int_equal(s->store, SETTINGS_STORE_MEMORY);
	assert_string_equal(addr_str(&s->address), "127.0.0.1:6379");
	assert_int_equal(s->timeout_ms, 20);
	assert_int_equal(s->agents, 1);
	assert_int_equal(rules_identity(r)->n, 3);
	assert_string_equal(rules_identity(r)->name[0], "api_key");
	assert_string_equal(rules_identity(r)->name[1], "user");
	assert_string_equal(rules_identity(r)->name[2], "ip");
	assert_string_equal(rules_cost_argument(r), "");
	assert_string_equal(rules_tier_argument(r), "tier");
	assert_false(rules_shadow(r));
	assert_int_equal(rules_on_failure(r), RULES_FAIL_OPEN);
	assert_int_equal(rules_default_priority(r), 2);
	assert_int_equal(rules_count(r), 1);
	d = rules_rule_at(r, 0);
	assert_ptr_equal(rules_default_tier(r), d);
	assert_string_equal(d->name, "default");
	assert_int_equal(d->kind, RULES_KIND_DEFAULT);
	assert_int_equal(d->nlimits, 1);
	assert_int_equal(d->limits[0].quota, 100);
	assert_int_equal(d->limits[0].period_us, 60 * S);
	assert_int_equal(d->limits[0].burst, 0);
	assert_int_equal(d->limits[0].algo, LIMIT_TOKEN_BUCKET);
	assert_false(d->shadow);
	assert_int_equal(d->on_failure, RULES_FAIL_OPEN);
	assert_int_equal(d->cost, 1);
	assert_null(rules_rule_at(r, 1));
	sh = rules_shed(r);
	assert_int_equal(sh->threshold_bp[1], 9000);
	assert_int_equal(sh->threshold_bp[2], 8000);
	assert_int_equal(sh->threshold_bp[3], 7000);
	assert_int_equal(sh->ramp_bp, 0);
	assert_int_equal(sh->retry_after_us, S);
	assert_string_equal(sh->in_use_arg, "be_in_use");
	assert_string_equal(sh->free_arg, "be_free");
	assert_false(sh->shadow);

	req(&a, "POST", "/api/payments", "example.com", "tier", "pro", NULL);
	v = classify(r, &a);
	assert_ptr_equal(v.rule, d);
	assert_ptr_equal(v.tier, d);
	assert_int_equal(v.priority, 2);
	assert_false(v.shadow);
	assert_false(v.shed_shadow);
	assert_int_equal(v.on_failure, RULES_FAIL_OPEN);
	assert_int_equal(v.cost, 1);
	assert_int_equal(v.identity, -1);
	assert_null(v.identity_val);
	assert_false(v.load_known);
}

static void test_defaults(void **unused)
{
	struct rules *r = rules_default();

	assert_non_null(r);
	assert_string_equal(rules_source(r), "(defaults)");
	check_defaults(r);
	rules_release(r);
	/* "{}" is the same. */
	r = load("{}");
	assert_string_equal(rules_source(r), "t.yaml");
	check_defaults(r);
	rules_release(r);
	/* So is a file with only comments around it. */
	r = load("# settings\n{}\n# end\n");
	check_defaults(r);
	rules_release(r);
	rules_release(NULL);
}

/* ---- the example and the full fixture --------------------------------------------- */

static void check_limit(const struct rule *rule, size_t i, uint64_t quota, int64_t period,
			uint64_t burst, enum limit_algo algo)
{
	assert_true(i < rule->nlimits);
	assert_int_equal(rule->limits[i].quota, quota);
	assert_int_equal(rule->limits[i].period_us, period);
	assert_int_equal(rule->limits[i].burst, burst);
	assert_int_equal(rule->limits[i].algo, algo);
}

static void test_example(void **unused)
{
	struct rules *r = rules_load(EXAMPLE, err, sizeof(err));
	const struct settings *s;
	const struct rule *x;
	const struct shed_config *sh;
	struct rules_args a;
	struct rules_verdict v;
	static const char *const names[] = {"free", "pro", "enterprise",
					    "search", "status", "payments"};

	if (!r)
		fail_msg("%s", err);
	s = rules_settings(r);
	assert_true(s->has_listen);
	assert_string_equal(addr_str(&s->listen), "127.0.0.1:12345");
	assert_true(s->has_store);
	assert_int_equal(s->store, SETTINGS_STORE_REDIS);
	assert_true(s->has_address);
	assert_string_equal(addr_str(&s->address), "127.0.0.1:6379");
	assert_true(s->has_timeout);
	assert_int_equal(s->timeout_ms, 20);
	assert_false(s->has_user || s->has_password || s->has_threads || s->has_agents);
	assert_int_equal(rules_on_failure(r), RULES_FAIL_OPEN);
	assert_false(rules_shadow(r));
	assert_string_equal(rules_tier_argument(r), "tier");
	assert_string_equal(rules_default_tier(r)->name, "free");
	assert_int_equal(rules_identity(r)->n, 3);

	assert_int_equal(rules_count(r), 6);
	for (size_t i = 0; i < 6; i++) {
		assert_string_equal(rules_rule_at(r, i)->name, names[i]);
		assert_int_equal(rules_rule_at(r, i)->index, i);
		assert_int_equal(rules_rule_at(r, i)->kind, i < 3 ? RULES_KIND_TIER : RULES_KIND_ENDPOINT);
		assert_false(rules_rule_at(r, i)->shadow);
		assert_int_equal(rules_rule_at(r, i)->on_failure, RULES_FAIL_OPEN);
	}
	x = rules_find(r, "free");
	assert_int_equal(x->nlimits, 2);
	check_limit(x, 0, 100, 60 * S, 0, LIMIT_TOKEN_BUCKET);
	check_limit(x, 1, 1000, 3600 * S, 0, LIMIT_TOKEN_BUCKET);
	x = rules_find(r, "pro");
	assert_int_equal(x->nlimits, 2);
	check_limit(x, 0, 1000, 60 * S, 0, LIMIT_TOKEN_BUCKET);
	check_limit(x, 1, 50000, 3600 * S, 0, LIMIT_TOKEN_BUCKET);
	x = rules_find(r, "enterprise");
	assert_int_equal(x->nlimits, 1);
	check_limit(x, 0, 10000, 60 * S, 0, LIMIT_TOKEN_BUCKET);
	x = rules_find(r, "search");
	assert_int_equal(x->nlimits, 1);
	check_limit(x, 0, 50, 60 * S, 0, LIMIT_TOKEN_BUCKET);
	x = rules_find(r, "status");
	assert_int_equal(x->nlimits, 1);
	check_limit(x, 0, 600, 60 * S, 0, LIMIT_TOKEN_BUCKET);
	x = rules_find(r, "payments");
	assert_int_equal(x->nlimits, 1);
	check_limit(x, 0, 20, 60 * S, 0, LIMIT_TOKEN_BUCKET);

	sh = rules_shed(r);
	assert_int_equal(sh->threshold_bp[1], 9000);
	assert_int_equal(sh->threshold_bp[2], 8000);
	assert_int_equal(sh->threshold_bp[3], 7000);
	assert_int_equal(sh->ramp_bp, 0);
	assert_int_equal(sh->retry_after_us, S);
	assert_string_equal(sh->in_use_arg, "be_in_use");
	assert_string_equal(sh->free_arg, "be_free");

	/* Endpoints, whatever the tier. */
	req(&a, "POST", "/api/search", NULL, "tier", "pro", NULL);
	v = classify(r, &a);
	assert_string_equal(v.rule->name, "search");
	assert_string_equal(v.tier->name, "pro");
	assert_int_equal(v.priority, 1);
	req(&a, "GET", "/api/search", NULL, NULL);
	v = classify(r, &a);
	assert_string_equal(v.rule->name, "free");
	assert_int_equal(v.priority, 2);
	req(&a, "GET", "/api/status", NULL, "tier", "enterprise", NULL);
	v = classify(r, &a);
	assert_string_equal(v.rule->name, "status");
	assert_int_equal(v.priority, 2);
	req(&a, "POST", "/api/payments", NULL, NULL);
	v = classify(r, &a);
	assert_string_equal(v.rule->name, "payments");
	assert_int_equal(v.priority, 0);
	/* Payments stay P0 even when marked as test traffic. */
	req(&a, "POST", "/api/payments/refund", NULL, "test", "1", NULL);
	v = classify(r, &a);
	assert_string_equal(v.rule->name, "payments");
	assert_int_equal(v.priority, 0);
	req(&a, "GET", "/api/payments", NULL, NULL);
	assert_int_equal(classify(r, &a).priority, 0);
	/* Test traffic is P3, even a POST. */
	req(&a, "POST", "/api/orders", NULL, "test", "1", NULL);
	assert_int_equal(classify(r, &a).priority, 3);
	req(&a, "GET", "/", NULL, "test", "1", NULL);
	assert_int_equal(classify(r, &a).priority, 3);
	req(&a, "GET", "/", NULL, "test", "0", NULL);
	assert_int_equal(classify(r, &a).priority, 2);
	req(&a, "POST", "/api/orders", NULL, NULL);
	assert_int_equal(classify(r, &a).priority, 1);
	req(&a, "DELETE", "/api/orders/1", NULL, NULL);
	assert_int_equal(classify(r, &a).priority, 2);
	/* Tiers. */
	req(&a, "GET", "/", NULL, "tier", "enterprise", NULL);
	assert_string_equal(rule_of(r, &a), "enterprise");
	req(&a, "GET", "/", NULL, "tier", "pro", NULL);
	assert_string_equal(rule_of(r, &a), "pro");
	req(&a, "GET", "/", NULL, "tier", "gold", NULL);
	assert_string_equal(rule_of(r, &a), "free");
	req(&a, "GET", "/", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "free");
	rules_release(r);
}

static void test_full_fixture(void **unused)
{
	struct rules *r, *r2;
	const struct settings *s;
	const struct rule *x;
	const struct shed_config *sh;

	setenv("RL_TEST_PASSWORD", "s3cret!", 1);
	r = rules_load(FIXTURES "/valid-full.yaml", err, sizeof(err));
	if (!r)
		fail_msg("%s", err);
	s = rules_settings(r);
	assert_true(s->has_listen && s->has_threads && s->has_store && s->has_address &&
		    s->has_user && s->has_password && s->has_timeout && s->has_agents);
	assert_string_equal(s->listen.host, "::1");
	assert_string_equal(s->listen.port, "9000");
	assert_int_equal(s->threads, 4);
	assert_int_equal(s->store, SETTINGS_STORE_REDIS);
	assert_string_equal(s->address.path, "/run/redis/redis.sock");
	assert_string_equal(s->address.host, "");
	assert_string_equal(s->user, "spoa");
	assert_string_equal(s->password, "s3cret!");
	assert_int_equal(s->timeout_ms, 2);
	assert_int_equal(s->agents, 3);
	assert_int_equal(rules_on_failure(r), RULES_FAIL_LOCAL);
	assert_int_equal(rules_identity(r)->n, 2);
	assert_string_equal(rules_identity(r)->name[0], "api_key");
	assert_string_equal(rules_identity(r)->name[1], "ip");
	assert_false(rules_shadow(r));
	assert_string_equal(rules_cost_argument(r), "weight");
	assert_string_equal(rules_tier_argument(r), "plan");
	assert_string_equal(rules_default_tier(r)->name, "basic");
	assert_int_equal(rules_default_priority(r), 3);
	assert_int_equal(rules_count(r), 7);

	x = rules_find(r, "basic");
	assert_int_equal(x->nlimits, 2);
	check_limit(x, 0, 10, S, 0, LIMIT_TOKEN_BUCKET);
	check_limit(x, 1, 100, 60 * S, 0, LIMIT_TOKEN_BUCKET);
	assert_false(x->shadow);
	assert_int_equal(x->on_failure, RULES_FAIL_LOCAL);
	assert_int_equal(x->cost, 1);
	x = rules_find(r, "plus");
	assert_int_equal(x->nlimits, 3);
	check_limit(x, 0, 1000, 60 * S, 0, LIMIT_TOKEN_BUCKET);
	check_limit(x, 1, 20000, 3600 * S, 30000, LIMIT_TOKEN_BUCKET);
	check_limit(x, 2, 100000, 86400 * S, 0, LIMIT_SLIDING_WINDOW);
	assert_true(x->shadow);
	assert_int_equal(x->on_failure, RULES_FAIL_CLOSED);
	assert_int_equal(x->cost, 2);
	x = rules_find(r, "unlimited");
	assert_int_equal(x->nlimits, 0);
	x = rules_find(r, "upload");
	assert_int_equal(x->kind, RULES_KIND_ENDPOINT);
	assert_int_equal(x->index, 3);
	check_limit(x, 0, 5, 60 * S, 0, LIMIT_FIXED_WINDOW);
	assert_int_equal(x->cost, 10);
	assert_int_equal(x->on_failure, RULES_FAIL_LOCAL);
	x = rules_find(r, "admin.panel");
	assert_true(x->shadow);
	assert_int_equal(x->on_failure, RULES_FAIL_OPEN);
	assert_non_null(rules_find(r, "team-blue"));
	assert_non_null(rules_find(r, "port-8443"));
	assert_null(rules_find(r, "nope"));
	assert_null(rules_find(r, ""));

	sh = rules_shed(r);
	assert_int_equal(sh->threshold_bp[1], SHED_NEVER);
	assert_int_equal(sh->threshold_bp[2], 9250);
	assert_int_equal(sh->threshold_bp[3], 5000);
	assert_int_equal(sh->ramp_bp, 1225);
	assert_int_equal(sh->retry_after_us, 5 * S);
	assert_string_equal(sh->in_use_arg, "busy");
	assert_string_equal(sh->free_arg, "idle");
	assert_true(sh->shadow);

	/* Settings compare equal across loads of the same file only. */
	r2 = rules_load(FIXTURES "/valid-full.yaml", err, sizeof(err));
	assert_non_null(r2);
	assert_true(settings_equal(rules_settings(r), rules_settings(r2)));
	rules_release(r2);
	r2 = rules_default();
	assert_false(settings_equal(rules_settings(r), rules_settings(r2)));
	rules_release(r2);
	setenv("RL_TEST_PASSWORD", "other", 1);
	r2 = rules_load(FIXTURES "/valid-full.yaml", err, sizeof(err));
	assert_non_null(r2);
	assert_false(settings_equal(rules_settings(r), rules_settings(r2)));
	rules_release(r2);
	rules_release(r);
}

static void test_anchors(void **unused)
{
	struct rules *r = rules_load(FIXTURES "/valid-anchors.yaml", err, sizeof(err));
	struct rules_args a;

	if (!r)
		fail_msg("%s", err);
	assert_int_equal(rules_count(r), 4);
	check_limit(rules_find(r, "trial"), 1, 1000, 3600 * S, 0, LIMIT_TOKEN_BUCKET);
	check_limit(rules_find(r, "search"), 0, 100, 60 * S, 0, LIMIT_TOKEN_BUCKET);
	req(&a, "POST", "/api/search", NULL, NULL);
	assert_int_equal(classify(r, &a).priority, 1);
	assert_string_equal(classify(r, &a).rule->name, "search");
	rules_release(r);
}

/* ---- every error message ------------------------------------------------------------ */

/* Loads one err-*.yaml and compares the message with its "# expect:" line. */
static void check_error_fixture(const char *path)
{
	char line[1024], expected[2048];
	FILE *fp = fopen(path, "r");
	const char *e;
	size_t n;
	struct rules *r;

	assert_non_null(fp);
	if (!fgets(line, sizeof(line), fp))
		fail_msg("%s: empty", path);
	fclose(fp);
	n = strlen(line);
	if (n && line[n - 1] == '\n')
		line[--n] = '\0';
	if (strncmp(line, "# expect: FILE", 14) != 0)
		fail_msg("%s: no \"# expect: FILE...\" first line", path);
	e = line + 14;
	snprintf(expected, sizeof(expected), "%s%s", path, e);
	r = rules_load(path, err, sizeof(err));
	if (r) {
		rules_release(r);
		fail_msg("%s: loaded, expected: %s", path, expected);
	}
	if (strcmp(err, expected) != 0)
		fail_msg("%s:\n  got      %s\n  expected %s", path, err, expected);
}

static void test_error_fixtures(void **unused)
{
	DIR *d = opendir(FIXTURES);
	struct dirent *e;
	int count = 0;

	assert_non_null(d);
	setenv("RL_TEST_EMPTY", "", 1);
	unsetenv("RL_TEST_NOT_SET");
	while ((e = readdir(d)) != NULL) {
		char path[512];
		size_t n = strlen(e->d_name);

		if (strncmp(e->d_name, "err-", 4) != 0 || n < 5 ||
		    strcmp(e->d_name + n - 5, ".yaml") != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", FIXTURES, e->d_name);
		check_error_fixture(path);
		count++;
	}
	closedir(d);
	assert_int_equal(count, ERR_FIXTURES);
}

static void test_file_errors(void **unused)
{
	char path[] = "/tmp/test_rules_XXXXXX";
	char big[64];
	int fd;
	struct rules *r;

	assert_null(rules_load(FIXTURES "/no-such-file.yaml", err, sizeof(err)));
	assert_string_equal(err, FIXTURES "/no-such-file.yaml: cannot open: No such file or directory");
	assert_null(rules_load(FIXTURES, err, sizeof(err)));
	assert_string_equal(err, FIXTURES ": not a regular file");
	assert_null(rules_load(FIXTURES "/empty.yaml", err, sizeof(err)));
	assert_string_equal(err, FIXTURES "/empty.yaml: no settings (the file is empty or only comments); "
				 "write {} to keep every default");

	/* A file over the size limit is refused before it is read. */
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)RULES_FILE_MAX + 1), 0);
	close(fd);
	r = rules_load(path, err, sizeof(err));
	unlink(path);
	assert_null(r);
	snprintf(big, sizeof(big), ": larger than %u bytes", RULES_FILE_MAX);
	assert_int_equal(strncmp(err, path, strlen(path)), 0);
	assert_string_equal(err + strlen(path), big);

	/* Unreadable: not for root, who reads everything. */
	if (geteuid() != 0) {
		char p2[] = "/tmp/test_rules_XXXXXX";

		fd = mkstemp(p2);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, "{}\n", 3), 3);
		close(fd);
		assert_int_equal(chmod(p2, 0), 0);
		r = rules_load(p2, err, sizeof(err));
		unlink(p2);
		assert_null(r);
		assert_int_equal(strncmp(err, p2, strlen(p2)), 0);
		assert_string_equal(err + strlen(p2), ": cannot open: Permission denied");
	}
}

static void test_buffer_errors(void **unused)
{
	char *huge;
	char small[16];

	/* Length over the limit. */
	huge = calloc(1, (size_t)RULES_FILE_MAX + 1);
	assert_non_null(huge);
	assert_null(rules_load_buffer(huge, (size_t)RULES_FILE_MAX + 1, "t.yaml", err, sizeof(err)));
	free(huge);
	assert_string_equal(err, "t.yaml: larger than 4194304 bytes");
	/* Empty, NULL buffer. */
	load_fails("", "t.yaml: no settings (the file is empty or only comments); write {} to keep every default");
	assert_null(rules_load_buffer(NULL, 0, "t.yaml", err, sizeof(err)));
	/* No name, no room for a message: no crash. */
	assert_null(rules_load_buffer("x: [", 4, NULL, NULL, 0));
	assert_null(rules_load_buffer("x: 1", 4, NULL, err, sizeof(err)));
	assert_string_equal(err, "(rules):1:1: unknown key \"x\" (expected one of: listen, threads, store, answer, listen_tls, "
				 "on_store_failure, identity, shadow, cost_argument, override_argument, limits, tiers, endpoints, "
				 "layers, stack, priorities, shedding, lease, paths, max_delayed)");
	/* A short buffer truncates the message, NUL-terminated. */
	assert_null(rules_load_buffer("x: 1", 4, "t.yaml", small, sizeof(small)));
	assert_string_equal(small, "t.yaml:1:1: unk");
	/* The buffer is not read past len (no NUL needed). */
	{
		struct rules *r = rules_load_buffer("threads: 2x", 10, "t.yaml", err, sizeof(err));

		assert_non_null(r);
		assert_int_equal(rules_settings(r)->threads, 2);
		rules_release(r);
	}
	/* Messages never hold raw control bytes. */
	load_fails("listen: \"a\\tb\\u00e9\"\n",
		   "t.yaml:1:9: listen: expected ADDR:PORT such as 127.0.0.1:12345, got \"a\\x09b\\xc3\\xa9\"");
	/* CRLF line ends count lines the same way. */
	load_fails("store:\r\n  type: redis\r\n\r\n  timeout: 0s\r\n",
		   "t.yaml:4:12: store.timeout: expected a duration from 1ms to 60s such as 20ms, got \"0s\"");
}

/* Lists at their caps load; one more is refused. */
static char *repeat(const char *head, const char *fmt, int n)
{
	size_t cap = strlen(head) + (size_t)n * 128 + 1, o;
	char *s = malloc(cap);

	assert_non_null(s);
	o = (size_t)snprintf(s, cap, "%s", head);
	for (int i = 0; i < n; i++)
		o += (size_t)snprintf(s + o, cap - o, fmt, i, i);
	return s;
}

static void test_caps(void **unused)
{
	char *y;
	struct rules *r;

	y = repeat("endpoints:\n", "  - { name: e%d, match: { path: /p%d }, limits: [] }\n", 1024);
	r = load(y);
	assert_int_equal(rules_count(r), 1025);
	rules_release(r);
	free(y);
	y = repeat("endpoints:\n", "  - { name: e%d, match: { path: /p%d }, limits: [] }\n", 1025);
	load_fails(y, "t.yaml:2:3: endpoints: more than 1024 endpoints");
	free(y);

	y = repeat("tiers:\n  default: t0\n", "  t%d: { limits: [\"1%d/1s\"] }\n", 256);
	r = load(y);
	assert_int_equal(rules_count(r), 256);
	rules_release(r);
	free(y);
	y = repeat("tiers:\n  default: t0\n", "  t%d: { limits: [\"1%d/1s\"] }\n", 257);
	load_fails(y, "t.yaml:2:3: tiers: more than 256 tiers");
	free(y);

	y = repeat("priorities:\n  classes:\n", "    - { priority: 1, match: { args: { a%d: \"%d\" } } }\n", 256);
	r = load(y);
	rules_release(r);
	free(y);
	y = repeat("priorities:\n  classes:\n", "    - { priority: 1, match: { args: { a%d: \"%d\" } } }\n", 257);
	load_fails(y, "t.yaml:3:5: priorities.classes: more than 256 classes");
	free(y);

	/* 16 limits, 8 identity arguments, 32 values, 16 arguments: fine. */
	r = load("tiers:\n  t:\n    limits: [1/1s, 1/2s, 1/3s, 1/4s, 1/5s, 1/6s, 1/7s, 1/8s, 1/9s, "
		 "1/10s, 1/11s, 1/12s, 1/13s, 1/14s, 1/15s, 1/16s]\n"
		 "identity: [a, b, c, d, e, f, g, h]\n");
	assert_int_equal(rules_rule_at(r, 0)->nlimits, 16);
	assert_int_equal(rules_identity(r)->n, 8);
	rules_release(r);
	y = repeat("endpoints:\n  - name: x\n    limits: []\n    match:\n      path: [/a", ", /p%d%d", 31);
	strcat(y, "]\n");
	rules_release(load(y));
	free(y);
	y = repeat("endpoints:\n  - name: x\n    limits: []\n    match:\n      args: { a: b", ", a%d: \"%d\"", 15);
	strcat(y, " }\n");
	rules_release(load(y));
	free(y);
}

/* head followed by n copies of unit. */
static char *times(const char *head, const char *unit, int n)
{
	size_t hl = strlen(head), ul = strlen(unit);
	char *s = malloc(hl + (size_t)n * ul + 64);

	assert_non_null(s);
	memcpy(s, head, hl);
	for (int i = 0; i < n; i++)
		memcpy(s + hl + (size_t)i * ul, unit, ul);
	s[hl + (size_t)n * ul] = '\0';
	return s;
}

/* What would make libyaml slow is refused before the document is built:
 * deep nesting, many anchors, many aliases, many values. */
static void test_prescan_caps(void **unused)
{
	char *y;
	struct rules *r;

	/* 32 levels pass the scan (the schema then refuses them). */
	y = times("x: ", "[", 31);
	for (int i = 0; i < 31; i++)
		strcat(y, "]");
	load_fails(y, "t.yaml:1:1: unknown key \"x\" (expected one of: listen, threads, store, answer, listen_tls, "
		   "on_store_failure, identity, shadow, cost_argument, override_argument, limits, tiers, endpoints, "
		   "layers, stack, priorities, shedding, lease, paths, max_delayed)");
	free(y);
	y = times("x: ", "{a: ", 32);
	load_fails(y, "t.yaml:1:128: nested deeper than 32 levels");
	free(y);

	/* 256 anchors and 4096 aliases are fine. */
	y = repeat("identity: [", "&a%d a%d, ", 256);
	strcat(y, "z]\n");
	load_fails(y, "t.yaml:1:11: identity: more than 8 arguments");
	free(y);
	y = repeat("identity: [", "&a%d a%d, ", 257);
	strcat(y, "z]\n");
	load_fails(y, "t.yaml:1:2864: more than 256 anchors (&name)");
	free(y);
	y = times("tiers: { t: { limits: &l [] } }\npriorities: { classes: [", "*l, ", 4096);
	strcat(y, "] }\n");
	load_fails(y, "t.yaml:2:24: priorities.classes: more than 256 classes");
	free(y);
	y = times("tiers: { t: { limits: &l [] } }\npriorities: { classes: [", "*l, ", 4097);
	strcat(y, "] }\n");
	load_fails(y, "t.yaml:2:16409: more than 4096 aliases (*name)");
	free(y);

	/* 200000 values: the root mapping, the key, the list and its items. */
	y = times("identity: [", "a,", 199997);
	strcat(y, "]\n");
	load_fails(y, "t.yaml:1:11: identity: more than 8 arguments");
	free(y);
	y = times("identity: [", "a,", 199998);
	strcat(y, "]\n");
	load_fails(y, "t.yaml:1:400006: more than 200000 values");
	free(y);

	/* Aliases resolve to the shared node (see also valid-anchors.yaml). */
	r = load("tiers:\n  default: a\n  a: &t { limits: [\"1/1s\"], cost: 2 }\n  b: *t\n");
	assert_int_equal(rules_find(r, "b")->cost, 2);
	rules_release(r);
	load_fails("tiers: *t\n", "t.yaml:1:8: YAML: found undefined alias");
}

/* algorithm: leaky is a synonym of token (docs/rules.md, Algorithms): the
 * same limits, so the same policy names, limit names and store keys, with
 * or without a burst, and a burst is allowed with it. */
static void test_leaky_is_token(void **unused)
{
	static const char *const fmt =
		"tiers:\n"
		"  default: free\n"
		"  free: { limits: [{ rate: \"100/1m\", algorithm: %s },\n"
		"                   { rate: \"20/1s\", burst: 50, algorithm: %s }] }\n"
		"  pro: { limits: [{ rate: \"3/10s\", burst: 1, algorithm: %s }] }\n"
		"endpoints: [ { name: e, match: { path: /e },\n"
		"               limits: [{ rate: \"7/1h\", algorithm: %s }] } ]\n";
	char token[1024], leaky[1024];
	struct rules *rt, *rl;

	snprintf(token, sizeof(token), fmt, "token", "token", "token", "token");
	snprintf(leaky, sizeof(leaky), fmt, "leaky", "leaky", "leaky", "leaky");
	rt = load(token);
	rl = load(leaky);
	check_limit(rules_find(rl, "free"), 0, 100, 60 * S, 0, LIMIT_TOKEN_BUCKET);
	check_limit(rules_find(rl, "free"), 1, 20, S, 50, LIMIT_TOKEN_BUCKET);
	check_limit(rules_find(rl, "pro"), 0, 3, 10 * S, 1, LIMIT_TOKEN_BUCKET);
	check_limit(rules_find(rl, "e"), 0, 7, 3600 * S, 0, LIMIT_TOKEN_BUCKET);
	assert_int_equal(rules_count(rl), rules_count(rt));
	for (size_t i = 0; i < rules_count(rl); i++) {
		const struct rule *t = rules_rule_at(rt, i), *l = rules_rule_at(rl, i);

		assert_string_equal(l->name, t->name);
		assert_int_equal(l->nlimits, t->nlimits);
		assert_memory_equal(l->limits, t->limits, sizeof(l->limits));
		assert_memory_equal(l->local, t->local, sizeof(l->local));
		assert_string_equal(l->policy, t->policy);
		for (size_t k = 0; k < l->nlimits; k++) {
			assert_string_equal(l->pname[k], t->pname[k]);
			assert_string_equal(l->lid[k], t->lid[k]);
			assert_int_equal(l->lidh[k], t->lidh[k]);
		}
	}
	rules_release(rt);
	rules_release(rl);
	/* The windows still refuse a burst; the word is whole. */
	load_fails("limits: [{ rate: \"5/1s\", burst: 2, algorithm: sliding }]",
		   "t.yaml:1:26: limits[0].burst: burst applies to the token bucket only "
		   "(algorithm: token)");
	load_fails("limits: [{ rate: \"5/1s\", algorithm: Leaky }]",
		   "t.yaml:1:37: limits[0].algorithm: expected token, leaky, sliding, fixed or log, "
		   "got \"Leaky\"");
}

/* The top-level limits: of a file without tiers are those of the
 * built-in rule "default". */
static void test_top_level_limits(void **unused)
{
	struct rules *r;
	struct rules_args a;

	r = load("limits: [\"5/1s\", { rate: \"50/1m\", algorithm: fixed }]\n"
		 "endpoints: [ { name: e, match: { path: /e }, limits: [\"1/1s\"] } ]\n");
	assert_int_equal(rules_count(r), 2);
	assert_string_equal(rules_default_tier(r)->name, "default");
	assert_int_equal(rules_default_tier(r)->kind, RULES_KIND_DEFAULT);
	assert_int_equal(rules_default_tier(r)->nlimits, 2);
	check_limit(rules_default_tier(r), 0, 5, S, 0, LIMIT_TOKEN_BUCKET);
	check_limit(rules_default_tier(r), 1, 50, 60 * S, 0, LIMIT_FIXED_WINDOW);
	req(&a, "GET", "/", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default");
	req(&a, "GET", "/e", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "e");
	rules_release(r);
	r = load("limits: []");
	assert_int_equal(rules_default_tier(r)->nlimits, 0);
	rules_release(r);
	/* A log, named apart from a sliding window of the same figures: a
	 * limit that changes algorithm starts fresh (its keys change). */
	r = load("limits: [{ rate: \"1000/1m\", algorithm: log }, "
		 "{ rate: \"5/1s\", algorithm: sliding }]\n");
	check_limit(rules_default_tier(r), 0, 1000, 60 * S, 0, LIMIT_LOG);
	assert_string_equal(rules_default_tier(r)->lid[0], "l1000/60000000/0");
	assert_string_equal(rules_default_tier(r)->lid[1], "s5/1000000/0");
	rules_release(r);
	load_fails("limits: [{ rate: \"1001/1m\", algorithm: log }]",
		   "t.yaml:1:18: limits[0].rate: '1001/1m': a log's quota is at most 1000 (it "
		   "keeps every request of its period; algorithm: sliding above)");
	load_fails("limits: 5/1s", "t.yaml:1:9: limits: expected a list of limits, got \"5/1s\"");
	load_fails("limits: [\"5/1s\", \"6/1s\"]",
		   "t.yaml:1:18: limits[1]: a limit of period 1s is already in this rule (limits[0])");
}

/* Every allocation failure gives "out of memory", leaks nothing (under
 * ASan) and the same load then succeeds. */
static void test_out_of_memory(void **unused)
{
	static const char *const files[] = {FIXTURES "/valid-full.yaml", EXAMPLE};
	int failures = 0;

	setenv("RL_TEST_PASSWORD", "pw", 1);
	for (size_t f = 0; f < 2; f++) {
		for (long n = 0; n < 10000; n++) {
			struct rules *r;
			char expected[256];

			xalloc_fail_after(n);
			r = rules_load(files[f], err, sizeof(err));
			xalloc_fail_after(-1);
			if (r) {
				rules_release(r);
				break;
			}
			snprintf(expected, sizeof(expected), "%s: out of memory", files[f]);
			assert_string_equal(err, expected);
			failures++;
		}
	}
	assert_true(failures > 10);
	xalloc_fail_after(0);
	assert_null(rules_default());
	xalloc_fail_after(-1);
}

/* Root keys besides the rules; the settings themselves are tested in
 * test_settings.c. */
static void test_root_values(void **unused)
{
	struct rules *r;

	r = load("threads: 256\nstore: { type: redis, timeout: 60s, agents: 10000 }\nshadow: true\n"
		 "identity: ip\non_store_failure: closed\n");
	assert_int_equal(rules_settings(r)->threads, 256);
	assert_int_equal(rules_settings(r)->timeout_ms, 60000);
	assert_int_equal(rules_settings(r)->agents, 10000);
	assert_true(rules_shadow(r));
	assert_int_equal(rules_identity(r)->n, 1);
	assert_string_equal(rules_identity(r)->name[0], "ip");
	assert_int_equal(rules_on_failure(r), RULES_FAIL_CLOSED);
	assert_int_equal(rules_rule_at(r, 0)->on_failure, RULES_FAIL_CLOSED);
	rules_release(r);
	load_fails("listen: \"a:0\"", "t.yaml:1:9: listen: expected ADDR:PORT such as 127.0.0.1:12345, got \"a:0\"");
	load_fails("shedding: { ramp: 10.% }", "t.yaml:1:19: shedding.ramp: expected a percentage from 0% to 100% such as 80%, got \"10.%\"");
	load_fails("shedding: { ramp: 1.234% }", "t.yaml:1:19: shedding.ramp: expected a percentage from 0% to 100% such as 80%, got \"1.234%\"");
	load_fails("shedding: { ramp: \"%\" }", "t.yaml:1:19: shedding.ramp: expected a percentage from 0% to 100% such as 80%, got \"%\"");
	r = load("shedding: { ramp: 100%, thresholds: { 1: 100%, 2: 1%, 3: 1% } }");
	load_fails("shedding: { thresholds: { 3: 0.99% } }", "t.yaml:1:30: shedding.thresholds.3: expected a percentage from 1% to 100% (or off) such as 80%, got \"0.99%\"");
	assert_int_equal(rules_shed(r)->ramp_bp, 10000);
	assert_int_equal(rules_shed(r)->threshold_bp[1], 10000);
	assert_int_equal(rules_shed(r)->threshold_bp[2], 100);
	rules_release(r);
}

/* ---- classification -------------------------------------------------------------------- */

static const char *const tiers_yaml =
	"on_store_failure: closed\n"
	"cost_argument: weight\n"
	"tiers:\n"
	"  default: free\n"
	"  free: { limits: [\"100/1m\"] }\n"
	"  pro: { limits: [\"1000/1m\"], shadow: true, on_store_failure: local }\n"
	"  internal: { limits: [], cost: 3 }\n";

static void test_first_match_and_paths(void **unused)
{
	struct rules_args a;
	struct rules *r = load(
		"endpoints:\n"
		"  - { name: first, match: { path: /api }, limits: [\"1/1s\"] }\n"
		"  - { name: second, match: { path: /api/search }, limits: [\"2/1s\"] }\n"
		"  - { name: static, match: { path: /static/ }, limits: [\"3/1s\"] }\n"
		"  - { name: root, match: { path: / , method: OPTIONS }, limits: [] }\n");

	req(&a, NULL, "/api/search", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "first"); /* first match wins */
	req(&a, NULL, "/api", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "first");
	req(&a, NULL, "/api/", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "first");
	req(&a, NULL, "/api?q=1", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "first");
	req(&a, NULL, "/apiary", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default"); /* not at a segment boundary */
	req(&a, NULL, "/ap", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default");
	req(&a, NULL, "/API", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "first"); /* normalised (test_paths_normalised) */
	req(&a, NULL, "/static/x.css", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "static");
	req(&a, NULL, "/static/", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "static");
	req(&a, NULL, "/static", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default");
	req(&a, NULL, "/staticfile", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default");
	req(&a, "OPTIONS", "/anything", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "root");
	req(&a, "GET", "/anything", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default");
	/* Missing or non-string path: no path condition holds. */
	req(&a, NULL, NULL, NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default");
	memset(&a, 0, sizeof(a));
	add(&a, "path", spop_int64(1));
	assert_string_equal(rule_of(r, &a), "default");
	memset(&a, 0, sizeof(a));
	add(&a, "path", spop_null());
	assert_string_equal(rule_of(r, &a), "default");
	memset(&a, 0, sizeof(a));
	add(&a, "path", bin("/api/x"));
	assert_string_equal(rule_of(r, &a), "first");
	/* A path with a NUL byte compares as bytes. */
	memset(&a, 0, sizeof(a));
	add(&a, "path", spop_strn("/api\0x", 6));
	assert_string_equal(rule_of(r, &a), "default");
	rules_release(r);
}

/* A path is matched in its normal form (urlpath.h): every spelling of
 * /login an application reads as /login is the login rule, however long;
 * `paths: raw` compares the bytes sent. */
static void test_paths_normalised(void **unused)
{
	static const char *const login[] = {
		"/login", "/%6cogin", "/%6Cogin", "//login", "/./login", "/x/../login",
		"/login;jsessionid=1", "/LOGIN", "/login%2f", "/login/", "/login?next=/x",
		"/a/b/../c/../../login", "/../login", "/%2e%2e/login", "/x/..;/login",
		"/login/sub/..", "/login/.", "/x%2f..%2flogin%3bx",
	};
	static const char *const other[] = {
		"/loginx", "/log", "/login%252f", "/x/%252e%252e/login", "/login/../x", "/%00login",
		"/api/search%3f", "/",
	};
	static const char *const yaml =
		"endpoints:\n"
		"  - { name: login, match: { path: /login }, limits: [\"1/1s\"] }\n"
		"  - { name: search, match: { path: [/api/search, /api/v2/] }, limits: [\"2/1s\"] }\n"
		"priorities:\n"
		"  classes: [ { priority: 0, match: { path: /pay } } ]\n";
	struct rules_args a;
	struct rules *r = load(yaml), *raw;
	struct rules_verdict v;
	char *path;
	size_t n;

	assert_false(rules_paths_raw(r));
	for (size_t i = 0; i < sizeof(login) / sizeof(login[0]); i++) {
		req(&a, NULL, login[i], NULL, NULL);
		if (strcmp(rule_of(r, &a), "login") != 0)
			fail_msg("%s is not the login rule", login[i]);
	}
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
		req(&a, NULL, other[i], NULL, NULL);
		if (strcmp(rule_of(r, &a), "default") != 0)
			fail_msg("%s is not the default rule", other[i]);
	}
	req(&a, NULL, "/API/%53earch?Q", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "search");
	req(&a, NULL, "/api/V2", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default"); /* /api/v2/ is below it */
	req(&a, NULL, "/API/V2/.", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "search");
	/* priority classes read the same path */
	req(&a, "POST", "/x/../PAY", NULL, NULL);
	v = classify(r, &a);
	assert_int_equal(v.priority, 0);
	assert_string_equal(v.rule->name, "default");

	/* Long paths, longer than what classification keeps of them: the
	 * dot segments after /login never push it out, and a ".." at the
	 * very end is resolved. */
	n = 6 + 2 * 10000;
	path = malloc(n + 16);
	assert_non_null(path);
	memcpy(path, "/login", 6);
	for (size_t i = 0; i < 10000; i++)
		memcpy(path + 6 + 2 * i, "/.", 2);
	path[n] = '\0';
	req(&a, NULL, path, NULL, NULL);
	assert_string_equal(rule_of(r, &a), "login");
	memcpy(path + n, "/x/../../y", 11);
	req(&a, NULL, path, NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default"); /* /y */
	memset(path, 'a', n);
	path[0] = '/';
	memcpy(path + n, "/../login", 10);
	req(&a, NULL, path, NULL, NULL);
	assert_string_equal(rule_of(r, &a), "login");
	memcpy(path + n, "/login", 7);
	req(&a, NULL, path, NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default");
	free(path);
	rules_release(r);

	/* paths: raw: the bytes as sent, case and all */
	raw = load("paths: raw\n"
		   "endpoints:\n"
		   "  - { name: login, match: { path: /login }, limits: [\"1/1s\"] }\n"
		   "  - { name: upper, match: { path: [/API, \"/a%2Fb\", //x] }, limits: [] }\n");
	assert_true(rules_paths_raw(raw));
	req(&a, NULL, "/login/x", NULL, NULL);
	assert_string_equal(rule_of(raw, &a), "login");
	req(&a, NULL, "/LOGIN", NULL, NULL);
	assert_string_equal(rule_of(raw, &a), "default");
	req(&a, NULL, "/x/../login", NULL, NULL);
	assert_string_equal(rule_of(raw, &a), "default");
	req(&a, NULL, "/API/x", NULL, NULL);
	assert_string_equal(rule_of(raw, &a), "upper");
	req(&a, NULL, "/a%2Fb", NULL, NULL);
	assert_string_equal(rule_of(raw, &a), "upper");
	req(&a, NULL, "/a/b", NULL, NULL);
	assert_string_equal(rule_of(raw, &a), "default");
	rules_release(raw);
	r = load("paths: normalised\n");
	assert_false(rules_paths_raw(r));
	rules_release(r);

	/* A value no normal form can equal would never match: refused, with
	 * the one meant. */
	load_fails("endpoints: [ { name: e, match: { path: /API/Search }, limits: [] } ]",
		   "t.yaml:1:40: endpoints[0].match.path: \"/API/Search\": paths are matched "
		   "normalised, write \"/api/search\" (or paths: raw)");
	load_fails("endpoints: [ { name: e, match: { path: [/a, /a//b/./c/..] }, limits: [] } ]",
		   "t.yaml:1:45: endpoints[0].match.path[1]: \"/a//b/./c/..\": paths are matched "
		   "normalised, write \"/a/b/\" (or paths: raw)");
	load_fails("priorities: { classes: [ { priority: 0, match: { path: \"/a;v=1\" } } ] }",
		   "t.yaml:1:56: priorities.classes[0].match.path: \"/a;v=1\": paths are matched "
		   "normalised, write \"/a\" (or paths: raw)");
	load_fails("endpoints: [ { name: e, match: { path: \"/%41\" }, limits: [] } ]",
		   "t.yaml:1:40: endpoints[0].match.path: \"/%41\": paths are matched "
		   "normalised, write \"/a\" (or paths: raw)");
	load_fails("paths: normalized", "t.yaml:1:8: paths: expected normalised or raw, got \"normalized\"");
	/* (read before the conditions it checks, wherever it is written) */
	raw = load("endpoints: [ { name: e, match: { path: /API }, limits: [] } ]\npaths: raw\n");
	rules_release(raw);
	/* values of up to RULES_PATH_MAX bytes */
	{
		char y[RULES_PATH_MAX + 128], e[256];

		n = (size_t)snprintf(y, sizeof(y), "endpoints: [ { name: e, match: { path: /");
		memset(y + n, 'a', RULES_PATH_MAX - 1);
		snprintf(y + n + RULES_PATH_MAX - 1, sizeof(y) - n - RULES_PATH_MAX + 1,
			 " }, limits: [] } ]");
		r = load(y);
		path = malloc(RULES_PATH_MAX + 8);
		assert_non_null(path);
		path[0] = '/';
		memset(path + 1, 'A', RULES_PATH_MAX - 1);
		memcpy(path + RULES_PATH_MAX, "/x", 3);
		req(&a, NULL, path, NULL, NULL);
		assert_string_equal(rule_of(r, &a), "e");
		path[RULES_PATH_MAX] = 'x';
		req(&a, NULL, path, NULL, NULL);
		assert_string_equal(rule_of(r, &a), "default");
		free(path);
		rules_release(r);
		memmove(y + n + 1, y + n, strlen(y + n) + 1);
		y[n] = 'a';
		snprintf(e, sizeof(e), "t.yaml:1:40: endpoints[0].match.path: longer than %d bytes",
			 RULES_PATH_MAX);
		load_fails(y, e);
	}
}

static void test_method(void **unused)
{
	struct rules_args a;
	struct rules *r = load(
		"endpoints:\n"
		"  - { name: writes, match: { method: [POST, PUT], path: /api }, limits: [] }\n"
		"  - { name: reads, match: { method: GET }, limits: [] }\n");

	req(&a, "POST", "/api/x", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "writes");
	req(&a, "PUT", "/api", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "writes");
	req(&a, "POST", "/other", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default"); /* both conditions needed */
	req(&a, "post", "/api", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default"); /* case-sensitive */
	req(&a, "POSTX", "/api", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default");
	req(&a, "POS", "/api", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default");
	req(&a, "GET", "/api", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "reads");
	req(&a, NULL, "/api", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default");
	rules_release(r);
}

static void test_host(void **unused)
{
	struct rules_args a;
	struct rules *r = load(
		"endpoints:\n"
		"  - { name: tls, match: { host: \"API.example.com:8443\" }, limits: [] }\n"
		"  - { name: api, match: { host: API.Example.com }, limits: [] }\n"
		"  - { name: v6, match: { host: \"[::1]\" }, limits: [] }\n");

	req(&a, NULL, NULL, "api.example.com", NULL);
	assert_string_equal(rule_of(r, &a), "api");
	req(&a, NULL, NULL, "API.EXAMPLE.COM", NULL);
	assert_string_equal(rule_of(r, &a), "api");
	req(&a, NULL, NULL, "api.example.com:80", NULL);
	assert_string_equal(rule_of(r, &a), "api"); /* port ignored */
	req(&a, NULL, NULL, "Api.Example.Com:8443", NULL);
	assert_string_equal(rule_of(r, &a), "tls"); /* port given: must match */
	req(&a, NULL, NULL, "api.example.com:84431", NULL);
	assert_string_equal(rule_of(r, &a), "api");
	req(&a, NULL, NULL, "api.example.com.evil.net", NULL);
	assert_string_equal(rule_of(r, &a), "default");
	req(&a, NULL, NULL, "xapi.example.com", NULL);
	assert_string_equal(rule_of(r, &a), "default");
	req(&a, NULL, NULL, "[::1]:8080", NULL);
	assert_string_equal(rule_of(r, &a), "v6");
	req(&a, NULL, NULL, "[::1]", NULL);
	assert_string_equal(rule_of(r, &a), "v6");
	req(&a, NULL, NULL, "::1", NULL);
	assert_string_equal(rule_of(r, &a), "default");
	req(&a, NULL, NULL, "", NULL);
	assert_string_equal(rule_of(r, &a), "default");
	req(&a, NULL, NULL, NULL, NULL);
	assert_string_equal(rule_of(r, &a), "default");
	rules_release(r);
}

static void test_args_match(void **unused)
{
	struct rules_args a;
	uint8_t v4[4] = {10, 0, 0, 1};
	uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, [15] = 1};
	struct spop_data d;
	struct rules *r = load(
		"endpoints:\n"
		"  - { name: team, match: { args: { x_team: [blue, navy] } }, limits: [] }\n"
		"  - { name: both, match: { args: { a: \"1\", b: \"\" } }, limits: [] }\n"
		"  - { name: flag, match: { args: { f: \"true\" } }, limits: [] }\n"
		"  - { name: neg, match: { args: { n: \"-5\" } }, limits: [] }\n"
		"  - { name: v4, match: { args: { src: 10.0.0.1 } }, limits: [] }\n"
		"  - { name: v6, match: { args: { src: \"2001:db8::1\" } }, limits: [] }\n");

	req(&a, NULL, NULL, NULL, "x_team", "blue", NULL);
	assert_string_equal(rule_of(r, &a), "team");
	req(&a, NULL, NULL, NULL, "x_team", "navy", NULL);
	assert_string_equal(rule_of(r, &a), "team");
	req(&a, NULL, NULL, NULL, "x_team", "Blue", NULL);
	assert_string_equal(rule_of(r, &a), "default");
	req(&a, NULL, NULL, NULL, "x_team", "blu", NULL);
	assert_string_equal(rule_of(r, &a), "default");
	req(&a, NULL, NULL, NULL, "x_team", "bluee", NULL);
	assert_string_equal(rule_of(r, &a), "default");
	req(&a, NULL, NULL, NULL, "x_tea", "blue", NULL);
	assert_string_equal(rule_of(r, &a), "default");
	memset(&a, 0, sizeof(a));
	add(&a, "x_team", bin("blue"));
	assert_string_equal(rule_of(r, &a), "team");
	memset(&a, 0, sizeof(a));
	add(&a, "x_team", spop_null());
	assert_string_equal(rule_of(r, &a), "default");
	/* Every argument condition must hold; "" matches an empty string. */
	req(&a, NULL, NULL, NULL, "a", "1", "b", "", NULL);
	assert_string_equal(rule_of(r, &a), "both");
	req(&a, NULL, NULL, NULL, "a", "1", NULL);
	assert_string_equal(rule_of(r, &a), "default");
	memset(&a, 0, sizeof(a));
	add(&a, "a", spop_int64(1));
	add(&a, "b", spop_null());
	assert_string_equal(rule_of(r, &a), "default"); /* NULL is not "" */
	memset(&a, 0, sizeof(a));
	add(&a, "a", spop_int64(1));
	add(&a, "b", bin(""));
	assert_string_equal(rule_of(r, &a), "both"); /* integers as decimal text */
	memset(&a, 0, sizeof(a));
	d.type = SPOP_T_UINT32;
	d.u.u32 = 1;
	add(&a, "a", d);
	add(&a, "b", str(""));
	assert_string_equal(rule_of(r, &a), "both");
	memset(&a, 0, sizeof(a));
	add(&a, "f", spop_bool(1));
	assert_string_equal(rule_of(r, &a), "flag");
	memset(&a, 0, sizeof(a));
	add(&a, "f", spop_bool(0));
	assert_string_equal(rule_of(r, &a), "default");
	memset(&a, 0, sizeof(a));
	add(&a, "n", spop_int64(-5));
	assert_string_equal(rule_of(r, &a), "neg");
	memset(&a, 0, sizeof(a));
	d.type = SPOP_T_INT32;
	d.u.i32 = -5;
	add(&a, "n", d);
	assert_string_equal(rule_of(r, &a), "neg");
	memset(&a, 0, sizeof(a));
	d.type = SPOP_T_IPV4;
	memcpy(d.u.ipv4, v4, 4);
	add(&a, "src", d);
	assert_string_equal(rule_of(r, &a), "v4");
	memset(&a, 0, sizeof(a));
	d.type = SPOP_T_IPV6;
	memcpy(d.u.ipv6, v6, 16);
	add(&a, "src", d);
	assert_string_equal(rule_of(r, &a), "v6");
	memset(&a, 0, sizeof(a));
	d.type = SPOP_T_UINT64;
	d.u.u64 = UINT64_MAX;
	add(&a, "src", d);
	assert_string_equal(rule_of(r, &a), "default");
	rules_release(r);
}

static void test_tiers(void **unused)
{
	struct rules_args a;
	struct rules_verdict v;
	struct rules *r = load(tiers_yaml);

	assert_string_equal(rules_default_tier(r)->name, "free");
	req(&a, NULL, NULL, NULL, "tier", "pro", NULL);
	assert_string_equal(rule_of(r, &a), "pro");
	req(&a, NULL, NULL, NULL, "tier", "internal", NULL);
	v = classify(r, &a);
	assert_string_equal(v.rule->name, "internal");
	assert_int_equal(v.rule->nlimits, 0);
	memset(&a, 0, sizeof(a));
	add(&a, "tier", bin("pro"));
	assert_string_equal(rule_of(r, &a), "pro");
	/* Absent, empty, NULL, unknown, other case, not a string: default. */
	req(&a, NULL, NULL, NULL, NULL);
	assert_string_equal(rule_of(r, &a), "free");
	req(&a, NULL, NULL, NULL, "tier", "", NULL);
	assert_string_equal(rule_of(r, &a), "free");
	req(&a, NULL, NULL, NULL, "tier", "Pro", NULL);
	assert_string_equal(rule_of(r, &a), "free");
	req(&a, NULL, NULL, NULL, "tier", "gold", NULL);
	assert_string_equal(rule_of(r, &a), "free");
	req(&a, NULL, NULL, NULL, "tier", "default", NULL);
	assert_string_equal(rule_of(r, &a), "free");
	req(&a, NULL, NULL, NULL, "tier", "pro ", NULL);
	assert_string_equal(rule_of(r, &a), "free");
	req(&a, NULL, NULL, NULL, "tier", "a-tier-name-longer-than-31-bytes!", NULL);
	assert_string_equal(rule_of(r, &a), "free");
	memset(&a, 0, sizeof(a));
	add(&a, "tier", spop_null());
	assert_string_equal(rule_of(r, &a), "free");
	memset(&a, 0, sizeof(a));
	add(&a, "tier", spop_int64(1));
	assert_string_equal(rule_of(r, &a), "free");
	rules_release(r);

	/* A single tier is the default without saying so; the argument can
	 * be renamed. */
	r = load("tiers: { argument: plan, only: { limits: [\"5/1s\"] } }");
	assert_string_equal(rules_default_tier(r)->name, "only");
	req(&a, NULL, NULL, NULL, "tier", "only", NULL);
	assert_string_equal(rule_of(r, &a), "only");
	rules_release(r);
	r = load("tiers: { argument: plan, default: b, a: { limits: [] }, b: { limits: [] } }");
	req(&a, NULL, NULL, NULL, "tier", "a", NULL);
	assert_string_equal(rule_of(r, &a), "b");
	req(&a, NULL, NULL, NULL, "plan", "a", NULL);
	assert_string_equal(rule_of(r, &a), "a");
	rules_release(r);
}

static void test_endpoints_replace_tiers(void **unused)
{
	struct rules_args a;
	struct rules_verdict v;
	char *y = malloc(4096);
	struct rules *r;

	assert_non_null(y);
	snprintf(y, 4096, "%s%s", tiers_yaml,
		 "endpoints:\n"
		 "  - { name: pro-search, match: { tier: pro, path: /search }, limits: [\"7/1s\"] }\n"
		 "  - { name: search, match: { path: /search }, limits: [\"5/1s\", \"50/1m\"], cost: 4 }\n"
		 "  - { name: login, match: { path: /login }, limits: [\"3/1m\"], shadow: true, on_store_failure: open }\n"
		 "  - { name: free-or-internal, match: { tier: [free, internal], path: /x }, limits: [] }\n");
	r = load(y);
	free(y);
	req(&a, "GET", "/search", NULL, "tier", "pro", NULL);
	v = classify(r, &a);
	assert_string_equal(v.rule->name, "pro-search");
	assert_string_equal(v.tier->name, "pro");
	check_limit(v.rule, 0, 7, S, 0, LIMIT_TOKEN_BUCKET);
	assert_int_equal(v.rule->nlimits, 1);
	/* The endpoint's own settings apply, not the tier's: pro is in
	 * shadow mode and fails local, pro-search neither. */
	assert_false(v.shadow);
	assert_int_equal(v.on_failure, RULES_FAIL_CLOSED);
	req(&a, "GET", "/search", NULL, NULL);
	v = classify(r, &a);
	assert_string_equal(v.rule->name, "search");
	assert_string_equal(v.tier->name, "free");
	assert_int_equal(v.rule->nlimits, 2);
	assert_int_equal(v.cost, 4);
	req(&a, "GET", "/search", NULL, "tier", "gold", NULL); /* unknown: free */
	assert_string_equal(rule_of(r, &a), "search");
	req(&a, "GET", "/login", NULL, "tier", "pro", NULL);
	v = classify(r, &a);
	assert_string_equal(v.rule->name, "login");
	assert_true(v.shadow);
	assert_int_equal(v.on_failure, RULES_FAIL_OPEN);
	req(&a, "GET", "/other", NULL, "tier", "pro", NULL);
	v = classify(r, &a);
	assert_string_equal(v.rule->name, "pro");
	assert_true(v.shadow);
	assert_int_equal(v.on_failure, RULES_FAIL_LOCAL);
	req(&a, "GET", "/x", NULL, NULL);
	assert_string_equal(rule_of(r, &a), "free-or-internal"); /* default tier */
	req(&a, "GET", "/x", NULL, "tier", "internal", NULL);
	assert_string_equal(rule_of(r, &a), "free-or-internal");
	req(&a, "GET", "/x", NULL, "tier", "pro", NULL);
	assert_string_equal(rule_of(r, &a), "pro");
	rules_release(r);
}

static void test_priorities(void **unused)
{
	struct rules_args a;
	struct rules *r = load(
		"tiers: { default: free, free: { limits: [] }, vip: { limits: [] } }\n"
		"priorities:\n"
		"  default: 1\n"
		"  classes:\n"
		"    - { priority: 0, match: { path: /pay } }\n"
		"    - { priority: 3, match: { args: { test: \"1\" } } }\n"
		"    - { priority: 0, match: { tier: vip } }\n"
		"    - { priority: 2, match: { method: [GET, HEAD] } }\n");

	req(&a, "GET", "/pay", NULL, "test", "1", NULL);
	assert_int_equal(classify(r, &a).priority, 0); /* first match wins */
	req(&a, "GET", "/x", NULL, "test", "1", "tier", "vip", NULL);
	assert_int_equal(classify(r, &a).priority, 3);
	req(&a, "GET", "/x", NULL, "tier", "vip", NULL);
	assert_int_equal(classify(r, &a).priority, 0);
	req(&a, "HEAD", "/x", NULL, NULL);
	assert_int_equal(classify(r, &a).priority, 2);
	req(&a, "POST", "/x", NULL, NULL);
	assert_int_equal(classify(r, &a).priority, 1); /* default */
	req(&a, NULL, NULL, NULL, NULL);
	assert_int_equal(classify(r, &a).priority, 1);
	rules_release(r);
	r = load("priorities: { default: 0 }");
	req(&a, "GET", "/", NULL, NULL);
	assert_int_equal(classify(r, &a).priority, 0);
	rules_release(r);
}

/* shedding.adaptive: its settings, defaults, and the arguments it reads
 * (the backend and request_id, checked against traffic; the load
 * figures are not, when adaptive is all the shedding says). */
static void test_adaptive(void **unused)
{
	const struct adaptive_config *ac;
	const struct spop_data *be = NULL, *id = NULL;
	struct rules_request rq;
	struct rules_args a;
	struct rules *r;
	bool seen_be = false, seen_id = false, seen_load = false;

	r = load("tiers: { t: { limits: [1/1s] } }");
	assert_null(rules_adaptive(r));
	rules_release(r);
	r = load("shedding: { adaptive: { target: 80ms, min: 3, max: 400, initial: 50, "
		 "timeout: 10s, backend: be_name } }");
	ac = rules_adaptive(r);
	assert_non_null(ac);
	assert_int_equal(ac->target_us, 80000);
	assert_int_equal(ac->min, 3);
	assert_int_equal(ac->max, 400);
	assert_int_equal(ac->initial, 50);
	assert_int_equal(ac->timeout_us, 10000000);
	assert_string_equal(ac->backend_arg, "be_name");
	for (size_t i = 0; rules_checked_name(r, i); i++) {
		seen_be |= strcmp(rules_checked_name(r, i), "be_name") == 0;
		seen_id |= strcmp(rules_checked_name(r, i), "request_id") == 0;
		seen_load |= strcmp(rules_checked_name(r, i), "be_in_use") == 0;
	}
	assert_true(seen_be && seen_id);
	assert_false(seen_load);
	req(&a, NULL, NULL, NULL, "be_name", "app", "request_id", "r-1", NULL);
	rules_request_from_args(r, &a, &rq);
	assert_true(rules_adaptive_args(r, &rq, &be, &id));
	assert_int_equal(be->u.str.len, 3);
	assert_memory_equal(be->u.str.ptr, "app", 3);
	assert_non_null(id);
	req(&a, NULL, NULL, NULL, "be_name", "", "request_id", "r-1", NULL);
	rules_request_from_args(r, &a, &rq);
	assert_false(rules_adaptive_args(r, &rq, &be, &id));
	rules_release(r);
	/* the defaults */
	r = load("shedding: { adaptive: { target: 50ms } }");
	ac = rules_adaptive(r);
	assert_int_equal(ac->min, 2);
	assert_int_equal(ac->max, 1000);
	assert_int_equal(ac->initial, 1000);
	assert_int_equal(ac->timeout_us, 30000000);
	assert_string_equal(ac->backend_arg, "backend");
	rules_release(r);
}

static void test_shadow(void **unused)
{
	struct rules_args a;
	struct rules_verdict v;
	struct rules *r;

	/* Per rule: only that rule's limits. */
	r = load(tiers_yaml);
	req(&a, NULL, NULL, NULL, "tier", "pro", NULL);
	v = classify(r, &a);
	assert_true(v.shadow);
	assert_false(v.shed_shadow);
	req(&a, NULL, NULL, NULL, "tier", "free", NULL);
	v = classify(r, &a);
	assert_false(v.shadow);
	assert_false(v.shed_shadow);
	rules_release(r);
	/* Global: everything, shedding included, even a rule that says
	 * shadow: false. */
	r = load("shadow: true\ntiers: { t: { limits: [1/1s], shadow: false } }");
	req(&a, NULL, NULL, NULL, NULL);
	v = classify(r, &a);
	assert_true(v.shadow);
	assert_true(v.shed_shadow);
	assert_false(v.rule->shadow);
	rules_release(r);
	/* Shedding alone. */
	r = load("shedding: { shadow: true }");
	v = classify(r, &a);
	assert_false(v.shadow);
	assert_true(v.shed_shadow);
	rules_release(r);
}

static void test_failure_policy(void **unused)
{
	struct rules_args a;
	struct rules *r = load(tiers_yaml);

	req(&a, NULL, NULL, NULL, NULL);
	assert_int_equal(classify(r, &a).on_failure, RULES_FAIL_CLOSED); /* file default */
	req(&a, NULL, NULL, NULL, "tier", "pro", NULL);
	assert_int_equal(classify(r, &a).on_failure, RULES_FAIL_LOCAL); /* its own */
	rules_release(r);
	/* Without a file default: open. */
	r = load("tiers: { t: { limits: [] } }\n"
		 "endpoints: [ { name: e, match: { path: /e }, limits: [], on_store_failure: closed } ]");
	req(&a, NULL, "/", NULL, NULL);
	assert_int_equal(classify(r, &a).on_failure, RULES_FAIL_OPEN);
	req(&a, NULL, "/e", NULL, NULL);
	assert_int_equal(classify(r, &a).on_failure, RULES_FAIL_CLOSED);
	rules_release(r);
	assert_string_equal(rules_failure_str(RULES_FAIL_OPEN), "open");
	assert_string_equal(rules_failure_str(RULES_FAIL_CLOSED), "closed");
	assert_string_equal(rules_failure_str(RULES_FAIL_LOCAL), "local");
}

static void test_cost(void **unused)
{
	struct rules_args a;
	struct spop_data d;
	struct rules *r = load(tiers_yaml);

#define COST_OF(data, tier)                                                    \
	(memset(&a, 0, sizeof(a)), add(&a, "weight", data),                     \
	 add(&a, "tier", str(tier)), classify(r, &a).cost)
	assert_int_equal(COST_OF(spop_int64(5), "free"), 5);
	assert_int_equal(COST_OF(spop_int64(5), "internal"), 5);     /* argument wins */
	assert_int_equal(COST_OF(spop_int64(0), "internal"), 3);     /* else the rule's */
	assert_int_equal(COST_OF(spop_int64(-2), "free"), 1);
	assert_int_equal(COST_OF(spop_int64(INT64_MAX), "free"), UINT32_MAX);
	assert_int_equal(COST_OF(spop_int64(UINT32_MAX), "free"), UINT32_MAX);
	assert_int_equal(COST_OF(spop_int64((int64_t)UINT32_MAX + 1), "free"), UINT32_MAX);
	assert_int_equal(COST_OF(str("7"), "free"), 7);
	assert_int_equal(COST_OF(bin("12"), "free"), 12);
	assert_int_equal(COST_OF(str("007"), "free"), 7);
	assert_int_equal(COST_OF(str("99999999999999999999"), "free"), UINT32_MAX);
	assert_int_equal(COST_OF(str("999999999999999999999"), "internal"), 3); /* 21 digits */
	assert_int_equal(COST_OF(str("7a"), "internal"), 3);
	assert_int_equal(COST_OF(str("-7"), "internal"), 3);
	assert_int_equal(COST_OF(str(""), "internal"), 3);
	assert_int_equal(COST_OF(str("0"), "internal"), 3);
	assert_int_equal(COST_OF(spop_null(), "internal"), 3);
	assert_int_equal(COST_OF(spop_bool(1), "internal"), 3);
	d.type = SPOP_T_UINT64;
	d.u.u64 = UINT64_MAX;
	assert_int_equal(COST_OF(d, "free"), UINT32_MAX);
	d.type = SPOP_T_INT32;
	d.u.i32 = 9;
	assert_int_equal(COST_OF(d, "free"), 9);
	d.type = SPOP_T_UINT32;
	d.u.u32 = 0;
	assert_int_equal(COST_OF(d, "internal"), 3);
#undef COST_OF
	req(&a, NULL, NULL, NULL, "tier", "internal", NULL);
	assert_int_equal(classify(r, &a).cost, 3);
	rules_release(r);
	/* Without cost_argument, the argument is not looked at. */
	r = load("{}");
	memset(&a, 0, sizeof(a));
	add(&a, "cost", spop_int64(9));
	assert_int_equal(classify(r, &a).cost, 1);
	rules_release(r);
}

static void test_identity(void **unused)
{
	struct rules_args a;
	struct rules_verdict v;
	uint8_t v4[4] = {192, 0, 2, 7};
	struct spop_data ip;
	struct rules *r = rules_default();

	ip.type = SPOP_T_IPV4;
	memcpy(ip.u.ipv4, v4, 4);
	memset(&a, 0, sizeof(a));
	add(&a, "api_key", str(""));
	add(&a, "user", spop_null());
	add(&a, "ip", ip);
	v = classify(r, &a);
	assert_int_equal(v.identity, 2);
	assert_ptr_equal(v.identity_val, &a.a[2].val);
	memset(&a, 0, sizeof(a));
	add(&a, "ip", ip);
	add(&a, "user", str("alice"));
	add(&a, "api_key", bin("k1"));
	v = classify(r, &a);
	assert_int_equal(v.identity, 0);
	assert_ptr_equal(v.identity_val, &a.a[2].val);
	memset(&a, 0, sizeof(a));
	add(&a, "user", spop_int64(0)); /* an integer is a value */
	v = classify(r, &a);
	assert_int_equal(v.identity, 1);
	memset(&a, 0, sizeof(a));
	add(&a, "api_key", bin(""));
	add(&a, "other", str("x"));
	v = classify(r, &a);
	assert_int_equal(v.identity, -1);
	assert_null(v.identity_val);
	rules_release(r);
}

/* Layers: parsed, stacked (own limits first, then each layer's), their
 * identities resolved per request, and every error of the format. */
static void test_layers(void **unused)
{
	struct rules_args a;
	struct rules_verdict v;
	const struct rule *free_, *search, *g, *ipl;
	struct rules *r = load("identity: [api_key, user]\n"
			       "stack: [per-ip]\n"
			       "layers:\n"
			       "  global: { identity: global, limits: [\"1000/1s\"] }\n"
			       "  per-ip: { identity: [ip, user], limits: [\"50/1s\", \"500/1m\"] }\n"
			       "  daily: { limits: [\"10000/1d\"] }\n"
			       "tiers:\n  default: free\n"
			       "  free: { limits: [\"10/1m\"] }\n"
			       "  pro: { limits: [\"100/1m\"], stack: [] }\n"
			       "endpoints:\n"
			       "  - { name: search, match: { path: /search }, limits: [\"5/1s\"],\n"
			       "      stack: [global, per-ip, daily] }\n");
	const struct rules_names *ids = rules_identity_names(r);

	free_ = rules_find(r, "free");
	search = rules_find(r, "search");
	g = rules_find(r, "global");
	ipl = rules_find(r, "per-ip");
	assert_non_null(free_);
	assert_non_null(search);
	assert_int_equal(g->kind, RULES_KIND_LAYER);
	assert_int_equal(g->scope, RULES_SCOPE_GLOBAL);
	assert_int_equal(rules_find(r, "daily")->scope, RULES_SCOPE_CLIENT);
	/* the file's identity first, then what only layers read */
	assert_int_equal(rules_identity(r)->n, 2);
	assert_int_equal(ids->n, 3);
	assert_string_equal(ids->name[2], "ip");
	assert_int_equal(ipl->nidk, 2);
	assert_int_equal(ipl->idk[0], 2);
	assert_int_equal(ipl->idk[1], 1);
	/* the top-level stack applies to rules without their own */
	assert_int_equal(free_->nstack, 1);
	assert_ptr_equal(free_->stack[0], ipl);
	assert_int_equal(free_->nown, 1);
	assert_int_equal(free_->nlimits, 3);
	assert_int_equal(free_->part_of[0], 0);
	assert_int_equal(free_->part_of[2], 1);
	assert_int_equal(free_->limits[2].quota, 500);
	assert_int_equal(free_->lidh[1], ipl->lidh[0]);
	assert_string_equal(free_->pname[1], "per-ip-1s");
	assert_string_equal(free_->policy,
			    "\"free\";q=10;w=60, \"per-ip-1s\";q=50;w=1, \"per-ip-1m\";q=500;w=60");
	assert_int_equal(rules_find(r, "pro")->nstack, 0);
	assert_int_equal(rules_find(r, "pro")->nlimits, 1);
	assert_int_equal(search->nstack, 3);
	assert_int_equal(search->nlimits, 5);
	assert_int_equal(search->part_of[4], 3);
	/* a layer's identity: global; the first of its arguments present;
	 * the client's */
	req(&a, "GET", "/search", NULL, "user", "bob", "ip", "192.0.2.1", NULL);
	v = classify(r, &a);
	assert_ptr_equal(v.rule, search);
	assert_int_equal(v.identity, 1);
	assert_int_equal(v.layer_identity[0], RULES_ID_GLOBAL);
	assert_null(v.layer_val[0]);
	assert_int_equal(v.layer_identity[1], 2);
	assert_ptr_equal(v.layer_val[1], &a.a[3].val);
	assert_int_equal(v.layer_identity[2], 1);
	assert_ptr_equal(v.layer_val[2], &a.a[2].val);
	req(&a, "GET", "/search", NULL, "user", "bob", NULL);
	v = classify(r, &a);
	assert_int_equal(v.layer_identity[1], 1); /* no ip: user */
	req(&a, "GET", "/search", NULL, NULL);
	v = classify(r, &a);
	assert_int_equal(v.identity, -1);
	assert_int_equal(v.layer_identity[1], -1);
	assert_int_equal(v.layer_identity[2], -1);
	rules_release(r);

	load_fails("layers: { l: { limits: [\"1/1s\"] } }\ntiers: { t: { limits: [], stack: [m] } }\n",
		   "t.yaml:2:35: tiers.t.stack[0]: no layer named \"m\"");
	load_fails("layers: { l: { limits: [\"1/1s\"] } }\nstack: [l, l]\n",
		   "t.yaml:2:12: stack[1]: layer \"l\" is listed twice");
	load_fails("layers: { a: { limits: [\"1/1s\"] }, b: { limits: [\"1/1s\"] },\n"
		   "  c: { limits: [\"1/1s\"] }, d: { limits: [\"1/1s\"] } }\nstack: [a, b, c, d]\n",
		   "t.yaml:3:8: stack: more than 3 layers");
	load_fails("layers: { l: { limits: [] } }\n",
		   "t.yaml:1:24: layers.l.limits: a layer needs at least one limit");
	load_fails("layers: { l: { limits: [\"1/1s\"], match: {} } }\n",
		   "t.yaml:1:34: layers.l: unknown key \"match\" (expected one of: identity, limits)");
	load_fails("layers: { l: { identity: ip } }\n",
		   "t.yaml:1:14: layers.l: missing key \"limits\" (such as limits: [1000/1s])");
	load_fails("tiers: { t: { limits: [] } }\nlayers: { t: { limits: [\"1/1s\"] } }\n",
		   "t.yaml:2:11: layers.t: duplicate rule name \"t\" (first at 1:10)");
	load_fails("identity: [a, b, c, d, e, f, g]\n"
		   "layers: { l: { identity: [x, y], limits: [\"1/1s\"] } }\n",
		   "t.yaml:2:26: layers.l.identity: more than 8 identity arguments in all "
		   "(the file's identity and the layers')");
	{
		/* 16 + 16 + 1 limits: over LIMIT_SET_MAX */
		char y[4096];
		size_t o = 0;

		o += (size_t)snprintf(y + o, sizeof(y) - o, "layers:\n");
		for (int l = 0; l < 2; l++) {
			o += (size_t)snprintf(y + o, sizeof(y) - o, "  l%d: { limits: [", l);
			for (int i = 0; i < (l ? 1 : 16); i++)
				o += (size_t)snprintf(y + o, sizeof(y) - o, "%s\"1/%ds\"", i ? ", " : "",
						      i + 1);
			o += (size_t)snprintf(y + o, sizeof(y) - o, "] }\n");
		}
		o += (size_t)snprintf(y + o, sizeof(y) - o, "tiers: { t: { limits: [");
		for (int i = 0; i < 16; i++)
			o += (size_t)snprintf(y + o, sizeof(y) - o, "%s\"1/%dm\"", i ? ", " : "", i + 1);
		snprintf(y + o, sizeof(y) - o, "], stack: [l0, l1] } }\n");
		r = rules_load_buffer(y, strlen(y), "t.yaml", err, sizeof(err));
		assert_null(r);
		assert_non_null(strstr(err, "tiers.t.stack[1]: rule \"t\" and its layers would have 33 limits; at most 32"));
	}
}

/* concurrency: one more limit, the last of the rule's own, out of the
 * policy; max_duration its period (30 s by default); the request_id
 * argument read only then. */
static void test_concurrency(void **unused)
{
	struct rules_args a;
	struct rules_verdict v;
	const struct rule *t, *e;
	struct rules *r = load("tiers:\n  default: t\n"
			       "  t: { limits: [\"10/1m\"], concurrency: 3 }\n"
			       "  u: { limits: [\"10/1m\", \"100/1h\"] }\n"
			       "endpoints:\n"
			       "  - { name: e, match: { path: /x }, limits: [], concurrency: 1,\n"
			       "      max_duration: 2m }\n");

	t = rules_find(r, "t");
	e = rules_find(r, "e");
	assert_int_equal(t->nlimits, 2);
	assert_int_equal(t->conc, 2);
	assert_int_equal(t->limits[1].algo, LIMIT_CONCURRENCY);
	assert_int_equal(t->limits[1].quota, 3);
	assert_int_equal(t->limits[1].period_us, 30 * LIMIT_US_PER_S);
	/* the rate limit keeps its name; the policy lists rates only */
	assert_string_equal(t->pname[0], "t");
	assert_string_equal(t->pname[1], "t-concurrency");
	assert_string_equal(t->policy, "\"t\";q=10;w=60");
	assert_string_equal(t->lid[1], "c3/30000000/0");
	assert_int_equal(e->conc, 1);
	assert_int_equal(e->limits[0].period_us, 120 * LIMIT_US_PER_S);
	assert_string_equal(e->policy, "");
	assert_int_equal(rules_find(r, "u")->conc, 0);
	/* request_id is read for a rule with a concurrency limit */
	req(&a, "GET", "/y", NULL, "request_id", "abc", NULL);
	v = classify(r, &a);
	assert_ptr_equal(v.rule, t);
	assert_non_null(v.request_id);
	req(&a, "GET", "/y", NULL, "tier", "u", "request_id", "abc", NULL);
	v = classify(r, &a);
	assert_null(v.request_id);
	req(&a, "GET", "/y", NULL, "request_id", "", NULL);
	v = classify(r, &a);
	assert_null(v.request_id);
	rules_release(r);

	load_fails("tiers: { t: { limits: [], concurrency: 0 } }",
		   "t.yaml:1:40: tiers.t.concurrency: expected an integer from 1 to 1000, got \"0\"");
	load_fails("tiers: { t: { limits: [], max_duration: 5s } }",
		   "t.yaml:1:41: tiers.t: max_duration goes with concurrency");
	load_fails("tiers: { t: { limits: [], concurrency: 2, max_duration: 500ms } }",
		   "t.yaml:1:57: tiers.t.max_duration: expected a duration from 1s to 1h such as 30s, "
		   "got \"500ms\"");
	load_fails("layers: { l: { limits: [\"1/1s\"], concurrency: 2 } }",
		   "t.yaml:1:34: layers.l: unknown key \"concurrency\" (expected one of: identity, limits)");
}

/* penalty: a ban limit among the rule's own (before a concurrency limit),
 * its count apart, and every error. */
static void test_penalty(void **unused)
{
	const struct rule *t;
	struct rules *r = load("tiers:\n  t:\n    limits: [\"10/1m\"]\n    concurrency: 2\n"
			       "    penalty: { responses: [401, 403], refusals: true, limit: 5/10m,\n"
			       "               ban: 15m, status: 403 }\n");

	t = rules_find(r, "t");
	assert_int_equal(t->nlimits, 3);
	assert_int_equal(t->penalty.ban, 2);
	assert_int_equal(t->conc, 3);
	assert_int_equal(t->limits[1].algo, LIMIT_BAN);
	assert_int_equal(t->limits[1].period_us, 900 * LIMIT_US_PER_S);
	assert_int_equal(t->penalty.kind, RULES_PENALTY_RESPONSES | RULES_PENALTY_REFUSALS);
	assert_int_equal(t->penalty.nstatuses, 2);
	assert_int_equal(t->penalty.statuses[1], 403);
	assert_int_equal(t->penalty.status, 403);
	assert_int_equal(t->penalty.count.quota, 5);
	assert_int_equal(t->penalty.count.algo, LIMIT_SLIDING_WINDOW);
	assert_int_not_equal(t->penalty.count_lidh, 0);
	assert_string_equal(t->pname[0], "t");
	assert_string_equal(t->pname[1], "t-ban");
	assert_string_equal(t->policy, "\"t\";q=10;w=60");
	rules_release(r);

	r = load("tiers: { t: { limits: [], penalty: { responses: 429, limit: 1/1s, ban: 1s } } }");
	t = rules_find(r, "t");
	assert_int_equal(t->penalty.status, 429);
	assert_int_equal(t->penalty.kind, RULES_PENALTY_RESPONSES);
	rules_release(r);

	load_fails("tiers: { t: { limits: [], penalty: { limit: 1/1s, ban: 1s } } }",
		   "t.yaml:1:36: tiers.t.penalty: count responses (responses: [401, 403]) or refusals "
		   "(refusals: true)");
	load_fails("tiers: { t: { limits: [], penalty: { refusals: true, ban: 1s } } }",
		   "t.yaml:1:36: tiers.t.penalty: missing key \"limit\" (such as limit: 5/10m)");
	load_fails("tiers: { t: { limits: [], penalty: { refusals: true, limit: 1/1s } } }",
		   "t.yaml:1:36: tiers.t.penalty: missing key \"ban\" (such as ban: 15m)");
	load_fails("tiers: { t: { limits: [], penalty: { responses: [401, 401], limit: 1/1s, "
		   "ban: 1s } } }",
		   "t.yaml:1:55: tiers.t.penalty.responses[1]: 401 is listed twice");
	load_fails("tiers: { t: { limits: [], penalty: { responses: 99, limit: 1/1s, ban: 1s } } }",
		   "t.yaml:1:49: tiers.t.penalty.responses: expected an integer from 100 to 599, got \"99\"");
	load_fails("tiers: { t: { limits: [], penalty: { refusals: true, limit: 1/1s, ban: 1s, "
		   "status: 404 } } }",
		   "t.yaml:1:84: tiers.t.penalty.status: expected 429 or 403, got \"404\"");
}

/* max_override and override_argument: the spec of an override, bounded;
 * the rule made for it, once per distinct limit, with the base's other
 * limits and layers. */
static void test_overrides(void **unused)
{
	struct rules_args a;
	struct rules_verdict v;
	struct limit_spec ov;
	const struct rule *t, *o, *o2;
	struct rules *r = load("override_argument: rl_limit\n"
			       "layers: { g: { identity: global, limits: [\"100/1s\"] } }\n"
			       "tiers:\n  default: t\n  t:\n    limits: [\"3/1h\", \"1/1s\"]\n"
			       "    max_override: 10/1h\n    concurrency: 2\n"
			       "    penalty: { refusals: true, limit: 5/1m, ban: 1m }\n"
			       "    stack: [g]\n"
			       "  u: { limits: [\"3/1h\"] }\n");

	t = rules_find(r, "t");
	assert_true(t->has_max_override);
	assert_int_equal(rules_override_spec(t, "5/1h", 4, &ov), 0);
	assert_int_equal(ov.quota, 5);
	assert_int_equal(rules_override_spec(t, "100/1s", 6, &ov), 0);
	assert_int_equal(ov.quota, 10); /* over in rate: the max */
	assert_int_equal(ov.period_us, 3600 * LIMIT_US_PER_S);
	assert_int_equal(rules_override_spec(t, "20/2h", 5, &ov), 0);
	assert_int_equal(ov.quota, 10); /* over in burst */
	assert_int_equal(rules_override_spec(t, "10/1h", 5, &ov), 0);
	assert_int_equal(ov.quota, 10);
	assert_int_equal(rules_override_spec(t, "x", 1, &ov), -1);
	assert_int_equal(rules_override_spec(rules_find(r, "u"), "5/1h", 4, &ov), -1);
	assert_int_equal(rules_override_spec(t, "5/1h", 4, &ov), 0);
	o = rules_override(r, t, &ov);
	assert_non_null(o);
	assert_ptr_equal(rules_override(r, t, &ov), o);
	assert_string_equal(o->name, "t");
	assert_int_equal(o->index, t->index);
	assert_int_equal(o->nown, 3); /* 5/1h, the ban, the concurrency */
	assert_int_equal(o->limits[0].quota, 5);
	assert_int_equal(o->penalty.ban, 2);
	assert_int_equal(o->conc, 3);
	assert_int_equal(o->nlimits, 4);
	assert_int_equal(o->part_of[3], 1);
	assert_string_equal(o->policy, "\"t\";q=5;w=3600, \"g\";q=100;w=1");
	assert_int_not_equal(o->lidh[0], t->lidh[0]);
	assert_int_equal(o->lidh[3], t->lidh[4]);
	rules_override_spec(t, "6/1h", 4, &ov);
	o2 = rules_override(r, t, &ov);
	assert_non_null(o2);
	assert_ptr_not_equal(o2, o);
	/* the argument is read for a rule with max_override only */
	req(&a, "GET", "/", NULL, "rl_limit", "5/1h", NULL);
	v = classify(r, &a);
	assert_non_null(v.override);
	req(&a, "GET", "/", NULL, "rl_limit", "5/1h", "tier", "u", NULL);
	v = classify(r, &a);
	assert_null(v.override);
	rules_rule_unhold(o);
	rules_rule_unhold(o);
	rules_rule_unhold(o2);
	rules_release(r);
	load_fails("tiers: { t: { limits: [], max_override: 0/1m } }",
		   "t.yaml:1:41: tiers.t.max_override: '0/1m': quota must be at least 1");
}

/* The rules made for overrides: at most RULES_OVERRIDES_MAX held at once
 * (past that none, counted); one nothing holds is freed when room is
 * needed, so that limits that come and go never use the room up. */
static void test_overrides_held(void **unused)
{
	static const struct rule *held[RULES_OVERRIDES_MAX];
	struct rules *r = load("tiers:\n  t: { limits: [\"3/1h\"], max_override: 1000/1s }\n");
	const struct rule *t = rules_find(r, "t"), *o, *o2;
	struct limit_spec ov = { .algo = LIMIT_TOKEN_BUCKET, .quota = 1 };
	uint64_t refused = rules_override_refused(), epoch = rules_override_epoch(r);

	/* the rules of the file take no hold */
	rules_rule_hold(t);
	rules_rule_unhold(t);
	/* 300 limits, each given back once used: the room never runs out */
	for (int i = 0; i < 300; i++) {
		ov.period_us = (i + 1) * LIMIT_US_PER_S;
		o = rules_override(r, t, &ov);
		assert_non_null(o);
		assert_true(o->derived);
		assert_int_equal(o->limits[0].period_us, ov.period_us);
		rules_rule_unhold(o);
	}
	assert_int_equal(rules_override_refused(), refused);
	assert_true(rules_override_epoch(r) > epoch);
	/* all held: the next has no room, and is counted */
	for (int i = 0; i < RULES_OVERRIDES_MAX; i++) {
		ov.period_us = (1000 + i) * LIMIT_US_PER_S;
		held[i] = rules_override(r, t, &ov);
		assert_non_null(held[i]);
	}
	ov.period_us = 5000 * LIMIT_US_PER_S;
	assert_null(rules_override(r, t, &ov));
	assert_int_equal(rules_override_refused(), refused + 1);
	/* one held already is found, held once more */
	ov.period_us = 1000 * LIMIT_US_PER_S;
	o = rules_override(r, t, &ov);
	assert_ptr_equal(o, held[0]);
	rules_rule_unhold(o);
	/* one given back (twice held: once more) makes room */
	rules_rule_unhold(held[7]);
	ov.period_us = 5000 * LIMIT_US_PER_S;
	o2 = rules_override(r, t, &ov);
	assert_non_null(o2);
	assert_int_equal(o2->limits[0].period_us, 5000 * LIMIT_US_PER_S);
	/* the others stayed where they were */
	ov.period_us = 1001 * LIMIT_US_PER_S;
	o = rules_override(r, t, &ov);
	assert_ptr_equal(o, held[1]);
	rules_rule_unhold(o);
	rules_rule_unhold(o2);
	/* the rules go, held ones too */
	rules_release(r);
}

/* delay on a tier and an endpoint, none elsewhere; max_delayed and its
 * default. */
static void test_delay(void **unused)
{
	struct rules *r = load("max_delayed: 10\n"
			       "tiers:\n"
			       "  default: a\n"
			       "  a: { limits: [1/1s], delay: 500ms }\n"
			       "  b: { limits: [1/1s] }\n"
			       "endpoints: [ { name: e, match: { path: /e }, limits: [10/1s],"
			       " delay: 30s } ]\n");

	assert_int_equal(rules_find(r, "a")->delay_us, 500000);
	assert_int_equal(rules_find(r, "b")->delay_us, 0);
	assert_int_equal(rules_find(r, "e")->delay_us, 30000000);
	assert_int_equal(rules_max_delayed(r), 10);
	rules_release(r);
	r = load("limits: [1/1s]");
	assert_int_equal(rules_find(r, "default")->delay_us, 0);
	assert_int_equal(rules_max_delayed(r), RULES_MAX_DELAYED_DEFAULT);
	rules_release(r);
	r = load("max_delayed: 0\ntiers: { t: { limits: [1/1s], delay: 1ms } }");
	assert_int_equal(rules_max_delayed(r), 0);
	assert_int_equal(rules_find(r, "t")->delay_us, 1000);
	rules_release(r);
	load_fails("tiers: { t: { limits: [], delay: 500us } }",
		   "t.yaml:1:34: tiers.t.delay: expected a duration from 1ms to 30s such as 500ms, got \"500us\"");
}

/* lease: the file's default for its rules, a rule's own, off, and the
 * bounds of each form. */
static void test_lease(void **unused)
{
	struct rules *r = load("lease: 200ms\n"
			       "tiers:\n"
			       "  default: a\n"
			       "  a: { limits: [100/1s] }\n"
			       "  b: { limits: [100/1s], lease: off }\n"
			       "  c: { limits: [100/1s], lease: { interval: 50ms, share: 25 } }\n"
			       "endpoints: [ { name: e, match: { path: /e }, limits: [10/1s],"
			       " lease: 1s } ]\n");

	assert_int_equal(rules_find(r, "a")->lease_us, 200000);
	assert_int_equal(rules_find(r, "a")->lease_share, 0);
	assert_int_equal(rules_find(r, "b")->lease_us, -1);
	assert_int_equal(rules_find(r, "c")->lease_us, 50000);
	assert_int_equal(rules_find(r, "c")->lease_share, 25);
	assert_int_equal(rules_find(r, "e")->lease_us, 1000000);
	assert_true(rules_any_lease(r));
	rules_release(r);
	/* none in the file: the agent's --lease decides (0) */
	r = load("tiers: { t: { limits: [100/1s] } }");
	assert_int_equal(rules_find(r, "t")->lease_us, 0);
	assert_false(rules_any_lease(r));
	rules_release(r);
	/* the built-in rule "default" (top-level limits, --limit) too */
	r = load("lease: 100ms\nlimits: [10/1s]");
	assert_int_equal(rules_find(r, "default")->lease_us, 100000);
	rules_release(r);
	r = load("lease: off\ntiers: { t: { limits: [100/1s] } }");
	assert_int_equal(rules_find(r, "t")->lease_us, -1);
	assert_false(rules_any_lease(r));
	rules_release(r);
	load_fails("lease: 5ms\ntiers: { t: { limits: [] } }",
		   "t.yaml:1:8: lease: expected a duration from 10ms to 1s such as 100ms, or off, got \"5ms\"");
	load_fails("tiers: { t: { limits: [], lease: 2s } }",
		   "t.yaml:1:34: tiers.t.lease: expected a duration from 10ms to 1s such as 100ms, or off, got \"2s\"");
	load_fails("tiers: { t: { limits: [], lease: { share: 5 } } }",
		   "t.yaml:1:34: tiers.t.lease: missing key \"interval\" (such as interval: 100ms)");
	load_fails("tiers: { t: { limits: [], lease: { interval: 1s, share: 60 } } }",
		   "t.yaml:1:57: tiers.t.lease.share: expected an integer from 1 to 50, got \"60\"");
	load_fails("tiers: { t: { limits: [], lease: { interval: 1s, size: 6 } } }",
		   "t.yaml:1:50: tiers.t.lease: unknown key \"size\" (expected one of: interval, share)");
}

static void test_load_figures(void **unused)
{
	struct rules_args a;
	struct rules_verdict v;
	struct spop_data d;
	struct rules *r = load("shedding: { in_use: busy, free: idle }");

	memset(&a, 0, sizeof(a));
	add(&a, "busy", spop_int64(3));
	add(&a, "idle", spop_int64(-1));
	v = classify(r, &a);
	assert_true(v.load_known);
	assert_int_equal(v.in_use, 3);
	assert_int_equal(v.free_conns, -1);
	memset(&a, 0, sizeof(a));
	add(&a, "busy", spop_int64(3));
	v = classify(r, &a);
	assert_false(v.load_known);
	memset(&a, 0, sizeof(a));
	add(&a, "busy", str("3"));
	add(&a, "idle", spop_int64(1));
	v = classify(r, &a);
	assert_false(v.load_known);
	memset(&a, 0, sizeof(a));
	add(&a, "be_in_use", spop_int64(3));
	add(&a, "be_free", spop_int64(1));
	assert_false(classify(r, &a).load_known);
	memset(&a, 0, sizeof(a));
	d.type = SPOP_T_UINT64;
	d.u.u64 = UINT64_MAX;
	add(&a, "busy", d);
	d.type = SPOP_T_UINT32;
	d.u.u32 = 7;
	add(&a, "idle", d);
	v = classify(r, &a);
	assert_true(v.load_known);
	assert_int_equal(v.in_use, INT64_MAX);
	assert_int_equal(v.free_conns, 7);
	rules_release(r);
}

static void test_listen_tls(void **state)
{
	struct rules *r = load("limits: [\"10/1m\"]\n"
			       "listen_tls: {cert: /a/agent.pem, key: /a/agent.key, ca: /a/ca.pem}\n");
	const struct settings *s = rules_settings(r);

	assert_string_equal(s->listen_tls_cert, "/a/agent.pem");
	assert_string_equal(s->listen_tls_key, "/a/agent.key");
	assert_string_equal(s->listen_tls_ca, "/a/ca.pem");
	rules_release(r);
	r = load("limits: [\"10/1m\"]\n");
	assert_string_equal(rules_settings(r)->listen_tls_cert, "");
	rules_release(r);
	load_fails("listen_tls: {cert: a, key: \"\"}\n",
		   "t.yaml:1:28: listen_tls.key: must not be empty");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_listen_tls),
		cmocka_unit_test(test_args_get),
		cmocka_unit_test(test_args_from_kv),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_example),
		cmocka_unit_test(test_full_fixture),
		cmocka_unit_test(test_anchors),
		cmocka_unit_test(test_error_fixtures),
		cmocka_unit_test(test_file_errors),
		cmocka_unit_test(test_buffer_errors),
		cmocka_unit_test(test_caps),
		cmocka_unit_test(test_prescan_caps),
		cmocka_unit_test(test_top_level_limits),
		cmocka_unit_test(test_leaky_is_token),
		cmocka_unit_test(test_out_of_memory),
		cmocka_unit_test(test_root_values),
		cmocka_unit_test(test_first_match_and_paths),
		cmocka_unit_test(test_paths_normalised),
		cmocka_unit_test(test_method),
		cmocka_unit_test(test_host),
		cmocka_unit_test(test_args_match),
		cmocka_unit_test(test_tiers),
		cmocka_unit_test(test_endpoints_replace_tiers),
		cmocka_unit_test(test_priorities),
		cmocka_unit_test(test_shadow),
		cmocka_unit_test(test_adaptive),
		cmocka_unit_test(test_failure_policy),
		cmocka_unit_test(test_cost),
		cmocka_unit_test(test_identity),
		cmocka_unit_test(test_layers),
		cmocka_unit_test(test_concurrency),
		cmocka_unit_test(test_penalty),
		cmocka_unit_test(test_overrides),
		cmocka_unit_test(test_overrides_held),
		cmocka_unit_test(test_lease),
		cmocka_unit_test(test_delay),
		cmocka_unit_test(test_load_figures),
		cmocka_unit_test(test_request_decode),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
