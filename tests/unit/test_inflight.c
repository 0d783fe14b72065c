/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of inflight.c: places taken, given back by id, ended at
 * their deadline, all or nothing with the caller's other limits, and the
 * pool's bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "inflight.h"

#define S LIMIT_US_PER_S
#define T0 (1700000000LL * S)

static struct limit_spec conc(uint64_t n, int64_t dur)
{
	struct limit_spec s;

	memset(&s, 0, sizeof(s));
	s.quota = n;
	s.period_us = dur;
	s.algo = LIMIT_CONCURRENCY;
	return s;
}

static void make_key(uint64_t i, uint8_t key[IDENTITY_KEY_LEN])
{
	uint64_t x = i * 0x9e3779b97f4a7c15ULL + 1, y = x * 0xbf58476d1ce4e5b9ULL;

	memcpy(key, &x, 8);
	memcpy(key + 8, &y, 8);
}

/* Decides one request and, when admitted, takes its place. */
static bool ask(struct inflight *in, const uint8_t *key, uint64_t id, const struct limit_spec *l,
		int64_t now, struct limit_result *res)
{
	struct inflight_hold h;

	assert_int_equal(inflight_begin(in, key, 7, id, l, now, res, &h), 0);
	inflight_end(&h, res->allowed);
	return res->allowed;
}

static void test_places(void **unused)
{
	struct inflight *in = inflight_new(1000);
	struct limit_spec l = conc(2, 30 * S);
	struct limit_result res;
	uint8_t k[IDENTITY_KEY_LEN], other[IDENTITY_KEY_LEN];

	(void)unused;
	assert_non_null(in);
	make_key(1, k);
	make_key(2, other);
	assert_true(ask(in, k, 11, &l, T0, &res));
	assert_int_equal(res.remaining, 1);
	assert_int_equal(res.reset_us, 30 * S);
	assert_true(ask(in, k, 12, &l, T0 + 1, &res));
	assert_int_equal(res.remaining, 0);
	/* full: refused, retry after a second, until the last ends */
	assert_false(ask(in, k, 13, &l, T0 + 2, &res));
	assert_int_equal(res.retry_after_us, S);
	assert_int_equal(res.reset_us, 30 * S - 1);
	/* the same request again holds its place already */
	assert_true(ask(in, k, 12, &l, T0 + 3, &res));
	assert_int_equal(inflight_count(in), 2);
	/* another client, another limit of the same key: their own places */
	assert_true(ask(in, other, 13, &l, T0 + 3, &res));
	{
		struct inflight_hold h;

		assert_int_equal(inflight_begin(in, k, 8, 13, &l, T0 + 3, &res, &h), 0);
		assert_true(res.allowed);
		inflight_end(&h, false); /* another limit refused: nothing taken */
	}
	assert_int_equal(inflight_count(in), 3);
	/* a release frees its own place, once */
	assert_int_equal(inflight_release(in, k, 7, 11), 1);
	assert_int_equal(inflight_release(in, k, 7, 11), 0);
	assert_int_equal(inflight_release(in, k, 7, 99), 0);
	assert_true(ask(in, k, 13, &l, T0 + 4, &res));
	assert_false(ask(in, k, 14, &l, T0 + 5, &res));
	/* a lost release: its place ends at its own deadline (12 at T0+1 + 30 s) */
	assert_false(ask(in, k, 14, &l, T0 + 1 + 30 * S - 1, &res));
	assert_true(ask(in, k, 14, &l, T0 + 1 + 30 * S, &res));
	assert_int_equal(res.remaining, 0);
	assert_int_equal(inflight_reset(in, k), 2);
	assert_int_equal(inflight_count(in), 1);
	assert_true(ask(in, k, 15, &l, T0 + 31 * S, &res));
	inflight_free(in);
}

/* Many clients: each gets exactly its places; a pool that is full says
 * so (-1, nothing locked) and works again once places are given back. */
static void test_pool(void **unused)
{
	struct inflight *in = inflight_new(16 * 4); /* 5 places per shard */
	struct limit_spec l = conc(3, 10 * S);
	struct limit_result res;
	struct inflight_hold h;
	uint8_t k[IDENTITY_KEY_LEN];
	int full = 0, taken = 0;

	(void)unused;
	for (uint64_t c = 0; c < 200; c++) {
		make_key(100 + c, k);
		for (uint64_t r = 0; r < 4; r++) {
			if (inflight_begin(in, k, 1, r + 1, &l, T0, &res, &h) < 0) {
				full++;
				continue;
			}
			assert_true(r < 3 ? res.allowed : !res.allowed);
			taken += res.allowed;
			inflight_end(&h, res.allowed);
		}
	}
	assert_true(full > 0);
	assert_int_equal(inflight_count(in), (uint64_t)taken);
	assert_true(taken <= 16 * 5);
	/* every place ended: the pool serves again */
	make_key(100, k);
	assert_int_equal(inflight_begin(in, k, 1, 9, &l, T0 + 10 * S, &res, &h), 0);
	assert_true(res.allowed);
	inflight_end(&h, true);
	inflight_free(in);
}

/* A pool full of places whose clients never came back: once those places
 * have ended, new clients get them, whichever shard they fall in; until
 * then, a newcomer finds no room. */
static void test_pool_reclaims_ended_places(void **unused)
{
	struct inflight *in = inflight_new(16 * 4); /* 5 places per shard */
	struct limit_spec l = conc(3, 10 * S);
	struct limit_result res;
	struct inflight_hold h;
	uint8_t k[IDENTITY_KEY_LEN];
	int full = 0, taken = 0;

	(void)unused;
	for (uint64_t c = 0; c < 200; c++) {
		make_key(100 + c, k);
		for (uint64_t r = 0; r < 3; r++)
			if (inflight_begin(in, k, 1, r + 1, &l, T0, &res, &h) == 0)
				inflight_end(&h, res.allowed);
	}
	assert_int_equal(inflight_count(in), 16 * 5);
	/* still in flight: no room for anybody new */
	for (uint64_t c = 0; c < 50; c++) {
		make_key(1000 + c, k);
		full += inflight_begin(in, k, 1, 1, &l, T0 + 10 * S - 1, &res, &h) < 0;
	}
	assert_int_equal(full, 50);
	/* ended: newcomers take the whole pool again */
	for (uint64_t c = 0; c < 2000 && taken < 16 * 5; c++) {
		make_key(1000 + c, k);
		if (inflight_begin(in, k, 1, 1, &l, T0 + 10 * S, &res, &h) < 0)
			continue;
		assert_true(res.allowed);
		inflight_end(&h, true);
		taken++;
	}
	assert_int_equal(taken, 16 * 5);
	assert_int_equal(inflight_count(in), 16 * 5);
	inflight_free(in);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_places),
		cmocka_unit_test(test_pool),
		cmocka_unit_test(test_pool_reclaims_ended_places),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
