/* SPDX-License-Identifier: Apache-2.0 */
/* redis_node.c: one Redis server as one worker sees it (see
 * redis_node.h): the connection and its handshake, the queue and the
 * batches that leave it, replies and the breaker's admission (deadlines
 * and the breaker's judgement are redis_deadline.c's). */
#include "redis_node.h"
#include "redis_node_int.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "redis_auth.h"
#include "redis_breaker.h"
#include "redis_cluster.h"
#include "redis_encode.h"
#include "redis_eviction.h"
#include "redis_health.h"
#include "redis_reply.h"
#include "redis_transport.h"
#include "store_redis.h"

/* The decision library (redis_library), generated at build time from
 * agent/store/redis/ratelimit.lua. */
#include "redis_library.h"


#define RECONNECT_MIN 0.05
#define RECONNECT_MAX 2.0
/* Connecting, AUTH and loading the library must be done within this; a
 * server that accepts and never answers is left, and tried again. */
#define HANDSHAKE_S 1.0

static void start_connect(struct redis_node *rn);
static void send_batches(struct redis_node *rn);
static int send_batch(struct redis_node *rn, struct rbatch *b);
static void handshake_failed(struct redis_node *rn);

void redis_node_answer_degraded(struct redis_node *rn, const struct redis_query *r, bool sent)
{
	rn->answers++;
	rn->cb->failed(rn->owner, r, sent, false);
}

static void trouble(struct redis_node *rn)
{
	if (rn->cb->trouble)
		rn->cb->trouble(rn->owner, rn);
}

/* Errors that say the server is not (or no longer) a usable master. */
static int topology_error(const redisReply *reply)
{
	static const char *const kinds[] = { "READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN" };

	if (!reply || reply->type != REDIS_REPLY_ERROR)
		return 0;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (strncmp(reply->str, kinds[i], strlen(kinds[i])) == 0)
			return 1;
	return 0;
}

const struct addr *redis_node_addr(const struct redis_node *rn)
{
	return &rn->addr;
}

bool redis_node_ready(const struct redis_node *rn)
{
	return rn->state == NODE_READY;
}

/* The node's state, counted in the server's gauge of ready nodes. */
static void set_state(struct redis_node *rn, enum node_state state)
{
	if ((rn->state == NODE_READY) != (state == NODE_READY))
		atomic_fetch_add_explicit(&rn->stats->ready, state == NODE_READY ? 1 : (uint64_t)-1,
					  memory_order_relaxed);
	rn->state = state;
}

int64_t redis_node_down_since(const struct redis_node *rn)
{
	return rn->down && rn->state != NODE_READY ? rn->down_since : 0;
}

int64_t redis_node_oldest(const struct redis_node *rn)
{
	return rn->qlen && rn->state == NODE_READY ? rn->queue[rn->qhead].queued : INT64_MAX;
}

void redis_node_share_calls(struct redis_node *rn, int *calls)
{
	rn->shared_calls = calls;
}

/* A question of where a key lives, with the query it is for. */
struct where {
	struct redis_node *rn;
	struct redis_query r;
};

static void on_where(struct redis_conn *c, redisReply *reply, void *priv)
{
	struct where *w = priv;
	struct redis_cluster_error e;

	if (!reply || w->rn->freeing) {
		/* no answer (the connection went, or the node is being freed):
		 * the failure policy answers */
		w->rn->cb->failed(w->rn->owner, &w->r, true, false);
		xfree(w);
		return;
	}
	memset(&e, 0, sizeof(e));
	if (reply && reply->type == REDIS_REPLY_ERROR)
		redis_cluster_error(reply->str, reply->len, &w->rn->addr, &e);
	/* any other reply: the key is here after all */
	w->rn->cb->where(w->rn->owner, &w->r, reply && reply->type != REDIS_REPLY_ERROR,
			 reply && reply->type == REDIS_REPLY_ERROR ? &e : NULL);
	xfree(w);
}

int redis_node_where(struct redis_node *rn, const struct redis_query *r)
{
	char key[REDIS_KEY_NAME_MAX + 1];
	size_t len;
	struct where *w;

	if (rn->state != NODE_READY || !rn->conn)
		return -1;
	w = xmalloc(sizeof(*w));
	if (!w)
		return -1;
	w->rn = rn;
	w->r = *r;
	/* the client's keys share a slot: any of them says where they live */
	len = redis_key_name(&rn->cfg->keys, r->q.key, r->q.rule->lidh[0], &r->q.limits[0], key);
	len = redis_key_held_len(&rn->cfg->keys, &r->q.limits[0], len);
	if (redis_conn_command(rn->conn, on_where, w, 2, (const char *[]){ "EXISTS", key },
			       (const size_t[]){ 6, len }) < 0) {
		xfree(w);
		return -1;
	}
	return 0;
}

/* ---- batches in flight ------------------------------------------------------ */

static void unlink_batch(struct redis_node *rn, struct rbatch *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		rn->oldest = b->next;
	if (b->next)
		b->next->prev = b->prev;
	else
		rn->newest = b->prev;
	b->prev = b->next = NULL;
}

void redis_node_fail_batch(struct redis_node *rn, struct rbatch *b)
{
	if (b->answered)
		return;
	b->answered = 1;
	rn->inflight -= b->n;
	for (size_t i = 0; i < b->n; i++)
		redis_node_answer_degraded(rn, &b->rq[i], true);
}

/* ---- replies ------------------------------------------------------------------ */

/* Fills res[] from one request's [remaining, retry_after_us, reset_us] per
 * limit. Returns 0 or -1.
 *
 * more_us (limit.h), the RateLimit field's t, costs Redis nothing more: a
 * token bucket's follows from its figures (limit_bucket_more_us); a
 * window's cannot (a sliding window's depends on the counts), so the
 * library sends minus it in the slot a window's result leaves unused:
 * retry_after_us when the limit allows, remaining when it refuses. */
static int result_from(const struct redis_query *r, int64_t allowed, const int64_t *vals,
		       size_t nvals, struct limit_result *res)
{
	if (nvals != 3 * r->q.nlimits)
		return -1;
	for (size_t i = 0; i < r->q.nlimits; i++) {
		const struct limit_spec *l = &r->q.limits[i];
		int64_t rem = vals[3 * i], retry = vals[3 * i + 1], more;

		res[i].limit = l->quota;
		res[i].allowed = allowed ? true : retry <= 0;
		res[i].remaining = rem > 0 ? (uint64_t)rem : 0;
		res[i].retry_after_us = retry > 0 ? retry : 0;
		res[i].reset_us = vals[3 * i + 2];
		if (l->algo == LIMIT_TOKEN_BUCKET)
			more = limit_bucket_more_us(l, res[i].allowed, res[i].remaining,
						    res[i].reset_us);
		else
			more = -(retry <= 0 ? retry : rem);
		res[i].more_us = more > 0 ? more : 0;
	}
	return 0;
}

/* Query i of b, answered by its part d of the reply. */
static void answer_one(struct redis_node *rn, struct rbatch *b, size_t i,
		       const struct redis_decision *d)
{
	struct limit_result res[LIMIT_SET_MAX];
	const struct redis_query *r = &b->rq[i];
	int64_t allowed = d->ok ? d->allowed : -1, decider = d->decider;
	struct lease_grant g, *grant = NULL;

	if (allowed == 2) {
		/* Cluster: the key lives on another node now */
		STAT_INC(rn->stats->moved);
		rn->cb->moved(rn->owner, rn, r);
		return;
	}
	if ((allowed != 0 && allowed != 1) || decider < 1 || (size_t)decider > r->q.nlimits ||
	    result_from(r, allowed, d->vals, d->nvals, res) < 0) {
		STAT_INC(rn->stats->errors);
		redis_health_count(rn->stats, REDIS_ERROR_PROTOCOL);
		redis_node_answer_degraded(rn, r, true);
		return;
	}
	if (!allowed) /* the deciding limit refuses; no other limit was charged */
		res[decider - 1].allowed = false;
	STAT_INC(rn->stats->replies);
	if (r->lease && d->has_lease) {
		g.extra = d->lease_extra;
		for (size_t j = 0; j < r->q.nlimits; j++) {
			g.value[j] = d->lval[j];
			g.value_len[j] = d->llen[j];
		}
		grant = &g;
	}
	rn->cb->decided(rn->owner, r, res, (int)decider - 1, b->sent, d->now, grant);
}

/* msgpack reply, decoded by redis_reply.c */
static int answer_msgpack(struct redis_node *rn, struct rbatch *b, const char *data, size_t len)
{
	if (redis_reply_msgpack(data, len, b->n, rn->decoded) < 0)
		return -1;
	for (size_t i = 0; i < b->n; i++)
		answer_one(rn, b, i, &rn->decoded[i]);
	return 0;
}


/* Keys without an expiry go to a server that evicts them itself: each
 * connection looks whether it does (maxmemory set, an allkeys policy that
 * evicts the least recently or frequently used) before its first call and
 * every EVICTION_LOOK_S after. With --redis-expiry auto the node's keys go
 * without an expiry while the last look found it evicting, with never
 * always. The gauge is 1 while keys without an expiry may be on a server
 * that may not evict them. What a look found is logged once per change,
 * whichever worker found it. */
#define EVICTION_LOOK_S 10.

static void eviction_found(struct redis_node *rn, bool evicting, const char *maxmemory,
			   const char *policy, const char *refused)
{
	rn->evicting = evicting;
	redis_eviction_found(rn->stats, rn->name, rn->cfg->keys.expiry == REDIS_EXPIRY_NEVER,
			     evicting, maxmemory, policy, refused);
}

static void on_eviction_policy(struct redis_conn *c, redisReply *reply, void *priv)
{
	struct redis_node *rn = priv;
	const char *policy = NULL, *maxmemory = NULL;

	if (!reply)
		return;
	/* behind an AUTH that failed: the connection is dropped */
	if (reply->type == REDIS_REPLY_ERROR && rn->down && rn->state != NODE_READY)
		return;
	if (reply->type != REDIS_REPLY_ARRAY) {
		/* refused (CONFIG renamed, or an ACL without it): asked again
		 * at the next connection only, not every EVICTION_LOOK_S (each
		 * refusal is an entry of the server's ACL LOG) */
		ev_timer_stop(rn->loop, &rn->eviction_w);
		eviction_found(rn, false, NULL, NULL,
			       reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
		return;
	}
	for (size_t i = 0; i + 1 < reply->elements; i += 2) {
		const redisReply *k = reply->element[i], *v = reply->element[i + 1];

		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
			continue;
		if (!strcmp(k->str, "maxmemory-policy"))
			policy = v->str;
		else if (!strcmp(k->str, "maxmemory"))
			maxmemory = v->str;
	}
	eviction_found(rn, policy && maxmemory && strcmp(maxmemory, "0") &&
			       (!strcmp(policy, "allkeys-lru") || !strcmp(policy, "allkeys-lfu")),
		       maxmemory, policy, NULL);
	redis_eviction_risk(rn->stats, rn->name, maxmemory, policy, redis_node_unexpiring(rn));
	/* the next look, EVICTION_LOOK_S after this answer */
	ev_timer_again(rn->loop, &rn->eviction_w);
}

static void look_at_eviction(struct redis_node *rn)
{
	const char *argv[4] = { "CONFIG", "GET", "maxmemory", "maxmemory-policy" };
	size_t argvlen[4] = { 6, 3, 9, 16 };

	if (rn->conn)
		redis_conn_command(rn->conn, on_eviction_policy, rn, 4, argv, argvlen);
}

static void on_eviction_look(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop;
	(void)revents;
	look_at_eviction(t->data);
}

bool redis_node_unexpiring(const struct redis_node *rn)
{
	return redis_key_expiry_dropped(&rn->cfg->keys, rn->evicting);
}

const struct redis_keys *redis_node_keys(const struct redis_node *rn)
{
	return &rn->cfg->keys;
}

static void on_library_loaded(struct redis_conn *c, redisReply *reply, void *priv)
{
	struct redis_node *rn = priv;

	if (!reply || rn->refused)
		return;
	if (reply->type != REDIS_REPLY_STRING) {
		enum redis_error_kind k = reply->type == REDIS_REPLY_ERROR
			? redis_error_classify(reply->str, reply->len) : REDIS_ERROR_PROTOCOL;

		/* e.g. NOPERM (an ACL user without +@scripting: said once), or
		 * a Redis before 7.0 (no FUNCTION). Decisions go to the failure
		 * policy at once; the load is tried again, with backoff, on a
		 * new connection. */
		if (redis_error_permanent(k)) {
			redis_health_failed(rn->stats, rn->name, k, reply->str, rn->cluster);
		} else {
			redis_health_count(rn->stats, k);
			log_err("redis: worker %d: %s: cannot load the decision library: %s",
				rn->worker, rn->name,
				reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
		}
		handshake_failed(rn);
		redis_conn_disconnect(c);
		return;
	}
	if (rn->state == NODE_CONNECTING) {
		set_state(rn, NODE_READY);
		rn->down = false;
		/* a probe lost with the last connection: the next one may go */
		rn->breaker.probing = false;
		redis_health_recovered(rn->stats, rn->name);
		ev_timer_stop(rn->loop, &rn->handshake_w);
		rn->backoff = RECONNECT_MIN;
		log_info("redis: worker %d ready (library %.*s) on %s", rn->worker, (int)reply->len,
			 reply->str, rn->name);
		send_batches(rn);
	}
}

/* FUNCTION LOAD REPLACE: every connection loads the library it calls, so
 * agents of another version on the same server each find their own after
 * a reconnection (and the library of the latest to connect stays). */
static void load_library(struct redis_node *rn)
{
	const char *argv[4] = { "FUNCTION", "LOAD", "REPLACE", redis_library };
	size_t argvlen[4] = { 8, 4, 7, sizeof(redis_library) - 1 };

	redis_conn_command(rn->conn, on_library_loaded, rn, 4, argv, argvlen);
}

static void on_batch_reply(struct redis_conn *c, redisReply *reply, void *priv)
{
	struct rbatch *b = priv;
	struct redis_node *rn = b->rn;
	int rc = -1;

	if (reply && reply->type == REDIS_REPLY_ERROR &&
	    strstr(reply->str, "Function not found") && !b->retried && rn->conn == c &&
	    !b->answered) {
		/* Redis restarted or its functions were flushed: load the
		 * library again, retry once. The batch keeps its place (and
		 * deadline) in the list. */
		STAT_INC(rn->stats->library_missing);
		b->retried = 1;
		load_library(rn);
		if (send_batch(rn, b) == 0)
			return;
	}
	unlink_batch(rn, b);
	rn->calls--;
	if (rn->shared_calls)
		(*rn->shared_calls)--;
	if (reply)
		redis_breaker_heard(&rn->breaker, clock_now_us());
	/* Late, for queries answered saturated: Redis answers all the same
	 * (and a probe among them closes the breaker). */
	if (b->answered && reply && reply->type == REDIS_REPLY_STRING)
		redis_breaker_succeeded(&rn->breaker);
	if (!b->answered) {
		/* the decoder checks the whole reply before answering anyone */
		if (reply && reply->type == REDIS_REPLY_STRING)
			rc = answer_msgpack(rn, b, reply->str, reply->len);
		if (rc == 0) {
			int64_t now = clock_now_us();

			hist_observe(&rn->stats->call_time, now - b->sent);
			for (size_t i = 0; i < b->n; i++)
				hist_observe(&rn->stats->wait_time, now - b->rq[i].queued);
			rn->inflight -= b->n;
			redis_breaker_succeeded(&rn->breaker);
		} else if (reply) {
			redis_breaker_failed(&rn->breaker, clock_now_us());
			STAT_INC(rn->stats->errors);
			redis_health_count(rn->stats, reply->type == REDIS_REPLY_ERROR
						? redis_error_classify(reply->str, reply->len)
						: REDIS_ERROR_PROTOCOL);
			log_warn("redis: %s: decision failed: %s", rn->name,
				 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
			redis_node_fail_batch(rn, b);
			if (topology_error(reply))
				trouble(rn);
		} else {
			STAT_ADD(rn->stats->unavailable, b->n);
			redis_node_fail_batch(rn, b);
		}
	}
	xfree(b);
	redis_node_arm_deadline(rn);
}

/* ---- sending ------------------------------------------------------------------ */

/* Sends batch b's call (again, after the library was loaded again), after
 * ASKING when its one query asks for it. Returns 0, or -1 when it could
 * not be made or queued. */
static int send_batch(struct redis_node *rn, struct rbatch *b)
{
	const char *cmd;
	size_t len = redis_batch_encode(&rn->enc, b->rq, b->n, rn->cluster,
					redis_node_unexpiring(rn), &cmd);

	if (!len)
		return -1;
	if (b->n == 1 && b->rq[0].asking &&
	    redis_conn_command(rn->conn, NULL, NULL, 1, (const char *[]){ "ASKING" },
			       (const size_t[]){ 6 }) < 0)
		return -1;
	return redis_conn_formatted(rn->conn, on_batch_reply, b, cmd, len);
}

/* Sends what is queued, in batches of at most batch_max, with at most
 * `pipeline` calls in flight. Called before the loop blocks and when a
 * reply frees a place. While calls are out, new queries gather into the
 * next batch: under light load a query leaves at once, under heavy load
 * batches grow by themselves, and Redis never holds a backlog of small
 * calls (each call costs Redis, on top of the decisions in it, about as
 * much as two or three more decisions). */
static void send_batches(struct redis_node *rn)
{
	int64_t now = clock_now_us();
	size_t cap = (size_t)rn->cfg->max_pending;

	while (rn->qlen && rn->state == NODE_READY && rn->calls < rn->cfg->pipeline &&
	       (!rn->cb->may_send || rn->cb->may_send(rn->owner, rn))) {
		size_t n = rn->qlen < (size_t)rn->cfg->batch_max ? rn->qlen
								 : (size_t)rn->cfg->batch_max;
		struct rbatch *b;

		n = redis_batch_take(rn->queue, cap, rn->qhead, n);
		b = xmalloc(sizeof(*b) + n * sizeof(struct redis_query));
		if (!b)
			return; /* the deadline answers them */
		b->rn = rn;
		b->answered = 0;
		b->retried = 0;
		b->sent = now;
		b->n = n;
		b->prev = b->next = NULL;
		for (size_t i = 0; i < n; i++) {
			b->rq[i] = rn->queue[rn->qhead];
			hist_observe(&rn->stats->queue_wait, now - b->rq[i].queued);
			rn->qhead = (rn->qhead + 1) % cap;
		}
		rn->qlen -= n;
		rn->inflight += n;
		/* append to the in-flight list before sending */
		b->prev = rn->newest;
		if (rn->newest)
			rn->newest->next = b;
		else
			rn->oldest = b;
		rn->newest = b;
		STAT_INC(rn->stats->calls);
		if (send_batch(rn, b) < 0) {
			unlink_batch(rn, b);
			STAT_ADD(rn->stats->unavailable, b->n);
			redis_node_fail_batch(rn, b);
			xfree(b);
		} else {
			rn->calls++;
			if (rn->shared_calls)
				(*rn->shared_calls)++;
		}
	}
	redis_node_arm_deadline(rn);
}

/* Writes the calls queued now rather than in the loop's next turn: the
 * connection's write watcher, started and stopped in the same turn, costs
 * libev nothing in the kernel. What a full socket leaves waits for it. */
void redis_node_flush(struct redis_node *rn)
{
	if (rn->conn && rn->state == NODE_READY)
		redis_conn_flush(rn->conn);
}

/* Before the loop blocks: sends and writes. */
static void on_prepare(struct ev_loop *loop, ev_prepare *p, int revents)
{
	struct redis_node *rn = p->data;
	unsigned answers = rn->answers;

	/* Past their deadline already (the loop came late; its timer runs
	 * after this): answered now, not sent to Redis for nothing. */
	if (rn->qlen && rn->queue[rn->qhead].deadline <= clock_now_us())
		redis_node_on_deadline(loop, &rn->deadline_w, 0);
	if (rn->qlen && rn->state == NODE_READY) {
		send_batches(rn);
		redis_node_flush(rn);
	}
	if (rn->answers != answers)
		ev_idle_start(loop, &rn->kick_w);
}

/* One turn of the loop without blocking, for the answers above. */
static void on_kick(struct ev_loop *loop, ev_idle *w, int revents)
{
	ev_idle_stop(loop, w);
}

const char *redis_node_name(const struct redis_node *rn)
{
	return rn->name;
}

struct redis_stats *redis_node_stats(struct redis_node *rn)
{
	return rn->stats;
}

bool redis_node_is_cluster(const struct redis_node *rn)
{
	return rn->cluster;
}

int redis_node_command(struct redis_node *rn, redis_reply_fn *cb, void *priv, int argc,
		       const char **argv, const size_t *argvlen)
{
	if (rn->state != NODE_READY || !rn->conn)
		return -1;
	return redis_conn_command(rn->conn, cb, priv, argc, argv, argvlen);
}

/* ---- connection ----------------------------------------------------------------- */

static void answer_queue_degraded(struct redis_node *rn)
{
	while (rn->qlen) {
		redis_node_answer_degraded(rn, &rn->queue[rn->qhead], false);
		rn->qhead = (rn->qhead + 1) % (size_t)rn->cfg->max_pending;
		rn->qlen--;
		STAT_INC(rn->stats->unavailable);
	}
}

static void schedule_reconnect(struct redis_node *rn)
{
	ev_timer_stop(rn->loop, &rn->reconnect_w);
	ev_timer_set(&rn->reconnect_w, rn->backoff, 0.);
	ev_timer_start(rn->loop, &rn->reconnect_w);
	rn->backoff *= 2;
	if (rn->backoff > RECONNECT_MAX)
		rn->backoff = RECONNECT_MAX;
}

static void on_connect(void *owner, struct redis_conn *c, bool ok)
{
	struct redis_node *rn = owner;

	if (!ok) {
		log_warn("redis: worker %d cannot connect to %s: %s", rn->worker, rn->name,
			 redis_conn_errstr(c));
		redis_health_count(rn->stats, redis_conn_errkind(c));
		/* the connection is freed after this callback */
		rn->conn = NULL;
		set_state(rn, NODE_DISCONNECTED);
		if (!rn->down)
			rn->down_since = clock_now_us();
		rn->down = true;
		ev_timer_stop(rn->loop, &rn->handshake_w);
		answer_queue_degraded(rn);
		schedule_reconnect(rn);
		trouble(rn);
		return;
	}
	log_debug("redis: worker %d connected to %s", rn->worker, rn->name);
}

static void on_disconnect(void *owner, struct redis_conn *c, bool lost)
{
	struct redis_node *rn = owner;

	if (rn->conn == c) {
		rn->conn = NULL;
		set_state(rn, NODE_DISCONNECTED);
		/* the next connection looks again */
		rn->evicting = false;
		ev_timer_stop(rn->loop, &rn->eviction_w);
		if (lost && !rn->refused) {
			log_warn("redis: worker %d lost its connection to %s: %s", rn->worker,
				 rn->name, redis_conn_errstr(c));
			redis_health_count(rn->stats, redis_conn_errkind(c));
		}
		ev_timer_stop(rn->loop, &rn->handshake_w);
		answer_queue_degraded(rn);
		schedule_reconnect(rn);
		trouble(rn);
	}
}

static void on_auth(struct redis_conn *c, redisReply *reply, void *priv)
{
	struct redis_node *rn = priv;

	if (reply && reply->type == REDIS_REPLY_ERROR && !rn->refused) {
		redis_health_failed(rn->stats, rn->name, REDIS_ERROR_AUTH, reply->str, rn->cluster);
		handshake_failed(rn);
		redis_conn_disconnect(c);
	}
}

/* The connection or its handshake failed: whatever waits is answered by
 * the failure policy now, and so is every decision until the node is
 * ready again (the reconnection goes on with backoff). */
static void handshake_failed(struct redis_node *rn)
{
	if (!rn->down)
		rn->down_since = clock_now_us();
	rn->down = true;
	rn->refused = true;
	answer_queue_degraded(rn);
}

/* Connected (or not) but not ready in time: a server that accepts and
 * never answers. Dropped; the reconnection tries again. */
static void on_handshake_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_node *rn = t->data;

	if (rn->state != NODE_CONNECTING || !rn->conn)
		return;
	if (rn->cfg->tls_ctx && !redis_conn_made(rn->conn)) {
		log_warn("redis: worker %d: %s: TLS: no answer to the handshake within %.0f s "
			 "(a server without TLS?)", rn->worker, rn->name, HANDSHAKE_S);
		redis_health_count(rn->stats, REDIS_ERROR_TLS);
	} else {
		log_warn("redis: worker %d: %s: no answer within %.0f s of connecting",
			 rn->worker, rn->name, HANDSHAKE_S);
		redis_health_count(rn->stats, REDIS_ERROR_TIMEOUT);
	}
	handshake_failed(rn);
	redis_conn_disconnect(rn->conn);
}

/* INFO cluster: a server of the kind the store expects (a Cluster node
 * for --redis-cluster, else not) goes on to the library; one of the other
 * kind is refused, and so is a server that wants a password. INFO refused
 * by an ACL says nothing: the handshake goes on. */
static void on_info(struct redis_conn *c, redisReply *reply, void *priv)
{
	struct redis_node *rn = priv;
	enum redis_error_kind k;

	if (!reply || rn->refused)
		return;
	if (reply->type == REDIS_REPLY_ERROR)
		k = redis_error_classify(reply->str, reply->len);
	else if (reply->type == REDIS_REPLY_STRING &&
		 (strstr(reply->str, "cluster_enabled:1") != NULL) != rn->cluster)
		k = REDIS_ERROR_CLUSTER_MISMATCH;
	else
		k = REDIS_ERROR_KINDS; /* nothing against it */
	if (k == REDIS_ERROR_AUTH || k == REDIS_ERROR_CLUSTER_MISMATCH) {
		redis_health_failed(rn->stats, rn->name, k,
				    reply->type == REDIS_REPLY_ERROR ? reply->str : NULL, rn->cluster);
		handshake_failed(rn);
		redis_conn_disconnect(c);
		return;
	}
	look_at_eviction(rn);
	load_library(rn);
}

static const struct redis_conn_cb conn_cb = {
	.connected = on_connect,
	.disconnected = on_disconnect,
};

static void start_connect(struct redis_node *rn)
{
	const struct redis_config *cfg = rn->cfg;
	const char *argv[3];
	size_t argvlen[3];
	char why[160];
	int argc;

	set_state(rn, NODE_CONNECTING);
	rn->refused = false;
	rn->conn = redis_conn_new(rn->loop, redis_transport_new(cfg), &rn->addr, &conn_cb, rn, why,
				  sizeof(why));
	if (!rn->conn) {
		log_warn("redis: cannot connect to %s: %s", rn->name, why);
		redis_health_count(rn->stats, REDIS_ERROR_CONNECT);
		set_state(rn, NODE_DISCONNECTED);
		schedule_reconnect(rn);
		return;
	}
	ev_timer_stop(rn->loop, &rn->handshake_w);
	ev_timer_set(&rn->handshake_w, HANDSHAKE_S, 0.);
	ev_timer_start(rn->loop, &rn->handshake_w);
	STAT_INC(rn->stats->connects);
	/* Pipelined behind the connection: AUTH, then what kind of server
	 * it is; once it answers, the look at its eviction (answered before
	 * the library, so before any call), then the library. */
	argc = redis_node_auth_argv(cfg, argv, argvlen);
	if (argc)
		redis_conn_command(rn->conn, on_auth, rn, argc, argv, argvlen);
	redis_conn_command(rn->conn, on_info, rn, 2, (const char *[]){ "INFO", "cluster" },
			   (const size_t[]){ 4, 7 });
}

static void on_reconnect(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_node *rn = t->data;

	if (rn->state == NODE_DISCONNECTED)
		start_connect(rn);
}

/* Frees the node's arrays and the node (NULL members are fine). */
static void free_buffers(struct redis_node *rn)
{
	xfree(rn->queue);
	xfree(rn->decoded);
	redis_batch_free(&rn->enc);
	xfree(rn);
}

struct redis_node *redis_node_new(struct ev_loop *loop, int worker, const struct addr *addr,
				  const struct redis_config *cfg, const struct redis_node_cb *cb,
				  void *owner, struct redis_stats *stats)
{
	struct redis_node *rn = xcalloc(1, sizeof(*rn));

	if (!rn)
		return NULL;
	rn->loop = loop;
	rn->worker = worker;
	rn->addr = *addr;
	addr_format(addr, rn->name, sizeof(rn->name));
	rn->cfg = cfg;
	rn->cb = cb;
	rn->owner = owner;
	rn->stats = stats;
	rn->breaker.stats = stats;
	rn->breaker.worker = worker;
	rn->breaker.name = rn->name;
	rn->cluster = cfg->topology == REDIS_CLUSTER;
	rn->backoff = RECONNECT_MIN;
	rn->queue = xcalloc((size_t)cfg->max_pending, sizeof(*rn->queue));
	rn->decoded = xcalloc((size_t)cfg->batch_max, sizeof(*rn->decoded));
	if (!rn->queue || !rn->decoded || redis_batch_init(&rn->enc, (size_t)cfg->batch_max, &cfg->keys) < 0) {
		free_buffers(rn);
		return NULL;
	}
	ev_timer_init(&rn->reconnect_w, on_reconnect, 0., 0.);
	rn->reconnect_w.data = rn;
	ev_timer_init(&rn->deadline_w, redis_node_on_deadline, 0., 0.);
	/* after the connection's reading in the same loop iteration: an agent
	 * that wakes late (its CPU busy) reads the replies waiting for it
	 * before it judges Redis silent */
	ev_set_priority(&rn->deadline_w, EV_MINPRI);
	rn->deadline_w.data = rn;
	ev_timer_init(&rn->handshake_w, on_handshake_timeout, HANDSHAKE_S, 0.);
	rn->handshake_w.data = rn;
	ev_timer_init(&rn->eviction_w, on_eviction_look, 0., EVICTION_LOOK_S);
	rn->eviction_w.data = rn;
	ev_idle_init(&rn->kick_w, on_kick);
	ev_prepare_init(&rn->send_w, on_prepare);
	rn->send_w.data = rn;
	ev_prepare_start(loop, &rn->send_w);
	atomic_fetch_add_explicit(&stats->nodes, 1, memory_order_relaxed);
	start_connect(rn);
	return rn;
}

void redis_node_free(struct redis_node *rn)
{
	if (!rn)
		return;
	rn->freeing = true;
	set_state(rn, NODE_DISCONNECTED);
	atomic_fetch_sub_explicit(&rn->stats->nodes, 1, memory_order_relaxed);
	ev_timer_stop(rn->loop, &rn->handshake_w);
	answer_queue_degraded(rn);
	if (rn->conn) {
		struct redis_conn *c = rn->conn;

		rn->conn = NULL;
		/* runs every pending callback with a NULL reply */
		redis_conn_free(c);
	}
	while (rn->oldest) {
		struct rbatch *b = rn->oldest;

		unlink_batch(rn, b);
		redis_node_fail_batch(rn, b);
		xfree(b);
	}
	ev_timer_stop(rn->loop, &rn->reconnect_w);
	ev_timer_stop(rn->loop, &rn->deadline_w);
	ev_timer_stop(rn->loop, &rn->eviction_w);
	ev_prepare_stop(rn->loop, &rn->send_w);
	ev_idle_stop(rn->loop, &rn->kick_w);
	free_buffers(rn);
}


int redis_node_submit(struct redis_node *rn, const struct redis_query *r)
{
	int64_t now = r->queued;

	if (!redis_breaker_admit(&rn->breaker, now, rn->state == NODE_READY))
		return -1;
	if (rn->state == NODE_DISCONNECTED || (rn->down && rn->state != NODE_READY) ||
	    rn->qlen + rn->inflight >= (size_t)rn->cfg->max_pending) {
		STAT_INC(rn->stats->unavailable);
		return -1;
	}
	rn->queue[(rn->qhead + rn->qlen) % (size_t)rn->cfg->max_pending] = *r;
	rn->qlen++;
	if (rn->qlen == 1 && !ev_is_active(&rn->deadline_w))
		redis_node_arm_deadline(rn);
	return 0;
}
