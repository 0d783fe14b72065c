/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the rules as others see them (rules_seen.c): which
 * argument names are checked against traffic, which of them a message
 * carries, and the match conditions as read-only views. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "rules.h"
#include "rules_text.h"
#include "spop.h"

static const char *names(const struct rules *r)
{
	static char out[512];
	size_t len = 0;

	out[0] = '\0';
	for (size_t i = 0; i < rules_checked_count(r); i++)
		len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%s", i ? " " : "",
					rules_checked_name(r, i));
	assert_null(rules_checked_name(r, rules_checked_count(r)));
	return out;
}

static void test_checked_names(void **unused)
{
	struct rules *r;

	/* the defaults: nothing the file wrote, nothing checked */
	r = rules_from_text("{}");
	assert_string_equal(names(r), "");
	rules_release(r);
	/* tiers without an identity: the tier argument only */
	r = rules_from_text("tiers: { default: free, free: { limits: [1/1m] } }\n");
	assert_string_equal(names(r), "tier");
	rules_release(r);
	r = rules_from_text(
		"identity: [apikey, ip]\n"
		"cost_argument: weight\n"
		"override_argument: rl_limit\n"
		"layers: { per-user: { identity: user, limits: [5/1s] } }\n"
		"stack: [per-user]\n"
		"tiers: { argument: plan, default: free, free: { limits: [1/1m], max_override: 9/1m } }\n"
		"endpoints: [ { name: s, match: { method: POST, path: /s, args: { x_area: a } },"
		" limits: [2/1m] } ]\n"
		"priorities: { classes: [ { priority: 3, match: { host: t.example } } ] }\n"
		"shedding: { in_use: busy, free: idle }\n");
	/* identity (the file's, then the layers'), tier, cost, shedding,
	 * override, then what the matches read, each once */
	assert_string_equal(names(r),
			    "apikey ip user plan weight busy idle rl_limit method path x_area host");
	rules_release(r);
}

static void put(struct spop_wbuf *w, const char *name, struct spop_data d)
{
	spop_put_name(w, name, strlen(name));
	spop_put_data(w, &d);
}

static void test_args_seen(void **unused)
{
	struct rules *r = rules_from_text("identity: [apikey, ip]\n"
					  "tiers: { default: free, free: { limits: [1/1m] } }\n");
	uint8_t buf[512];
	struct spop_wbuf w;
	struct spop_cursor c;

	assert_string_equal(names(r), "apikey ip tier");
	spop_wbuf_init(&w, buf, sizeof(buf));
	put(&w, "api_key", spop_cstr("k1"));
	put(&w, "ip", spop_int64(1));
	/* NULL is sent all the same */
	put(&w, "tier", spop_null());
	assert_false(w.err);
	c.p = buf;
	c.end = buf + w.len;
	assert_int_equal(rules_args_seen(r, c, 3), 2 | 4);
	/* fewer than announced, or broken: what was read before */
	assert_int_equal(rules_args_seen(r, c, 9), 2 | 4);
	c.end = buf + w.len - 1;
	assert_int_equal(rules_args_seen(r, c, 3), 2);
	/* a name that is a prefix, or longer: not the same */
	spop_wbuf_init(&w, buf, sizeof(buf));
	put(&w, "apike", spop_null());
	put(&w, "apikeys", spop_null());
	put(&w, "apikey", spop_null());
	c.end = buf + w.len;
	assert_int_equal(rules_args_seen(r, c, 2), 0);
	assert_int_equal(rules_args_seen(r, c, 3), 1);
	rules_release(r);
}

static void test_match_views(void **unused)
{
	struct rules *r = rules_from_text(
		"tiers: { default: free, free: { limits: [1/1m] }, pro: { limits: [2/1m] } }\n"
		"endpoints: [ { name: a, match: { method: [GET, HEAD], tier: pro }, limits: [] },"
		" { name: b, match: { host: \"x.example:8080\", args: { k: [v1, v2] } }, limits: [] } ]\n"
		"priorities: { classes: [ { priority: 0, match: { path: /health } } ] }\n");
	const struct rules_match *m;
	int priority = -1;

	assert_int_equal(rules_endpoint_count(r), 2);
	assert_int_equal(rules_endpoint_first(r), 2);
	assert_string_equal(rules_rule_at(r, rules_endpoint_first(r))->name, "a");
	m = rules_endpoint_match(r, 0);
	assert_int_equal(m->method.n, 2);
	assert_memory_equal(m->method.v[1].ptr, "HEAD", 4);
	assert_int_equal(m->ntiers, 1);
	assert_string_equal(rules_rule_at(r, m->tiers[0])->name, "pro");
	m = rules_endpoint_match(r, 1);
	assert_int_equal(m->host.n, 1);
	assert_true(m->host.v[0].port);
	assert_int_equal(m->nargs, 1);
	assert_string_equal(m->args[0].name, "k");
	assert_int_equal(m->args[0].c.n, 2);
	assert_null(rules_endpoint_match(r, 2));
	assert_int_equal(rules_class_count(r), 1);
	m = rules_class_match(r, 0, &priority);
	assert_int_equal(priority, 0);
	assert_int_equal(m->path.n, 1);
	assert_null(rules_class_match(r, 1, &priority));
	rules_release(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_checked_names),
		cmocka_unit_test(test_args_seen),
		cmocka_unit_test(test_match_views),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
