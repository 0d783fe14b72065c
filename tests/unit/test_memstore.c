/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the in-memory store. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "alloc.h"
#include "memstore.h"

#define MS 1000LL
#define S LIMIT_US_PER_S
#define T0 (1700000000LL * S)

static struct limit_spec bucket(uint64_t quota, int64_t period)
{
	struct limit_spec s;

	memset(&s, 0, sizeof(s));
	s.quota = quota;
	s.period_us = period;
	s.algo = LIMIT_TOKEN_BUCKET;
	return s;
}

static struct limit_spec log_limit(uint64_t quota, int64_t period)
{
	struct limit_spec s = bucket(quota, period);

	s.algo = LIMIT_LOG;
	return s;
}

static uint64_t chunks_in_use(struct memstore *ms)
{
	struct memstore_stats st;

	memstore_get_stats(ms, &st);
	return st.log_chunks;
}

/* Distinct, well spread test keys (real keys are SipHash outputs). */
static void make_key(uint64_t i, uint8_t key[IDENTITY_KEY_LEN])
{
	uint64_t x = i * 0x9e3779b97f4a7c15ULL + 1, y;

	x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ULL;
	y = (x ^ (x >> 29)) * 0x94d049bb133111ebULL;
	memcpy(key, &x, 8);
	memcpy(key + 8, &y, 8);
}

static void test_bad_counts(void **unused)
{
	struct memstore *ms = memstore_new(100);
	struct limit_spec l[LIMIT_SET_MAX + 1];
	struct limit_result res[LIMIT_SET_MAX + 1];
	uint8_t key[IDENTITY_KEY_LEN];
	const uint8_t *keys[LIMIT_SET_MAX + 1];

	assert_non_null(ms);
	make_key(1, key);
	for (int i = 0; i <= LIMIT_SET_MAX; i++) {
		l[i] = bucket(10 + (uint64_t)i, S);
		keys[i] = key;
	}
	assert_int_equal(memstore_check(ms, key, l, 0, T0, 1, res), -1);
	assert_int_equal(memstore_check(ms, key, l, LIMIT_RULE_MAX + 1, T0, 1, res), -1);
	assert_int_equal(memstore_check_keys(ms, keys, l, 0, T0, 1, res), -1);
	assert_int_equal(memstore_check_keys(ms, keys, l, LIMIT_SET_MAX + 1, T0, 1, res), -1);
	/* Sixteen is fine; the decider is the one with the fewest left. */
	assert_int_equal(memstore_check(ms, key, l, 16, T0, 1, res), 0);
	for (int i = 0; i < 16; i++) {
		assert_true(res[i].allowed);
		assert_int_equal(res[i].remaining, 9 + (uint64_t)i);
	}
	assert_int_equal(memstore_reset(ms, key), 16);
	memstore_free(ms);
}

/* 10/1m and 3/1s: the 4th request in the same second is refused by 3/1s
 * and takes nothing from 10/1m. */
static void test_all_or_nothing(void **unused)
{
	struct memstore *ms = memstore_new(1000);
	struct limit_spec l[2] = {bucket(10, 60 * S), bucket(3, S)};
	struct limit_result res[2];
	uint8_t key[IDENTITY_KEY_LEN];

	assert_non_null(ms);
	make_key(7, key);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(memstore_check(ms, key, l, 2, T0, 1, res), 1);
		assert_true(res[0].allowed);
		assert_true(res[1].allowed);
		assert_int_equal(res[0].remaining, 9 - i);
		assert_int_equal(res[1].remaining, 2 - i);
	}
	for (int i = 0; i < 100; i++) {
		assert_int_equal(memstore_check(ms, key, l, 2, T0 + i, 1, res), 1);
		assert_false(res[1].allowed);
		assert_int_equal(res[1].retry_after_us, 333334 - i);
		/* The minute limit would allow, and reports what it still
		 * holds: 7, not the 6 this request would have left. */
		assert_true(res[0].allowed);
		assert_int_equal(res[0].remaining, 7);
	}
	/* One second on, 3/1s is full again and 10/1m has lost only the 3
	 * tokens it allowed (1/6 of one has come back): 10 - 3 - 1 = 6 whole
	 * tokens left after this request. Had the 100 refused requests been
	 * counted there, it would refuse. */
	assert_int_equal(memstore_check(ms, key, l, 2, T0 + S, 1, res), 1);
	assert_true(res[0].allowed);
	assert_true(res[1].allowed);
	assert_int_equal(res[0].remaining, 6);
	assert_int_equal(res[1].remaining, 2);
	memstore_free(ms);
}

/* Limits under several keys (a rule with layers): a client's 3/1s and a
 * key every client shares, 4/1s. All or nothing across the keys, each
 * key's state its own, and a key's limits numbered as memstore_check()
 * numbers them, so the same state is found by either call. */
static void test_keys(void **unused)
{
	struct memstore *ms = memstore_new(1000);
	struct limit_spec l[2] = {bucket(3, S), bucket(4, S)};
	struct limit_result res[2];
	uint8_t a[IDENTITY_KEY_LEN], b[IDENTITY_KEY_LEN], g[IDENTITY_KEY_LEN];
	const uint8_t *ka[2] = {a, g}, *kb[2] = {b, g};

	assert_non_null(ms);
	make_key(21, a);
	make_key(22, b);
	make_key(23, g);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(memstore_check_keys(ms, ka, l, 2, T0, 1, res), 0);
		assert_true(res[0].allowed && res[1].allowed);
		assert_int_equal(res[1].remaining, 3 - (uint64_t)i);
	}
	/* a's own limit refuses: the shared key is not charged */
	assert_int_equal(memstore_check_keys(ms, ka, l, 2, T0, 1, res), 0);
	assert_false(res[0].allowed);
	assert_true(res[1].allowed);
	assert_int_equal(res[1].remaining, 1);
	/* b takes the last of the shared key, then is refused by it, which
	 * leaves b's own bucket at 2 */
	assert_int_equal(memstore_check_keys(ms, kb, l, 2, T0, 1, res), 1);
	assert_true(res[1].allowed);
	assert_int_equal(res[1].remaining, 0);
	assert_int_equal(memstore_check_keys(ms, kb, l, 2, T0, 1, res), 1);
	assert_false(res[1].allowed);
	assert_true(res[0].allowed);
	assert_int_equal(res[0].remaining, 2);
	/* the shared key alone, as memstore_check numbers it: limit 0 of g is
	 * the one the calls above kept (a 4/1s at 0 left) */
	l[0] = bucket(4, S);
	assert_int_equal(memstore_check(ms, g, l, 1, T0, 1, res), 0);
	assert_false(res[0].allowed);
	assert_int_equal(memstore_reset(ms, a), 1);
	assert_int_equal(memstore_reset(ms, g), 1);

	/* a log under a shared key: exact, all or nothing with the others */
	{
		struct limit_spec lg[2] = {bucket(2, S), bucket(3, S)};

		lg[1].algo = LIMIT_LOG;
		for (int i = 0; i < 2; i++)
			assert_int_equal(memstore_check_keys(ms, ka, lg, 2, T0 + i, 1, res), 0);
		/* a's bucket refuses: the log records nothing */
		assert_int_equal(memstore_check_keys(ms, ka, lg, 2, T0 + 2, 1, res), 0);
		assert_false(res[0].allowed);
		assert_int_equal(res[1].remaining, 1);
		assert_int_equal(memstore_check_keys(ms, kb, lg, 2, T0 + 3, 1, res), 1);
		assert_true(res[1].allowed);
		assert_int_equal(res[1].remaining, 0);
		/* the log is full until its first request is a second old */
		assert_int_equal(memstore_check_keys(ms, kb, lg, 2, T0 + 4, 1, res), 1);
		assert_false(res[1].allowed);
		assert_int_equal(res[1].retry_after_us, S - 4);
		assert_int_equal(memstore_check_keys(ms, kb, lg, 2, T0 + S, 1, res), 1);
		assert_true(res[1].allowed);
	}
	memstore_free(ms);
}

static void test_decider(void **unused)
{
	struct memstore *ms = memstore_new(1000);
	struct limit_spec a[2] = {bucket(3, S), bucket(3, 60 * S)};
	struct limit_spec b[2] = {bucket(3, 60 * S), bucket(3, S)};
	struct limit_spec same[2] = {bucket(5, S), bucket(5, S)};
	struct limit_result res[2];
	uint8_t k1[IDENTITY_KEY_LEN], k2[IDENTITY_KEY_LEN], k3[IDENTITY_KEY_LEN];

	make_key(11, k1);
	make_key(12, k2);
	make_key(13, k3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(memstore_check(ms, k1, a, 2, T0, 1, res), 0);
		assert_int_equal(memstore_check(ms, k2, b, 2, T0, 1, res), 0);
	}
	/* Both refuse: the longest retry-after decides, wherever it is. */
	assert_int_equal(memstore_check(ms, k1, a, 2, T0, 1, res), 1);
	assert_int_equal(res[0].retry_after_us, 333334);
	assert_int_equal(res[1].retry_after_us, 20 * S);
	assert_int_equal(memstore_check(ms, k2, b, 2, T0, 1, res), 0);
	/* Ties go to the lowest index. */
	assert_int_equal(memstore_check(ms, k3, same, 2, T0, 1, res), 0);
	for (int i = 0; i < 4; i++)
		memstore_check(ms, k3, same, 2, T0, 1, res);
	assert_int_equal(memstore_check(ms, k3, same, 2, T0, 1, res), 0);
	assert_false(res[0].allowed);
	assert_false(res[1].allowed);
	memstore_free(ms);
}

static void test_spec_change_and_expiry(void **unused)
{
	struct memstore *ms = memstore_new(1000);
	struct limit_spec l = bucket(10, 60 * S), l2 = bucket(5, 60 * S);
	struct limit_result res;
	uint8_t key[IDENTITY_KEY_LEN];

	make_key(3, key);
	for (int i = 0; i < 3; i++)
		memstore_check(ms, key, &l, 1, T0, 1, &res);
	assert_int_equal(res.remaining, 7);
	/* Another spec in the same position starts fresh. */
	memstore_check(ms, key, &l2, 1, T0, 1, &res);
	assert_int_equal(res.remaining, 4);
	assert_int_equal(res.limit, 5);
	/* And back: the old count is gone too. */
	memstore_check(ms, key, &l, 1, T0, 1, &res);
	assert_int_equal(res.remaining, 9);
	/* Past its TTL (6 s for one token of 10/1m) the key is fresh. */
	memstore_check(ms, key, &l, 1, T0 + 6 * S - 1, 1, &res);
	assert_int_equal(res.remaining, 8);
	memstore_check(ms, key, &l, 1, T0 + 60 * S, 1, &res);
	assert_int_equal(res.remaining, 9);
	memstore_free(ms);
}

static void test_full(void **unused)
{
	struct memstore *ms = memstore_new(1);
	struct limit_spec l = bucket(2, S);
	struct limit_spec two[2] = {bucket(2, S), bucket(4, S)};
	struct limit_result res[2];
	struct memstore_stats st;
	uint8_t a[IDENTITY_KEY_LEN], b[IDENTITY_KEY_LEN], c[IDENTITY_KEY_LEN];

	assert_non_null(ms);
	make_key(100, a);
	make_key(101, b);
	make_key(102, c);
	assert_int_equal(memstore_check(ms, a, &l, 1, T0, 1, res), 0);
	assert_true(res[0].allowed);
	memstore_get_stats(ms, &st);
	assert_int_equal(st.keys, 1);
	assert_int_equal(st.full, 0);
	/* No room for b: a, which refuses nothing, makes way (b keeps state). */
	assert_int_equal(memstore_check(ms, b, &l, 1, T0 + 100 * MS, 1, res), 0);
	assert_true(res[0].allowed);
	assert_int_equal(res[0].remaining, 1);
	memstore_get_stats(ms, &st);
	assert_int_equal(st.keys, 1);
	assert_int_equal(st.evicted, 1);
	assert_int_equal(st.full, 0);
	assert_int_equal(memstore_check(ms, b, &l, 1, T0 + 100 * MS, 1, res), 0);
	assert_true(res[0].allowed);
	assert_int_equal(res[0].remaining, 0);
	/* b is refused now: it is not forgotten for a newcomer, who is not
	 * decided here (the failure mode answers) and takes nothing. */
	assert_int_equal(memstore_check(ms, b, &l, 1, T0 + 100 * MS, 1, res), 0);
	assert_false(res[0].allowed);
	for (int i = 0; i < 5; i++)
		assert_int_equal(memstore_check(ms, c, &l, 1, T0 + 200 * MS, 1, res),
				 MEMSTORE_NO_ROOM);
	memstore_get_stats(ms, &st);
	assert_int_equal(st.full, 5);
	assert_int_equal(st.evicted, 1);
	assert_int_equal(memstore_check(ms, b, &l, 1, T0 + 200 * MS, 1, res), 0);
	assert_false(res[0].allowed);
	/* Once b's refusal has run out (a token back after 600 ms), b may go. */
	assert_int_equal(memstore_check(ms, c, &l, 1, T0 + 700 * MS, 1, res), 0);
	assert_true(res[0].allowed);
	memstore_get_stats(ms, &st);
	assert_int_equal(st.evicted, 2);
	/* A client with two limits and room for one entry: not decided. */
	assert_int_equal(memstore_check(ms, a, two, 2, T0 + 800 * MS, 1, res), MEMSTORE_NO_ROOM);
	memstore_free(ms);
}

/* Room made for a client's new entry sweeps what is back to fresh, but
 * never the client's own entries the decision is about to write: an
 * expired one of them would be freed under the decision, its new state
 * lost (and the next request let through). One shard of 20 entries: 18
 * clients refused for an hour, B's entry expired, A's first limit
 * expired; A comes back with a second limit. */
static void test_room_spares_the_deciding_client(void **unused)
{
	struct memstore *ms = memstore_new(20);
	struct limit_spec l[2] = {bucket(1, 100 * MS), bucket(10, 3600 * S)};
	struct limit_spec hour = bucket(1, 3600 * S);
	struct limit_result res[2];
	uint8_t a[IDENTITY_KEY_LEN], b[IDENTITY_KEY_LEN], k[IDENTITY_KEY_LEN];

	assert_non_null(ms);
	make_key(500, a);
	make_key(501, b);
	assert_int_equal(memstore_check(ms, a, l, 1, T0, 1, res), 0);
	assert_int_equal(memstore_check(ms, b, l, 1, T0, 1, res), 0);
	for (uint64_t i = 0; i < 18; i++) {
		make_key(600 + i, k);
		memstore_check(ms, k, &hour, 1, T0, 1, res);
		memstore_check(ms, k, &hour, 1, T0, 1, res);
		assert_false(res[0].allowed);
	}
	assert_int_equal(memstore_check(ms, a, l, 2, T0 + 200 * MS, 1, res), 0);
	assert_true(res[0].allowed && res[1].allowed);
	/* the first limit's token is taken until T0 + 300 ms */
	assert_int_equal(memstore_check(ms, a, l, 2, T0 + 210 * MS, 1, res), 0);
	assert_false(res[0].allowed);
	assert_int_equal(res[0].retry_after_us, 90 * MS);
	memstore_free(ms);
}

/* The probe that found a full store letting every new client through: a
 * client refused now stays refused while new identities keep arriving,
 * and a newcomer is limited like anyone. */
static void test_full_of_new_identities(void **unused)
{
	struct memstore *ms = memstore_new(1000);
	struct limit_spec l = bucket(5, 60 * S);
	struct limit_result res[1];
	struct memstore_stats st;
	uint8_t key[IDENTITY_KEY_LEN], refused[IDENTITY_KEY_LEN], late[IDENTITY_KEY_LEN];
	int passed = 0;

	assert_non_null(ms);
	make_key(7, refused);
	for (int i = 0; i < 6; i++)
		memstore_check(ms, refused, &l, 1, T0, 1, res);
	assert_false(res[0].allowed);
	for (uint32_t i = 0; i < 100000; i++) {
		make_key(1000000 + i, key);
		memstore_check(ms, key, &l, 1, T0 + i, 1, res);
		if (i % 10000 == 0) {
			assert_int_equal(memstore_check(ms, refused, &l, 1, T0 + i, 1, res), 0);
			assert_false(res[0].allowed);
		}
	}
	make_key(8, late);
	for (int i = 0; i < 20; i++)
		passed += memstore_check(ms, late, &l, 1, T0 + 200000, 1, res) == 0 &&
			  res[0].allowed;
	assert_int_equal(passed, 5);
	memstore_get_stats(ms, &st);
	assert_true(st.keys <= 1000);
	assert_true(st.evicted > 90000);
	memstore_free(ms);
}

static void test_sweep_and_reset(void **unused)
{
	struct memstore *ms = memstore_new(1000);
	struct limit_spec l = bucket(10, S);
	struct limit_spec three[3] = {bucket(10, S), bucket(100, 60 * S), bucket(5, S)};
	struct limit_result res[3];
	struct memstore_stats st;
	uint8_t key[IDENTITY_KEY_LEN];

	for (uint64_t i = 0; i < 10; i++) {
		make_key(i, key);
		memstore_check(ms, key, &l, 1, T0, 1, res);
	}
	memstore_get_stats(ms, &st);
	assert_int_equal(st.keys, 10);
	/* One token of 10/1s: fresh again 100 ms later. */
	assert_int_equal(memstore_sweep(ms, T0 + 100 * MS - 1), 0);
	assert_int_equal(memstore_sweep(ms, T0 + 100 * MS), 10);
	memstore_get_stats(ms, &st);
	assert_int_equal(st.keys, 0);
	assert_int_equal(st.reclaimed, 10);

	make_key(42, key);
	memstore_check(ms, key, three, 3, T0, 1, res);
	memstore_check(ms, key, three, 3, T0, 1, res);
	assert_int_equal(res[2].remaining, 3);
	assert_int_equal(memstore_reset(ms, key), 3);
	assert_int_equal(memstore_reset(ms, key), 0);
	memstore_check(ms, key, three, 3, T0, 1, res);
	assert_int_equal(res[0].remaining, 9);
	assert_int_equal(res[1].remaining, 99);
	assert_int_equal(res[2].remaining, 4);
	/* Only entries that are fresh go: 10/1s and 5/1s after 200 ms, the
	 * 100/1m one (600 ms per token) stays. */
	assert_int_equal(memstore_sweep(ms, T0 + 200 * MS), 2);
	memstore_get_stats(ms, &st);
	assert_int_equal(st.keys, 1);
	memstore_check(ms, key, three, 3, T0 + 200 * MS, 1, res);
	assert_int_equal(res[1].remaining, 98);
	memstore_free(ms);
}

/* Many keys in a fairly dense table, then deletions in the middle of probe
 * runs: every key that stays must still be found with its state. */
static void test_many_keys(void **unused)
{
	enum { NKEYS = 6000 };
	struct memstore *ms = memstore_new(8192);
	struct limit_spec l = bucket(10, 60 * S);
	struct limit_result res;
	struct memstore_stats st;
	static uint8_t stored[NKEYS];
	uint8_t key[IDENTITY_KEY_LEN];
	uint64_t nstored = 0;

	assert_non_null(ms);
	for (uint64_t i = 0; i < NKEYS; i++) {
		make_key(i, key);
		memstore_check(ms, key, &l, 1, T0, 1, &res);
		assert_int_equal(res.remaining, 9);
	}
	for (uint64_t i = 0; i < NKEYS; i++) {
		make_key(i, key);
		memstore_check(ms, key, &l, 1, T0, 1, &res);
		stored[i] = res.remaining == 8;
		nstored += stored[i];
		if (!stored[i])
			assert_int_equal(res.remaining, 9);
	}
	memstore_get_stats(ms, &st);
	assert_int_equal(st.keys, nstored);
	assert_true(nstored >= NKEYS * 9 / 10);
	for (uint64_t i = 0; i < NKEYS; i += 2) {
		make_key(i, key);
		assert_int_equal(memstore_reset(ms, key), stored[i]);
	}
	for (uint64_t i = 0; i < NKEYS; i++) {
		make_key(i, key);
		memstore_check(ms, key, &l, 1, T0, 1, &res);
		/* Reset keys and keys that never had room start fresh. */
		if (i % 2 == 0 || !stored[i])
			assert_int_equal(res.remaining, 9);
		else
			assert_int_equal(res.remaining, 7);
	}
	memstore_free(ms);
}

/* Once created, the store never allocates: it keeps working with every
 * allocation failing, logs included. And creation cleans up after any
 * failed step. */
static void test_no_allocation(void **unused)
{
	struct limit_spec l = bucket(3, S);
	struct limit_result res;
	uint8_t key[IDENTITY_KEY_LEN];
	struct memstore *ms;
	long k;

	for (k = 0; k < 1000; k++) {
		xalloc_fail_after(k);
		ms = memstore_new(5000);
		xalloc_fail_after(-1);
		if (ms)
			break;
	}
	assert_non_null(ms);
	assert_int_equal(k, 2 + 3 * 64);
	xalloc_fail_after(0);
	for (uint64_t i = 0; i < 2000; i++) {
		make_key(i, key);
		for (int j = 0; j < 4; j++) {
			memstore_check(ms, key, &l, 1, T0, 1, &res);
			assert_int_equal(res.allowed, j < 3);
		}
	}
	/* logs too: their chunks come from the pool */
	for (uint64_t i = 0; i < 200; i++) {
		struct limit_spec lg = log_limit(40, S);

		make_key(10000 + i, key);
		for (int j = 0; j < 41; j++) {
			memstore_check(ms, key, &lg, 1, T0 + j, 1, &res);
			assert_int_equal(res.allowed, j < 40);
		}
	}
	memstore_sweep(ms, T0 + 2 * S);
	assert_int_equal(chunks_in_use(ms), 0);
	xalloc_fail_after(-1);
	memstore_free(ms);
}

struct worker_arg {
	struct memstore *ms;
	int allowed;
};

static void *worker(void *p)
{
	struct worker_arg *w = p;
	struct limit_spec l = bucket(5000, 3600 * S);
	struct limit_result res;
	uint8_t key[IDENTITY_KEY_LEN];

	make_key(999, key);
	for (int i = 0; i < 10000; i++) {
		memstore_check(w->ms, key, &l, 1, T0, 1, &res);
		w->allowed += res.allowed;
	}
	return NULL;
}

static void test_concurrency(void **unused)
{
	struct memstore *ms = memstore_new(1 << 16);
	struct worker_arg args[4];
	pthread_t th[4];
	int total = 0;

	assert_non_null(ms);
	for (int i = 0; i < 4; i++) {
		args[i].ms = ms;
		args[i].allowed = 0;
		assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		total += args[i].allowed;
	}
	assert_int_equal(total, 5000);
	memstore_free(ms);
}

/* The store keeps each new state with the TTL limit_eval() hands back:
 * it must be limit_ttl_us() of that state, for every algorithm, near
 * now and at the far ends of time (saturated states included). */
static void test_next_ttl(void **unused)
{
	static const int64_t times[] = { 0, 1, 1700000000000000LL, INT64_MAX - 5,
					 INT64_MIN + 5, -1000000 };
	uint64_t x = 88172645463325252ULL;

	for (int i = 0; i < 200000; i++) {
		struct limit_spec sp;
		struct limit_state st, next;
		struct limit_result res;
		int64_t now;
		uint32_t cost;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memset(&sp, 0, sizeof(sp));
		sp.quota = x % 3 ? x % 1000 + 1 : (x >> 8) % (LIMIT_QUOTA_MAX + 2);
		sp.period_us = x % 5 ? (int64_t)((x >> 12) % LIMIT_PERIOD_MAX_US) + 1 : (int64_t)(x >> 1);
		sp.burst = x % 7 == 0 ? (x >> 20) % 5000 : 0;
		sp.algo = (enum limit_algo)((x >> 30) % 3);
		now = times[(x >> 33) % (sizeof(times) / sizeof(times[0]))];
		/* near now, wrapping (in unsigned arithmetic) at the extremes */
		st.a = x % 11 ? (int64_t)((uint64_t)now + (x >> 40) % 100000000 - 50000000)
			      : (int64_t)x;
		st.b = (int64_t)((x >> 17) % (sp.quota + 2));
		st.c = (int64_t)((x >> 23) % 40);
		if (x % 13 == 0)
			st.a = st.b = st.c = 0;
		cost = x % 9 ? (uint32_t)((x >> 45) % 4) : (uint32_t)(x >> 32);
		limit_eval(&sp, &st, now, cost, &next, &res);
		assert_int_equal(res.next_ttl_us, limit_ttl_us(&sp, &next, now));
	}
}

/* ---- logs ------------------------------------------------------------------------ */

/* A log with a token bucket, all or nothing; refused requests take nothing
 * from the log. */
static void test_log_basic(void **unused)
{
	struct memstore *ms = memstore_new(1000);
	struct limit_spec l[2] = {log_limit(3, 60 * S), bucket(2, S)};
	struct limit_result res[2];
	uint8_t key[IDENTITY_KEY_LEN];

	assert_non_null(ms);
	make_key(11, key);
	assert_int_equal(memstore_check(ms, key, l, 1, T0, 1, res), 0);
	assert_int_equal(res[0].remaining, 2);
	assert_int_equal(res[0].reset_us, 60 * S);
	assert_int_equal(res[0].more_us, 60 * S);
	assert_int_equal(chunks_in_use(ms), 1);
	memstore_check(ms, key, l, 1, T0 + 20 * S, 1, res);
	memstore_check(ms, key, l, 1, T0 + 40 * S, 1, res);
	assert_int_equal(res[0].remaining, 0);
	memstore_check(ms, key, l, 1, T0 + 50 * S, 1, res);
	assert_false(res[0].allowed);
	assert_int_equal(res[0].retry_after_us, 10 * S);
	memstore_check(ms, key, l, 1, T0 + 60 * S, 1, res);
	assert_true(res[0].allowed);
	assert_int_equal(res[0].more_us, 20 * S);
	/* With the bucket: its third request in a second is refused, and the
	 * log, which would allow it, keeps what it had. */
	make_key(12, key);
	for (int i = 0; i < 2; i++)
		assert_int_equal(memstore_check(ms, key, l, 2, T0 + i, 1, res), 1);
	assert_int_equal(memstore_check(ms, key, l, 2, T0 + 2, 1, res), 1);
	assert_false(res[1].allowed);
	assert_true(res[0].allowed);
	assert_int_equal(res[0].remaining, 1);
	assert_int_equal(memstore_check(ms, key, l, 1, T0 + 3, 1, res), 0);
	assert_int_equal(res[0].remaining, 0);
	/* A look takes nothing. */
	assert_int_equal(memstore_check(ms, key, l, 1, T0 + 4, 0, res), 0);
	assert_int_equal(res[0].remaining, 0);
	assert_int_equal(res[0].more_us, 60 * S - 4);
	memstore_free(ms);
}

/* The memstore's log against a log kept by hand from limit_log_eval(),
 * over random timelines of many clients: chunk boundaries, drops, requests
 * of one microsecond merged, weights, long logs, the clock standing
 * still. Then every chunk goes back to the pool. */
static void test_log_matches_the_math(void **unused)
{
	enum { CLIENTS = 24 };
	static struct limit_log_entry logs[CLIENTS][LIMIT_LOG_QUOTA_MAX];
	size_t n[CLIENTS] = {0};
	struct memstore *ms = memstore_new(4096);
	struct limit_spec specs[3] = {log_limit(7, 300 * MS), log_limit(40, 2 * S), log_limit(1000, 5 * S)};
	uint64_t x = 0x9e3779b97f4a7c15ULL;
	int64_t now = T0;
	int tally[2] = {0, 0};

	assert_non_null(ms);
	for (int step = 0; step < 60000; step++) {
		struct limit_result res, want;
		struct limit_log_step ls;
		uint8_t key[IDENTITY_KEY_LEN];
		int c;
		const struct limit_spec *sp;
		uint32_t cost;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		c = (int)(x % CLIENTS);
		sp = &specs[c % 3];
		now += x % 4 == 0 ? 0 : (int64_t)((x >> 8) % (uint64_t)(sp->period_us / 200 + 1));
		if (x % 997 == 0)
			now += 3 * S;
		cost = x % 5 == 0 ? (uint32_t)((x >> 20) % (sp->quota + 2)) : 1;
		make_key((uint64_t)c, key);
		assert_int_equal(memstore_check(ms, key, sp, 1, now, cost, &res), 0);
		limit_log_eval(sp, logs[c], n[c], now, cost, &ls, &want);
		assert_int_equal(res.allowed, want.allowed);
		assert_int_equal(res.remaining, want.remaining);
		assert_int_equal(res.retry_after_us, want.retry_after_us);
		assert_int_equal(res.reset_us, want.reset_us);
		assert_int_equal(res.more_us, want.more_us);
		tally[res.allowed]++;
		if (want.allowed && cost > 0) {
			memmove(logs[c], logs[c] + ls.keep, (n[c] - ls.keep) * sizeof(logs[c][0]));
			n[c] -= ls.keep;
			if (n[c] > 0 && logs[c][n[c] - 1].t == ls.at) {
				logs[c][n[c] - 1].cost += cost;
			} else {
				logs[c][n[c]].t = ls.at;
				logs[c][n[c]].cost = cost;
				n[c]++;
			}
		}
	}
	assert_true(tally[0] > 1000 && tally[1] > 1000);
	assert_true(chunks_in_use(ms) > 0);
	memstore_sweep(ms, now + 6 * S);
	assert_int_equal(chunks_in_use(ms), 0);
	memstore_free(ms);
}

/* A limit that changes algorithm, a log past its TTL, an admin reset: each
 * gives its chunks back, and a changed limit starts fresh. */
static void test_log_chunks_come_back(void **unused)
{
	struct memstore *ms = memstore_new(1000);
	struct limit_spec lg = log_limit(100, 60 * S), tb = bucket(100, 60 * S);
	struct limit_result res;
	uint8_t key[IDENTITY_KEY_LEN];

	assert_non_null(ms);
	make_key(21, key);
	for (int i = 0; i < 30; i++)
		memstore_check(ms, key, &lg, 1, T0 + i, 1, &res);
	assert_int_equal(res.remaining, 70);
	assert_int_equal(chunks_in_use(ms), 3);
	/* the same figures as a token bucket: fresh, the log's chunks go */
	memstore_check(ms, key, &tb, 1, T0 + 100, 1, &res);
	assert_int_equal(res.remaining, 99);
	assert_int_equal(chunks_in_use(ms), 0);
	/* and back: fresh again */
	memstore_check(ms, key, &lg, 1, T0 + 200, 1, &res);
	assert_int_equal(res.remaining, 99);
	assert_int_equal(chunks_in_use(ms), 1);
	/* the quota changed: fresh, one chunk */
	lg.quota = 50;
	memstore_check(ms, key, &lg, 1, T0 + 300, 1, &res);
	assert_int_equal(res.remaining, 49);
	assert_int_equal(chunks_in_use(ms), 1);
	/* past its TTL (its newest request + P): fresh, and a request then
	 * reuses the entry with a new chunk */
	memstore_check(ms, key, &lg, 1, T0 + 300 + 60 * S, 1, &res);
	assert_int_equal(res.remaining, 49);
	assert_int_equal(chunks_in_use(ms), 1);
	/* 41 requests in 4 chunks; the 22 oldest leave, and the first chunk
	 * with them (the next, with one of those left, is kept) */
	for (int i = 0; i < 40; i++)
		memstore_check(ms, key, &lg, 1, T0 + 61 * S + i, 1, &res);
	assert_int_equal(chunks_in_use(ms), 4);
	memstore_check(ms, key, &lg, 1, T0 + 121 * S + 20, 1, &res);
	assert_int_equal(res.remaining, 30);
	assert_int_equal(chunks_in_use(ms), 3);
	assert_int_equal(memstore_reset(ms, key), 1);
	assert_int_equal(chunks_in_use(ms), 0);
	/* swept once back to fresh */
	memstore_check(ms, key, &lg, 1, T0, 1, &res);
	assert_int_equal(memstore_sweep(ms, T0 + 60 * S - 1), 0);
	assert_int_equal(memstore_sweep(ms, T0 + 60 * S), 1);
	assert_int_equal(chunks_in_use(ms), 0);
	memstore_free(ms);
}

/* A shard's pool holds as many chunks as it has entries, and at least a
 * full log's worth: 85 chunks for a store of 31 entries (one shard). A log
 * of 1000 requests takes 84; another log takes the last chunk, then may
 * evict the first, unless that one refuses its client now: then nothing
 * is decided (MEMSTORE_NO_ROOM) and nothing is taken. */
static void test_log_pool_full(void **unused)
{
	struct memstore *ms = memstore_new(31);
	struct limit_spec lg = log_limit(1000, 10 * S);
	struct limit_result res;
	struct memstore_stats st;
	uint8_t a[IDENTITY_KEY_LEN], b[IDENTITY_KEY_LEN];

	assert_non_null(ms);
	make_key(1, a);
	make_key(2, b);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(memstore_check(ms, a, &lg, 1, T0 + i, 1, &res), 0);
	assert_int_equal(chunks_in_use(ms), 84);
	memstore_check(ms, a, &lg, 1, T0 + 1000, 1, &res);
	assert_false(res.allowed);
	assert_int_equal(res.retry_after_us, 10 * S - 1000);
	for (int i = 0; i < 12; i++)
		assert_int_equal(memstore_check(ms, b, &lg, 1, T0 + 1000 + i, 1, &res), 0);
	assert_int_equal(chunks_in_use(ms), 85);
	assert_int_equal(memstore_check(ms, b, &lg, 1, T0 + 2000, 1, &res), MEMSTORE_NO_ROOM);
	memstore_get_stats(ms, &st);
	assert_int_equal(st.full, 1);
	assert_int_equal(st.evicted, 0);
	assert_int_equal(memstore_check(ms, b, &lg, 1, T0 + 2000, 0, &res), 0);
	assert_int_equal(res.remaining, 988);
	/* a's refusal over, a may go */
	assert_int_equal(memstore_check(ms, b, &lg, 1, T0 + 10 * S, 1, &res), 0);
	assert_true(res.allowed);
	assert_int_equal(res.remaining, 987);
	memstore_get_stats(ms, &st);
	assert_int_equal(st.evicted, 1);
	assert_int_equal(chunks_in_use(ms), 2);
	assert_int_equal(memstore_check(ms, a, &lg, 1, T0 + 10 * S, 0, &res), 0);
	assert_int_equal(res.remaining, 1000);
	memstore_free(ms);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_counts),
		cmocka_unit_test(test_all_or_nothing),
		cmocka_unit_test(test_keys),
		cmocka_unit_test(test_decider),
		cmocka_unit_test(test_spec_change_and_expiry),
		cmocka_unit_test(test_full),
		cmocka_unit_test(test_full_of_new_identities),
		cmocka_unit_test(test_room_spares_the_deciding_client),
		cmocka_unit_test(test_sweep_and_reset),
		cmocka_unit_test(test_many_keys),
		cmocka_unit_test(test_no_allocation),
		cmocka_unit_test(test_concurrency),
		cmocka_unit_test(test_next_ttl),
		cmocka_unit_test(test_log_basic),
		cmocka_unit_test(test_log_matches_the_math),
		cmocka_unit_test(test_log_chunks_come_back),
		cmocka_unit_test(test_log_pool_full),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
