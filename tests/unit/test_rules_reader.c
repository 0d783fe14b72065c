/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the rules reader (rules_reader.c): a load that answers, one
 * that fails, and one that never answers (a stale network mount), which the
 * caller gives up on within its time and which is freed when it ends; the
 * bound on loads given up on; the done callback, never after giving up.
 *
 * rules_load() and rules_release() are this file's: "hang" blocks until
 * the test lets it go, through a pipe. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rules_reader.h"

static int gate[2];             /* a byte lets one "hang" load end */
static atomic_int released;     /* rules_release() calls */
static atomic_int done_calls;
static struct rules *const LOADED = (struct rules *)&gate;

struct rules *rules_load(const char *path, char *err, size_t errlen)
{
	char b;

	if (strcmp(path, "hang") == 0) {
		while (read(gate[0], &b, 1) < 0)
			;
		return LOADED;
	}
	if (strcmp(path, "bad") == 0) {
		snprintf(err, errlen, "bad:1:1: broken");
		return NULL;
	}
	return LOADED;
}

void rules_release(struct rules *r)
{
	assert_ptr_equal(r, LOADED);
	atomic_fetch_add(&released, 1);
}

static void on_done(void *arg)
{
	atomic_fetch_add(&done_calls, 1);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void wait_released(int n)
{
	for (int i = 0; i < 500 && atomic_load(&released) < n; i++)
		usleep(10000);
	assert_int_equal(atomic_load(&released), n);
}

static void test_answers(void **unused)
{
	char err[256] = "untouched";

	assert_ptr_equal(rules_reader_load("ok", 5., err, sizeof(err)), LOADED);
	assert_null(rules_reader_load("bad", 5., err, sizeof(err)));
	assert_string_equal(err, "bad:1:1: broken");
	assert_int_equal(atomic_load(&released), 0);
}

static void test_hung_loads_are_bounded(void **unused)
{
	struct rules_reader *rr[RULES_READER_HUNG_MAX];
	char err[256];
	double t0 = now();

	atomic_store(&released, 0);
	assert_null(rules_reader_load("hang", 0.2, err, sizeof(err)));
	assert_string_equal(err, "hang: not read after 0 s (a mount that does not answer?)");
	assert_true(now() - t0 < 2.);
	/* more given up on, up to the bound; past it, a load fails at once */
	for (int i = 1; i < RULES_READER_HUNG_MAX; i++) {
		rr[i] = rules_reader_start("hang", on_done, NULL, err, sizeof(err));
		assert_non_null(rr[i]);
		assert_int_equal(rules_reader_wait(rr[i], 0.), 0);
		rules_reader_abandon(rr[i]);
	}
	assert_null(rules_reader_start("ok", NULL, NULL, err, sizeof(err)));
	assert_non_null(strstr(err, "earlier reads of rules files have not returned"));
	/* the mount answers: every load ends, frees what it loaded, and
	 * calls no done() of a caller that gave up */
	for (int i = 0; i < RULES_READER_HUNG_MAX; i++)
		assert_int_equal(write(gate[1], "x", 1), 1);
	wait_released(RULES_READER_HUNG_MAX);
	assert_int_equal(atomic_load(&done_calls), 0);
	assert_ptr_equal(rules_reader_load("ok", 5., err, sizeof(err)), LOADED);
}

static void test_done_then_finish(void **unused)
{
	char err[256];
	struct rules_reader *rr;

	atomic_store(&done_calls, 0);
	atomic_store(&released, 0);
	rr = rules_reader_start("hang", on_done, NULL, err, sizeof(err));
	assert_non_null(rr);
	assert_int_equal(rules_reader_wait(rr, 0.05), 0);
	assert_int_equal(write(gate[1], "x", 1), 1);
	assert_int_equal(rules_reader_wait(rr, 5.), 1);
	assert_int_equal(atomic_load(&done_calls), 1);
	assert_ptr_equal(rules_reader_finish(rr, err, sizeof(err)), LOADED);
	/* a load ready but given up on frees its result */
	rr = rules_reader_start("ok", NULL, NULL, err, sizeof(err));
	assert_non_null(rr);
	assert_int_equal(rules_reader_wait(rr, 5.), 1);
	rules_reader_abandon(rr);
	wait_released(1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_answers),
		cmocka_unit_test(test_hung_loads_are_bounded),
		cmocka_unit_test(test_done_then_finish),
	};

	if (pipe(gate) < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
