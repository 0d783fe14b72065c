/* SPDX-License-Identifier: Apache-2.0 */
/* worker.c: what a worker does with a NOTIFY's messages (worker.h): the
 * handler its connections call, and the store's answer callback. */
#include "worker.h"

#include <string.h>

#include "adaptive_gate.h"
#include "alloc.h"
#include "clock.h"
#include "decide.h"
#include "hll.h"
#include "log.h"
#include "server.h"
#include "spop.h"
#include "store.h"

_Static_assert(DECIDE_ACTIONS_MAX <= CONN_ACTIONS_LIMIT, "an answer fits a connection's buffer");

/* handler_flags of a connection (conn_view) */
#define WARNED_TRIM 1u /* logged that answers lose variables to fit */

/* ---- answers ------------------------------------------------------------- */

static int ack_trimmed(struct worker *w, struct conn *c, uint64_t sid, uint64_t fid,
		       const struct decide_decision *d);

/* Queues an ACK frame that carries a decision's actions, or when d is
 * NULL, the one no-op action that every ACK needs (an empty ACK can hang
 * HAProxy). Returns 0, or -1 after disconnecting. */
static int ack(struct worker *w, struct conn *c, uint64_t sid, uint64_t fid,
	       const struct decide_decision *d)
{
	struct conn_ack a;

	if (conn_ack_begin(c, sid, fid, &a) < 0)
		return -1;
	if (d)
		decide_put_actions(&a.wb, d);
	else
		spop_put_unset_var(&a.wb, SPOP_SCOPE_TXN, "status", 6);
	if (conn_ack_end(&a) < 0)
		return ack_trimmed(w, c, sid, fid, d);
	return 0;
}

/* ack() for an answer over the max-frame-size HAProxy announced (it may
 * announce as little as 256 bytes, and a rule's RateLimit-Policy alone
 * can take 2 KiB): the same answer without the variables HAProxy only
 * copies into headers, policy first, then ratelimit, and counted. What
 * HAProxy's rules act on (status, retry_after, reason, place) is never
 * dropped: an answer too big without those two disconnects, as our own
 * failure (logged), not the peer's. Returns 0, or -1 after
 * disconnecting. */
static __attribute__((noinline)) int ack_trimmed(struct worker *w, struct conn *c,
						 uint64_t sid, uint64_t fid,
						 const struct decide_decision *d)
{
	struct conn_view *v = conn_view(c);
	struct decide_decision t;
	struct conn_ack a;

	if (d) {
		t = *d;
		for (int drop = 0; drop < 2; drop++) {
			if (drop == 0)
				t.policy_len = 0;
			else
				t.ratelimit_len = 0;
			if (conn_ack_begin(c, sid, fid, &a) < 0)
				return -1;
			decide_put_actions(&a.wb, &t);
			if (conn_ack_end(&a) == 0) {
				STAT_INC(w->stats.answers_trimmed);
				if (!(v->handler_flags & WARNED_TRIM)) {
					v->handler_flags |= WARNED_TRIM;
					log_warn("connection %u: answers over the max-frame-size of %u "
						 "bytes HAProxy announced are sent without %s",
						 v->id, v->max_frame,
						 drop ? "policy and ratelimit" : "policy");
				}
				return 0;
			}
		}
	}
	log_warn("connection %u: an answer does not fit the max-frame-size of %u bytes "
		 "HAProxy announced, even without policy and ratelimit", v->id, v->max_frame);
	conn_disconnect(c, SPOP_ST_TOO_BIG);
	return -1;
}

/* Counts a decision under its rule's name (rulestats.h). A refusal has a
 * reason other than ok, so the common answer (ok, forwarded) takes one
 * test before the flags. Priorities are 0 to 3 (rules_classify), and only
 * P1 to P3 are ever shed. Inline: every answer counts, and a call costs
 * as much as the counting. */
static inline __attribute__((always_inline)) void count_decision(struct worker *w,
								 const struct decide_decision *d)
{
	struct rule_counters *rc = &w->rule_stats[d->counters];

	STAT_INC(rc->decisions);
	if (d->reason != DECIDE_OK) {
		if (d->status == 429)
			STAT_INC(rc->limited);
		else if (d->reason == DECIDE_SHED && !d->shadow)
			STAT_INC(rc->shed[d->priority & 3]);
		else if (d->status == 503 && d->reason == DECIDE_STORE_DOWN)
			STAT_INC(w->stats.store_down);
	}
	if (d->shadow)
		STAT_INC(rc->shadow);
	if (d->degraded) {
		STAT_INC(w->stats.degraded);
		if (d->saturated)
			STAT_INC(rc->saturated);
	}
	if (d->near_limit)
		STAT_INC(rc->near_limit);
}

/* A request the store held (its rule's delay), answered now. */
static __attribute__((noinline)) void count_delayed(struct worker *w,
						    const struct decide_decision *d)
{
	STAT_INC(w->rule_stats[d->counters].delayed);
	hist_long_observe(&w->stats.delays, d->delayed_us);
}

void worker_answer(void *worker, const struct store_ref *ref, const struct decide_decision *d)
{
	struct worker *w = worker;
	struct decide_decision own;
	struct conn *c;

	count_decision(w, d);
	if (d->delayed_us)
		count_delayed(w, d);
	c = conn_deferred(&w->conns, ref->id, ref->gen);
	if (d->flight)
		d = gate_answered(w, c ? d : NULL, d, &own);
	if (!c)
		return;
	ack(w, c, ref->stream_id, ref->frame_id, d);
	conn_answered(c);
}

bool worker_awaited(void *worker, const struct store_ref *ref)
{
	struct worker *w = worker;

	return conn_open(&w->conns, ref->id, ref->gen);
}

/* ---- check-rate ------------------------------------------------------------ */

/* xorshift32: shedding needs uniform numbers, not secrets. */
static uint32_t worker_rand(struct worker *w)
{
	uint32_t x = w->rnd;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	w->rnd = x;
	return x;
}

/* Counts the client of q among the distinct clients of its rule and of
 * each layer's under the layer's identity (hll.h), at `now` (the loop's
 * time of the read, wall clock seconds). */
static inline void count_clients(struct worker *w, const struct decide_query *q, double now)
{
	int64_t period = hll_period((int64_t)(now * 1e6));
	struct hll_window *h = w->clients[q->rule->counters];

	if (h)
		hll_add(h, hll_hash(q->key), period);
	for (unsigned p = 0; p < q->rule->nstack; p++) {
		h = w->clients[q->rule->stack[p]->counters];
		if (h)
			hll_add(h, hll_hash(q->lkey[p]), period);
	}
}

/* Decides a check-rate message read on c. Returns 1 when *d holds the
 * decision now, 0 when it comes later (worker_answer). */
static int check_rate(struct worker *w, struct conn *c, const struct spop_frame *f,
		      const struct rules_request *req, struct decide_decision *d)
{
	const struct conn_view *v = conn_view(c);
	const struct adaptive_config *ac;
	struct decide_query q;
	struct store_ref ref;

	decide_prepare_request(w->rules, req, worker_rand(w), &q);
	if (w->ovt)
		decide_override(w->rules, w->ovt, clock_wall_ms(), &q);
	count_clients(w, &q, v->last_active);
	if (q.load_known) {
		/* for the load gauge; last_active is when this was read */
		STAT_SET(w->load.in_use, q.in_use);
		STAT_SET(w->load.free_conns, q.free_conns);
		STAT_SET(w->load.at, v->last_active);
	}
	/* Shed in earnest: no token taken. Shed in shadow mode: the limits
	 * still decide, and the answer says it would have been shed. */
	if (q.shed && !q.shed_shadow) {
		decide_shed(&q, d);
		return 1;
	}
	/* adaptive shedding, before any token is taken */
	if ((ac = rules_adaptive(w->rules)) && gate_check(w, ac, &q, req, d))
		return 1;
	ref.id = v->id;
	ref.gen = v->gen;
	ref.stream_id = f->stream_id;
	ref.frame_id = f->frame_id;
	return store_submit(w->store, &q, &ref, d);
}

/* ---- release and response ---------------------------------------------------- */

/* The response's cost argument (DECIDE_COST) settles the charge of the
 * request whose place is a charge's (store_settle); other places go
 * untouched. */
static __attribute__((noinline)) void settle(struct worker *w, const struct rules_args *args,
					     const struct spop_data *place)
{
	store_settle(w->store, w->rules, place->u.str.ptr, place->u.str.len,
		     rules_args_get(args, DECIDE_COST));
}

/* A release or response message (checked already): for the request its
 * place argument names (txn.rl.place), gives back the concurrency place of
 * its request_id, and counts its status for the rule's penalty. The
 * argument's name before 0.3, slot, is read when place is absent. */
static __attribute__((noinline)) void release(struct worker *w, struct spop_cursor kv,
					      unsigned nargs)
{
	struct rules_args args;
	const struct spop_data *place, *id, *status;
	int64_t st = 0;

	rules_args_from_kv(&args, kv, nargs);
	place = rules_args_get(&args, DECIDE_PLACE);
	if (!place)
		place = rules_args_get(&args, DECIDE_PLACE_OLD);
	id = rules_args_get(&args, RULES_REQUEST_ID);
	status = rules_args_get(&args, "status");
	STAT_INC(w->stats.releases);
	if (status && !spop_data_int(status, &st))
		st = 0;
	if (place && place->type != SPOP_T_STR && place->type != SPOP_T_BIN)
		place = NULL; /* no place of ours */
	if (place && id && gate_release(w, id, place->u.str.ptr, place->u.str.len))
		return;
	if (!place || (!id && !st) ||
	    store_response(w->store, w->rules, place->u.str.ptr, place->u.str.len,
			   id ? decide_request_id(id) : 0, st > 0 && st < 1000 ? (int)st : 0) < 0)
		STAT_INC(w->stats.releases_bad);
	if (place)
		settle(w, &args, place);
}

static inline bool is_release(struct spop_str name)
{
	return (name.len == sizeof(DECIDE_RELEASE) - 1 &&
		memcmp(name.ptr, DECIDE_RELEASE, name.len) == 0) ||
	       (name.len == sizeof(DECIDE_RESPONSE) - 1 &&
		memcmp(name.ptr, DECIDE_RESPONSE, name.len) == 0);
}

/* Acts on the release or response message whose nargs arguments start at
 * args, then on every later one of the NOTIFY (its list checked whole
 * already): one HAProxy event can carry both, from two SPOE files. The
 * walk is bounded by the frame. Apart from notify(): most NOTIFYs carry
 * no release. */
static __attribute__((noinline)) void release_all(struct worker *w, struct spop_cursor args,
						  unsigned nargs)
{
	struct spop_cursor cur = args;
	struct spop_str name;

	release(w, args, nargs);
	if (spop_kv_skip(&cur, nargs) < 0)
		return;
	while (spop_msg_head(&cur, &name, &nargs) == 1) {
		args = cur;
		if (spop_kv_skip(&cur, nargs) < 0)
			return;
		if (is_release(name))
			release(w, args, nargs);
	}
}

/* ---- arguments never sent ---------------------------------------------------- */

/* Notes which checked arguments (rules_checked_name) the check-rate
 * message at kv carries; at the WORKER_ARGS_JUDGED-th, adds those never
 * seen to the server's missing ones and logs each name new there, once
 * per rules. A worker judges its own traffic: a name that HAProxy sends
 * never reaches any. Only while args_msgs is short of the count: later
 * messages do not come here. */
static __attribute__((noinline)) void args_note(struct worker *w, struct spop_cursor kv,
						unsigned nargs)
{
	struct server *srv = w->srv;
	uint64_t gen = rules_gen(w->rules), all, missing, fresh = 0;
	size_t n = rules_checked_count(w->rules);

	w->args_seen |= rules_args_seen(w->rules, kv, nargs);
	if (++w->args_msgs < WORKER_ARGS_JUDGED || n == 0)
		return;
	all = n >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1;
	missing = all & ~w->args_seen;
	pthread_mutex_lock(&srv->args_lock);
	if (srv->args_gen < gen) {
		srv->args_gen = gen;
		srv->args_missing = 0;
	}
	if (srv->args_gen == gen) {
		fresh = missing & ~srv->args_missing;
		srv->args_missing |= missing;
	}
	pthread_mutex_unlock(&srv->args_lock);
	for (size_t i = 0; fresh && i < n; i++)
		if (fresh & ((uint64_t)1 << i))
			log_msg(LOG_WARN,
				"argument %s: the rules read it, but none of the first %d check-rate "
				"messages carried it: is it misspelt in the rules file or in the SPOE "
				"file's args? (spoa_rl_argument_missing)",
				rules_checked_name(w->rules, i), WORKER_ARGS_JUDGED);
}

/* ---- --fixed-answer ----------------------------------------------------------- */

/* A decision kept with copies of its strings, so that it outlives the
 * rules it was made with. The first one made in the process is the
 * server's, and every worker answers with it from then on. */
struct fixed_answer {
	struct decide_decision d;
	char rule[RULES_NAME_MAX];
	char policy[RULES_POLICY_MAX];
};

/* The server's answer, once made: the worker takes it. */
static __attribute__((noinline)) bool fixed_answer(struct worker *w)
{
	w->fixed = atomic_load_explicit(&w->srv->fixed, memory_order_acquire);
	return w->fixed != NULL;
}

static __attribute__((noinline)) void keep_answer(struct worker *w,
						  const struct decide_decision *d)
{
	struct fixed_answer *fa = xmalloc(sizeof(*fa)), *none = NULL;

	if (!fa)
		return;
	fa->d = *d;
	fa->d.rule_len = d->rule_len < sizeof(fa->rule) ? d->rule_len : 0;
	fa->d.policy_len = d->policy_len < sizeof(fa->policy) ? d->policy_len : 0;
	if (fa->d.rule_len)
		memcpy(fa->rule, d->rule, fa->d.rule_len);
	if (fa->d.policy_len)
		memcpy(fa->policy, d->policy, fa->d.policy_len);
	fa->d.rule = fa->rule;
	fa->d.policy = fa->policy;
	/* another worker's, made at the same time, may be the first */
	if (!atomic_compare_exchange_strong_explicit(&w->srv->fixed, &none, fa,
						     memory_order_acq_rel, memory_order_acquire))
		xfree(fa);
	fixed_answer(w);
}

/* ---- the handlers ----------------------------------------------------------- */

/* A NOTIFY read on c, with the --fixed-answer steps or without them
 * (fixed is a constant in each handler below). */
static inline __attribute__((always_inline)) enum conn_answer
notify(struct worker *w, struct conn *c, const struct spop_frame *f, const bool fixed)
{
	struct spop_cursor cur = { f->payload, f->payload + f->payload_len };
	struct spop_str name;
	struct rules_request req;
	struct decide_decision d;
	struct spop_cursor rel = { NULL, NULL };
	unsigned nargs, nrel = 0;
	int rc, found = 0;

	/* Validate the whole message list before acting on any of it. The
	 * first check-rate message's arguments are decoded as they are
	 * checked, so that each byte is walked once; a second check-rate
	 * would answer with the same variables, and is ignored. Every
	 * release and response message is acted on (release_all), from the
	 * first one's place. */
	while ((rc = spop_msg_head(&cur, &name, &nargs)) == 1) {
		if (!found && name.len == sizeof(DECIDE_MESSAGE) - 1 &&
		    memcmp(name.ptr, DECIDE_MESSAGE, name.len) == 0) {
			found = 1;
			if (!fixed && w->args_msgs < WORKER_ARGS_JUDGED)
				args_note(w, cur, nargs);
			rc = rules_request_decode(w->rules, &req, &cur, nargs);
		} else {
			if (!rel.p && is_release(name)) {
				rel = cur;
				nrel = nargs;
			}
			rc = spop_kv_skip(&cur, nargs);
		}
		if (rc < 0)
			break;
	}
	if (rc < 0) {
		conn_disconnect(c, SPOP_ST_INVALID);
		return CONN_ANSWERED;
	}
	if (rel.p)
		release_all(w, rel, nrel);
	/* Unknown messages, or none, are acknowledged, not refused. */
	if (!found) {
		ack(w, c, f->stream_id, f->frame_id, NULL);
		return CONN_ANSWERED;
	}
	if (fixed && (w->fixed || fixed_answer(w))) {
		ack(w, c, f->stream_id, f->frame_id, &w->fixed->d);
		return CONN_ANSWERED;
	}
	if (!check_rate(w, c, f, &req, &d))
		return CONN_DEFERRED;
	count_decision(w, &d);
	if (d.flight)
		gate_answered(w, &d, &d, &d);
	if (fixed)
		keep_answer(w, &d);
	ack(w, c, f->stream_id, f->frame_id, &d);
	return CONN_ANSWERED;
}

static enum conn_answer on_notify(void *app, struct conn *c, const struct spop_frame *f)
{
	return notify(app, c, f, false);
}

static enum conn_answer on_notify_fixed(void *app, struct conn *c, const struct spop_frame *f)
{
	return notify(app, c, f, true);
}

const struct conn_handler *worker_handler(bool fixed)
{
	static const struct conn_handler normal_handler = { .notify = on_notify };
	static const struct conn_handler fixed_handler = { .notify = on_notify_fixed };

	return fixed ? &fixed_handler : &normal_handler;
}
