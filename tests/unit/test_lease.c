/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of lease.c on an injected clock: who gets a lease and how
 * large, spending it, the answers it gives, the wait after a refusal, what
 * goes back and when, resets, and the rules that have none. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lease.h"

#define S LIMIT_US_PER_S
#define MS 1000LL
#define T0 (1000LL * S)
#define IV (100 * MS)

static struct rule rule;
static struct limit_spec limits[LIMIT_SET_MAX];
static struct lease_stats stats;
static struct lease_return sent_back[16];
static size_t nsent;
static int refuse_returns;

static int on_return(void *priv, const struct lease_return *ret)
{
	(void)priv;
	if (refuse_returns)
		return -1;
	assert_true(nsent < 16);
	sent_back[nsent++] = *ret;
	return 0;
}

static const struct lease_config cfg = { IV, 10 };

static struct limit_spec spec(enum limit_algo algo, uint64_t quota, int64_t period, uint64_t burst)
{
	struct limit_spec l;

	memset(&l, 0, sizeof(l));
	l.algo = algo;
	l.quota = quota;
	l.period_us = period;
	l.burst = burst;
	return l;
}

/* A query of client c under the test's rule of n limits. */
static struct decide_query query(unsigned c, size_t n, uint32_t cost)
{
	struct decide_query q;

	memset(&q, 0, sizeof(q));
	memset(q.key, 0, sizeof(q.key));
	q.key[0] = (uint8_t)(2 * c); /* clients 0, 1, 2 ... in distinct places */
	q.key[15] = (uint8_t)c;
	q.rule = &rule;
	q.limits = limits;
	q.nlimits = n;
	q.cost = cost;
	return q;
}

static struct lease_table *setup(size_t nlimits)
{
	memset(&rule, 0, sizeof(rule));
	memset(&stats, 0, sizeof(stats));
	nsent = 0;
	refuse_returns = 0;
	for (size_t j = 0; j < nlimits; j++)
		rule.lidh[j] = 0x1000 + j;
	return lease_table_new(64, on_return, NULL, &stats);
}

/* Sends `n` requests of cost 1 through the table at `now`, none decided
 * there; returns what the last one would ask for. */
static uint32_t warm(struct lease_table *t, const struct decide_query *q, int n, int64_t now)
{
	struct limit_result res[LIMIT_SET_MAX];
	int d;
	uint32_t want = 0;

	for (int i = 0; i < n; i++) {
		assert_int_equal(lease_check(t, &cfg, q, 0, now, res, &d, &want), 0);
		if (want) {
			/* the call that asks goes out, as the store sends it */
			lease_asked(t, q, now);
			return want;
		}
	}
	return want;
}

/* Sends `n` requests of cost 1 whose calls all fail (no lease comes):
 * the demand grows. Returns what the last one asked for. */
static uint32_t feed(struct lease_table *t, const struct decide_query *q, int n, int64_t now)
{
	struct limit_result res[LIMIT_SET_MAX];
	int d;
	uint32_t want = 0;

	for (int i = 0; i < n; i++) {
		assert_int_equal(lease_check(t, &cfg, q, 0, now, res, &d, &want), 0);
		if (want)
			lease_failed(t, q);
	}
	return want;
}

/* Redis's answer to a request that asked for `want`: allowed with
 * `remaining` left and `extra` leased, a token bucket's value "v<j>". */
static void grant(struct lease_table *t, const struct decide_query *q, uint32_t want,
		  int64_t extra, uint64_t remaining, int64_t sent, int64_t redis_now)
{
	struct limit_result res[LIMIT_SET_MAX];
	struct lease_grant g;
	static const char *vals[] = { "123450", "777+3", "9", "10" };

	memset(res, 0, sizeof(res));
	memset(&g, 0, sizeof(g));
	g.extra = extra;
	for (size_t j = 0; j < q->nlimits; j++) {
		res[j].allowed = true;
		res[j].limit = q->limits[j].quota;
		res[j].remaining = remaining + j;
		res[j].reset_us = 10 * MS * (int64_t)(j + 1);
		if (q->limits[j].algo == LIMIT_TOKEN_BUCKET) {
			g.value[j] = vals[j];
			g.value_len[j] = strlen(vals[j]);
		}
	}
	lease_granted(t, &cfg, q, want, 0, res, 0, &g, sent, redis_now);
}

static void test_cold_clients_get_no_lease(void **unused)
{
	struct lease_table *t = setup(1);
	struct decide_query q = query(1, 1, 1);

	limits[0] = spec(LIMIT_TOKEN_BUCKET, 1000, S, 0);
	/* under LEASE_MIN tokens in an interval: decided in Redis, no lease */
	for (int i = 0; i < 20; i++)
		assert_int_equal(warm(t, &q, LEASE_MIN - 1, T0 + i * 2 * IV), 0);
	lease_table_free(t);
}

static void test_want_follows_demand_within_the_share(void **unused)
{
	struct lease_table *t = setup(1);
	struct decide_query q = query(1, 1, 1);

	limits[0] = spec(LIMIT_TOKEN_BUCKET, 1000, S, 0);
	/* within the first interval, the demand so far */
	assert_int_equal(warm(t, &q, 10, T0), LEASE_MIN);
	lease_failed(t, &q);
	assert_int_equal(feed(t, &q, 6, T0), 10);
	/* the next interval asks for what the last one took */
	assert_int_equal(feed(t, &q, 1, T0 + IV), 10);
	/* at most 10% of the capacity (1000): 100 */
	assert_int_equal(feed(t, &q, 500, T0 + IV + 1), 100);
	assert_int_equal(feed(t, &q, 1, T0 + 2 * IV + 1), 100);
	/* a quiet interval: the demand starts again */
	assert_int_equal(feed(t, &q, 1, T0 + 5 * IV), 0);
	/* a burst bounds it instead of the quota; the tightest limit wins */
	limits[0] = spec(LIMIT_TOKEN_BUCKET, 1000, S, 200);
	limits[1] = spec(LIMIT_FIXED_WINDOW, 50000, 60 * S, 0);
	rule.lidh[1] = 0x1001;
	q = query(2, 2, 1);
	assert_int_equal(feed(t, &q, 500, T0), 20);
	lease_table_free(t);
}

static void test_a_lease_is_spent_locally_then_asked_again(void **unused)
{
	struct lease_table *t = setup(1);
	struct decide_query q = query(3, 1, 1);
	struct limit_result res[LIMIT_SET_MAX];
	uint32_t want;
	int d;

	limits[0] = spec(LIMIT_TOKEN_BUCKET, 1000, S, 0); /* T = 1 ms */
	want = warm(t, &q, 10, T0);
	assert_int_equal(want, LEASE_MIN);
	/* while the call is out, others go to Redis without asking */
	assert_int_equal(warm(t, &q, 3, T0), 0);
	grant(t, &q, want, 3, 500, T0, 5 * S);
	assert_int_equal(STAT_GET(stats.grants), 1);
	assert_int_equal(STAT_GET(stats.tokens), 3);
	for (int i = 1; i <= 3; i++) {
		assert_int_equal(lease_check(t, &cfg, &q, 0, T0 + i * MS, res, &d, &want), 1);
		assert_true(res[0].allowed);
		assert_int_equal(d, 0);
		/* what the grant said, less what was spent since */
		assert_int_equal(res[0].remaining, 500 - (uint64_t)i);
		/* the reset moves one emission interval per token spent */
		assert_int_equal(res[0].reset_us, 10 * MS - i * MS + i * MS);
		assert_int_equal(want, 0);
	}
	assert_int_equal(STAT_GET(stats.decisions), 3);
	/* spent: the next one goes to Redis and asks again */
	assert_int_equal(lease_check(t, &cfg, &q, 0, T0 + 4 * MS, res, &d, &want), 0);
	assert_true(want >= LEASE_MIN);
	assert_int_equal(nsent, 0);
	lease_table_free(t);
}

static void test_unspent_tokens_go_back_when_the_interval_ends(void **unused)
{
	struct lease_table *t = setup(2);
	struct decide_query q = query(4, 2, 1);
	struct limit_result res[LIMIT_SET_MAX];
	uint32_t want;
	int d;

	limits[0] = spec(LIMIT_TOKEN_BUCKET, 1000, S, 0);
	limits[1] = spec(LIMIT_SLIDING_WINDOW, 100000, 60 * S, 0);
	want = warm(t, &q, 10, T0);
	grant(t, &q, want, 4, 500, T0, 77 * S);
	assert_int_equal(lease_check(t, &cfg, &q, 0, T0 + MS, res, &d, &want), 1);
	lease_expire(t, T0 + IV - 1, false);
	assert_int_equal(nsent, 0);
	lease_expire(t, T0 + IV, false);
	assert_int_equal(nsent, 1);
	assert_int_equal(sent_back[0].tokens, 3);
	assert_int_equal(sent_back[0].take_us, 77 * S);
	assert_int_equal(sent_back[0].nlimits, 2);
	assert_memory_equal(sent_back[0].key, q.key, IDENTITY_KEY_LEN);
	assert_int_equal(sent_back[0].lidh[1], 0x1001);
	assert_int_equal(sent_back[0].limits[1].quota, 100000);
	/* the token bucket's value to compare, none for the window */
	assert_int_equal(sent_back[0].value_len[0], 6);
	assert_memory_equal(sent_back[0].value[0], "123450", 6);
	assert_int_equal(sent_back[0].value_len[1], 0);
	assert_int_equal(STAT_GET(stats.returned), 3);
	/* once only */
	lease_expire(t, T0 + 2 * IV, true);
	assert_int_equal(nsent, 1);
	/* a lease whose interval is over is not spent: it goes back first */
	want = warm(t, &q, 20, T0 + 3 * IV);
	grant(t, &q, want, 5, 500, T0 + 3 * IV, 78 * S);
	assert_int_equal(lease_check(t, &cfg, &q, 0, T0 + 4 * IV, res, &d, &want), 0);
	assert_int_equal(nsent, 2);
	assert_int_equal(sent_back[1].tokens, 5);
	lease_table_free(t);
}

static void test_a_heavier_request_than_the_lease_holds(void **unused)
{
	struct lease_table *t = setup(1);
	struct decide_query q = query(5, 1, 1), heavy = query(5, 1, 3);
	struct limit_result res[LIMIT_SET_MAX];
	uint32_t want;
	int d;

	limits[0] = spec(LIMIT_FIXED_WINDOW, 1000, S, 0);
	want = warm(t, &q, 10, T0);
	grant(t, &q, want, 2, 500, T0, 9 * S);
	/* 2 left, a request of 3: what is left goes back, Redis decides */
	assert_int_equal(lease_check(t, &cfg, &heavy, 0, T0 + MS, res, &d, &want), 0);
	assert_int_equal(nsent, 1);
	assert_int_equal(sent_back[0].tokens, 2);
	assert_int_equal(sent_back[0].value_len[0], 0);
	lease_table_free(t);
}

static void test_a_window_s_lease_ends_with_the_window(void **unused)
{
	struct lease_table *t = setup(1);
	struct decide_query q = query(11, 1, 1);
	struct limit_result res[LIMIT_SET_MAX];
	uint32_t want;
	int d;

	/* Redis's clock at the grant: 50 ms before the window of 1 s ends;
	 * spent after it, the tokens would come on top of the next window's
	 * quota */
	limits[0] = spec(LIMIT_FIXED_WINDOW, 1000, S, 0);
	want = warm(t, &q, 10, T0);
	grant(t, &q, want, 4, 500, T0, 9 * S + 950 * MS);
	assert_int_equal(lease_check(t, &cfg, &q, 0, T0 + 49 * MS, res, &d, &want), 1);
	assert_int_equal(lease_check(t, &cfg, &q, 0, T0 + 50 * MS, res, &d, &want), 0);
	assert_int_equal(nsent, 1);
	assert_int_equal(sent_back[0].tokens, 3);
	/* a token bucket's lease lasts its interval */
	limits[0] = spec(LIMIT_TOKEN_BUCKET, 1000, S, 0);
	q = query(12, 1, 1);
	want = warm(t, &q, 10, T0);
	grant(t, &q, want, 4, 500, T0, 9 * S + 950 * MS);
	assert_int_equal(lease_check(t, &cfg, &q, 0, T0 + IV - 1, res, &d, &want), 1);
	lease_table_free(t);
}

static void test_after_a_refusal_it_waits_for_the_tokens_it_wants(void **unused)
{
	struct lease_table *t = setup(1);
	struct decide_query q = query(6, 1, 1);
	struct limit_result res[LIMIT_SET_MAX], r[LIMIT_SET_MAX];
	uint32_t want;
	int d;

	limits[0] = spec(LIMIT_TOKEN_BUCKET, 100, S, 0); /* T = 10 ms, share 10 */
	feed(t, &q, 50, T0);
	want = warm(t, &q, 1, T0 + IV);
	assert_int_equal(want, 10);
	memset(res, 0, sizeof(res));
	res[0].allowed = false;
	res[0].limit = 100;
	res[0].retry_after_us = 3 * MS;
	res[0].reset_us = S;
	res[0].more_us = 3 * MS;
	lease_granted(t, &cfg, &q, want, 0, res, 0, NULL, T0 + IV, 5 * S);
	/* Redis said 3 ms; 9 more tokens take 90 ms: refused until a moment
	 * drawn between the two */
	assert_int_equal(lease_check(t, &cfg, &q, 0, T0 + IV + 2 * MS, r, &d, &want), 1);
	assert_false(r[0].allowed);
	assert_in_range(r[0].retry_after_us, 1 * MS, 91 * MS);
	assert_int_equal(r[0].reset_us, S - 2 * MS);
	assert_int_equal(STAT_GET(stats.waits), 1);
	/* then it asks again */
	assert_int_equal(lease_check(t, &cfg, &q, 0, T0 + IV + 93 * MS, r, &d, &want), 0);
	assert_true(want > 0);
	/* the draws differ: over many refusals, waits of several lengths */
	{
		int64_t lo = INT64_MAX, hi = 0;

		for (int i = 0; i < 50; i++) {
			int64_t at = T0 + (10 + i) * S;

			lease_granted(t, &cfg, &q, 10, 0, res, 0, NULL, at, 6 * S);
			assert_int_equal(lease_check(t, &cfg, &q, 0, at + 2 * MS, r, &d, &want), 1);
			lo = r[0].retry_after_us < lo ? r[0].retry_after_us : lo;
			hi = r[0].retry_after_us > hi ? r[0].retry_after_us : hi;
		}
		assert_true(lo < 30 * MS && hi > 60 * MS);
	}
	/* the wait never passes an interval */
	lease_granted(t, &cfg, &q, 1000, 0, res, 0, NULL, T0 + 2 * IV, 6 * S);
	assert_int_equal(lease_check(t, &cfg, &q, 0, T0 + 2 * IV + 3 * MS + IV, r, &d, &want), 0);
	lease_table_free(t);
}

static void test_an_admin_reset_voids_leases(void **unused)
{
	struct lease_table *t = setup(1);
	struct decide_query q = query(7, 1, 1);
	struct limit_result res[LIMIT_SET_MAX];
	uint32_t want;
	int d;

	limits[0] = spec(LIMIT_TOKEN_BUCKET, 1000, S, 0);
	want = warm(t, &q, 10, T0);
	grant(t, &q, want, 5, 500, T0, 9 * S);
	/* epoch 1: the keys were reset; the lease is gone, nothing goes back */
	assert_int_equal(lease_check(t, &cfg, &q, 1, T0 + MS, res, &d, &want), 0);
	assert_int_equal(nsent, 0);
	assert_int_equal(STAT_GET(stats.dropped), 5);
	lease_table_free(t);
}

static void test_rules_without_leases(void **unused)
{
	struct lease_table *t = setup(5);
	struct decide_query q = query(8, 1, 1);

	limits[0] = spec(LIMIT_LOG, 1000, S, 0);
	assert_false(lease_rule_ok(&q));
	assert_int_equal(warm(t, &q, 100, T0), 0);
	limits[0] = spec(LIMIT_CONCURRENCY, 10, S, 0);
	assert_false(lease_rule_ok(&q));
	for (size_t j = 0; j < 5; j++)
		limits[j] = spec(LIMIT_TOKEN_BUCKET, 1000, S, 0);
	q = query(8, 5, 1);
	assert_false(lease_rule_ok(&q));
	q = query(8, 4, 1);
	assert_true(lease_rule_ok(&q));
	rule.nstack = 1;
	assert_false(lease_rule_ok(&q));
	assert_int_equal(warm(t, &q, 100, T0), 0);
	lease_table_free(t);
}

static void test_clear_and_failed_returns(void **unused)
{
	struct lease_table *t = setup(1);
	struct decide_query a = query(9, 1, 1), b = query(10, 1, 1);
	uint32_t want;

	limits[0] = spec(LIMIT_TOKEN_BUCKET, 1000, S, 0);
	want = warm(t, &a, 10, T0);
	grant(t, &a, want, 5, 500, T0, 9 * S);
	want = warm(t, &b, 10, T0);
	grant(t, &b, want, 6, 500, T0, 9 * S);
	refuse_returns = 1;
	lease_table_clear(t);
	assert_int_equal(STAT_GET(stats.dropped), 11);
	assert_int_equal(STAT_GET(stats.returned), 0);
	/* forgotten: a grant for a client no longer followed goes back at once */
	refuse_returns = 0;
	grant(t, &a, 5, 4, 500, T0, 9 * S);
	assert_int_equal(nsent, 1);
	assert_int_equal(sent_back[0].tokens, 4);
	lease_table_free(t);
}

static void test_clients_holding_leases_keep_their_places(void **unused)
{
	struct lease_table *t = setup(1);
	struct decide_query q[3];
	uint32_t want;

	limits[0] = spec(LIMIT_TOKEN_BUCKET, 1000, S, 0);
	/* three clients whose keys name the same two places */
	for (int i = 0; i < 3; i++) {
		q[i] = query(20, 1, 1);
		q[i].key[0] = (uint8_t)(40 + (i == 1)); /* 40 and 41: one pair */
		q[i].key[15] = (uint8_t)i;
	}
	want = warm(t, &q[0], 10, T0);
	grant(t, &q[0], want, 5, 500, T0, 9 * S);
	want = warm(t, &q[1], 10, T0);
	grant(t, &q[1], want, 5, 500, T0, 9 * S);
	/* the third finds both places held: not followed, never leased */
	assert_int_equal(warm(t, &q[2], 100, T0), 0);
	lease_table_free(t);
}

/* A request that would ask for a lease but never went out (the store
 * answered it itself) leaves nothing pending: the next one asks again. */
static void test_only_a_call_that_went_out_is_awaited(void **unused)
{
	struct lease_table *t = setup(1);
	struct decide_query q = query(13, 1, 1);
	struct limit_result res[LIMIT_SET_MAX];
	uint32_t want;
	int d;

	limits[0] = spec(LIMIT_TOKEN_BUCKET, 1000, S, 0);
	assert_int_equal(feed(t, &q, 4, T0), LEASE_MIN);
	assert_int_equal(lease_check(t, &cfg, &q, 0, T0 + MS, res, &d, &want), 0);
	assert_int_equal(want, 5);
	lease_asked(t, &q, T0 + MS);
	assert_int_equal(lease_check(t, &cfg, &q, 0, T0 + 2 * MS, res, &d, &want), 0);
	assert_int_equal(want, 0);
	lease_failed(t, &q);
	assert_int_equal(lease_check(t, &cfg, &q, 0, T0 + 3 * MS, res, &d, &want), 0);
	assert_int_equal(want, 7);
	lease_table_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cold_clients_get_no_lease),
		cmocka_unit_test(test_want_follows_demand_within_the_share),
		cmocka_unit_test(test_a_lease_is_spent_locally_then_asked_again),
		cmocka_unit_test(test_unspent_tokens_go_back_when_the_interval_ends),
		cmocka_unit_test(test_a_heavier_request_than_the_lease_holds),
		cmocka_unit_test(test_a_window_s_lease_ends_with_the_window),
		cmocka_unit_test(test_only_a_call_that_went_out_is_awaited),
		cmocka_unit_test(test_after_a_refusal_it_waits_for_the_tokens_it_wants),
		cmocka_unit_test(test_an_admin_reset_voids_leases),
		cmocka_unit_test(test_rules_without_leases),
		cmocka_unit_test(test_clear_and_failed_returns),
		cmocka_unit_test(test_clients_holding_leases_keep_their_places),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
