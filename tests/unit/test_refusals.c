/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of refusals.c: a refusal answered until its time, for
 * requests at least as heavy, under the same limits and admin-reset
 * count; the refusals not worth remembering; and clients in entries
 * across the table, each answered on its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
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

/* A client in entry `entry` (the key's first four bytes, little-endian,
 * select it): keys that differ past them. */
static struct decide_query in_entry(uint32_t entry, uint8_t other)
{
	struct decide_query q = query(0, 1);

	q.key[0] = (uint8_t)entry;
	q.key[1] = (uint8_t)(entry >> 8);
	q.key[15] = other;
	return q;
}

/* Entries at the ends of the table and of its words of live bits: each
 * refusal answered, another client of the same entry not; one past its
 * time leaves the others refused. */
static void test_entries_across_the_table(void **unused)
{
	static const uint32_t entries[] = { 0, 1, 62, 63, 64, 65, 127, 128, 4031, 4032, 4095 };
	struct refusals *c = refusals_new();
	struct limit_result res[2], got[2];
	size_t n = sizeof(entries) / sizeof(entries[0]);
	int d;

	setup_rule();
	refused(res);
	for (size_t i = 0; i < n; i++) {
		struct decide_query q = in_entry(entries[i], 1);

		/* the first ends 5 ms after 10 ms, the others after 20 */
		refusals_store(c, &q, 0, 1, res, i ? 20 * MS : 10 * MS);
	}
	for (size_t i = 0; i < n; i++) {
		struct decide_query q = in_entry(entries[i], 1), other = in_entry(entries[i], 2),
				    next = in_entry(entries[i] + 2, 1);

		assert_int_equal(refusals_answer(c, &q, 0, 14 * MS, got, &d), 1);
		assert_int_equal(refusals_answer(c, &other, 0, 14 * MS, got, &d), 0);
		bool taken = false;

		for (size_t k = 0; k < n; k++)
			taken |= entries[k] == entries[i] + 2;
		if (entries[i] + 2 < 4096 && !taken)
			assert_int_equal(refusals_answer(c, &next, 0, 14 * MS, got, &d), 0);
	}
	for (size_t i = 0; i < n; i++) {
		struct decide_query q = in_entry(entries[i], 1);

		assert_int_equal(refusals_answer(c, &q, 0, 16 * MS, got, &d), i ? 1 : 0);
	}
	refusals_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_answered_until_its_time),
		cmocka_unit_test(test_refusals_not_remembered),
		cmocka_unit_test(test_entries_across_the_table),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
