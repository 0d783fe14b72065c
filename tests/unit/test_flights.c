/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the requests in flight per backend: shedding by priority
 * at the limit, releases as samples, refusals given back, overdue
 * releases dropped, a full table, and releases from other threads. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "flights.h"

#define MS 1000LL

static struct adaptive_config cfg(uint32_t min, uint32_t max)
{
	struct adaptive_config c;

	adaptive_config_defaults(&c);
	c.set = true;
	c.min = min;
	c.max = max;
	c.initial = max;
	c.timeout_us = 1000 * MS;
	return c;
}

static struct flights_backend_stats stats_of(struct flights *f, const char *name)
{
	struct flights_backend_stats s[FLIGHTS_BACKENDS_MAX];
	size_t n = flights_backends(f, s, FLIGHTS_BACKENDS_MAX);

	for (size_t i = 0; i < n; i++)
		if (strcmp(s[i].name, name) == 0)
			return s[i];
	fail_msg("no backend %s", name);
	return s[0];
}

static enum flights_verdict enter(struct flights *f, const char *be, uint64_t id, int prio,
				  const struct adaptive_config *c, int64_t now)
{
	return flights_enter(f, be, strlen(be), id, prio, false, c, now);
}

/* Limit 4: P3 is shed at 4 in flight, P2 at 5, P1 at 6, P0 never. */
static void test_shed_by_priority(void **unused)
{
	struct adaptive_config c = cfg(4, 4);
	struct flights *f = flights_new();
	uint64_t id = 1;

	assert_false(flights_active(f));
	for (int i = 0; i < 4; i++)
		assert_int_equal(enter(f, "app", id++, 3, &c, 0), FLIGHTS_ADMITTED);
	assert_true(flights_active(f));
	assert_int_equal(enter(f, "app", id++, 3, &c, 0), FLIGHTS_SHED);
	assert_int_equal(enter(f, "app", id++, 2, &c, 0), FLIGHTS_ADMITTED);
	assert_int_equal(enter(f, "app", id++, 2, &c, 0), FLIGHTS_SHED);
	assert_int_equal(enter(f, "app", id++, 1, &c, 0), FLIGHTS_ADMITTED);
	assert_int_equal(enter(f, "app", id++, 1, &c, 0), FLIGHTS_SHED);
	for (int i = 0; i < 10; i++)
		assert_int_equal(enter(f, "app", id++, 0, &c, 0), FLIGHTS_ADMITTED);
	/* shadow: admitted, marked */
	assert_int_equal(flights_enter(f, "app", 3, 1000, 3, true, &c, 0), FLIGHTS_SHADOW_SHED);
	/* another backend has its own count */
	assert_int_equal(enter(f, "other", 2000, 3, &c, 0), FLIGHTS_ADMITTED);
	assert_int_equal(stats_of(f, "app").inflight, 17);
	assert_int_equal(stats_of(f, "app").shed, 3);
	assert_int_equal(stats_of(f, "other").inflight, 1);
	/* one P3 released: a P3 still waits for the count to fall under 4 */
	assert_int_equal(flights_leave(f, 1, &c, 10 * MS), 1);
	assert_int_equal(flights_leave(f, 1, &c, 10 * MS), 0);
	assert_int_equal(stats_of(f, "app").inflight, 16);
	assert_int_equal(stats_of(f, "app").samples, 1);
	flights_free(f);
}

/* A refused request leaves without a sample; no id is not tracked. */
static void test_cancel_and_untracked(void **unused)
{
	struct adaptive_config c = cfg(2, 100);
	struct flights *f = flights_new();

	assert_int_equal(enter(f, "app", 7, 3, &c, 0), FLIGHTS_ADMITTED);
	flights_cancel(f, 7);
	assert_int_equal(stats_of(f, "app").inflight, 0);
	assert_int_equal(stats_of(f, "app").samples, 0);
	assert_int_equal(flights_leave(f, 7, &c, 0), 0);
	assert_int_equal(enter(f, "app", 0, 3, &c, 0), FLIGHTS_UNTRACKED);
	assert_int_equal(flights_untracked(f), 1);
	/* the same id twice: the second is not tracked */
	assert_int_equal(enter(f, "app", 9, 3, &c, 0), FLIGHTS_ADMITTED);
	assert_int_equal(enter(f, "app", 9, 3, &c, 0), FLIGHTS_UNTRACKED);
	assert_int_equal(stats_of(f, "app").inflight, 1);
	/* a name too long, and more backends than the table holds */
	char longname[FLIGHTS_NAME_MAX + 1];
	memset(longname, 'b', sizeof(longname) - 1);
	longname[FLIGHTS_NAME_MAX] = 0;
	assert_int_equal(enter(f, longname, 10, 3, &c, 0), FLIGHTS_UNTRACKED);
	for (int i = 0; i < FLIGHTS_BACKENDS_MAX + 5; i++) {
		char name[16];

		snprintf(name, sizeof(name), "be%d", i);
		enter(f, name, 100 + (uint64_t)i, 0, &c, 0);
	}
	assert_int_equal(flights_backends(f, (struct flights_backend_stats[FLIGHTS_BACKENDS_MAX]){0},
					  FLIGHTS_BACKENDS_MAX), FLIGHTS_BACKENDS_MAX);
	assert_int_equal(flights_untracked(f), 3 + 6);
	flights_free(f);
}

/* A release that never comes: dropped at the timeout, as a long sample,
 * by a later request's sweep or by flights_expire(). */
static void test_expire(void **unused)
{
	struct adaptive_config c = cfg(2, 100);
	struct flights *f = flights_new();

	for (uint64_t id = 1; id <= 50; id++)
		assert_int_equal(enter(f, "app", id, 0, &c, 0), FLIGHTS_ADMITTED);
	assert_int_equal(flights_expire(f, &c, 999 * MS), 0);
	assert_int_equal(stats_of(f, "app").inflight, 50);
	assert_int_equal(flights_expire(f, &c, 1000 * MS), 50);
	assert_int_equal(stats_of(f, "app").inflight, 0);
	assert_int_equal(stats_of(f, "app").drops, 50);
	/* the sweep of a later request */
	assert_int_equal(enter(f, "app", 60, 0, &c, 2000 * MS), FLIGHTS_ADMITTED);
	assert_int_equal(enter(f, "app", 61, 0, &c, 3100 * MS), FLIGHTS_ADMITTED);
	assert_int_equal(stats_of(f, "app").inflight, 1);
	assert_int_equal(stats_of(f, "app").drops, 51);
	/* samples of a second and more against a 50 ms target, their
	 * window closed: the limit fell */
	assert_true(stats_of(f, "app").limit < 100);
	flights_free(f);
}

/* A sweep reads only the shards with an entry due (each shard keeps its
 * earliest deadline): entries of a shorter timeout, after a reload, are
 * dropped at their own deadline though older ones are due later; those
 * released meanwhile are not dropped; each due one is, once. */
static void test_expire_follows_each_deadline(void **unused)
{
	struct adaptive_config c = cfg(2, 1000), shorter = cfg(2, 1000);
	struct flights *f = flights_new();

	shorter.timeout_us = 100 * MS;
	for (uint64_t id = 1; id <= 40; id++)
		assert_int_equal(enter(f, "app", id, 0, &c, 0), FLIGHTS_ADMITTED);
	for (uint64_t id = 1; id <= 10; id++)
		assert_int_equal(flights_leave(f, id, &c, 300 * MS), 1);
	assert_int_equal(flights_expire(f, &c, 500 * MS), 0);
	for (uint64_t id = 41; id <= 60; id++)
		assert_int_equal(enter(f, "app", id, 0, &shorter, 600 * MS), FLIGHTS_ADMITTED);
	assert_int_equal(stats_of(f, "app").inflight, 50);
	assert_int_equal(flights_expire(f, &shorter, 699 * MS), 0);
	assert_int_equal(flights_expire(f, &shorter, 700 * MS), 20);
	assert_int_equal(flights_expire(f, &shorter, 800 * MS), 0);
	assert_int_equal(stats_of(f, "app").inflight, 30);
	assert_int_equal(flights_expire(f, &c, 999 * MS), 0);
	assert_int_equal(flights_expire(f, &c, 1000 * MS), 30);
	assert_int_equal(flights_expire(f, &c, 5000 * MS), 0);
	assert_int_equal(stats_of(f, "app").inflight, 0);
	assert_int_equal(stats_of(f, "app").drops, 50);
	flights_free(f);
}

/* Many ids land in one probe: past FLIGHTS_PROBE of one shard's slot,
 * not tracked, counted; the count stays exact. */
static void test_full(void **unused)
{
	struct adaptive_config c = cfg(2, ADAPTIVE_LIMIT_MAX);
	struct flights *f = flights_new();
	size_t stride = FLIGHTS_SHARDS * (FLIGHTS_CAPACITY / FLIGHTS_SHARDS);
	int admitted = 0;

	/* ids that share shard and home slot */
	for (int i = 0; i < FLIGHTS_PROBE + 4; i++)
		admitted += enter(f, "app", 5 + (uint64_t)i * stride, 0, &c, 0) == FLIGHTS_ADMITTED;
	assert_int_equal(admitted, FLIGHTS_PROBE);
	assert_int_equal(flights_untracked(f), 4);
	assert_int_equal(stats_of(f, "app").inflight, FLIGHTS_PROBE);
	flights_free(f);
}

/* Four threads admit and release each other's requests: the count ends
 * at zero. */
struct job {
	struct flights *f;
	const struct adaptive_config *c;
	uint64_t base;
};

static void *run(void *arg)
{
	struct job *j = arg;

	for (uint64_t i = 1; i <= 20000; i++) {
		uint64_t id = j->base + i;

		if (flights_enter(j->f, "app", 3, id, 0, false, j->c, (int64_t)i) == FLIGHTS_ADMITTED)
			flights_leave(j->f, (j->base ^ 0x100000000ULL) + i, j->c, (int64_t)i);
	}
	for (uint64_t i = 1; i <= 20000; i++)
		flights_leave(j->f, j->base + i, j->c, 30000);
	return NULL;
}

static void test_threads(void **unused)
{
	struct adaptive_config c = cfg(2, ADAPTIVE_LIMIT_MAX);
	struct flights *f = flights_new();
	struct job jobs[4];
	pthread_t t[4];

	for (int i = 0; i < 4; i++) {
		jobs[i] = (struct job){f, &c, ((uint64_t)(i / 2) << 32) | ((uint64_t)(i % 2) << 40)};
		pthread_create(&t[i], NULL, run, &jobs[i]);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(stats_of(f, "app").inflight, 0);
	flights_free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shed_by_priority),
		cmocka_unit_test(test_cancel_and_untracked),
		cmocka_unit_test(test_expire),
		cmocka_unit_test(test_expire_follows_each_deadline),
		cmocka_unit_test(test_full),
		cmocka_unit_test(test_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
