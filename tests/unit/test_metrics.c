/* Unit tests of the metrics text: every counter of two workers, their Redis
 * stores and the in-memory store, rendered and compared byte for byte with
 * the texts of tests/unit/metrics, so that a change in how the figures are summed
 * cannot change what scrapers read. The stores are stand-ins that hold
 * counters only: the rendering is under test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "alloc.h"
#include "memstore.h"
#include "metrics.h"
#include "server.h"
#include "store.h"

#define FIXTURES "tests/unit/metrics"
#define NWORKERS 2

static struct store_worker sws[NWORKERS];
static struct worker workers[NWORKERS];
static struct rules *rules;
static struct store store;
static const struct store_ops shared_ops = { .name = "redis", .shared = true };
static const struct store_ops memory_ops = { .name = "memory", .shared = false };

void memstore_get_stats(struct memstore *ms, struct memstore_stats *out)
{
	out->keys = 4242;
	out->full = 17;
	out->reclaimed = 99;
	out->evicted = 5;
}

/* Both structs hold nothing but counters: number them all, distinctly per
 * worker, so that a field summed from the wrong place shows. */
static void fill(counter_t *c, size_t n, uint64_t base)
{
	for (size_t i = 0; i < n; i++)
		atomic_store(&c[i], base + 3 * i + (i % 5 == 4 ? 0 : 1));
}

/* A server as the metrics see it: with Redis or the in-memory store alone. */
static void scenario(struct server *srv, int redis)
{
	memset(srv, 0, sizeof(*srv));
	memset(workers, 0, sizeof(workers));
	for (int i = 0; i < NWORKERS; i++) {
		fill((counter_t *)&workers[i].stats,
		     sizeof(workers[i].stats) / sizeof(counter_t), 1000u * (i + 1));
		/* more opened than closed: the gauge of open connections */
		atomic_store(&workers[i].stats.accepted, 5000u * (i + 1));
		/* a status never sent stays out of the text */
		atomic_store(&workers[i].stats.disconnects_sent[3], 0);
		memset(&sws[i], 0, sizeof(sws[i]));
		if (redis)
			fill((counter_t *)&sws[i].stats, sizeof(sws[i].stats) / sizeof(counter_t),
			     70000u * (i + 1));
		workers[i].store = &sws[i];
	}
	if (!rules)
		rules = rules_default();
	rules_set_gen(rules, 3);
	atomic_init(&srv->rules, rules);
	atomic_store(&srv->reloads, 2);
	atomic_store(&srv->reload_failures, 1);
	srv->workers = workers;
	srv->nworkers = NWORKERS;
	store.ops = redis ? &shared_ops : &memory_ops;
	store.mem = (struct memstore *)&store; /* only passed to the stub */
	srv->store = &store;
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
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_redis_store),
		cmocka_unit_test(test_memory_store),
		cmocka_unit_test(test_allocation_failure),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
