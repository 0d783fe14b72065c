/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of store.c (the life of a query and the failure mode, with
 * a backend written here) and store_memory.c (the in-memory store). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rules_text.h"

#include "alloc.h"
#include "charge.h"
#include "clock.h"
#include "inflight.h"
#include "memstore.h"
#include "overrides.h"
#include "store.h"

static void prepare(struct rules *rules, const char *api_key, struct decide_query *q)
{
	uint8_t buf[256];
	struct spop_wbuf w;
	struct spop_cursor c;

	spop_wbuf_init(&w, buf, sizeof(buf));
	spop_put_name(&w, "api_key", 7);
	spop_put_data(&w, &(struct spop_data){ .type = SPOP_T_STR,
					       .u.str = { api_key, strlen(api_key) } });
	assert_int_equal(w.err, 0);
	c.p = buf;
	c.end = buf + w.len;
	decide_prepare(rules, c, 1, 0, q);
}

/* ---- a backend that does what the test says -------------------------------- */

static enum store_outcome next_outcome;
static struct decide_query held;     /* the query a PENDING check kept */
static struct store_ref held_ref;
static int checks;

static enum store_outcome fake_check(struct store_worker *sw, const struct decide_query *q,
				     const struct store_ref *ref, struct limit_result *res,
				     int *decider)
{
	checks++;
	if (next_outcome == STORE_DECIDED) {
		memset(res, 0, sizeof(*res));
		res[0].allowed = false;
		res[0].limit = q->limits[0].quota;
		res[0].retry_after_us = 2500000;
		res[0].reset_us = 60000000;
		*decider = 0;
	} else if (next_outcome == STORE_PENDING) {
		held = *q;
		held_ref = *ref;
	}
	return next_outcome;
}

static void fake_admin(struct store *st, struct store_admin *a)
{
	snprintf(a->error, sizeof(a->error), "no");
	store_admin_done(st, a);
}

static const struct store_ops fake_ops = {
	.name = "fake",
	.shared = true,
	.check = fake_check,
	.admin = fake_admin,
};

static struct decide_decision answered;
static struct store_ref answered_ref;
static int answers;

static void on_answer(void *priv, const struct store_ref *ref, const struct decide_decision *d)
{
	assert_ptr_equal(priv, &answers);
	answered = *d;
	answered_ref = *ref;
	answers++;
}

static struct store *fake_store(void)
{
	struct store *st = xcalloc(1, sizeof(*st));

	assert_non_null(st);
	assert_int_equal(store_init(st, &fake_ops, 1000), 0);
	return st;
}

/* Decided at once, decided later, not decided: each reaches the caller as
 * a decision, the late one through the callback with the caller's ref. */
static void test_outcomes(void **state)
{
	struct rules *rules = rules_from_text("limits: [10/1m]\non_store_failure: closed");
	struct store *st = fake_store();
	struct store_worker *sw = store_worker_new(st, NULL, 0, on_answer, &answers);
	struct store_ref ref = { 7, 3, 11, 12 };
	struct decide_query q;
	struct decide_decision d;

	(void)state;
	assert_non_null(sw);
	prepare(rules, "k", &q);

	next_outcome = STORE_DECIDED;
	assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
	assert_int_equal(d.status, 429);
	assert_int_equal(d.retry_after, 3);
	assert_false(d.degraded);

	next_outcome = STORE_UNAVAILABLE;
	assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
	assert_int_equal(d.status, 503);
	assert_true(d.degraded);
	assert_string_equal(decide_reason_str(d.reason), "store_down");

	/* pending: the rules stay referenced until the answer */
	next_outcome = STORE_PENDING;
	assert_int_equal(rules_refs(rules), 1);
	assert_int_equal(store_submit(sw, &q, &ref, &d), 0);
	assert_int_equal(rules_refs(rules), 2);
	assert_int_equal(answers, 0);
	store_complete(sw, &held, &held_ref, NULL, -1);
	assert_int_equal(answers, 1);
	assert_int_equal(rules_refs(rules), 1);
	assert_memory_equal(&answered_ref, &ref, sizeof(ref));
	assert_int_equal(answered.status, 503);
	assert_true(answered.degraded);

	/* a rule without limits never reaches the backend */
	{
		struct rules *none = rules_from_text("limits: []");
		int before = checks;

		prepare(none, "k", &q);
		assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
		assert_int_equal(d.status, 0);
		assert_int_equal(checks, before);
		rules_release(none);
	}
	store_worker_free(sw);
	store_free(st);
	rules_release(rules);
}

/* The failure mode: closed refuses, open forwards, local keeps the limit
 * divided among the agents, each answer marked degraded. */
static void test_failure_policies(void **state)
{
	struct rules *rules = rules_from_text("limits: [10/1m]\non_store_failure: closed\nstore: {type: redis, agents: 4}");
	struct store *st = fake_store();
	struct decide_query q;
	struct decide_decision d;
	int passed = 0;

	(void)state;
	prepare(rules, "k", &q);
	store_without(st, &q, &d);
	assert_int_equal(d.status, 503);
	assert_true(d.degraded);

	q.on_failure = RULES_FAIL_OPEN;
	store_without(st, &q, &d);
	assert_int_equal(d.status, 0);
	assert_true(d.degraded);

	/* local: 10 per minute shared by 4 agents leaves 2 here */
	q.on_failure = RULES_FAIL_LOCAL;
	for (int i = 0; i < 5; i++) {
		store_without(st, &q, &d);
		assert_true(d.degraded);
		passed += d.status == 0;
	}
	assert_int_equal(passed, 2);
	assert_int_equal(d.status, 429);
	store_free(st);
	rules_release(rules);

	/* a log too: 9 per minute shared by 4 agents, 2 here; the third
	 * waits for the first to leave the window, a minute */
	rules = rules_from_text("limits: [{rate: 9/1m, algorithm: log}]\n"
				"on_store_failure: local\nstore: {type: redis, agents: 4}");
	st = fake_store();
	prepare(rules, "k", &q);
	passed = 0;
	for (int i = 0; i < 3; i++) {
		store_without(st, &q, &d);
		assert_true(d.degraded);
		passed += d.status == 0;
	}
	assert_int_equal(passed, 2);
	assert_int_equal(d.status, 429);
	assert_int_equal(d.limit, 2);
	assert_true(d.retry_after >= 59 && d.retry_after <= 60);
	store_free(st);
	rules_release(rules);
}

static int admin_finished;

static void admin_done(struct store_admin *a)
{
	admin_finished++;
}

/* A reset voids cached refusals (the epoch moves) only when it worked. */
static void test_reset_epoch(void **state)
{
	struct store *st = fake_store();
	struct store_admin a = { .reset = true, .done = admin_done };

	(void)state;
	store_admin(st, &a);
	assert_int_equal(admin_finished, 1);
	assert_string_equal(a.error, "no");
	assert_int_equal(store_reset_epoch(st), 0);
	store_free(st);

	st = store_memory_new(1000);
	admin_finished = 0;
	store_admin(st, &a);
	assert_int_equal(admin_finished, 1);
	assert_string_equal(a.error, "");
	assert_int_equal(store_reset_epoch(st), 1);
	store_free(st);
}

/* The memory store's operator overrides: at most OVERRIDES_MAX, a PUT
 * past that refused with 409 (one that replaces entries is not), and the
 * entries past their end left out when the set changes. */
static int set_overrides(struct store *st, struct override_entry *e, size_t n, bool remove)
{
	struct store_admin a = { .override = true, .ov_remove = remove, .ov = e, .nov = n,
				 .done = admin_done };

	store_admin(st, &a);
	return a.error[0] ? a.status : 0;
}

static void test_memory_overrides_bounded(void **state)
{
	struct store *st = store_memory_new(1000);
	struct override_entry *e = calloc(OVERRIDES_MAX + 1, sizeof(*e));
	int64_t now = clock_wall_ms();

	(void)state;
	assert_non_null(e);
	for (uint32_t i = 0; i <= OVERRIDES_MAX; i++) {
		memcpy(e[i].key, &i, sizeof(i));
		e[i].spec = (struct limit_spec){ .algo = LIMIT_TOKEN_BUCKET, .quota = 5,
						 .period_us = 60 * LIMIT_US_PER_S };
		/* the first ten end at once */
		e[i].expires_ms = i < 10 ? now - 1 : 0;
	}
	assert_int_equal(set_overrides(st, e, OVERRIDES_MAX, false), 0);
	assert_int_equal(overrides_count(st->ov), OVERRIDES_MAX);
	/* full: a new client is refused, a known one changes */
	for (uint32_t i = 0; i < 10; i++)
		e[i].expires_ms = 0;
	/* (the ten that ended make room) */
	assert_int_equal(set_overrides(st, &e[OVERRIDES_MAX], 1, false), 0);
	assert_int_equal(overrides_count(st->ov), OVERRIDES_MAX - 9);
	assert_int_equal(set_overrides(st, e, 10, false), 409);
	assert_int_equal(set_overrides(st, e, 9, false), 0);
	assert_int_equal(overrides_count(st->ov), OVERRIDES_MAX);
	assert_int_equal(set_overrides(st, &e[9], 1, false), 409);
	assert_int_equal(set_overrides(st, &e[20], 1, false), 0);
	assert_int_equal(overrides_count(st->ov), OVERRIDES_MAX);
	/* a removal makes room */
	assert_int_equal(set_overrides(st, &e[20], 1, true), 0);
	assert_int_equal(set_overrides(st, e, 10, false), 0);
	free(e);
	store_free(st);
}

/* The memory store decides at once, counts exactly, and its admin look
 * and reset see and drop the client's buckets. */
static void test_memory_store(void **state)
{
	struct rules *rules = rules_from_text("limits: [3/1h]");
	struct store *st = store_memory_new(1000);
	struct store_worker *sw = store_worker_new(st, NULL, 0, on_answer, &answers);
	struct store_ref ref = { 0, 0, 0, 0 };
	struct decide_query q;
	struct decide_decision d;
	struct store_admin_item it = { 0 };
	struct store_admin a = { .n = 1, .item = &it, .done = admin_done };
	int answers_before = answers;

	(void)state;
	assert_non_null(st);
	assert_non_null(sw);
	assert_string_equal(st->ops->name, "memory");
	prepare(rules, "k", &q);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
		assert_int_equal(d.status, 0);
		assert_int_equal(d.remaining, 2 - i);
	}
	assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
	assert_int_equal(d.status, 429);

	it.rule = q.rule;
	memcpy(it.key, q.key, sizeof(it.key));
	store_admin(st, &a);
	assert_int_equal(it.found, STORE_ADMIN_STATE);
	/* the answer names the client by 24 bits of its key */
	assert_int_equal(strlen(it.label), 6);
	assert_true(it.label[0] == '{' && it.label[5] == '}');
	assert_int_equal(strcspn(it.label + 1, "{}~"), 4);
	assert_int_equal(it.limit[0].remaining, 0);
	assert_int_equal(limit_ceil_s(it.limit[0].reset_us), 3600);
	assert_false(it.has_ttl || it.out_of_memory);

	a.reset = true;
	memset(&it.found, 0, sizeof(it) - offsetof(struct store_admin_item, found));
	store_admin(st, &a);
	assert_int_equal(it.found, STORE_ADMIN_DELETED);
	assert_int_equal(it.deleted, 1);
	assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.remaining, 2);

	assert_int_equal(answers, answers_before); /* all answered at once */
	store_worker_free(sw);
	store_free(st);
	rules_release(rules);
}

static void prepare_rid(struct rules *rules, const char *api_key, const char *rid,
			struct decide_query *q)
{
	uint8_t buf[256];
	struct spop_wbuf w;
	struct spop_cursor c;

	spop_wbuf_init(&w, buf, sizeof(buf));
	spop_put_name(&w, "api_key", 7);
	spop_put_data(&w, &(struct spop_data){ .type = SPOP_T_STR,
					       .u.str = { api_key, strlen(api_key) } });
	spop_put_name(&w, "request_id", 10);
	spop_put_data(&w, &(struct spop_data){ .type = SPOP_T_STR, .u.str = { rid, strlen(rid) } });
	assert_int_equal(w.err, 0);
	c.p = buf;
	c.end = buf + w.len;
	decide_prepare(rules, c, 2, 0, q);
}

/* A charge's place, RULE/KEYHEX/ESTIMATE/TAKE_US/LIMITS, byte for byte as
 * the printf format "%s/%s/%u/%lld/%016llx" writes it, at the ends of
 * each number's range; and read back. */
static void test_charge_place_format(void **state)
{
	struct rules *rules = rules_from_text(
		"tiers: { a-tier-with-a-longer-name: { limits: [10/1m], charge: response } }");
	static const uint32_t costs[] = { 0, 1, 9, 10, 4294967295u };
	static const int64_t takes[] = { 0, 7, 1733300000123456, INT64_MAX, -5, INT64_MIN };
	struct decide_query q;
	struct decide_decision d;
	struct charge_place cp;
	char want[DECIDE_PLACE_MAX], hex[IDENTITY_HEX_LEN + 1];

	(void)state;
	prepare_rid(rules, "k", "a", &q);
	identity_hex(q.key, hex);
	for (size_t c = 0; c < sizeof(costs) / sizeof(costs[0]); c++) {
		for (size_t t = 0; t < sizeof(takes) / sizeof(takes[0]); t++) {
			int n;

			q.cost = costs[c];
			charge_put_place(&q, takes[t], &d);
			n = snprintf(want, sizeof(want), "%.*s/%s/%u/%lld/%016llx",
				     (int)q.rule->name_len, q.rule->name, hex, (unsigned)q.cost,
				     (long long)takes[t],
				     (unsigned long long)charge_limits_id(q.rule));
			assert_int_equal(d.place_len, n);
			assert_memory_equal(d.place, want, (size_t)n);
			if (takes[t] < 0 || costs[c] == 0)
				continue;
			assert_int_equal(charge_parse_place(d.place, d.place_len, &cp), 1);
			assert_int_equal(cp.estimate, costs[c]);
			assert_true(cp.take_us == takes[t]);
			assert_true(cp.limits == charge_limits_id(q.rule));
		}
	}
	rules_release(rules);
}

/* A rule that charges what the response says, with a concurrency limit:
 * its place carries the estimate and serves both the release and the
 * settlement; more is taken (the client waits its debt out), a cost not a
 * number or a place of limits no longer in force settles nothing. */
static void test_memory_charge(void **state)
{
	struct rules *rules = rules_from_text(
		"tiers: { t: { limits: [10/1m], concurrency: 2, charge: response } }");
	struct rules *changed = rules_from_text(
		"tiers: { t: { limits: [20/1m], concurrency: 2, charge: response } }");
	struct store *st = store_memory_new(1000);
	struct store_worker *sw = store_worker_new(st, NULL, 0, on_answer, &answers);
	struct store_ref ref = { 0, 0, 0, 0 };
	struct spop_data cost = { .type = SPOP_T_INT32, .u.i32 = 15 };
	struct spop_data bad = { .type = SPOP_T_STR, .u.str = { "1x", 2 } };
	struct decide_query q;
	struct decide_decision d;
	char place[DECIDE_PLACE_MAX];
	size_t place_len, slashes = 0;

	(void)state;
	prepare_rid(rules, "k", "a", &q);
	assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.remaining, 9);
	memcpy(place, d.place, d.place_len);
	place_len = d.place_len;
	for (size_t i = 0; i < place_len; i++)
		slashes += place[i] == '/';
	assert_int_equal(slashes, 4);
	/* 15, not 1: 14 more, 5 in debt; the release frees the place */
	assert_int_equal(store_settle(sw, rules, place, place_len, &cost), 1);
	assert_int_equal(store_response(sw, rules, place, place_len,
					decide_request_id(&(struct spop_data){
						.type = SPOP_T_STR, .u.str = { "a", 1 } }), 0), 0);
	assert_int_equal(STAT_GET(sw->stats.charge_settlements), 1);
	assert_int_equal(STAT_GET(sw->stats.charge_taken), 14);
	prepare_rid(rules, "k", "b", &q);
	assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
	assert_int_equal(d.status, 429);
	assert_int_equal(d.reason, DECIDE_LIMITED);
	assert_int_equal(d.retry_after, 36);
	/* what settles nothing, counted */
	assert_int_equal(store_settle(sw, rules, place, place_len, &bad), -1);
	assert_int_equal(store_settle(sw, rules, place, place_len, NULL), -1);
	assert_int_equal(STAT_GET(sw->stats.charge_invalid), 2);
	assert_int_equal(store_settle(sw, changed, place, place_len, &cost), -1);
	assert_int_equal(STAT_GET(sw->stats.charge_stale), 1);
	/* a place without the charge's fields is not a charge's */
	assert_int_equal(store_settle(sw, rules, place, 2 + IDENTITY_HEX_LEN, &cost), 0);
	assert_int_equal(STAT_GET(sw->stats.charge_settlements), 1);
	store_worker_free(sw);
	store_free(st);
	rules_release(changed);
	rules_release(rules);
}

/* A concurrency limit in memory: all or nothing with the rule's rate limit
 * (a request the rate refuses takes no place, one the places refuse takes
 * no token), the name of the place, the release through it, and
 * the admin's look and reset. */
static void test_memory_concurrency(void **state)
{
	struct rules *rules = rules_from_text(
		"tiers: { t: { limits: [3/1h], concurrency: 2 } }");
	struct store *st = store_memory_new(1000);
	struct store_worker *sw = store_worker_new(st, NULL, 0, on_answer, &answers);
	struct store_ref ref = { 0, 0, 0, 0 };
	struct decide_query q;
	struct decide_decision d;
	struct store_admin_item it = { 0 };
	struct store_admin a = { .n = 1, .item = &it, .done = admin_done };
	char place[DECIDE_PLACE_MAX];
	size_t place_len;

	(void)state;
	prepare_rid(rules, "k", "a", &q);
	assert_int_not_equal(q.request_id, 0);
	assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.limit, 3);
	assert_int_equal(d.remaining, 2);
	assert_true(d.place_len > 2 && memcmp(d.place, "t/", 2) == 0);
	memcpy(place, d.place, d.place_len);
	place_len = d.place_len;
	prepare_rid(rules, "k", "b", &q);
	assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
	assert_int_equal(d.status, 0);
	/* full: refused by the places, no token taken */
	prepare_rid(rules, "k", "c", &q);
	assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
	assert_int_equal(d.status, 429);
	assert_int_equal(d.reason, DECIDE_CONCURRENCY);
	assert_int_equal(d.retry_after, 1);
	assert_int_equal(d.limit, 2);
	assert_int_equal(d.ratelimit_len, 0);
	assert_int_equal(d.place_len, 0);
	it.rule = q.rule;
	memcpy(it.key, q.key, sizeof(it.key));
	store_admin(st, &a);
	assert_int_equal(it.found, STORE_ADMIN_STATE);
	assert_int_equal(it.limit[0].remaining, 1);
	assert_int_equal(limit_ceil_s(it.limit[0].reset_us), 2400);
	assert_int_equal(it.limit[1].in_flight, 2);
	/* a release gives its place back: c passes, taking the last token */
	assert_int_equal(store_response(sw, rules, place, place_len,
					decide_request_id(&(struct spop_data){
						.type = SPOP_T_STR, .u.str = { "a", 1 } }), 0), 0);
	assert_int_equal(store_response(sw, rules, "t/zz", 4, 1, 0), -1);
	assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
	assert_int_equal(d.status, 0);
	assert_int_equal(d.remaining, 0);
	/* the rate refuses: no place taken (one left after b and c? none:
	 * a third would find 2 in flight); release b, then d is refused by
	 * the rate and takes no place, so e still finds one */
	assert_int_equal(store_response(sw, rules, place, place_len,
					decide_request_id(&(struct spop_data){
						.type = SPOP_T_STR, .u.str = { "b", 1 } }), 0), 0);
	prepare_rid(rules, "k", "d", &q);
	assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
	assert_int_equal(d.status, 429);
	assert_int_equal(d.reason, DECIDE_LIMITED);
	assert_int_equal(inflight_look(st->flights, q.key, q.rule->lidh[1], 0), 1);
	/* reset: the buckets and the places */
	a.reset = true;
	store_admin(st, &a);
	assert_int_equal(it.found, STORE_ADMIN_DELETED);
	assert_int_equal(it.deleted, 2);
	store_worker_free(sw);
	store_free(st);
	rules_release(rules);
}

/* The metrics' figures: every worker's part summed, a part freed no
 * longer counted. */
static void test_stats_summed(void **state)
{
	struct store *st = fake_store();
	struct store_worker *sw[3];
	struct store_stats sum;

	(void)state;
	for (int i = 0; i < 3; i++) {
		sw[i] = store_worker_new(st, NULL, i, on_answer, &answers);
		assert_non_null(sw[i]);
		STAT_SET(sw[i]->stats.penalty_events, (uint64_t)(i + 1));
	}
	store_get_stats(st, &sum);
	assert_int_equal(STAT_GET(sum.penalty_events), 6);
	store_worker_free(sw[1]);
	store_get_stats(st, &sum);
	assert_int_equal(STAT_GET(sum.penalty_events), 1 + 3);
	store_worker_free(sw[0]);
	store_worker_free(sw[2]);
	store_get_stats(st, &sum);
	assert_int_equal(STAT_GET(sum.penalty_events), 0);
	store_free(st);
}

/* ---- a rule's delay ----------------------------------------------------------- */

static struct decide_decision delayed_answers[8];
static struct store_ref delayed_refs[8];
static int ndelayed;

static void on_delayed(void *priv, const struct store_ref *ref, const struct decide_decision *d)
{
	(void)priv;
	assert_true(ndelayed < 8);
	delayed_answers[ndelayed] = *d;
	delayed_refs[ndelayed++] = *ref;
}

/* 1/50ms with a delay of 50ms, in the memory store, on a real loop: the
 * first passes at once; the second, refused now, is held and admitted
 * when its token is due (taken then: the bucket is empty again after);
 * the third, held behind it, finds the token taken, has waited as long
 * as the delay allows, and is refused; a rule without a delay refuses at
 * once; past max_delayed (2) a request is refused at once, counted; one
 * held when the worker's store goes is answered, refused. */
static void test_delay_memory(void **state)
{
	struct rules *rules = rules_from_text("max_delayed: 2\n"
					      "tiers:\n  default: d\n"
					      "  d: { limits: [1/50ms], delay: 50ms }\n"
					      "  n: { limits: [1/50ms] }\n");
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct store *st = store_memory_new(1000);
	struct store_worker *sw = store_worker_new(st, loop, 0, on_delayed, NULL);
	struct decide_query q;
	struct decide_decision d;
	struct store_ref ref = { 1, 1, 1, 1 };

	(void)state;
	assert_non_null(sw);
	ndelayed = 0;
	prepare(rules, "a", &q);
	assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
	assert_int_equal(d.status, 0);
	ref.stream_id = 2;
	assert_int_equal(store_submit(sw, &q, &ref, &d), 0);
	ref.stream_id = 3;
	assert_int_equal(store_submit(sw, &q, &ref, &d), 0);
	assert_int_equal(rules_refs(rules), 3);
	/* the third of another client: max_delayed (2) are held */
	prepare(rules, "b", &q);
	ref.stream_id = 4;
	assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
	assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
	assert_int_equal(d.status, 429);
	assert_int_equal(STAT_GET(sw->stats.delay_full), 1);
	assert_int_equal(STAT_GET(sw->stats.delayed_held), 2);
	while (ndelayed < 2)
		ev_run(loop, EVRUN_ONCE);
	/* in the order they came: the second admitted, the third refused */
	assert_int_equal(delayed_refs[0].stream_id, 2);
	assert_int_equal(delayed_answers[0].status, 0);
	assert_true(delayed_answers[0].delayed_us >= 1);
	assert_int_equal(delayed_refs[1].stream_id, 3);
	assert_int_equal(delayed_answers[1].status, 429);
	assert_true(delayed_answers[1].delayed_us >= 1);
	assert_int_equal(rules_refs(rules), 1);
	assert_int_equal(STAT_GET(sw->stats.delayed_held), 0);
	/* a tier without a delay refuses at once */
	{
		struct rules *nd = rules_from_text("limits: [1/1h]");

		prepare(nd, "c", &q);
		assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
		assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
		assert_int_equal(d.status, 429);
		rules_release(nd);
	}
	/* held when the store goes: answered, refused */
	prepare(rules, "e", &q);
	assert_int_equal(store_submit(sw, &q, &ref, &d), 1);
	assert_int_equal(store_submit(sw, &q, &ref, &d), 0);
	store_worker_free(sw);
	assert_int_equal(ndelayed, 3);
	assert_int_equal(delayed_answers[2].status, 429);
	assert_true(delayed_answers[2].retry_after >= 1);
	assert_int_equal(rules_refs(rules), 1);
	store_free(st);
	ev_loop_destroy(loop);
	rules_release(rules);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_outcomes),
		cmocka_unit_test(test_failure_policies),
		cmocka_unit_test(test_reset_epoch),
		cmocka_unit_test(test_memory_store),
		cmocka_unit_test(test_memory_overrides_bounded),
		cmocka_unit_test(test_memory_concurrency),
		cmocka_unit_test(test_charge_place_format),
		cmocka_unit_test(test_memory_charge),
		cmocka_unit_test(test_stats_summed),
		cmocka_unit_test(test_delay_memory),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
