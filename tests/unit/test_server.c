/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of server.c's start and stop: every way start-up can fail
 * leaves a server that server_stop() takes down without a crash, a leak or
 * a reference left on the rules. Failures are injected at the link
 * boundary (ev_loop_new, pthread_create: -Wl,--wrap) and in the project's
 * allocation wrappers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "alloc.h"
#include "log.h"
#include "server.h"
#include "store.h"

/* ---- link-time hooks -------------------------------------------------------- */

struct ev_loop *__real_ev_loop_new(unsigned int flags);
int __real_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
			  void *arg);

static int loops_before_failure = -1;   /* -1: never fail */
static int threads_before_failure = -1;

struct ev_loop *__wrap_ev_loop_new(unsigned int flags)
{
	if (loops_before_failure == 0)
		return NULL;
	if (loops_before_failure > 0)
		loops_before_failure--;
	return __real_ev_loop_new(flags);
}

int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
			  void *arg)
{
	if (threads_before_failure == 0)
		return 11; /* EAGAIN */
	if (threads_before_failure > 0)
		threads_before_failure--;
	return __real_pthread_create(t, attr, fn, arg);
}

/* ---- fixture ----------------------------------------------------------------- */

static struct server srv;
static struct rules *rules;

static void setup_server(int threads)
{
	memset(&srv, 0, sizeof(srv));
	server_config_defaults(&srv.cfg);
	assert_int_equal(addr_parse("127.0.0.1:0", ADDR_PORT0, &srv.cfg.listen), 0);
	srv.cfg.threads = threads;
	srv.lfd = -1;
	rules = rules_default();
	assert_non_null(rules);
	atomic_init(&srv.rules, rules);
	srv.store = store_memory_new(1000);
	assert_non_null(srv.store);
	assert_int_equal(server_listen(&srv), 0);
}

/* Stops the server and checks that nothing it allocated is left and that
 * the rules are referenced by the server alone. */
static void teardown_server(long live_before)
{
	server_stop(&srv);
	assert_int_equal(srv.nworkers, 0);
	assert_int_equal(rules_refs(rules), 1);
	rules_release(rules);
	store_free(srv.store);
	assert_int_equal(xalloc_live(), live_before);
}

static void test_start_and_stop(void **state)
{
	long live = xalloc_live();

	(void)state;
	setup_server(3);
	assert_int_equal(server_start(&srv), 0);
	assert_int_equal(srv.nworkers, 3);
	teardown_server(live);
}

/* The k-th worker's loop (or thread) cannot be made, for k = 0, 1, 2: the
 * workers before it run, the rest never exist, and stopping joins the
 * threads that started. */
static void check_failure_at_each_worker(int *before_failure)
{
	long live = xalloc_live();

	for (int k = 0; k < 3; k++) {
		setup_server(3);
		*before_failure = k;
		assert_int_equal(server_start(&srv), -1);
		*before_failure = -1;
		assert_int_equal(srv.nworkers, k);
		teardown_server(live);
	}
}

static void test_loop_failure(void **state)
{
	(void)state;
	check_failure_at_each_worker(&loops_before_failure);
}

static void test_thread_failure(void **state)
{
	(void)state;
	check_failure_at_each_worker(&threads_before_failure);
}

/* Every allocation of start-up fails in turn. */
static void test_allocation_failures(void **state)
{
	long live = xalloc_live();
	int failed = 0;

	(void)state;
	for (long n = 0; n < 200; n++) {
		int rc;

		setup_server(2);
		xalloc_fail_after(n);
		rc = server_start(&srv);
		xalloc_fail_after(-1);
		teardown_server(live);
		if (rc == 0)
			break;
		failed++;
	}
	/* start-up allocates, so some runs failed, and the loop ended with
	 * one that had all it needed */
	assert_true(failed > 0);
	assert_true(failed < 200);
}

/* The metrics' figures: every worker's counters summed, the load figures
 * of the most recent request that carried them, the server's own. */
static void test_stats_summed(void **state)
{
	long live = xalloc_live();
	struct server_stats ss;

	(void)state;
	setup_server(2);
	assert_int_equal(server_start(&srv), 0);
	for (int i = 0; i < 2; i++) {
		struct worker *w = &srv.workers[i];

		STAT_ADD(w->conns.stats.notifies, 10u * (uint64_t)(i + 1));
		STAT_ADD(w->conns.stats.disconnects_sent[13], (uint64_t)(i + 1));
		STAT_ADD(w->stats.releases_bad, 5u);
		STAT_SET(w->load.in_use, (int64_t)(i ? 3 : 50));
		STAT_SET(w->load.free_conns, (int64_t)(i ? 4 : 60));
		STAT_SET(w->load.at, i ? 10.0 : 20.0);
	}
	STAT_ADD(srv.reloads, 2);
	atomic_store(&srv.out_grown, 4096);
	server_get_stats(&srv, &ss);
	assert_int_equal(ss.notifies, 30);
	assert_int_equal(ss.disconnects_sent[13], 3);
	assert_int_equal(ss.releases_bad, 10);
	assert_int_equal(ss.hellos, 0);
	assert_true(ss.load_at == 20.0);
	assert_int_equal(ss.in_use, 50);
	assert_int_equal(ss.free_conns, 60);
	assert_int_equal(ss.reloads, 2);
	assert_int_equal(ss.out_grown, 4096);
	atomic_store(&srv.out_grown, 0);
	teardown_server(live);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_start_and_stop),
		cmocka_unit_test(test_loop_failure),
		cmocka_unit_test(test_thread_failure),
		cmocka_unit_test(test_stats_summed),
		cmocka_unit_test(test_allocation_failures),
	};

	log_set_level(LOG_ERR - 1); /* quiet: failures are expected */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
