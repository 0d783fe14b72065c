/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the metrics text: every counter of two workers, of their
 * rules (three, counters of their own each), their Redis stores and the in-memory
 * store, rendered and compared byte for byte with the texts of
 * tests/unit/metrics, so that a change in how the figures are read
 * cannot change what scrapers read. The modules' stats functions are
 * stand-ins that give every field a distinct figure, as two workers'
 * counters summed (server.c and store.c sum them: test_server,
 * test_store): the rendering is under test. Then the counters of rules
 * across reloads (rulestats.c), through the text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "alloc.h"
#include "clock.h"
#include "hll.h"
#include "memstore.h"
#include "metrics.h"
#include "out.h"
#include "procstat.h"
#include "rules_text.h"
#include "rulestats.h"
#include "server.h"
#include "store.h"
#include "store_redis.h"

#define FIXTURES "tests/unit/metrics"
#define NWORKERS 2

static struct rules *rules;
static struct store store;
static int shared; /* the store: Redis (1), or the in-memory store alone */

/* The figure of field i of a struct of counters in two workers, summed:
 * worker w (0, 1) counted base * (w + 1) + 3 i + (1 but every fifth). */
static uint64_t figure(uint64_t base, size_t i)
{
	uint64_t v = 0;

	for (int w = 0; w < NWORKERS; w++)
		v += base * (uint64_t)(w + 1) + 3 * i + (i % 5 == 4 ? 0 : 1);
	return v;
}

static void fill(counter_t *c, size_t n, uint64_t base)
{
	for (size_t i = 0; i < n; i++)
		atomic_store(&c[i], base + 3 * i + (i % 5 == 4 ? 0 : 1));
}

/* ---- the modules' stats functions ------------------------------------------ */

void server_get_stats(const struct server *srv, struct server_stats *out)
{
	/* the workers' counters, in the order they were numbered in */
	uint64_t *field[] = {
		&out->accepted, &out->closed, &out->hellos, &out->healthchecks, &out->notifies,
		&out->degraded, &out->store_down, &out->releases, &out->releases_bad,
	};
	size_t i = 0;

	memset(out, 0, sizeof(*out));
	for (; i < sizeof(field) / sizeof(field[0]); i++)
		*field[i] = figure(1000, i);
	for (int st = 0; st < 14; st++, i++)
		out->disconnects_sent[st] = figure(1000, i);
	out->answers_trimmed = figure(1000, i++);
	out->write_stalls = figure(1000, i++);
	/* more opened than closed: the gauge of open connections */
	out->accepted = 5000 + 10000;
	/* a status never sent stays out of the text */
	out->disconnects_sent[3] = 0;
	/* the later of the two workers' figures: 30 busy of 120 */
	out->load_at = 2000.5;
	out->in_use = 30;
	out->free_conns = 90;
	out->reloads = 2;
	out->reload_failures = 1;
}

bool store_shared(const struct store *st)
{
	return shared;
}

/* The Redis store's counters and the store's own, one figure each; the
 * figures as they were when penalty_events sat before penalty_lost among
 * them (the fixture's). */
#define PENALTY_AT (offsetof(struct redis_stats, penalty_lost) / sizeof(counter_t))

void store_get_stats(struct store *st, struct store_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (shared)
		atomic_store(&out->penalty_events, figure(70000, PENALTY_AT));
}

bool store_redis_stats(struct store *st, struct redis_stats *out)
{
	counter_t *c = (counter_t *)out;

	memset(out, 0, sizeof(*out));
	for (size_t i = 0; shared && i < sizeof(*out) / sizeof(counter_t); i++)
		atomic_store(&c[i], figure(70000, i < PENALTY_AT ? i : i + 1));
	return shared;
}

/* Ready with the in-memory store, not with Redis (no server talked to) */
bool store_redis_ready(struct store *st, char *why, size_t len)
{
	snprintf(why, len, "%s", shared ? "redis: no server" : "");
	return !shared;
}

/* (a Redis store always names its servers: their series have their
 * headers even when none was talked to yet) */
void store_redis_each_node(struct store *st, redis_node_stats_fn *fn, void *arg)
{
}

/* TLS to the servers: figures of their own */
void redis_tls_counts(unsigned long long *handshakes, unsigned long long *resumed)
{
	*handshakes = 7;
	*resumed = 5;
}

/* The arguments found missing: the second checked name of RULES_TEXT
 * ("path", after "tier") under the rules' generation 3. */
uint64_t server_args_missing(struct server *srv, uint64_t *gen)
{
	*gen = 3;
	return 2;
}

/* The process_* series read /proc (their own e2e test): a marker here,
 * where they go. */
void procstat_series(struct out *o)
{
	outf(o, "# process_* series\n");
}

void store_mem_stats(const struct store *st, struct memstore_stats *out)
{
	out->keys = 4242;
	out->full = 17;
	out->reclaimed = 99;
	out->evicted = 5;
	out->log_chunks = 31;
	out->max_keys = 50000;
}

#define RULES_TEXT                                                            \
	"tiers: { default: free, free: { limits: [10/1m] }, pro: { limits: [100/1m] } }\n"    \
	"endpoints: [ { name: search, match: { path: /search }, limits: [5/1m] } ]\n"

/* A server as the metrics see it: with Redis or the in-memory store alone. */
static void scenario(struct server *srv, int redis)
{
	memset(srv, 0, sizeof(*srv));
	if (!rules)
		rules = rules_from_text(RULES_TEXT);
	srv->rulestats = rulestats_new(NWORKERS);
	assert_non_null(srv->rulestats);
	rulestats_assign(srv->rulestats, rules);
	for (int i = 0; i < NWORKERS; i++) {
		/* the rules' counters (0, 1, 2) and one past them, never shown */
		for (uint32_t k = 0; k < 4; k++)
			fill((counter_t *)&rulestats_worker(srv->rulestats, i)[k],
			     sizeof(struct rule_counters) / sizeof(counter_t),
			     100000u * (i + 1) + 100u * k);
	}
	rules_set_gen(rules, 3);
	atomic_init(&srv->rules, rules);
	shared = redis;
	srv->store = &store; /* only passed to the stubs */
}

static char *read_fixture(const char *name, size_t *len)
{
	char path[256];
	FILE *fp;
	char *buf = malloc(1 << 16);

	snprintf(path, sizeof(path), "%s/%s", FIXTURES, name);
	fp = fopen(path, "rb");
	assert_non_null(fp);
	assert_non_null(buf);
	*len = fread(buf, 1, (1 << 16) - 1, fp);
	buf[*len] = '\0';
	fclose(fp);
	return buf;
}

static void check(int redis, const char *fixture)
{
	struct server srv;
	char *text = NULL, *want;
	size_t len, wlen;

	scenario(&srv, redis);
	len = metrics_render(&srv, &text);
	assert_non_null(text);
	want = read_fixture(fixture, &wlen);
	if (len != wlen || memcmp(text, want, len) != 0) {
		fwrite(text, 1, len, stderr);
		fail_msg("the metrics text differs from %s/%s", FIXTURES, fixture);
	}
	free(want);
	xfree(text);
	rulestats_free(srv.rulestats);
}

static void test_redis_store(void **unused) { check(1, "redis.txt"); }

static void test_memory_store(void **unused) { check(0, "memory.txt"); }

static void test_allocation_failure(void **unused)
{
	struct server srv;
	char *text = NULL;

	scenario(&srv, 1);
	xalloc_fail_after(0);
	assert_int_equal(metrics_render(&srv, &text), 0);
	xalloc_fail_after(-1);
	assert_null(text);
	rulestats_free(srv.rulestats);
}

/* The value of the series `line` (name and labels) in a metrics text. */
static uint64_t series(struct server *srv, const char *line)
{
	char *text = NULL, *p;
	uint64_t v;

	assert_true(metrics_render(srv, &text) > 0);
	p = strstr(text, line);
	if (!p) {
		fwrite(text, 1, strlen(text), stderr);
		fail_msg("no series %s", line);
	}
	v = strtoull(p + strlen(line), NULL, 10);
	xfree(text);
	return v;
}

static int has_series(struct server *srv, const char *line)
{
	char *text = NULL;
	int found;

	assert_true(metrics_render(srv, &text) > 0);
	found = strstr(text, line) != NULL;
	xfree(text);
	return found;
}

static struct rules *swap(struct server *srv, const char *yaml)
{
	struct rules *r = rules_from_text(yaml);

	rulestats_assign(srv->rulestats, r);
	atomic_store(&srv->rules, r);
	return r;
}

static void count(struct server *srv, const struct rules *r, const char *rule, int worker)
{
	const struct rule *ru = rules_find(r, rule);

	assert_non_null(ru);
	STAT_INC(rulestats_worker(srv->rulestats, worker)[ru->counters].decisions);
}

/* A reload keeps the counts of the rules it keeps, by name, wherever they
 * moved; drops the series of a rule it removes; and a rule that comes back
 * counts on from where it was. */
static void test_rules_across_reloads(void **unused)
{
	struct server srv;
	struct rules *a, *b, *c;

	memset(&srv, 0, sizeof(srv));
	shared = 0;
	srv.store = &store;
	srv.rulestats = rulestats_new(NWORKERS);
	assert_non_null(srv.rulestats);
	a = swap(&srv, "tiers: { default: free, free: { limits: [10/1m] }, pro: { limits: [100/1m] } }");
	count(&srv, a, "free", 0);
	count(&srv, a, "free", 1);
	count(&srv, a, "pro", 1);
	assert_int_equal(series(&srv, "spoa_rl_decisions_total{rule=\"free\"} "), 2);
	assert_int_equal(series(&srv, "spoa_rl_decisions_total{rule=\"pro\"} "), 1);

	/* pro moves to the front, free goes, gold comes */
	b = swap(&srv, "tiers: { default: pro, pro: { limits: [100/1m] }, gold: { limits: [1000/1m] } }");
	/* a decision made under the old rules, answered after the reload */
	count(&srv, a, "pro", 0);
	count(&srv, b, "gold", 0);
	assert_int_equal(series(&srv, "spoa_rl_decisions_total{rule=\"pro\"} "), 2);
	assert_int_equal(series(&srv, "spoa_rl_decisions_total{rule=\"gold\"} "), 1);
	assert_false(has_series(&srv, "rule=\"free\""));

	c = swap(&srv, "tiers: { free: { limits: [10/1m] } }");
	count(&srv, c, "free", 0);
	assert_int_equal(series(&srv, "spoa_rl_decisions_total{rule=\"free\"} "), 3);
	assert_false(has_series(&srv, "rule=\"pro\""));
	rules_release(a);
	rules_release(b);
	rules_release(c);
	rulestats_free(srv.rulestats);
}

/* When all counters have had a name, a new name takes those of the name
 * that left the rules longest ago, counting from zero; the names in force
 * keep theirs. */
static void test_counters_taken_back(void **unused)
{
	struct rulestats *rs = rulestats_new(1);
	struct rules *keep = rules_from_text("tiers: { keep: { limits: [10/1m] } }");
	uint32_t kept;

	assert_non_null(rs);
	rulestats_assign(rs, keep);
	kept = rules_rule_at(keep, 0)->counters;
	STAT_INC(rulestats_worker(rs, 0)[kept].decisions);
	for (int i = 0; i < RULESTATS_NAMES + 10; i++) {
		char yaml[128];
		struct rules *r;
		uint32_t s;

		snprintf(yaml, sizeof(yaml),
			 "tiers: { default: keep, keep: { limits: [10/1m] }, t%d: { limits: [10/1m] } }",
			 i);
		r = rules_from_text(yaml);
		rulestats_assign(rs, r);
		assert_int_equal(rules_find(r, "keep")->counters, kept);
		s = rules_rule_at(r, 1)->counters;
		assert_true(s != kept);
		/* a fresh name counts from zero, in new counters or taken ones */
		assert_int_equal(rulestats_get(rs, s, offsetof(struct rule_counters, decisions)), 0);
		STAT_INC(rulestats_worker(rs, 0)[s].decisions);
		rules_release(r);
	}
	assert_int_equal(rulestats_get(rs, kept, offsetof(struct rule_counters, decisions)), 1);
	rules_release(keep);
	rulestats_free(rs);
}

/* Distinct clients by rule: each worker's sketch merged (a client seen by
 * two workers counts once), a rule kept by a reload keeps its clients. */
static void test_clients_estimate(void **unused)
{
	struct server srv;
	struct rules *a, *b;
	int64_t now = hll_period(clock_wall_ms() * 1000);
	uint64_t v;

	memset(&srv, 0, sizeof(srv));
	shared = 0;
	srv.store = &store;
	srv.rulestats = rulestats_new(NWORKERS);
	assert_non_null(srv.rulestats);
	a = swap(&srv, "tiers: { default: free, free: { limits: [10/1m] }, pro: { limits: [100/1m] } }");
	assert_int_equal(series(&srv, "spoa_rl_clients_estimate{rule=\"free\"} "), 0);
	for (uint64_t c = 0; c < 3000; c++) {
		uint64_t h = (c + 1) * 0x9e3779b97f4a7c15ull;

		h ^= h >> 29;
		h *= 0xbf58476d1ce4e5b9ull;
		h ^= h >> 32;
		/* workers 0 and 1 see the first 2000 and the last 2000 */
		if (c < 2000)
			hll_add(rulestats_sketches(srv.rulestats, 0)[rules_find(a, "free")->counters], h,
				now);
		if (c >= 1000)
			hll_add(rulestats_sketches(srv.rulestats, 1)[rules_find(a, "free")->counters], h,
				now);
	}
	v = series(&srv, "spoa_rl_clients_estimate{rule=\"free\"} ");
	assert_true(v > 2850 && v < 3150);
	assert_int_equal(series(&srv, "spoa_rl_clients_estimate{rule=\"pro\"} "), 0);
	b = swap(&srv, "tiers: { default: free, free: { limits: [20/1m] } }");
	assert_int_equal(series(&srv, "spoa_rl_clients_estimate{rule=\"free\"} "), v);
	assert_false(has_series(&srv, "spoa_rl_clients_estimate{rule=\"pro\"}"));
	rules_release(a);
	rules_release(b);
	rulestats_free(srv.rulestats);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_redis_store),
		cmocka_unit_test(test_memory_store),
		cmocka_unit_test(test_allocation_failure),
		cmocka_unit_test(test_rules_across_reloads),
		cmocka_unit_test(test_counters_taken_back),
		cmocka_unit_test(test_clients_estimate),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
