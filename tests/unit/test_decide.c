/* Unit tests of decide.c: identity choice, query building, the decision
 * variables and their exact SET-VAR encoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

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

static void key_of(const struct decide_config *cfg, const char *kind, const char *value,
		   uint8_t out[IDENTITY_KEY_LEN])
{
	identity_hash(cfg->secret, kind, strlen(kind), value, strlen(value), out);
}

static void test_identity_order(void **state)
{
	struct decide_config cfg;
	struct decide_query q;
	struct args a;
	uint8_t want[IDENTITY_KEY_LEN];
	struct spop_data ip = { .type = SPOP_T_IPV4, .u.ipv4 = { 10, 0, 0, 1 } };

	(void)state;
	decide_config_defaults(&cfg);

	/* ip only */
	args_init(&a);
	args_add(&a, "ip", ip);
	args_add(&a, "api_key", spop_null());
	args_add(&a, "user", spop_cstr(""));
	decide_prepare(&cfg, args_cursor(&a), a.n, &q);
	assert_string_equal(q.identity, "ip");
	key_of(&cfg, "ip", "10.0.0.1", want);
	assert_memory_equal(q.key, want, IDENTITY_KEY_LEN);

	/* user beats ip, api_key beats user, whatever the order of arguments */
	args_init(&a);
	args_add(&a, "ip", ip);
	args_add(&a, "user", spop_cstr("alice"));
	decide_prepare(&cfg, args_cursor(&a), a.n, &q);
	assert_string_equal(q.identity, "user");
	args_add(&a, "api_key", spop_cstr("k1"));
	decide_prepare(&cfg, args_cursor(&a), a.n, &q);
	assert_string_equal(q.identity, "api_key");
	key_of(&cfg, "api_key", "k1", want);
	assert_memory_equal(q.key, want, IDENTITY_KEY_LEN);
	assert_int_equal(strlen(q.key_hex), 32);

	/* the same value under two kinds is two clients */
	key_of(&cfg, "user", "k1", want);
	assert_memory_not_equal(q.key, want, IDENTITY_KEY_LEN);
}

static void test_identity_exact_names_and_anonymous(void **state)
{
	struct decide_config cfg;
	struct decide_query q;
	struct args a;

	(void)state;
	decide_config_defaults(&cfg);
	args_init(&a);
	args_add(&a, "api_keyx", spop_cstr("k1")); /* not a prefix match */
	args_add(&a, "ap", spop_cstr("k2"));
	decide_prepare(&cfg, args_cursor(&a), a.n, &q);
	assert_string_equal(q.identity, "anonymous");
	assert_int_equal(q.cost, 1);
	assert_int_equal(q.priority, 2);
	assert_string_equal(q.rule, "default");
	assert_int_equal(q.nlimits, 1);

	assert_int_equal(decide_set_identity(&cfg, "x_client,ip"), 0);
	args_add(&a, "x_client", spop_cstr("c"));
	decide_prepare(&cfg, args_cursor(&a), a.n, &q);
	assert_string_equal(q.identity, "x_client");
	assert_int_equal(decide_set_identity(&cfg, ""), -1);
	assert_int_equal(decide_set_identity(&cfg, "a,,b"), -1);
	assert_int_equal(decide_set_identity(&cfg, "a,"), -1);
	assert_int_equal(decide_set_identity(&cfg, "1,2,3,4,5,6,7,8,9"), -1);
	assert_string_equal(cfg.identity[0], "x_client"); /* unchanged on error */
}

static void test_cost_argument(void **state)
{
	struct decide_config cfg;
	struct decide_query q;
	struct args a;

	(void)state;
	decide_config_defaults(&cfg);
	strcpy(cfg.cost_arg, "cost");
	args_init(&a);
	args_add(&a, "cost", spop_int64(3));
	decide_prepare(&cfg, args_cursor(&a), a.n, &q);
	assert_int_equal(q.cost, 3);
	args_init(&a);
	args_add(&a, "cost", spop_int64(-5));
	decide_prepare(&cfg, args_cursor(&a), a.n, &q);
	assert_int_equal(q.cost, 1);
	args_init(&a);
	args_add(&a, "cost", spop_int64(1LL << 40));
	decide_prepare(&cfg, args_cursor(&a), a.n, &q);
	assert_int_equal(q.cost, UINT32_MAX);
	args_init(&a);
	args_add(&a, "cost", spop_cstr("7"));
	decide_prepare(&cfg, args_cursor(&a), a.n, &q);
	assert_int_equal(q.cost, 1);
}

static void test_result_allowed_and_limited(void **state)
{
	struct decide_config cfg;
	struct decide_query q;
	struct decide_decision d;
	struct args a;
	struct limit_result r = { .allowed = true, .limit = 100, .remaining = 42,
				  .retry_after_us = 0, .reset_us = 34500001 };

	(void)state;
	decide_config_defaults(&cfg);
	args_init(&a);
	decide_prepare(&cfg, args_cursor(&a), 0, &q);
	decide_result(&q, &r, 0, &d);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.retry_after, 0);
	assert_int_equal(d.limit, 100);
	assert_int_equal(d.remaining, 42);
	assert_int_equal(d.reset, 35);
	assert_string_equal(decide_reason_str(d.reason), "ok");
	assert_string_equal(d.policy, "\"default\";q=100;w=60");
	assert_string_equal(d.ratelimit, "\"default\";r=42;t=35");

	r.allowed = false;
	r.remaining = 0;
	r.retry_after_us = 1; /* one microsecond still rounds up to 1 s */
	decide_result(&q, &r, 0, &d);
	assert_int_equal(d.status, 429);
	assert_int_equal(d.retry_after, 1);
	assert_string_equal(decide_reason_str(d.reason), "limited");
	assert_string_equal(d.ratelimit, "\"default\";r=0;t=35");
}

static void test_result_several_limits(void **state)
{
	struct decide_config cfg;
	struct decide_query q;
	struct decide_decision d;
	struct args a;
	struct limit_result r[2] = {
		{ .allowed = true, .limit = 100, .remaining = 99, .reset_us = 600000 },
		{ .allowed = false, .limit = 1000, .remaining = 0, .retry_after_us = 3600000000LL,
		  .reset_us = 3600000000LL },
	};
	char err[64];

	(void)state;
	decide_config_defaults(&cfg);
	assert_int_equal(limit_parse("1000/1h", &cfg.limits[1], err, sizeof(err)), 0);
	cfg.nlimits = 2;
	args_init(&a);
	decide_prepare(&cfg, args_cursor(&a), 0, &q);
	decide_result(&q, r, 1, &d);
	assert_int_equal(d.status, 429);
	assert_int_equal(d.retry_after, 3600);
	assert_int_equal(d.limit, 1000);
	assert_string_equal(d.policy, "\"default-1m\";q=100;w=60, \"default-1h\";q=1000;w=3600");
	assert_string_equal(d.ratelimit, "\"default-1h\";r=0;t=3600");
}

static void test_degraded(void **state)
{
	struct decide_config cfg;
	struct decide_query q;
	struct decide_decision d;
	struct args a;

	(void)state;
	decide_config_defaults(&cfg);
	args_init(&a);
	decide_prepare(&cfg, args_cursor(&a), 0, &q);
	decide_degraded(&q, &d);
	assert_int_equal(d.status, 0);
	assert_true(d.degraded);
	assert_false(d.counted);
	assert_string_equal(d.policy, "\"default\";q=100;w=60");
	assert_string_equal(d.ratelimit, "");
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
	strcpy(d.policy, "\"default\";q=5;w=10");
	strcpy(d.ratelimit, "\"default\";r=0;t=9");
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
	spop_wbuf_init(&w, buf, sizeof(buf));
	decide_put_actions(&w, &d);
	assert_null(memmem(buf, w.len, "remaining", 9));
	assert_null(memmem(buf, w.len, "ratelimit", 9));
	assert_non_null(memmem(buf, w.len, "policy", 6));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_identity_order),
		cmocka_unit_test(test_identity_exact_names_and_anonymous),
		cmocka_unit_test(test_cost_argument),
		cmocka_unit_test(test_result_allowed_and_limited),
		cmocka_unit_test(test_result_several_limits),
		cmocka_unit_test(test_degraded),
		cmocka_unit_test(test_actions_encoding),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
