/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of delay.c, the queue of held requests: handed back in the
 * order they are due, a client's never before one held earlier for it,
 * ties in the order held; bounded by max; what is left handed back late
 * when the queue is freed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "clock.h"
#include "delay.h"
#include "store.h"

#define MS 1000LL

static struct rule rule_a, rule_b;
static uint64_t order[16];
static bool was_late[16];
static int n;

static void on_due(void *priv, const struct decide_query *q, const struct store_ref *ref,
		   bool late, int64_t retry_us)
{
	(void)priv;
	(void)q;
	assert_true(n < 16);
	if (late)
		assert_true(retry_us >= 1);
	order[n] = ref->stream_id;
	was_late[n++] = late;
}

static struct decide_query query(const struct rule *rule, uint8_t client)
{
	struct decide_query q;

	memset(&q, 0, sizeof(q));
	q.rule = rule;
	q.key[0] = client;
	return q;
}

static int add(struct delay_queue *dq, const struct rule *rule, uint8_t client, uint64_t id,
	       int64_t now, int64_t wait_ms, uint32_t max)
{
	struct decide_query q = query(rule, client);
	struct store_ref ref = { 0, 0, id, 1 };

	return delay_add(dq, &q, &ref, now, wait_ms * MS, max);
}

static void test_order(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct delay_queue *dq = delay_new(loop, on_due, NULL);
	int64_t now = clock_now_us();

	(void)state;
	n = 0;
	/* client 1 of rule a: 30 ms, then one that would be due sooner, which
	 * goes after it; client 2: 10 ms, first; client 1 of rule b is
	 * another client: 20 ms; two due at the same time go in the order
	 * held */
	assert_int_equal(add(dq, &rule_a, 1, 1, now, 30, 16), 0);
	assert_int_equal(add(dq, &rule_a, 1, 2, now, 5, 16), 0);
	assert_int_equal(add(dq, &rule_a, 2, 3, now, 10, 16), 0);
	assert_int_equal(add(dq, &rule_b, 1, 4, now, 20, 16), 0);
	assert_int_equal(add(dq, &rule_b, 3, 5, now, 40, 16), 0);
	assert_int_equal(add(dq, &rule_b, 4, 6, now, 40, 16), 0);
	assert_int_equal(delay_count(dq), 6);
	while (n < 6)
		ev_run(loop, EVRUN_ONCE);
	assert_int_equal(order[0], 3);
	assert_int_equal(order[1], 4);
	assert_int_equal(order[2], 1);
	assert_int_equal(order[3], 2);
	assert_int_equal(order[4], 5);
	assert_int_equal(order[5], 6);
	for (int i = 0; i < 6; i++)
		assert_false(was_late[i]);
	assert_int_equal(delay_count(dq), 0);
	/* never handed back before its time */
	assert_true(clock_now_us() >= now + 40 * MS);
	delay_free(dq);
	ev_loop_destroy(loop);
}

static void test_bound_and_free(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct delay_queue *dq = delay_new(loop, on_due, NULL);
	int64_t now = clock_now_us();

	(void)state;
	n = 0;
	assert_int_equal(add(dq, &rule_a, 1, 1, now, 60000, 2), 0);
	assert_int_equal(add(dq, &rule_a, 2, 2, now, 60000, 2), 0);
	assert_int_equal(add(dq, &rule_a, 3, 3, now, 60000, 2), -1);
	assert_int_equal(delay_count(dq), 2);
	/* a larger bound (rules reloaded) takes one more */
	assert_int_equal(add(dq, &rule_a, 3, 3, now, 60000, 3), 0);
	assert_int_equal(n, 0);
	delay_free(dq);
	assert_int_equal(n, 3);
	for (int i = 0; i < 3; i++)
		assert_true(was_late[i]);
	delay_free(NULL);
	ev_loop_destroy(loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order),
		cmocka_unit_test(test_bound_and_free),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
