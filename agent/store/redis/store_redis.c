/* SPDX-License-Identifier: Apache-2.0 */
/* store_redis.c: the Redis store (see store_redis.h): a worker's queries
 * and the store interface.
 *
 * Per worker: the nodes it sends to (store_redis_topology.c: chosen by
 * topology, replaced as Sentinel or the Cluster's map says); a queue of
 * queries held while no node can take them (no master known yet, a slot
 * that moved); the nodes' answers; the refused-until cache and leases;
 * on worker 0, the pollers of the fleet's overrides and of each server's
 * memory. Process-wide: the configuration and per-node counters for
 * the metrics (store_redis_config.c), and the latest topology a worker
 * learned, for the admin endpoint (store_redis_topology.c).
 */
#include "store_redis_int.h"

#include <stdio.h>

#include "alloc.h"
#include "clock.h"
#include "memstore.h"
#include "overrides.h"
#include "redis_auth.h"
#include "redis_info.h"
#include "redis_oneway.h"
#include "redis_overrides.h"
#include "redis_slots.h"
#include "redis_split.h"
#include "refusals.h"

#define LEASE_CLIENTS 1024         /* clients followed for leases, per worker */
#define LEASE_SWEEP 0.05           /* leases over go back this often (s) */
#define MOVES_MAX 3                /* a query follows its key this often */

/* ---- the refused-until cache (refusals.h), leases (lease.h) ------------------ */

/* The epoch of q's entries in both: admin resets so far, and for a rule
 * made for an override, the times such rules were freed (their entries
 * tell rules apart by address). */
static uint64_t cache_epoch(const struct store *st, const struct decide_query *q)
{
	return store_reset_epoch(st) + (q->rule->derived ? rules_override_epoch(q->rules) : 0);
}

static void redis_rules_changed(struct store_worker *sw)
{
	struct redis_worker *rw = sw->impl;

	refusals_clear(rw->cache);
	lease_table_clear(rw->leases);
}

/* ---- held queries ----------------------------------------------------------------- */

static void arm_held(struct redis_worker *rw)
{
	int64_t now;

	ev_timer_stop(rw->sw->loop, &rw->held_w);
	if (!rw->hlen)
		return;
	now = clock_now_us();
	ev_timer_set(&rw->held_w,
		     rw->held[rw->hhead].deadline > now
			     ? (double)(rw->held[rw->hhead].deadline - now) / 1e6 : 0., 0.);
	ev_timer_start(rw->sw->loop, &rw->held_w);
}

/* Holds r until a node can take it. Returns 0, or -1 when the queue is
 * full (r is then the caller's to answer). */
static int hold(struct redis_worker *rw, const struct redis_query *r)
{
	if (rw->hlen == rw->hcap)
		return -1;
	rw->held[(rw->hhead + rw->hlen) % rw->hcap] = *r;
	if (rw->hlen++ == 0)
		arm_held(rw);
	return 0;
}

/* The outcome of r (res NULL: not decided): to whoever asked, or to the
 * decision r is a part of. */
static void complete(struct redis_worker *rw, const struct redis_query *r,
		     const struct limit_result *res, int decider, int64_t redis_now)
{
	if (!res && r->lease)
		lease_failed(rw->leases, &r->q);
	if (r->split)
		redis_split_part(r, res, decider, redis_now);
	else
		store_complete_at(rw->sw, &r->q, &r->ref, res, decider, redis_now);
}

static void answer_unavailable(struct redis_worker *rw, const struct redis_query *r)
{
	STAT_INC(rw->stats.unavailable);
	complete(rw, r, NULL, -1, 0);
}

/* Held past their deadline: answered by the failure policy. Held ones
 * are in deadline order, as they were queued. */
static void on_held_deadline(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_worker *rw = t->data;
	int64_t now = clock_now_us();

	while (rw->hlen && rw->held[rw->hhead].deadline <= now) {
		struct redis_query r = rw->held[rw->hhead];

		rw->hhead = (rw->hhead + 1) % rw->hcap;
		rw->hlen--;
		STAT_INC(rw->stats.timeouts);
		complete(rw, &r, NULL, -1, 0);
	}
	arm_held(rw);
}

/* Sends r to its node, or holds it when there is none yet. On a Cluster, a
 * node that went down after the map in use was read may have been
 * replaced (its replica promoted): r then waits once for a fresh map,
 * within its deadline; a node down under a fresh map is down, and r goes
 * to the failure policy at once. Returns 0 (sent or held), or -1 when
 * neither could be done (r is then the caller's to answer). */
static int dispatch(struct redis_worker *rw, const struct redis_query *r)
{
	struct redis_node *rn = route(rw, r->q.key);
	int64_t down;

	if (rn) {
		if (redis_node_submit(rn, r) == 0)
			return 0;
		down = redis_node_down_since(rn);
		if (rw->cfg->topology == REDIS_CLUSTER && r->moves == 0 && down &&
		    down >= rw->map_checked && r->deadline > clock_now_us()) {
			struct redis_query again = *r;

			again.moves = 1;
			again.asking = false;
			if (hold(rw, &again) == 0) {
				rw->stale = true;
				refresh_map(rw);
				return 0;
			}
		}
		return -1;
	}
	if (rw->cfg->topology == REDIS_CLUSTER)
		refresh_map(rw);
	return hold(rw, r);
}

/* A node (or map) became available: what waited goes out again. */
void resubmit_held(struct redis_worker *rw)
{
	size_t n = rw->hlen;

	for (size_t i = 0; i < n; i++) {
		struct redis_query r = rw->held[rw->hhead];

		rw->hhead = (rw->hhead + 1) % rw->hcap;
		rw->hlen--;
		if (route(rw, r.q.key) == NULL) {
			/* still nowhere to go: back in line (n bounds the loop) */
			hold(rw, &r);
			continue;
		}
		if (dispatch(rw, &r) < 0)
			answer_unavailable(rw, &r);
	}
	arm_held(rw);
}

/* ---- answers from the nodes -------------------------------------------------- */

static void on_decided(void *owner, const struct redis_query *r, const struct limit_result *res,
		       int decider, int64_t sent, int64_t redis_now, const struct lease_grant *grant)
{
	struct redis_worker *rw = owner;

	if (r->lease) {
		lease_granted(rw->leases, &rw->lease, &r->q, r->lease,
			      cache_epoch(rw->sw->st, &r->q), res, decider, grant, sent, redis_now);
		if (grant && grant->extra > 0 && !ev_is_active(&rw->lease_w))
			ev_timer_start(rw->sw->loop, &rw->lease_w);
	}
	if (!res[decider].allowed && !r->split && rw->cfg->local_cache)
		refusals_store(rw->cache, &r->q, cache_epoch(rw->sw->st, &r->q), decider, res,
			       sent);
	complete(rw, r, res, decider, redis_now);
}

/* Holds r for a fresh map, or answers it by the failure policy when it
 * cannot wait. */
static void hold_for_map(struct redis_worker *rw, struct redis_query *r)
{
	r->asking = false;
	if (r->deadline <= clock_now_us() || hold(rw, r) < 0) {
		complete(rw, r, NULL, -1, 0);
		return;
	}
	rw->stale = true;
	refresh_map(rw);
}

/* Redis did not decide: the failure policy answers, or the rule's local
 * bucket when the deadline passed while Redis kept answering. On a Cluster, a
 * decision that never left the queue of a node that failed (a master
 * refusing connections may have been replaced: a worker that sent
 * nothing there since has the old map) waits once for a fresh map
 * within its deadline. One that was sent is never sent again: its call
 * may have run. */
static void on_failed(void *owner, const struct redis_query *r, bool sent, bool saturated)
{
	struct redis_worker *rw = owner;

	if (saturated) {
		complete(rw, r, NULL, STORE_SATURATED, 0);
		return;
	}
	if (!sent && rw->cfg->topology == REDIS_CLUSTER && r->moves == 0) {
		struct redis_query again = *r;

		again.moves = 1;
		hold_for_map(rw, &again);
		return;
	}
	complete(rw, r, NULL, -1, 0);
}

/* Cluster: r's key was not on the node rn the map named. The first time,
 * the map is read again and r waits for it; after that, rn is asked where
 * the key is (its slot may be migrating: ASK). A few times at most, within
 * r's deadline. */
static void on_moved(void *owner, struct redis_node *rn, const struct redis_query *r)
{
	struct redis_worker *rw = owner;
	struct redis_query again = *r;

	STAT_INC(rw->stats.moved);
	if (rw->cfg->topology != REDIS_CLUSTER || ++again.moves > MOVES_MAX ||
	    again.deadline <= clock_now_us()) {
		complete(rw, r, NULL, -1, 0);
		return;
	}
	if (again.moves == 1 || redis_node_where(rn, &again) < 0)
		hold_for_map(rw, &again);
}

/* Where r's key lives, as its node said: here after all (send it again),
 * migrating (ASKING to the importing node, once), moved (a fresh map). */
static void on_where(void *owner, const struct redis_query *r, int here,
		     const struct redis_cluster_error *e)
{
	struct redis_worker *rw = owner;
	struct redis_query again = *r;

	again.asking = false;
	if (again.deadline <= clock_now_us()) {
		complete(rw, r, NULL, -1, 0);
		return;
	}
	if (here) {
		if (dispatch(rw, &again) < 0)
			answer_unavailable(rw, &again);
		return;
	}
	if (e && e->kind == REDIS_CLUSTER_E_ASK && e->has_addr && rw->map) {
		for (size_t m = 0; m < rw->map->nmasters; m++) {
			if (!addr_equal(&rw->map->master[m], &e->addr))
				continue;
			if (!rw->node[m])
				rw->node[m] = new_node(rw, &rw->map->master[m]);
			STAT_INC(rw->stats.asked);
			again.asking = true;
			if (!rw->node[m] || redis_node_submit(rw->node[m], &again) < 0)
				answer_unavailable(rw, &again);
			return;
		}
	}
	hold_for_map(rw, &again);
}

static void on_trouble(void *owner, struct redis_node *rn)
{
	struct redis_worker *rw = owner;

	if (rw->cfg->topology == REDIS_SENTINEL && rw->sentinel)
		redis_sentinel_ask(rw->sentinel);
	else if (rw->cfg->topology == REDIS_CLUSTER) {
		rw->stale = true;
		refresh_map(rw);
	}
}

/* Several servers: the worker keeps --redis-pipeline calls in flight in
 * all, not per server, and the server whose waiting query is oldest sends
 * next. While calls are out, decisions for every server gather, so each
 * call carries about as many as one server's would: batches, and Redis's
 * CPU per decision, hold up however many masters there are. */
static bool may_send(void *owner, const struct redis_node *rn)
{
	struct redis_worker *rw = owner;
	int64_t mine;

	if (!rw->cfg->pipeline || rw->calls >= rw->cfg->pipeline)
		return false;
	mine = redis_node_oldest(rn);
	/* (a worker's nodes are all below nnodes: install_map, init) */
	for (size_t i = 0; i < rw->nnodes; i++)
		if (rw->node[i] && rw->node[i] != rn && redis_node_oldest(rw->node[i]) < mine)
			return false;
	return true;
}

const struct redis_node_cb node_cb = { on_decided, on_failed, on_moved, on_trouble,
					      on_where, may_send };

/* ---- the fleet's overrides (overrides.h) ----------------------------------------------
 *
 * Worker 0 polls them every OV_POLL seconds (redis_overrides.h) on a
 * connection of their own to the server that holds them, and hands every
 * new set to the store's holder: every agent applies an operator's change
 * within about that long. */
#define OV_POLL 0.5

static void on_ov_set(void *owner, struct overrides *o)
{
	struct redis_worker *rw = owner;

	if (rw->sw->st->on_overrides)
		rw->sw->st->on_overrides(rw->sw->st->on_overrides_priv, o);
	else
		overrides_release(o);
}

static void on_ov_poll(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_worker *rw = t->data;
	struct redis_node *rn = route(rw, redis_overrides_at);

	(void)loop;
	(void)revents;
	if (rn)
		redis_overrides_poll(rw->ovr, redis_node_addr(rn), redis_node_unexpiring(rn));
}

/* ---- each server's memory and keys (redis_info.h) -----------------------------
 *
 * Worker 0 looks at every server that holds the limiter's keys now, each
 * --redis-info-interval, on connections of its own. */

static struct redis_stats *info_stats(void *owner, const struct addr *at)
{
	return node_stats(((struct redis_worker *)owner)->rst, at);
}

static void on_info_poll(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_worker *rw = t->data;
	const struct addr *at = NULL;
	size_t n = 0;

	(void)loop;
	(void)revents;
	switch (rw->cfg->topology) {
	case REDIS_STANDALONE:
		at = &rw->cfg->addr;
		n = 1;
		break;
	case REDIS_SHARDS:
		at = rw->cfg->nodes;
		n = rw->cfg->nnodes;
		break;
	case REDIS_SENTINEL:
		if (rw->node[0]) {
			at = redis_node_addr(rw->node[0]);
			n = 1;
		}
		break;
	case REDIS_CLUSTER:
		if (rw->map) {
			at = rw->map->master;
			n = rw->map->nmasters;
		}
		break;
	}
	redis_info_poll(rw->info, at, n, (int64_t)(rw->cfg->info_interval * 1e6));
}

/* ---- leases (lease.h) ------------------------------------------------------------ */

/* A lease's unspent tokens, back to the server of its client. */
static int lease_send_back(void *priv, const struct lease_return *ret)
{
	struct redis_worker *rw = priv;
	struct redis_node *rn = route(rw, ret->key);

	return rn ? redis_node_lease_return(rn, ret) : -1;
}

/* While leases are held: what is over goes back (LEASE_SWEEP after its
 * end at most; a client that asks again finds it over at once). */
static void on_lease_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_worker *rw = t->data;

	if (lease_expire(rw->leases, clock_now_us(), false) == 0)
		ev_timer_stop(loop, t);
}

/* The table always (a rule of the file may ask for leases even when the
 * agent's --lease does not, and a reload may bring one); its pages are
 * touched only as clients use them. */
static int leases_init(struct redis_worker *rw)
{
	rw->lease.interval_us = rw->cfg->lease_us;
	rw->lease.share_pct = rw->cfg->lease_share;
	rw->leases = lease_table_new(LEASE_CLIENTS, lease_send_back, rw, &rw->stats.lease);
	if (!rw->leases)
		return -1;
	ev_timer_init(&rw->lease_w, on_lease_timer, LEASE_SWEEP, LEASE_SWEEP);
	rw->lease_w.data = rw;
	return 0;
}

/* At a stop: every lease goes back, written out before the nodes go. */
static void leases_fini(struct redis_worker *rw)
{
	if (!rw->leases)
		return;
	lease_table_clear(rw->leases);
	for (size_t i = 0; i < WORKER_NODES_MAX; i++)
		if (rw->node[i])
			redis_node_flush(rw->node[i]);
	ev_timer_stop(rw->sw->loop, &rw->lease_w);
	lease_table_free(rw->leases);
	rw->leases = NULL;
}

static void redis_worker_free(struct store_worker *sw);

static int redis_worker_init(struct store_worker *sw)
{
	struct redis_store *rst = sw->st->impl;
	const struct redis_config *cfg = &rst->cfg;
	struct redis_worker *rw = xcalloc(1, sizeof(*rw));

	if (!rw)
		return -1;
	sw->impl = rw;
	rw->sw = sw;
	rw->rst = rst;
	rw->cfg = cfg;
	rw->hcap = (size_t)cfg->max_pending;
	rw->cache = refusals_new();
	rw->held = xcalloc(rw->hcap, sizeof(*rw->held));
	ev_timer_init(&rw->held_w, on_held_deadline, 0., 0.);
	rw->held_w.data = rw;
	ev_timer_init(&rw->recheck_w, on_recheck, 0., 0.);
	rw->recheck_w.data = rw;
	ev_idle_init(&rw->kick_w, on_reap_kick);
	ev_prepare_init(&rw->reap_w, on_reap);
	rw->reap_w.data = rw;
	ev_prepare_start(sw->loop, &rw->reap_w);
	ev_timer_init(&rw->ov_w, on_ov_poll, 0.01, OV_POLL);
	rw->ov_w.data = rw;
	ev_timer_init(&rw->info_w, on_info_poll, cfg->info_interval < 1. ? cfg->info_interval : 1.,
		      cfg->info_interval);
	rw->info_w.data = rw;
	if (sw->idx == 0) {
		rw->ovr = redis_overrides_new(sw->loop, cfg, on_ov_set, rw);
		ev_timer_start(sw->loop, &rw->ov_w);
		rw->info = redis_info_new(sw->loop, cfg, info_stats, rw);
		ev_timer_start(sw->loop, &rw->info_w);
	}
	if (!rw->cache || !rw->held || (sw->idx == 0 && (!rw->ovr || !rw->info)) ||
	    leases_init(rw) < 0) {
		redis_worker_free(sw);
		return -1;
	}
	switch (cfg->topology) {
	case REDIS_STANDALONE:
		rw->nnodes = 1;
		rw->node[0] = new_node(rw, &cfg->addr);
		break;
	case REDIS_SHARDS:
		for (size_t i = 0; i < cfg->nnodes; i++) {
			rw->node[i] = new_node(rw, &cfg->nodes[i]);
			if (!rw->node[i])
				break;
			rw->nnodes = i + 1;
		}
		if (rw->nnodes != cfg->nnodes)
			rw->nnodes = 0;
		break;
	case REDIS_SENTINEL:
		rw->nnodes = 1;
		rw->sentinel = redis_sentinel_new(sw->loop, sw->idx, cfg, &sentinel_cb, rw);
		break;
	case REDIS_CLUSTER:
		rw->seed = (size_t)sw->idx;
		refresh_map(rw);
		break;
	}
	if ((cfg->topology == REDIS_STANDALONE && !rw->node[0]) ||
	    (cfg->topology == REDIS_SHARDS && rw->nnodes == 0) ||
	    (cfg->topology == REDIS_SENTINEL && !rw->sentinel) ||
	    (cfg->topology == REDIS_CLUSTER && !rw->asking)) {
		redis_worker_free(sw);
		return -1;
	}
	return 0;
}

static void redis_worker_free(struct store_worker *sw)
{
	struct redis_worker *rw = sw->impl;

	if (!rw)
		return;
	leases_fini(rw);
	redis_sentinel_free(rw->sentinel);
	redis_slots_cancel(rw->asking);
	for (size_t i = 0; i < WORKER_NODES_MAX; i++)
		if (rw->node[i])
			redis_node_free(rw->node[i]);
	on_reap(sw->loop, &rw->reap_w, 0);
	while (rw->hlen) {
		struct redis_query r = rw->held[rw->hhead];

		rw->hhead = (rw->hhead + 1) % rw->hcap;
		rw->hlen--;
		answer_unavailable(rw, &r);
	}
	ev_timer_stop(sw->loop, &rw->held_w);
	ev_timer_stop(sw->loop, &rw->recheck_w);
	ev_timer_stop(sw->loop, &rw->ov_w);
	redis_overrides_free(rw->ovr);
	ev_timer_stop(sw->loop, &rw->info_w);
	redis_info_free(rw->info);
	ev_prepare_stop(sw->loop, &rw->reap_w);
	ev_idle_stop(sw->loop, &rw->kick_w);
	xfree(rw->map);
	xfree(rw->held);
	refusals_free(rw->cache);
	xfree(rw);
	sw->impl = NULL;
}

/* ---- decisions whose keys live on several servers (redis_split.h) ---------------- */

/* Whether q's keys may live on several servers: a rule with layers, on a
 * Cluster or shards, whose parts' keys the map does not put on one
 * server (or no map yet says where). */
static bool needs_split(struct redis_worker *rw, const struct decide_query *q)
{
	struct redis_node *first;

	if (!q->rule->nstack ||
	    (rw->cfg->topology != REDIS_CLUSTER && rw->cfg->topology != REDIS_SHARDS))
		return false;
	first = route(rw, q->key);
	for (unsigned p = 0; p < q->rule->nstack; p++)
		if (!first || route(rw, q->lkey[p]) != first)
			return true;
	return false;
}

static void split_refund(void *owner, const struct redis_query *r, int64_t take)
{
	struct redis_worker *rw = owner;
	struct redis_node *rn = route(rw, r->q.key);

	if (rn) {
		redis_node_refund(rn, r, take);
	} else {
		STAT_INC(rw->stats.refunds);
		STAT_INC(rw->stats.refunds_lost);
	}
}

static int split_send(void *owner, const struct redis_query *r)
{
	return dispatch(owner, r);
}

static void split_answer(void *owner, const struct decide_query *q, const struct store_ref *ref,
			 const struct limit_result *res, int decider)
{
	struct redis_worker *rw = owner;

	store_complete(rw->sw, q, ref, res, decider);
}

static const struct redis_split_cb split_cb = { split_send, split_refund, split_answer };

/* ---- the store interface ------------------------------------------------------- */

static enum store_outcome redis_check(struct store_worker *sw, const struct decide_query *q,
				      const struct store_ref *ref, struct limit_result *res,
				      int *decider)
{
	struct redis_worker *rw = sw->impl;
	struct redis_query r;

	r.queued = clock_now_us();
	STAT_INC(rw->stats.queries);
	r.lease = 0;
	if (rw->leases && lease_check(rw->leases, &rw->lease, q, cache_epoch(sw->st, q),
				      r.queued, res, decider, &r.lease))
		return STORE_DECIDED;
	if (rw->cfg->local_cache &&
	    refusals_answer(rw->cache, q, cache_epoch(sw->st, q), r.queued, res, decider)) {
		STAT_INC(rw->stats.local_refusals);
		return STORE_DECIDED;
	}
	r.ref = *ref;
	r.q = *q;
	r.moves = 0;
	r.asking = false;
	r.deadline = r.queued + (int64_t)(rw->cfg->timeout * 1e6);
	r.split = NULL;
	r.part = 0;
	if (needs_split(rw, q)) {
		STAT_INC(rw->stats.split);
		return redis_split_start(&r, &split_cb, rw) == 0 ? STORE_PENDING
								  : STORE_UNAVAILABLE;
	}
	if (dispatch(rw, &r) < 0)
		return STORE_UNAVAILABLE;
	/* asked for only now that the call is on its way (a request the
	 * refusal cache answered, or that found no server, asked nothing) */
	if (r.lease)
		lease_asked(rw->leases, q, r.queued);
	return STORE_PENDING;
}

static void redis_release(struct store_worker *sw, const struct rule *rule, size_t j,
			  const uint8_t key[IDENTITY_KEY_LEN], uint64_t id)
{
	struct redis_worker *rw = sw->impl;
	struct redis_node *rn = route(rw, key);

	if (!rn || redis_node_release(rn, rule, j, key, id) < 0)
		STAT_INC(rw->stats.releases_lost);
}

static void redis_penalize(struct store_worker *sw, const struct rule *rule,
			   const uint8_t key[IDENTITY_KEY_LEN])
{
	struct redis_worker *rw = sw->impl;
	struct redis_node *rn = route(rw, key);

	if (!rn || redis_node_penalize(rn, rule, key) < 0)
		STAT_INC(rw->stats.penalty_lost);
}

static void redis_charge(struct store_worker *sw, const struct rule *rule,
			 const uint8_t key[IDENTITY_KEY_LEN], int64_t take_us, int64_t delta)
{
	struct redis_worker *rw = sw->impl;
	struct redis_node *rn = route(rw, key);

	if (!rn)
		STAT_INC(rw->stats.charges_lost);
	else
		redis_node_charge(rn, rule, key, take_us, delta);
}

static void redis_free(struct store *st)
{
	struct redis_store *rst = st->impl;
	size_t n = atomic_load(&rst->nentries);

	for (size_t i = 0; i < n; i++)
		xfree(rst->entry[i]);
	xfree(rst->map);
	pthread_mutex_destroy(&rst->lock);
	redis_secrets_free(rst->cfg.secrets);
	xfree(rst);
}

const struct store_ops redis_ops = {
	.name = "redis",
	.shared = true,
	.worker_init = redis_worker_init,
	.worker_free = redis_worker_free,
	.check = redis_check,
	.rules_changed = redis_rules_changed,
	.admin = redis_admin_op,
	.release = redis_release,
	.penalize = redis_penalize,
	.charge = redis_charge,
	.free = redis_free,
};

struct store *store_redis_new(const struct redis_config *cfg, size_t mem_max_keys)
{
	struct store *st = xcalloc(1, sizeof(*st));
	struct redis_store *rst = xcalloc(1, sizeof(*rst));

	if (!st || !rst || store_init(st, &redis_ops, mem_max_keys) < 0) {
		if (st)
			memstore_free(st->mem);
		xfree(st);
		xfree(rst);
		return NULL;
	}
	rst->cfg = *cfg;
	redis_keys_settle(&rst->cfg.keys);
	rst->cfg.secrets = redis_secrets_new(cfg);
	st->limit_space = REDIS_KEYS_LIMIT_SPACE;
	pthread_mutex_init(&rst->lock, NULL);
	snprintf(rst->overflow.name, sizeof(rst->overflow.name), "other");
	st->impl = rst;
	return st;
}
