/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the log limiter: per site, LOG_BURST lines per window,
 * the rest counted and each counted line reported exactly once, on an
 * injected clock (milliseconds); then the lines themselves, read back from
 * stderr redirected to a file. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "log.h"

/* A realistic start, so nothing relies on the clock starting at 0. */
#define T0 123456789LL

/* log_report_suppressed(), its lines to /dev/null. */
static int reports(int64_t now_ms, int all)
{
	int saved = dup(2), n;
	FILE *null = fopen("/dev/null", "w");

	assert_true(saved >= 0 && null);
	dup2(fileno(null), 2);
	n = log_report_suppressed(now_ms, all);
	dup2(saved, 2);
	close(saved);
	fclose(null);
	return n;
}

/* Reports whatever the tests before left suppressed. */
static void drain_reports(void)
{
	reports(INT64_MAX / 2, 1);
}

static void test_burst_then_counted(void **state)
{
	static struct log_site s;
	uint64_t report;

	(void)state;
	for (int i = 0; i < LOG_BURST; i++) {
		assert_int_equal(log_site_admit(&s, T0 + i, &report), 1);
		assert_int_equal(report, 0);
	}
	for (int i = 0; i < 1234; i++) {
		assert_int_equal(log_site_admit(&s, T0 + 100, &report), 0);
		assert_int_equal(report, 0);
	}
	/* the window is measured from its first line */
	assert_int_equal(log_site_admit(&s, T0 + LOG_WINDOW_MS - 1, &report), 0);
	assert_int_equal(report, 0);
	/* the next window opens with the count of the last one */
	assert_int_equal(log_site_admit(&s, T0 + LOG_WINDOW_MS, &report), 1);
	assert_int_equal(report, 1235);
	for (int i = 1; i < LOG_BURST; i++)
		assert_int_equal(log_site_admit(&s, T0 + LOG_WINDOW_MS + 1, &report), 1);
	assert_int_equal(log_site_admit(&s, T0 + LOG_WINDOW_MS + 2, &report), 0);
	/* a quiet window after a busy one reports the busy one's rest */
	assert_int_equal(log_site_admit(&s, T0 + 5 * LOG_WINDOW_MS, &report), 1);
	assert_int_equal(report, 1);
	assert_int_equal(log_site_admit(&s, T0 + 6 * LOG_WINDOW_MS, &report), 1);
	assert_int_equal(report, 0);
}

static void test_sites_apart(void **state)
{
	static struct log_site a, b;
	uint64_t report;

	(void)state;
	for (int i = 0; i < LOG_BURST; i++)
		assert_int_equal(log_site_admit(&a, T0, &report), 1);
	assert_int_equal(log_site_admit(&a, T0, &report), 0);
	/* a flood at one site takes nothing from another */
	assert_int_equal(log_site_admit(&b, T0, &report), 1);
}

/* Reports from the periodic call: only for windows that have ended, unless
 * all; and a count reported there is not reported again by the site. */
static void test_periodic_reports(void **state)
{
	static struct log_site s;
	uint64_t report;
	int64_t t = 10 * T0;  /* after every window of the other tests */

	(void)state;
	drain_reports();
	for (int i = 0; i < LOG_BURST + 7; i++)
		log_site_admit(&s, t, &report);
	assert_int_equal(reports(t + LOG_WINDOW_MS - 1, 0), 0);
	assert_int_equal(reports(t + LOG_WINDOW_MS, 0), 1);
	assert_int_equal(reports(t + LOG_WINDOW_MS + 1000, 0), 0);
	assert_int_equal(log_site_admit(&s, t + LOG_WINDOW_MS + 1000, &report), 1);
	assert_int_equal(report, 0);

	/* at exit, windows still open are reported too */
	t += 3 * LOG_WINDOW_MS;
	for (int i = 0; i < LOG_BURST + 3; i++)
		log_site_admit(&s, t, &report);
	assert_int_equal(reports(t + 1, 0), 0);
	assert_int_equal(reports(t + 1, 1), 1);
	assert_int_equal(reports(t + 1, 1), 0);
}

/* Threads hammering one site across many windows: every call is written,
 * or counted once in a report or in what is left; written lines stay
 * within a burst per window, give or take a line per thread at the turn of
 * a window. */
#define THREADS 4
#define CALLS 200000
#define WINDOWS 20

static struct log_site shared;

struct tally {
	uint64_t written, reported;
};

static void *hammer(void *arg)
{
	struct tally *t = arg;
	uint64_t report;

	for (int i = 0; i < CALLS; i++) {
		/* every thread walks the same clock, WINDOWS windows long */
		int64_t now = 20 * T0 + (int64_t)i * WINDOWS * LOG_WINDOW_MS / CALLS;

		t->written += (uint64_t)log_site_admit(&shared, now, &report);
		t->reported += report;
	}
	return NULL;
}

static void test_threads_count_every_line_once(void **state)
{
	pthread_t th[THREADS];
	struct tally tally[THREADS];
	uint64_t written = 0, reported = 0, left;

	(void)state;
	memset(tally, 0, sizeof(tally));
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, hammer, &tally[i]), 0);
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		written += tally[i].written;
		reported += tally[i].reported;
	}
	left = atomic_load(&shared.suppressed);
	assert_int_equal(written + reported + left, (uint64_t)THREADS * CALLS);
	assert_true(written >= (uint64_t)WINDOWS * LOG_BURST);
	assert_true(written <= (uint64_t)(WINDOWS + 1) * (LOG_BURST + THREADS));
}

/* The lines as written: a burst, then one report that quotes the last
 * line written and counts the rest. */
static void test_lines_written(void **state)
{
	char path[] = "/tmp/test_log.XXXXXX";
	char buf[8192], *p;
	int fd = mkstemp(path), saved = dup(2), lines = 0;
	FILE *f;

	(void)state;
	assert_true(fd >= 0 && saved >= 0);
	unlink(path);
	drain_reports();
	assert_int_equal(dup2(fd, 2), 2);
	log_set_level(LOG_INFO);
	for (int i = 0; i < 2000; i++)
		log_warn("connection %d: refused", i);
	log_debug("not written at level info");
	log_report_suppressed(log_now_ms(), 1);
	assert_int_equal(dup2(saved, 2), 2);
	close(saved);
	f = fdopen(fd, "r");
	assert_non_null(f);
	rewind(f);
	buf[fread(buf, 1, sizeof(buf) - 1, f)] = '\0';
	fclose(f);
	for (p = buf; (p = strchr(p, '\n')); p++)
		lines++;
	assert_int_equal(lines, LOG_BURST + 1);
	assert_non_null(strstr(buf, " warning: connection 0: refused\n"));
	assert_non_null(strstr(buf, " warning: connection 9: refused\n"));
	assert_null(strstr(buf, "connection 10: refused\n"));
	assert_non_null(strstr(buf, " warning: 1990 more like \"connection 9: refused\" in the last "));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_burst_then_counted),
		cmocka_unit_test(test_sites_apart),
		cmocka_unit_test(test_periodic_reports),
		cmocka_unit_test(test_threads_count_every_line_once),
		cmocka_unit_test(test_lines_written),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
