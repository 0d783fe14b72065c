/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the process settings (settings.c): their defaults, their
 * values and messages as the strict readers give them, settings_equal.
 *
 * The documents here hold only settings keys. The rules file's fixtures
 * (tests/unit/rules/err-listen-*.yaml, err-store-*.yaml) check the same
 * messages through the whole loader.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "addr.h"
#include "settings.h"
#include "yaml_strict.h"

static char err[1024];

/* Reads the settings of a document whose root holds settings keys only.
 * Returns 0, or -1 with the message in err. */
static int parse(const char *yaml, struct settings *s)
{
	struct ys y;
	yaml_node_t *root, *k[SETTINGS_NKEYS], *v[SETTINGS_NKEYS];
	int rc = -1;

	settings_defaults(s);
	err[0] = '\0';
	if (ys_open(&y, yaml, strlen(yaml), "t.yaml", err, sizeof(err), &root) == 0 && root &&
	    ys_map_fields(&y, root, "", settings_keys, SETTINGS_NKEYS, k, v) == 0 &&
	    settings_parse(&y, v, s) == 0)
		rc = 0;
	ys_close(&y);
	return rc;
}

static void ok(const char *yaml, struct settings *s)
{
	if (parse(yaml, s) < 0)
		fail_msg("unexpected error: %s", err);
}

static void fails(const char *yaml, const char *expected)
{
	struct settings s;

	assert_int_equal(parse(yaml, &s), -1);
	assert_string_equal(err, expected);
}

static const char *addr_str(const struct addr *a)
{
	static char buf[ADDR_HOST_MAX + 16];

	return addr_format(a, buf, sizeof(buf));
}

static void test_defaults(void **unused)
{
	struct settings s;

	settings_defaults(&s);
	assert_false(s.has_listen || s.has_threads || s.has_store || s.has_address ||
		     s.has_user || s.has_password || s.has_timeout || s.has_agents);
	assert_string_equal(addr_str(&s.listen), "127.0.0.1:12345");
	assert_int_equal(s.threads, 0);
	assert_int_equal(s.store, SETTINGS_STORE_MEMORY);
	assert_string_equal(addr_str(&s.address), "127.0.0.1:6379");
	assert_string_equal(s.user, "");
	assert_string_equal(s.password, "");
	assert_int_equal(s.timeout_ms, 20);
	assert_int_equal(s.agents, 1);
	/* An empty mapping sets nothing. */
	ok("{}", &s);
	assert_false(s.has_listen || s.has_threads || s.has_store);
}

static void test_values(void **unused)
{
	struct settings s;

	ok("store: { type: memory }", &s);
	assert_true(s.has_store);
	assert_int_equal(s.store, SETTINGS_STORE_MEMORY);
	ok("store: { type: redis, address: \"[2001:db8::1]:6380\", timeout: 1s }\n"
	   "listen: \"0.0.0.0:1\"", &s);
	assert_int_equal(s.store, SETTINGS_STORE_REDIS);
	assert_true(s.has_address);
	assert_string_equal(s.address.host, "2001:db8::1");
	assert_string_equal(s.address.port, "6380");
	assert_string_equal(s.address.path, "");
	assert_int_equal(s.timeout_ms, 1000);
	assert_true(s.has_listen);
	assert_string_equal(addr_str(&s.listen), "0.0.0.0:1");
	assert_false(s.has_user);
	ok("threads: 256\nstore: { type: redis, timeout: 60s, agents: 10000, user: spoa }\n", &s);
	assert_int_equal(s.threads, 256);
	assert_int_equal(s.timeout_ms, 60000);
	assert_int_equal(s.agents, 10000);
	assert_string_equal(s.user, "spoa");
	/* A timeout rounds up to whole milliseconds. */
	ok("store: { type: redis, timeout: 1500us }", &s);
	assert_int_equal(s.timeout_ms, 2);
	ok("listen: \"[::1]:9000\"", &s);
	assert_string_equal(s.listen.host, "::1");
	assert_string_equal(s.listen.port, "9000");

	fails("threads: 99999999999999999999999",
	      "t.yaml:1:10: threads: expected an integer from 1 to 256, got \"99999999999999999999999\"");
	fails("threads: +", "t.yaml:1:10: threads: expected an integer from 1 to 256, got \"+\"");
	fails("threads: \"\"", "t.yaml:1:10: threads: expected an integer from 1 to 256, got \"\"");
	fails("threads:", "t.yaml:1:9: threads: expected an integer from 1 to 256, got nothing");
	fails("store: { type: redis, adress: x }",
	      "t.yaml:1:23: store: unknown key \"adress\" (expected one of: type, address, nodes, "
	      "sentinels, master, sentinel_password, user, password, timeout, agents, "
	      "hash_key_file, password_file, sentinel_password_file, tls, sentinel_tls)");
	fails("store: { user: spoa }",
	      "t.yaml:1:10: store.user: applies to a Redis store only (add type: redis, sentinel, cluster or shards)");
}

/* Addresses are what addr_parse() accepts: the listen address a host and
 * a port from 1, the store's also a socket path that fits a socket
 * address. */
static void test_addresses(void **unused)
{
	struct settings s;
	char yaml[256], path[ADDR_PATH_MAX + 2];

	fails("listen: \"[::1]\"",
	      "t.yaml:1:9: listen: expected ADDR:PORT such as 127.0.0.1:12345, got \"[::1]\"");
	fails("listen: \":80\"",
	      "t.yaml:1:9: listen: expected ADDR:PORT such as 127.0.0.1:12345, got \":80\"");
	fails("listen: \"a:0\"",
	      "t.yaml:1:9: listen: expected ADDR:PORT such as 127.0.0.1:12345, got \"a:0\"");
	fails("listen: \"a:123456\"",
	      "t.yaml:1:9: listen: expected ADDR:PORT such as 127.0.0.1:12345, got \"a:123456\"");
	fails("listen: /run/agent.sock",
	      "t.yaml:1:9: listen: expected ADDR:PORT such as 127.0.0.1:12345, got \"/run/agent.sock\"");
	fails("listen: \"a b:80\"",
	      "t.yaml:1:9: listen: expected ADDR:PORT such as 127.0.0.1:12345, got \"a b:80\"");
	fails("listen: [a]", "t.yaml:1:9: listen: expected a string, got a list");
	fails("store: { type: redis, address: localhost }",
	      "t.yaml:1:32: store.address: expected HOST:PORT or a socket path, got \"localhost\"");

	ok("store: { type: redis, address: /run/redis/redis.sock }", &s);
	assert_string_equal(s.address.path, "/run/redis/redis.sock");
	assert_string_equal(s.address.host, "");
	assert_string_equal(addr_str(&s.address), "/run/redis/redis.sock");
	/* The longest path a socket address holds, and one byte more. */
	memset(path, 'p', sizeof(path));
	path[0] = '/';
	path[ADDR_PATH_MAX] = '\0';
	snprintf(yaml, sizeof(yaml), "store: { type: redis, address: %s }", path);
	ok(yaml, &s);
	assert_string_equal(s.address.path, path);
	path[ADDR_PATH_MAX] = 'p';
	path[ADDR_PATH_MAX + 1] = '\0';
	snprintf(yaml, sizeof(yaml), "store: { type: redis, address: %s }", path);
	assert_int_equal(parse(yaml, &s), -1);
	assert_non_null(strstr(err, "t.yaml:1:32: store.address: expected HOST:PORT or a socket "
				    "path, got \"/ppp"));
}

/* The Redis topologies: what each type takes and needs. */
static void test_topologies(void **unused)
{
	struct settings s;

	ok("store: { type: sentinel, sentinels: [\"10.0.0.1:26379\", \"[::1]:26380\"], master: mymaster,"
	   " sentinel_password: sp, password: dp }", &s);
	assert_int_equal(s.store, SETTINGS_STORE_SENTINEL);
	assert_int_equal(s.nnodes, 2);
	assert_string_equal(addr_str(&s.nodes[0]), "10.0.0.1:26379");
	assert_string_equal(addr_str(&s.nodes[1]), "[::1]:26380");
	assert_string_equal(s.master, "mymaster");
	assert_string_equal(s.sentinel_password, "sp");
	assert_string_equal(s.password, "dp");

	ok("store: { type: cluster, nodes: 127.0.0.1:7000 }", &s);
	assert_int_equal(s.store, SETTINGS_STORE_CLUSTER);
	assert_int_equal(s.nnodes, 1);
	assert_string_equal(addr_str(&s.nodes[0]), "127.0.0.1:7000");

	ok("store: { type: shards, nodes: [a:1, b:2, c:3] }", &s);
	assert_int_equal(s.store, SETTINGS_STORE_SHARDS);
	assert_int_equal(s.nnodes, 3);
	assert_string_equal(addr_str(&s.nodes[2]), "c:3");

	ok("store: { hash_key_file: /etc/spoa-ratelimit/hash.key }", &s);
	assert_int_equal(s.store, SETTINGS_STORE_MEMORY);
	assert_true(s.has_hash_key_file);
	assert_string_equal(s.hash_key_file, "/etc/spoa-ratelimit/hash.key");
	fails("store: { type: sentinel, master: m }",
	      "t.yaml:1:8: store: missing key \"sentinels\" (type sentinel needs sentinels and master)");
	fails("store: { type: shards, master: m, nodes: [a:1] }",
	      "t.yaml:1:24: store.master: does not apply to type shards");
	fails("store: { type: redis, nodes: [a:1] }",
	      "t.yaml:1:23: store.nodes: does not apply to type redis");
	fails("store: { type: cluster, nodes: [a:1, a:1] }",
	      "t.yaml:1:38: store.nodes[1]: listed twice");
	fails("store: { type: cluster, nodes: [] }",
	      "t.yaml:1:32: store.nodes: empty list");
	fails("store: { type: sentinel, sentinels: [a:1], master: \"\" }",
	      "t.yaml:1:52: store.master: must not be empty");
}

static void test_tls(void **unused)
{
	struct settings s;

	ok("store: { type: redis }", &s);
	assert_false(s.has_tls);
	assert_true(s.tls_verify);
	assert_true(s.sentinel_tls);
	ok("store: { type: redis, tls: true }", &s);
	assert_true(s.has_tls && s.tls);
	assert_string_equal(s.tls_ca, "");
	ok("store: { type: redis, tls: false }", &s);
	assert_true(s.has_tls && !s.tls);
	ok("store: { type: cluster, nodes: \"a:1\", tls: {} }", &s);
	assert_true(s.tls && s.tls_verify);
	ok("store: { type: redis, tls: { ca: /c, cert: /crt, key: /k, server_name: r.x, "
	   "verify: false } }", &s);
	assert_true(s.tls && !s.tls_verify);
	assert_string_equal(s.tls_ca, "/c");
	assert_string_equal(s.tls_cert, "/crt");
	assert_string_equal(s.tls_key, "/k");
	assert_string_equal(s.tls_server_name, "r.x");
	ok("store: { type: sentinel, sentinels: \"a:1\", master: m, tls: true, "
	   "sentinel_tls: false }", &s);
	assert_true(s.tls && s.has_sentinel_tls && !s.sentinel_tls);
	fails("store: { type: redis, tls: { cert: /crt } }",
	      "t.yaml:1:28: store.tls: missing key \"key\" (a client certificate goes with its key)");
	fails("store: { type: redis, tls: { ca: \"\" } }",
	      "t.yaml:1:34: store.tls.ca: must not be empty");
	fails("store: { type: redis, tls: { crt: /x } }",
	      "t.yaml:1:30: store.tls: unknown key \"crt\" (expected one of: ca, cert, key, "
	      "server_name, verify)");
	fails("store: { type: redis, sentinel_tls: false }",
	      "t.yaml:1:23: store.sentinel_tls: does not apply to type redis");
	fails("store: { type: redis, tls: maybe }",
	      "t.yaml:1:28: store.tls: expected true or false, got \"maybe\"");
}

static void test_password_env(void **unused)
{
	struct settings s;
	char longval[300];

	setenv("RL_TEST_PW", "from-env", 1);
	ok("store: { type: redis, password: \"${RL_TEST_PW}\" }", &s);
	assert_true(s.has_password);
	assert_string_equal(s.password, "from-env");
	/* Only a whole "${NAME}" is replaced. */
	ok("store: { type: redis, password: \"x${RL_TEST_PW}\" }", &s);
	assert_string_equal(s.password, "x${RL_TEST_PW}");
	ok("store: { type: redis, password: \"${}\" }", &s);
	assert_string_equal(s.password, "${}");
	fails("store: { type: redis, password: \"${RL-TEST}\" }",
	      "t.yaml:1:33: store.password: \"${...}\" must name an environment variable (A-Z a-z 0-9 _)");
	unsetenv("RL_TEST_NOT_SET");
	fails("store: { type: redis, password: \"${RL_TEST_NOT_SET}\" }",
	      "t.yaml:1:33: store.password: environment variable RL_TEST_NOT_SET is not set");
	/* The variable's value is checked against the same bound. */
	memset(longval, 'p', sizeof(longval) - 1);
	longval[sizeof(longval) - 1] = '\0';
	setenv("RL_TEST_PW", longval, 1);
	fails("store: { type: redis, password: \"${RL_TEST_PW}\" }",
	      "t.yaml:1:33: store.password: longer than 255 bytes");
	unsetenv("RL_TEST_PW");
}

/* Every field counts, set or not. */
static void test_equal(void **unused)
{
	static const char *const changes[] = {
		"listen: \"127.0.0.1:12345\"", /* the default value, but set */
		"listen: \"127.0.0.1:12346\"",
		"threads: 2",
		"store: { type: memory }",
		"store: { type: redis }",
		"store: { type: redis, address: \"127.0.0.1:6380\" }",
		"store: { type: redis, address: /run/redis.sock }",
		"store: { type: redis, user: u }",
		"store: { type: redis, password: p }",
		"store: { type: redis, timeout: 21ms }",
		"store: { type: redis, agents: 2 }",
		"store: { type: redis, tls: true }",
		"store: { type: redis, tls: { ca: /etc/ca.pem } }",
		"store: { type: redis, tls: { server_name: r.example } }",
		"store: { type: redis, tls: { verify: false } }",
		"store: { type: sentinel, sentinels: \"a:1\", master: m, sentinel_tls: false }",
	};
	struct settings a, b;

	settings_defaults(&a);
	ok("{}", &b);
	assert_true(settings_equal(&a, &b));
	for (size_t i = 0; i < sizeof(changes) / sizeof(changes[0]); i++) {
		ok(changes[i], &b);
		if (settings_equal(&a, &b))
			fail_msg("equal to the defaults: %s", changes[i]);
		ok(changes[i], &a);
		if (!settings_equal(&a, &b))
			fail_msg("not equal to itself: %s", changes[i]);
		settings_defaults(&a);
	}
}

/* `answer`: full, default, or a list of the variables' names, each once;
 * a reload applies it, so it is not among the settings compared. */
static void test_answer(void **unused)
{
	struct settings s, d;

	settings_defaults(&d);
	assert_int_equal(d.answer, SETTINGS_ANSWER_READ);
	ok("answer: full", &s);
	assert_true(s.has_answer);
	assert_int_equal(s.answer, SETTINGS_ANSWER_FULL);
	assert_true(settings_equal(&s, &d));
	ok("answer: default", &s);
	assert_int_equal(s.answer, SETTINGS_ANSWER_READ);
	ok("answer: [full]", &s);
	assert_int_equal(s.answer, SETTINGS_ANSWER_FULL);
	ok("answer: status", &s);
	assert_int_equal(s.answer, SETTINGS_ANSWER_LIST | SETTINGS_VAR_STATUS);
	ok("answer: [status, retry_after, ratelimit, policy, priority]", &s);
	assert_int_equal(s.answer, SETTINGS_ANSWER_LIST | SETTINGS_VAR_STATUS |
					   SETTINGS_VAR_RETRY_AFTER | SETTINGS_VAR_RATELIMIT |
					   SETTINGS_VAR_POLICY | SETTINGS_VAR_PRIORITY);
	ok("answer: [status, retry_after, limit, remaining, reset, priority, reason, rule, "
	   "policy, ratelimit, place, shadow, degraded]", &s);
	assert_int_equal(s.answer, SETTINGS_ANSWER_LIST | SETTINGS_VAR_ALL);

	fails("answer: [status, slot]",
	      "t.yaml:1:18: answer[1]: unknown variable \"slot\" (expected full, default, or a "
	      "list of status, retry_after, limit, remaining, reset, priority, reason, rule, "
	      "policy, ratelimit, place, shadow, degraded)");
	fails("answer:\n  - status\n  - status\n",
	      "t.yaml:3:5: answer[1]: status listed twice");
	fails("answer: [status, full]",
	      "t.yaml:1:18: answer[1]: full stands alone, not in a list of variables");
	fails("answer: [default, status]",
	      "t.yaml:1:19: answer[1]: full and default stand alone, not in a list of variables");
	fails("answer: []", "t.yaml:1:9: answer: empty list");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_addresses),
		cmocka_unit_test(test_topologies),
		cmocka_unit_test(test_password_env),
		cmocka_unit_test(test_equal),
		cmocka_unit_test(test_tls),
		cmocka_unit_test(test_answer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
