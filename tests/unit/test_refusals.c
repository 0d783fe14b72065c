/* Unit tests of refusals.c: a refusal answered until its time, for
 * requests at least as heavy, under the same limits and admin-reset
 * count; and the refusals not worth remembering. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "refusals.h"

#define MS 1000LL

static struct rule rule;
static struct limit_spec limits[2];

static struct decide_query query(uint8_t client, uint32_t cost)
{
	struct decide_query q;

	memset(&q, 0, sizeof(q));
	q.key[0] = client;
	q.key[15] = client;
	q.rule = &rule;
	q.limits = limits;
	q.nlimits = 2;
	q.cost = cost;
	return q;
}

/* Limit 1 refused, Redis said: retry in 5 ms, full in 9 ms, more in 7 ms. */
static void refused(struct limit_result *res)
{
	memset(res, 0, 2 * sizeof(*res));
	res[0].allowed = true;
	res[1].retry_after_us = 5 * MS;
	res[1].reset_us = 9 * MS;
	res[1].more_us = 7 * MS;
}

static void setup_rule(void)
{
	memset(&rule, 0, sizeof(rule));
	memset(limits, 0, sizeof(limits));
	limits[0].quota = 100;
	limits[0].period_us = 60000 * MS;
	limits[1].quota = 10;
	limits[1].period_us = 1000 * MS;
}

static void test_answered_until_its_time(void **unused)
{
	struct refusals *c = refusals_new();
	struct decide_query q = query(1, 2), light = query(1, 1), other = query(2, 2);
	struct limit_result res[2], got[2];
	int d = -1;

	setup_rule();
	refused(res);
	refusals_store(c, &q, 3, 1, res, 1000 * MS);
	assert_int_equal(refusals_answer(c, &q, 3, 1001 * MS, got, &d), 1);
	assert_int_equal(d, 1);
	assert_true(got[0].allowed);
	assert_false(got[1].allowed);
	assert_int_equal(got[1].retry_after_us, 4 * MS);
	assert_int_equal(got[1].reset_us, 8 * MS);
	assert_int_equal(got[1].more_us, 6 * MS);
	/* heavier: refused too; lighter, another client, a reset, the time
	 * passed, new rules: asked again */
	q.cost = 3;
	assert_int_equal(refusals_answer(c, &q, 3, 1001 * MS, got, &d), 1);
	assert_int_equal(refusals_answer(c, &light, 3, 1001 * MS, got, &d), 0);
	assert_int_equal(refusals_answer(c, &other, 3, 1001 * MS, got, &d), 0);
	assert_int_equal(refusals_answer(c, &q, 4, 1001 * MS, got, &d), 0);
	assert_int_equal(refusals_answer(c, &q, 3, 1005 * MS, got, &d), 0);
	refusals_clear(c);
	assert_int_equal(refusals_answer(c, &q, 3, 1001 * MS, got, &d), 0);
	refusals_free(c);
}

static void test_refusals_not_remembered(void **unused)
{
	struct refusals *c = refusals_new();
	struct decide_query q = query(1, 1), heavy = query(1, 11);
	struct limit_result res[2], got[2];
	int d;

	setup_rule();
	/* heavier than the bucket: never passes, lighter ones do */
	refused(res);
	refusals_store(c, &heavy, 0, 1, res, 0);
	assert_int_equal(refusals_answer(c, &heavy, 0, 1 * MS, got, &d), 0);
	/* a concurrency limit frees with a response, not at a time */
	limits[1].algo = LIMIT_CONCURRENCY;
	refusals_store(c, &q, 0, 1, res, 0);
	assert_int_equal(refusals_answer(c, &q, 0, 1 * MS, got, &d), 0);
	/* with a penalty box, only the ban */
	limits[1].algo = LIMIT_TOKEN_BUCKET;
	rule.penalty.ban = 2;
	refusals_store(c, &q, 0, 1, res, 0);
	assert_int_equal(refusals_answer(c, &q, 0, 1 * MS, got, &d), 0);
	limits[1].algo = LIMIT_BAN;
	refusals_store(c, &q, 0, 1, res, 0);
	assert_int_equal(refusals_answer(c, &q, 0, 1 * MS, got, &d), 1);
	refusals_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_answered_until_its_time),
		cmocka_unit_test(test_refusals_not_remembered),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
