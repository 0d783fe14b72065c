/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of decide.c: identity choice, query building, the decision
 * variables and their exact SET-VAR encoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "rules_text.h"

#include "decide.h"

/* Builds a KV list of arguments in buf; returns a cursor over it. */
struct args {
	uint8_t buf[1024];
	struct spop_wbuf w;
	unsigned n;
};

static void args_init(struct args *a)
{
	spop_wbuf_init(&a->w, a->buf, sizeof(a->buf));
	a->n = 0;
}

static void args_add(struct args *a, const char *name, struct spop_data d)
{
	spop_put_name(&a->w, name, strlen(name));
	spop_put_data(&a->w, &d);
	a->n++;
}

static struct spop_cursor args_cursor(struct args *a)
{
	struct spop_cursor c = { a->buf, a->buf + a->w.len };

	assert_int_equal(a->w.err, 0);
	return c;
}

/* The key of a client: kind \0 value \0 rule, under the rules' secret. */
static void key_of(const struct rules *rules, const char *kind, const char *value,
		   const char *rule, uint8_t out[IDENTITY_KEY_LEN])
{
	uint8_t buf[256];
	size_t n = 0;

	memcpy(buf, kind, strlen(kind));
	n += strlen(kind);
	buf[n++] = 0;
	memcpy(buf + n, value, strlen(value));
	n += strlen(value);
	buf[n++] = 0;
	memcpy(buf + n, rule, strlen(rule));
	n += strlen(rule);
	identity_siphash128(rules_secret(rules), buf, n, out);
}

static void test_identity_order(void **state)
{
	struct rules *rules = rules_from_text("{}");
	struct decide_query q;
	struct args a;
	uint8_t want[IDENTITY_KEY_LEN];
	struct spop_data ip = { .type = SPOP_T_IPV4, .u.ipv4 = { 10, 0, 0, 1 } };

	(void)state;
	/* ip only */
	args_init(&a);
	args_add(&a, "ip", ip);
	args_add(&a, "api_key", spop_null());
	args_add(&a, "user", spop_cstr(""));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	assert_string_equal(q.identity, "ip");
	key_of(rules, "ip", "10.0.0.1", "default", want);
	assert_memory_equal(q.key, want, IDENTITY_KEY_LEN);

	/* user beats ip, api_key beats user, whatever the order of arguments */
	args_init(&a);
	args_add(&a, "ip", ip);
	args_add(&a, "user", spop_cstr("alice"));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	assert_string_equal(q.identity, "user");
	args_add(&a, "api_key", spop_cstr("k1"));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	assert_string_equal(q.identity, "api_key");
	key_of(rules, "api_key", "k1", "default", want);
	assert_memory_equal(q.key, want, IDENTITY_KEY_LEN);

	/* the same value under two kinds is two clients */
	key_of(rules, "user", "k1", "default", want);
	assert_memory_not_equal(q.key, want, IDENTITY_KEY_LEN);
	rules_release(rules);
}

static void test_identity_exact_names_and_anonymous(void **state)
{
	struct rules *rules = rules_from_text("{}");
	struct decide_query q;
	struct args a;

	(void)state;
	args_init(&a);
	args_add(&a, "api_keyx", spop_cstr("k1")); /* not a prefix match */
	args_add(&a, "ap", spop_cstr("k2"));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	assert_string_equal(q.identity, "anonymous");
	assert_int_equal(q.cost, 1);
	assert_int_equal(q.priority, 2);
	assert_string_equal(q.rule->name, "default");
	assert_int_equal(q.nlimits, 1);
	rules_release(rules);

	rules = rules_from_text("identity: [x_client, ip]");
	args_add(&a, "x_client", spop_cstr("c"));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	assert_string_equal(q.identity, "x_client");
	rules_release(rules);
}

static void test_cost_argument(void **state)
{
	struct rules *rules = rules_from_text("cost_argument: cost");
	struct decide_query q;
	struct args a;

	(void)state;
	args_init(&a);
	args_add(&a, "cost", spop_int64(3));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	assert_int_equal(q.cost, 3);
	args_init(&a);
	args_add(&a, "cost", spop_int64(-5));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	assert_int_equal(q.cost, 1);
	args_init(&a);
	args_add(&a, "cost", spop_int64(1LL << 40));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	assert_int_equal(q.cost, UINT32_MAX);
	rules_release(rules);
}

static void test_result_allowed_and_limited(void **state)
{
	struct rules *rules = rules_from_text("{}");
	struct decide_query q;
	struct decide_decision d;
	struct args a;
	struct limit_result r = { .allowed = true, .limit = 100, .remaining = 42,
				  .retry_after_us = 0, .reset_us = 34500001, .more_us = 100000 };

	(void)state;
	args_init(&a);
	/* the index of the rule's counters goes with its decisions */
	rules_set_counters(rules, 0, 7);
	decide_prepare(rules, args_cursor(&a), 0, 0, &q);
	decide_result(&q, &r, 0, &d);
	assert_int_equal(d.counters, 7);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.retry_after, 0);
	assert_int_equal(d.limit, 100);
	assert_int_equal(d.remaining, 42);
	assert_int_equal(d.reset, 35);
	assert_string_equal(decide_reason_str(d.reason), "ok");
	assert_string_equal(d.policy, "\"default\";q=100;w=60");
	/* t is the time until more quota (draft -10), rounded up; reset
	 * keeps the time until full */
	assert_string_equal(d.ratelimit, "\"default\";r=42;t=1");
	assert_false(d.near_limit);
	/* near the limit: under a tenth of the quota left */
	r.remaining = 10;
	decide_result(&q, &r, 0, &d);
	assert_false(d.near_limit);
	r.remaining = 9;
	decide_result(&q, &r, 0, &d);
	assert_true(d.near_limit);
	/* a quota under 10 has a last tenth too: its last token */
	r.limit = 5;
	r.remaining = 0;
	decide_result(&q, &r, 0, &d);
	assert_true(d.near_limit);
	r.remaining = 1;
	decide_result(&q, &r, 0, &d);
	assert_false(d.near_limit);
	r.limit = 100;

	r.allowed = false;
	r.remaining = 0;
	r.retry_after_us = 1; /* one microsecond still rounds up to 1 s */
	r.more_us = 1;
	decide_result(&q, &r, 0, &d);
	assert_int_equal(d.status, 429);
	assert_int_equal(d.retry_after, 1);
	assert_int_equal(d.reset, 35);
	assert_string_equal(decide_reason_str(d.reason), "limited");
	assert_string_equal(d.ratelimit, "\"default\";r=0;t=1");
	/* refused: counted as limited, not as near the limit */
	assert_false(d.near_limit);
	/* a full limit (nothing more to come) says t=0 */
	r.allowed = true;
	r.remaining = 100;
	r.reset_us = 0;
	r.more_us = 0;
	decide_result(&q, &r, 0, &d);
	assert_string_equal(d.ratelimit, "\"default\";r=100;t=0");
	rules_release(rules);
}

/* From the limiter's math to the field, on an injected clock: a 10/1m
 * bucket emptied at once tells t=6 (its next token), not 60 (full), while
 * reset and Retry-After keep their meanings. */
static void test_result_ratelimit_t_from_the_math(void **state)
{
	struct rules *rules = rules_from_text("limits: [10/1m]");
	struct decide_query q;
	struct decide_decision d;
	struct args a;
	struct limit_state st = {0, 0, 0}, next;
	struct limit_result r;
	const int64_t t0 = 1700000000LL * LIMIT_US_PER_S;

	(void)state;
	args_init(&a);
	decide_prepare(rules, args_cursor(&a), 0, 0, &q);
	for (int i = 0; i < 10; i++) {
		limit_eval(&q.limits[0], &st, t0, 1, &next, &r);
		assert_true(r.allowed);
		st = next;
	}
	decide_result(&q, &r, 0, &d);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.reset, 60);
	assert_string_equal(d.ratelimit, "\"default\";r=0;t=6");
	/* 2.5 s later: refused, the token 3.5 s away, rounded up */
	limit_eval(&q.limits[0], &st, t0 + 2500000, 1, &next, &r);
	decide_result(&q, &r, 0, &d);
	assert_int_equal(d.status, 429);
	assert_int_equal(d.retry_after, 4);
	assert_int_equal(d.reset, 58);
	assert_string_equal(d.ratelimit, "\"default\";r=0;t=4");
	rules_release(rules);
}

static void test_result_several_limits(void **state)
{
	struct rules *rules = rules_from_text("limits: [100/1m, 1000/1h]");
	struct decide_query q;
	struct decide_decision d;
	struct args a;
	struct limit_result r[2] = {
		{ .allowed = true, .limit = 100, .remaining = 99, .reset_us = 600000,
		  .more_us = 600000 },
		{ .allowed = false, .limit = 1000, .remaining = 0, .retry_after_us = 3600000000LL,
		  .reset_us = 3600000000LL, .more_us = 3600000 },
	};

	(void)state;
	args_init(&a);
	decide_prepare(rules, args_cursor(&a), 0, 0, &q);
	decide_result(&q, r, 1, &d);
	assert_int_equal(d.status, 429);
	assert_int_equal(d.retry_after, 3600);
	assert_int_equal(d.limit, 1000);
	assert_string_equal(d.policy, "\"default-1m\";q=100;w=60, \"default-1h\";q=1000;w=3600");
	assert_int_equal(d.policy_len, strlen(d.policy));
	assert_int_equal(d.rule_len, strlen(d.rule));
	assert_int_equal(d.reset, 3600);
	assert_string_equal(d.ratelimit, "\"default-1h\";r=0;t=4");
	/* Redis field names, derived once at load */
	assert_string_equal(q.rule->lid[0], "t100/60000000/0");
	assert_string_equal(q.rule->lid[1], "t1000/3600000000/0");
	rules_release(rules);
}

/* The two answers without the store; store.c chooses between them (and
 * the local failure mode) by the rule's failure mode. */
static void test_open_and_closed(void **state)
{
	struct rules *rules = rules_from_text("limits: [10/1m]\non_store_failure: closed");
	struct decide_query q;
	struct decide_decision d;
	struct args a;

	(void)state;
	args_init(&a);
	args_add(&a, "api_key", spop_cstr("k"));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	decide_closed(&q, &d);
	assert_int_equal(d.status, 503);
	assert_int_equal(d.retry_after, 1);
	assert_true(d.degraded);
	assert_false(d.counted);
	assert_string_equal(decide_reason_str(d.reason), "store_down");
	assert_string_equal(d.policy, "\"default\";q=10;w=60");
	assert_string_equal(d.ratelimit, "");

	decide_open(&q, &d);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.limit, 10);
	assert_true(d.degraded);
	assert_string_equal(decide_reason_str(d.reason), "ok");

	/* shadow mode: computed, nothing refused */
	q.shadow = true;
	decide_closed(&q, &d);
	assert_int_equal(d.status, 0);
	assert_true(d.shadow);
	assert_string_equal(decide_reason_str(d.reason), "store_down");
	rules_release(rules);
}

static void test_shedding(void **state)
{
	struct rules *rules = rules_from_text(
		"priorities:\n"
		"  classes:\n"
		"    - { priority: 0, match: { path: /pay } }\n"
		"    - { priority: 3, match: { args: { test: \"1\" } } }\n"
		"shedding: { thresholds: { 1: 90%, 2: 80%, 3: 70% }, retry_after: 2s }\n");
	struct decide_query q;
	struct decide_decision d;
	struct args a;

	(void)state;
	/* 75% busy: P3 shed, P2 not */
	args_init(&a);
	args_add(&a, "be_in_use", spop_int64(75));
	args_add(&a, "be_free", spop_int64(25));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	assert_int_equal(q.priority, 2);
	assert_false(q.shed);
	args_add(&a, "test", spop_cstr("1"));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	assert_int_equal(q.priority, 3);
	assert_true(q.shed);
	decide_shed(&q, &d);
	assert_int_equal(d.status, 503);
	assert_int_equal(d.retry_after, 2);
	assert_string_equal(decide_reason_str(d.reason), "shed");
	assert_int_equal(d.priority, 3);

	/* P0 is never shed, even at 100% */
	args_init(&a);
	args_add(&a, "path", spop_cstr("/pay"));
	args_add(&a, "be_in_use", spop_int64(100));
	args_add(&a, "be_free", spop_int64(0));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	assert_int_equal(q.priority, 0);
	assert_false(q.shed);

	/* unknown load (be_conn_free is -1 without maxconn): never shed */
	args_init(&a);
	args_add(&a, "be_in_use", spop_int64(100));
	args_add(&a, "be_free", spop_int64(-1));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	assert_false(q.shed);
	rules_release(rules);
}

static void test_shadow(void **state)
{
	struct rules *rules = rules_from_text("limits: [1/1m]\nshadow: true");
	struct decide_query q;
	struct decide_decision d;
	struct args a;
	struct limit_result r = { .allowed = false, .limit = 1, .remaining = 0,
				  .retry_after_us = 5000000, .reset_us = 60000000 };

	(void)state;
	args_init(&a);
	decide_prepare(rules, args_cursor(&a), 0, 0, &q);
	assert_true(q.shadow);
	decide_result(&q, &r, 0, &d);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.retry_after, 0);
	assert_true(d.shadow);
	assert_string_equal(decide_reason_str(d.reason), "limited");
	rules_release(rules);
}

static void test_shedding_in_shadow_mode(void **state)
{
	struct rules *rules = rules_from_text("limits: [5/1m]\nshedding: { thresholds: { 3: 70% }, shadow: true }\n"
				  "priorities: { default: 3 }");
	struct decide_query q;
	struct decide_decision d;
	struct args a;
	struct limit_result ok = { .allowed = true, .limit = 5, .remaining = 4, .reset_us = 12000000 };
	struct limit_result no = { .allowed = false, .limit = 5, .remaining = 0,
				   .retry_after_us = 12000000, .reset_us = 60000000 };

	(void)state;
	args_init(&a);
	args_add(&a, "be_in_use", spop_int64(9));
	args_add(&a, "be_free", spop_int64(1));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	assert_true(q.shed);
	assert_true(q.shed_shadow);
	/* the limits still decide; an allowed request says it would be shed */
	decide_result(&q, &ok, 0, &d);
	assert_int_equal(d.status, 0);
	assert_true(d.shadow);
	assert_string_equal(decide_reason_str(d.reason), "shed");
	assert_int_equal(d.remaining, 4);
	/* a refused one is refused: shedding's shadow mode is not the limits' */
	decide_result(&q, &no, 0, &d);
	assert_int_equal(d.status, 429);
	assert_false(d.shadow);
	assert_string_equal(decide_reason_str(d.reason), "limited");
	rules_release(rules);
}

static void test_tiers_and_endpoints(void **state)
{
	struct rules *rules = rules_from_text(
		"tiers:\n"
		"  default: free\n"
		"  free: { limits: [100/1m, 1000/1h] }\n"
		"  pro: { limits: [1000/1m] }\n"
		"endpoints:\n"
		"  - { name: search, match: { method: POST, path: /api/search }, limits: [50/1m] }\n");
	struct decide_query q, q2;
	struct args a;

	(void)state;
	args_init(&a);
	args_add(&a, "api_key", spop_cstr("k"));
	args_add(&a, "tier", spop_cstr("pro"));
	args_add(&a, "method", spop_cstr("GET"));
	args_add(&a, "path", spop_cstr("/api/search"));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	assert_string_equal(q.rule->name, "pro");
	assert_int_equal(q.nlimits, 1);
	assert_int_equal(q.limits[0].quota, 1000);

	args_init(&a);
	args_add(&a, "api_key", spop_cstr("k"));
	args_add(&a, "tier", spop_cstr("pro"));
	args_add(&a, "method", spop_cstr("POST"));
	args_add(&a, "path", spop_cstr("/api/search/recent"));
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q2);
	assert_string_equal(q2.rule->name, "search");
	assert_int_equal(q2.limits[0].quota, 50);
	/* one client, two rules: two keys */
	assert_memory_not_equal(q.key, q2.key, IDENTITY_KEY_LEN);

	args_init(&a);
	args_add(&a, "api_key", spop_cstr("k"));
	args_add(&a, "tier", spop_cstr("platinum")); /* unknown: the default tier */
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
	assert_string_equal(q.rule->name, "free");
	assert_int_equal(q.nlimits, 2);
	rules_release(rules);
}

/* Layers: each one's key from its own identity (global: one for every
 * client; an address: per address, whoever the client); a refusal by a
 * layer names the layer and counts under it; allowed, the rule's name. */
static void test_layers(void **state)
{
	struct rules *rules = rules_from_text(
		"identity: [api_key]\n"
		"layers:\n"
		"  g: { identity: global, limits: [10/1m] }\n"
		"  addr: { identity: ip, limits: [5/1m] }\n"
		"  mine: { limits: [7/1m] }\n"
		"limits: [3/1m]\n"
		"stack: [g, addr, mine]\n");
	struct decide_query q1, q2, q3;
	struct decide_decision d;
	struct limit_result res[LIMIT_SET_MAX];
	struct args a;
	struct spop_data ip1 = { .type = SPOP_T_IPV4, .u.ipv4 = { 10, 0, 0, 1 } };
	struct spop_data ip2 = { .type = SPOP_T_IPV4, .u.ipv4 = { 10, 0, 0, 2 } };
	uint8_t want[IDENTITY_KEY_LEN];

	(void)state;
	args_init(&a);
	args_add(&a, "api_key", spop_cstr("k1"));
	args_add(&a, "ip", ip1);
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q1);
	args_init(&a);
	args_add(&a, "api_key", spop_cstr("k2"));
	args_add(&a, "ip", ip1);
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q2);
	args_init(&a);
	args_add(&a, "api_key", spop_cstr("k1"));
	args_add(&a, "ip", ip2);
	decide_prepare(rules, args_cursor(&a), a.n, 0, &q3);
	assert_int_equal(q1.nlimits, 4);
	key_of(rules, "api_key", "k1", "default", want);
	assert_memory_equal(q1.key, want, IDENTITY_KEY_LEN);
	key_of(rules, "global", "", "g", want);
	assert_memory_equal(q1.lkey[0], want, IDENTITY_KEY_LEN);
	assert_memory_equal(q2.lkey[0], want, IDENTITY_KEY_LEN);
	key_of(rules, "ip", "10.0.0.1", "addr", want);
	assert_memory_equal(q1.lkey[1], want, IDENTITY_KEY_LEN);
	assert_memory_equal(q2.lkey[1], want, IDENTITY_KEY_LEN);
	assert_memory_not_equal(q3.lkey[1], want, IDENTITY_KEY_LEN);
	key_of(rules, "api_key", "k1", "mine", want);
	assert_memory_equal(q1.lkey[2], want, IDENTITY_KEY_LEN);
	assert_memory_equal(q3.lkey[2], want, IDENTITY_KEY_LEN);
	assert_memory_not_equal(q2.lkey[2], want, IDENTITY_KEY_LEN);
	assert_ptr_equal(decide_limit_key(&q1, 0), q1.key);
	assert_ptr_equal(decide_limit_key(&q1, 2), q1.lkey[1]);
	assert_string_equal(decide_limit_rule(&q1, 3)->name, "mine");

	/* refused by the address's layer */
	memset(res, 0, sizeof(res));
	for (int i = 0; i < 4; i++) {
		res[i].allowed = true;
		res[i].limit = q1.limits[i].quota;
		res[i].remaining = 1;
	}
	res[2].allowed = false;
	res[2].remaining = 0;
	res[2].retry_after_us = 12 * LIMIT_US_PER_S;
	decide_result(&q1, res, 2, &d);
	assert_int_equal(d.status, 429);
	assert_int_equal(d.retry_after, 12);
	assert_int_equal(d.limit, 5);
	assert_string_equal(d.rule, "addr");
	assert_int_equal(d.rule_len, 4);
	assert_int_equal(d.counters, rules_find(rules, "addr")->counters);
	assert_string_equal(d.policy, "\"default\";q=3;w=60, \"g\";q=10;w=60, \"addr\";q=5;w=60, "
				      "\"mine\";q=7;w=60");
	assert_memory_equal(d.ratelimit, "\"addr\";r=0;", 11);
	/* allowed: the rule's name, the deciding limit in RateLimit */
	res[2].allowed = true;
	res[2].remaining = 0;
	res[2].retry_after_us = 0;
	decide_result(&q1, res, 2, &d);
	assert_int_equal(d.status, 0);
	assert_string_equal(d.rule, "default");
	rules_release(rules);
}

/* The actions, decoded back with the codec: names, scopes, types, values. */
static void test_actions_encoding(void **state)
{
	struct decide_decision d = { 0 };
	uint8_t buf[1024];
	struct spop_wbuf w;
	const uint8_t *p, *end;
	static const char *names[] = { "status", "retry_after", "limit", "remaining", "reset",
				       "priority", "reason", "rule", "policy", "ratelimit",
				       "shadow", "degraded" };
	size_t i = 0;

	(void)state;
	d.status = 429;
	d.retry_after = 7;
	d.limit = 5;
	d.remaining = 0;
	d.reset = 9;
	d.priority = 2;
	d.reason = DECIDE_LIMITED;
	d.rule = "default";
	d.policy = "\"default\";q=5;w=10";
	d.rule_len = (uint16_t)strlen(d.rule);
	d.policy_len = (uint16_t)strlen(d.policy);
	strcpy(d.ratelimit, "\"default\";r=0;t=9");
	d.ratelimit_len = (uint16_t)strlen(d.ratelimit);
	d.counted = true;
	spop_wbuf_init(&w, buf, sizeof(buf));
	decide_put_actions(&w, &d);
	assert_int_equal(w.err, 0);
	p = buf;
	end = buf + w.len;
	while (p < end) {
		struct spop_str name;
		struct spop_data v;

		assert_int_equal(p[0], SPOP_ACT_SET_VAR);
		assert_int_equal(p[1], 3);
		assert_int_equal(p[2], SPOP_SCOPE_TXN);
		p += 3;
		assert_int_equal(spop_name_decode(&p, end, &name), SPOP_OK);
		assert_int_equal(spop_data_decode(&p, end, &v), SPOP_OK);
		assert_true(i < 12);
		assert_int_equal(name.len, strlen(names[i]));
		assert_memory_equal(name.ptr, names[i], name.len);
		if (i == 0) {
			assert_int_equal(v.type, SPOP_T_INT64);
			assert_int_equal(v.u.i64, 429);
		} else if (i == 1) {
			assert_int_equal(v.u.i64, 7);
		} else if (i == 6) {
			assert_int_equal(v.type, SPOP_T_STR);
			assert_int_equal(v.u.str.len, 7);
			assert_memory_equal(v.u.str.ptr, "limited", 7);
		} else if (i == 10 || i == 11) {
			assert_int_equal(v.type, SPOP_T_BOOL);
			assert_int_equal(v.u.boolean, 0);
		}
		i++;
	}
	assert_int_equal(i, 12);

	/* without counts, no remaining/reset/ratelimit */
	d.counted = false;
	d.ratelimit[0] = '\0';
	d.ratelimit_len = 0;
	spop_wbuf_init(&w, buf, sizeof(buf));
	decide_put_actions(&w, &d);
	assert_null(memmem(buf, w.len, "remaining", 9));
	assert_null(memmem(buf, w.len, "ratelimit", 9));
	assert_non_null(memmem(buf, w.len, "policy", 6));
}

/* The actions are written after one check of the room for the longest
 * they could take; in a buffer with less room than that, the same bytes
 * when they fit, and w.err when they do not. */
static void test_actions_near_the_end(void **state)
{
	struct decide_decision d = { 0 };
	uint8_t full[1024], tight[1024];
	struct spop_wbuf w;
	size_t n;

	(void)state;
	d.status = 429;
	d.retry_after = 300;
	d.limit = 1000000000;
	d.remaining = 0;
	d.reset = 3600;
	d.priority = 3;
	d.reason = DECIDE_STORE_DOWN;
	d.rule = "pro-search";
	d.policy = "\"pro-search-1m\";q=5;w=60, \"pro-search-1h\";q=50;w=3600";
	d.rule_len = (uint16_t)strlen(d.rule);
	d.policy_len = (uint16_t)strlen(d.policy);
	strcpy(d.ratelimit, "\"pro-search-1h\";r=0;t=3600");
	d.ratelimit_len = (uint16_t)strlen(d.ratelimit);
	d.counted = true;
	d.shadow = true;
	spop_wbuf_init(&w, full, sizeof(full));
	decide_put_actions(&w, &d);
	assert_int_equal(w.err, 0);
	n = w.len;
	spop_wbuf_init(&w, tight, n);
	decide_put_actions(&w, &d);
	assert_int_equal(w.err, 0);
	assert_int_equal(w.len, n);
	assert_memory_equal(tight, full, n);
	spop_wbuf_init(&w, tight, n - 1);
	decide_put_actions(&w, &d);
	assert_int_equal(w.err, 1);
}

/* The names of the variables a decision's actions set, in order,
 * separated by spaces; "-status" for an UNSET-VAR. */
static const char *answer_names(const struct decide_decision *d)
{
	static char out[256];
	uint8_t buf[1024];
	struct spop_wbuf w;
	const uint8_t *p, *end;
	size_t n = 0;

	spop_wbuf_init(&w, buf, sizeof(buf));
	decide_put_actions(&w, d);
	assert_int_equal(w.err, 0);
	out[0] = '\0';
	for (p = buf, end = buf + w.len; p < end;) {
		int set = p[0] == SPOP_ACT_SET_VAR;
		struct spop_str name;
		struct spop_data v;

		assert_int_equal(p[2], SPOP_SCOPE_TXN);
		p += 3;
		assert_int_equal(spop_name_decode(&p, end, &name), SPOP_OK);
		if (set)
			assert_int_equal(spop_data_decode(&p, end, &v), SPOP_OK);
		n += (size_t)snprintf(out + n, sizeof(out) - n, "%s%s%.*s", n ? " " : "",
				      set ? "" : "-", (int)name.len, name.ptr);
	}
	return out;
}

/* Decides one request under the rules of `text` with the store's result r
 * (NULL: without the store, forwarded) and names the variables sent. */
static const char *answer_under(const char *text, const struct limit_result *r, bool open)
{
	static char out[256];
	struct rules *rules = rules_from_text(text);
	struct decide_query q;
	struct decide_decision d;
	struct args a;

	args_init(&a);
	decide_prepare(rules, args_cursor(&a), 0, 0, &q);
	if (open)
		decide_open(&q, &d);
	else
		decide_result(&q, r, r ? 0 : -1, &d);
	snprintf(out, sizeof(out), "%s", answer_names(&d));
	rules_release(rules);
	return out;
}

/* By default an answer carries what HAProxy's rules read: an allowed one
 * the RateLimit fields (and the priority when the rules classify), a
 * refused one also status, retry_after, reason and rule; shadow and
 * degraded are sent when true, with the reason and rule. `answer: full`
 * sends every variable, a list exactly those listed. */
static void test_answer_setting(void **state)
{
	struct limit_result ok = { .allowed = true, .limit = 5, .remaining = 4, .reset_us = 12000000 };
	struct limit_result no = { .allowed = false, .limit = 5, .remaining = 0,
				   .retry_after_us = 12000000, .reset_us = 60000000 };

	(void)state;
	assert_string_equal(answer_under("limits: [5/1m]", &ok, false), "policy ratelimit");
	assert_string_equal(answer_under("limits: [5/1m]", &no, false),
			    "status retry_after reason rule policy ratelimit");
	assert_string_equal(answer_under("limits: [5/1m]\npriorities: { default: 1 }", &ok, false),
			    "priority policy ratelimit");
	assert_string_equal(answer_under("limits: [5/1m]\nshadow: true", &no, false),
			    "reason rule policy ratelimit shadow");
	assert_string_equal(answer_under("limits: [5/1m]", NULL, true),
			    "reason rule policy degraded");
	assert_string_equal(answer_under("limits: [5/1m]\nanswer: default", &ok, false),
			    "policy ratelimit");
	assert_string_equal(answer_under("limits: [5/1m]\nanswer: full", &ok, false),
			    "status retry_after limit remaining reset priority reason rule policy "
			    "ratelimit shadow degraded");
	assert_string_equal(answer_under("limits: [5/1m]\nanswer: [remaining, status]", &ok, false),
			    "status remaining");
	/* an answer with no variable left still carries an action */
	assert_string_equal(answer_under("limits: [5/1m]\nanswer: [place]", &ok, false), "-status");
	assert_string_equal(answer_under("limits: []", NULL, false), "-status");
	/* a decision made by hand (answer 0) is a full one */
	{
		struct decide_decision d = { 0 };

		assert_string_equal(answer_names(&d), "status retry_after limit priority reason rule "
						       "shadow degraded");
	}
}

/* Keys start from hashes of "kind\0" the rules keep: they must follow a
 * secret set after the rules were loaded, for every kind and for anonymous
 * clients. */
static void test_keys_follow_the_secret(void **state)
{
	static const uint8_t secret[16] = { 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2, 3, 4, 5, 6 };
	struct rules *rules = rules_from_text("identity: [api_key, user, ip]\n");
	struct decide_query q;
	struct args a;
	uint8_t want[IDENTITY_KEY_LEN];

	(void)state;
	for (int round = 0; round < 2; round++) {
		if (round == 1)
			rules_set_secret(rules, secret);
		args_init(&a);
		args_add(&a, "api_key", spop_cstr("k-123456789"));
		decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
		key_of(rules, "api_key", "k-123456789", "default", want);
		assert_memory_equal(q.key, want, IDENTITY_KEY_LEN);
		args_init(&a);
		args_add(&a, "user", spop_int64(-42));
		decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
		key_of(rules, "user", "-42", "default", want);
		assert_memory_equal(q.key, want, IDENTITY_KEY_LEN);
		args_init(&a);
		decide_prepare(rules, args_cursor(&a), a.n, 0, &q);
		key_of(rules, "anonymous", "", "default", want);
		assert_memory_equal(q.key, want, IDENTITY_KEY_LEN);
		decide_key(rules, "anonymous", "", 0, "default", want);
		assert_memory_equal(q.key, want, IDENTITY_KEY_LEN);
	}
	rules_release(rules);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_identity_order),
		cmocka_unit_test(test_identity_exact_names_and_anonymous),
		cmocka_unit_test(test_cost_argument),
		cmocka_unit_test(test_result_allowed_and_limited),
		cmocka_unit_test(test_result_ratelimit_t_from_the_math),
		cmocka_unit_test(test_result_several_limits),
		cmocka_unit_test(test_open_and_closed),
		cmocka_unit_test(test_shedding),
		cmocka_unit_test(test_shadow),
		cmocka_unit_test(test_shedding_in_shadow_mode),
		cmocka_unit_test(test_tiers_and_endpoints),
		cmocka_unit_test(test_layers),
		cmocka_unit_test(test_actions_encoding),
		cmocka_unit_test(test_actions_near_the_end),
		cmocka_unit_test(test_answer_setting),
		cmocka_unit_test(test_keys_follow_the_secret),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
