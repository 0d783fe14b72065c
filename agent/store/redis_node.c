#include "redis_node.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/adapters/libev.h>

#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "redis_cluster.h"
#include "redis_reply.h"
#include "store_redis.h"

/* The decision scripts, generated from the Lua files of agent/redis at build time. */
#include "redis_scripts.h"


#define RECONNECT_MIN 0.05
#define RECONNECT_MAX 2.0
#define NUM_MAX 24
/* Circuit breaker: after BREAKER_FAILS script calls in a row that missed
 * their deadline or failed, decisions skip Redis (answered at once by the
 * failure policy instead of each waiting out the deadline); every
 * BREAKER_PROBE_US one decision goes through as a probe, and the first
 * that Redis answers closes the breaker: Redis decides again within that
 * interval (plus a call) of its recovery, however long it was away. */
#define BREAKER_FAILS 3
#define BREAKER_PROBE_US 250000
/* Connecting, AUTH and loading the script must be done within this; a
 * server that accepts and never answers is left, and tried again. */
#define HANDSHAKE_S 1.0
/* The largest array a reply of ours may hold: a plain-encoding batch is
 * 1 + 1024 * (2 + 3 * 16) elements. Larger is a broken or hostile server:
 * the connection is dropped before anything is allocated for it. */
#define REPLY_ELEMENTS_MAX 65536

enum node_state {
	NODE_DISCONNECTED,
	NODE_CONNECTING,   /* connected or not, the script is not loaded yet */
	NODE_READY,
};

struct rbatch {
	struct redis_node *rn;
	struct rbatch *prev, *next;  /* in flight, oldest first */
	int answered;                /* its queries were answered degraded */
	int retried;                 /* sent again after NOSCRIPT */
	int64_t sent;
	size_t n;
	struct redis_query rq[];
};

struct redis_node {
	struct ev_loop *loop;
	int worker;                  /* index, for logs */
	struct addr addr;
	const struct redis_config *cfg;
	const struct redis_node_cb *cb;
	void *owner;
	redisAsyncContext *ac;
	enum node_state state;
	char sha[48];
	double backoff;
	ev_timer reconnect_w;
	ev_timer deadline_w;
	ev_prepare send_w;
	/* queue of unsent queries: a ring of cfg->max_pending */
	struct redis_query *queue;
	size_t qhead, qlen;
	size_t inflight;             /* queries sent, not answered */
	int calls;                   /* script calls sent, reply not back */
	struct rbatch *oldest, *newest;
	struct redis_decision *decoded; /* a batch's decoded reply */
	int fails;                   /* calls in a row that failed */
	int64_t open_until;          /* breaker open: the next probe then */
	int probing;                 /* a probe is in flight */
	bool down;                   /* the last connection or handshake failed:
				      * decisions go to the failure policy at
				      * once until the node is ready again */
	bool freeing;                /* redis_node_free() under way */
	int *shared_calls;           /* calls in flight of all the owner's nodes */
	ev_timer handshake_w;        /* connecting and loading the script */
	msgpack_sbuffer sbuf;
	/* argv of one script call */
	const char **argv;
	size_t *argvlen;
	char *arena;                 /* key and number texts of the argv */
	size_t arena_cap;
	struct store_stats *stats;
	bool cluster;                /* keys as arguments (see CLUSTER_SHEBANG) */
	char name[ADDR_HOST_MAX + 16]; /* the address, for logs */
	const char *script;          /* the decision script this node loads */
	char *own_script;            /* an allocated one (Cluster), or NULL */
};

static void start_connect(struct redis_node *rn);
static void send_batches(struct redis_node *rn);
static void handshake_failed(struct redis_node *rn);

static void answer_degraded(struct redis_node *rn, const struct redis_query *r)
{
	rn->cb->failed(rn->owner, r);
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

static void on_where(redisAsyncContext *ac, void *reply_, void *priv)
{
	struct where *w = priv;
	redisReply *reply = reply_;
	struct redis_cluster_error e;

	if (!reply || w->rn->freeing) {
		/* no answer (the connection went, or the node is being freed):
		 * the failure policy answers */
		w->rn->cb->failed(w->rn->owner, &w->r);
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
	char key[STORE_KEY_NAME_LEN + 1];
	struct where *w;

	if (rn->state != NODE_READY || !rn->ac)
		return -1;
	w = xmalloc(sizeof(*w));
	if (!w)
		return -1;
	w->rn = rn;
	w->r = *r;
	store_key_name(r->q.key, key);
	if (redisAsyncCommand(rn->ac, on_where, w, "EXISTS %b", key,
			      (size_t)STORE_KEY_NAME_LEN) != REDIS_OK) {
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

static void fail_batch(struct redis_node *rn, struct rbatch *b)
{
	if (b->answered)
		return;
	b->answered = 1;
	rn->inflight -= b->n;
	for (size_t i = 0; i < b->n; i++)
		answer_degraded(rn, &b->rq[i]);
}

static void arm_deadline(struct redis_node *rn)
{
	int64_t next = INT64_MAX, now;
	struct rbatch *b;

	for (b = rn->oldest; b && b->answered; b = b->next)
		;
	if (b)
		next = b->rq[0].deadline;
	if (rn->qlen && rn->queue[rn->qhead].deadline < next)
		next = rn->queue[rn->qhead].deadline;
	ev_timer_stop(rn->loop, &rn->deadline_w);
	if (next == INT64_MAX)
		return;
	now = clock_now_us();
	ev_timer_set(&rn->deadline_w, next > now ? (double)(next - now) / 1e6 : 0., 0.);
	ev_timer_start(rn->loop, &rn->deadline_w);
}

static void call_failed(struct redis_node *rn, int64_t now)
{
	if (rn->open_until) {
		/* a probe (or a call from before) failed: probe again later */
		rn->probing = 0;
		rn->open_until = now + BREAKER_PROBE_US;
		return;
	}
	if (++rn->fails < BREAKER_FAILS)
		return;
	rn->open_until = now + BREAKER_PROBE_US;
	rn->probing = 0;
	STAT_INC(rn->stats->breaker_trips);
	log_warn("redis: worker %d: %s: %d failed calls in a row, deciding without Redis and "
		 "probing every %d ms", rn->worker, rn->name, rn->fails, BREAKER_PROBE_US / 1000);
}

static void call_succeeded(struct redis_node *rn)
{
	if (rn->open_until)
		log_info("redis: worker %d: %s: Redis answers again", rn->worker, rn->name);
	rn->fails = 0;
	rn->open_until = 0;
	rn->probing = 0;
}

/* Answers, degraded, every query whose deadline has passed: queued ones
 * and sent ones. A late reply for a sent one is then ignored. */
static void on_deadline(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_node *rn = t->data;
	int64_t now = clock_now_us();

	int expired = 0;

	while (rn->qlen && rn->queue[rn->qhead].deadline <= now) {
		answer_degraded(rn, &rn->queue[rn->qhead]);
		rn->qhead = (rn->qhead + 1) % (size_t)rn->cfg->max_pending;
		rn->qlen--;
		STAT_INC(rn->stats->timeouts);
		expired = 1;
	}
	/* Queries still queued at their deadline waited behind a call that
	 * has not come back: that counts against Redis too. */
	if (expired && rn->state == NODE_READY)
		call_failed(rn, now);
	for (struct rbatch *b = rn->oldest; b; b = b->next) {
		if (b->answered)
			continue;
		if (b->rq[0].deadline > now)
			break;
		STAT_ADD(rn->stats->timeouts, b->n);
		fail_batch(rn, b);
		call_failed(rn, now);
	}
	arm_deadline(rn);
}

/* ---- replies ------------------------------------------------------------------ */

/* Fills res[] from one request's [remaining, retry_after_us, reset_us] per
 * limit. Returns 0 or -1. */
static int result_from(const struct redis_query *r, int64_t allowed, const int64_t *vals,
		       size_t nvals, struct limit_result *res)
{
	if (nvals != 3 * r->q.nlimits)
		return -1;
	for (size_t i = 0; i < r->q.nlimits; i++) {
		res[i].limit = r->q.limits[i].quota;
		res[i].remaining = vals[3 * i] > 0 ? (uint64_t)vals[3 * i] : 0;
		res[i].retry_after_us = vals[3 * i + 1];
		res[i].reset_us = vals[3 * i + 2];
		res[i].allowed = allowed ? true : res[i].retry_after_us <= 0;
	}
	return 0;
}

static void answer_one(struct redis_node *rn, struct rbatch *b, size_t i, int64_t allowed,
		       int64_t decider, const int64_t *vals, size_t nvals)
{
	struct limit_result res[LIMIT_SET_MAX];
	const struct redis_query *r = &b->rq[i];

	if (allowed == 2) {
		/* Cluster: the key lives on another node now */
		STAT_INC(rn->stats->moved);
		rn->cb->moved(rn->owner, rn, r);
		return;
	}
	if ((allowed != 0 && allowed != 1) || decider < 1 || (size_t)decider > r->q.nlimits ||
	    result_from(r, allowed, vals, nvals, res) < 0) {
		STAT_INC(rn->stats->errors);
		answer_degraded(rn, r);
		return;
	}
	if (!allowed) /* the deciding limit refuses; no other limit was charged */
		res[decider - 1].allowed = false;
	STAT_INC(rn->stats->replies);
	rn->cb->decided(rn->owner, r, res, (int)decider - 1, b->sent);
}

/* msgpack reply, decoded by redis_reply.c */
static int answer_msgpack(struct redis_node *rn, struct rbatch *b, const char *data, size_t len)
{
	if (redis_reply_msgpack(data, len, b->n, rn->decoded) < 0)
		return -1;
	for (size_t i = 0; i < b->n; i++) {
		const struct redis_decision *d = &rn->decoded[i];

		answer_one(rn, b, i, d->ok ? d->allowed : -1, d->decider, d->vals, d->nvals);
	}
	return 0;
}

/* plain reply: now_us, then per request allowed, decider, 3 per limit */
static int answer_plain(struct redis_node *rn, struct rbatch *b, const redisReply *reply)
{
	size_t pos = 1, need = 1;

	for (size_t i = 0; i < b->n; i++)
		need += 2 + 3 * b->rq[i].q.nlimits;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != need)
		return -1;
	for (size_t i = 0; i < need; i++)
		if (reply->element[i]->type != REDIS_REPLY_INTEGER)
			return -1;
	for (size_t i = 0; i < b->n; i++) {
		int64_t vals[3 * LIMIT_SET_MAX];
		size_t nvals = 3 * b->rq[i].q.nlimits;
		int64_t allowed = reply->element[pos]->integer;
		int64_t decider = reply->element[pos + 1]->integer;

		pos += 2;
		for (size_t k = 0; k < nvals; k++)
			vals[k] = reply->element[pos + k]->integer;
		pos += nvals;
		answer_one(rn, b, i, allowed, decider, vals, nvals);
	}
	return 0;
}

static int send_batch_cmd(struct redis_node *rn, struct rbatch *b);

static void on_script_loaded(redisAsyncContext *ac, void *r, void *priv)
{
	struct redis_node *rn = ac->data;
	redisReply *reply = r;

	if (!rn)
		return;
	if (!reply)
		return;
	if (reply->type != REDIS_REPLY_STRING || reply->len >= sizeof(rn->sha)) {
		/* e.g. NOPERM: an ACL user without +@scripting. Decisions go to
		 * the failure policy at once; the load is tried again, with
		 * backoff, on a new connection. */
		log_err("redis: worker %d: %s: cannot load the decision script: %s", rn->worker,
			rn->name, reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
		handshake_failed(rn);
		redisAsyncDisconnect(ac);
		return;
	}
	memcpy(rn->sha, reply->str, reply->len);
	rn->sha[reply->len] = '\0';
	if (rn->state == NODE_CONNECTING) {
		rn->state = NODE_READY;
		rn->down = false;
		ev_timer_stop(rn->loop, &rn->handshake_w);
		rn->backoff = RECONNECT_MIN;
		log_info("redis: worker %d ready (script %s) on %s", rn->worker, rn->sha, rn->name);
		send_batches(rn);
	}
}

/* In a Cluster, one call decides the clients of every slot of its node:
 * the script then declares no key and is allowed keys of several slots. */
#define CLUSTER_SHEBANG "#!lua flags=allow-cross-slot-keys\n"

static void load_script(struct redis_node *rn)
{
	const char *argv[3] = { "SCRIPT", "LOAD", rn->script };
	size_t argvlen[3] = { 6, 4, strlen(rn->script) };

	redisAsyncCommandArgv(rn->ac, on_script_loaded, NULL, 3, argv, argvlen);
}

static void on_batch_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct rbatch *b = priv;
	struct redis_node *rn = b->rn;
	redisReply *reply = r;
	int rc = -1;

	if (reply && reply->type == REDIS_REPLY_ERROR &&
	    strncmp(reply->str, "NOSCRIPT", 8) == 0 && !b->retried && rn->ac == ac &&
	    !b->answered) {
		/* Redis restarted or flushed its scripts: load again, retry once.
		 * The batch keeps its place (and deadline) in the list. */
		STAT_INC(rn->stats->noscript);
		b->retried = 1;
		load_script(rn);
		if (send_batch_cmd(rn, b) == 0)
			return;
	}
	unlink_batch(rn, b);
	rn->calls--;
	if (rn->shared_calls)
		(*rn->shared_calls)--;
	if (!b->answered) {
		/* both decoders check the whole reply before answering anyone */
		if (reply && reply->type == REDIS_REPLY_STRING &&
		    rn->cfg->encoding == REDIS_ENC_MSGPACK)
			rc = answer_msgpack(rn, b, reply->str, reply->len);
		else if (reply && reply->type == REDIS_REPLY_ARRAY &&
			 rn->cfg->encoding == REDIS_ENC_PLAIN)
			rc = answer_plain(rn, b, reply);
		if (rc == 0) {
			int64_t now = clock_now_us();

			hist_observe(&rn->stats->call_time, now - b->sent);
			for (size_t i = 0; i < b->n; i++)
				hist_observe(&rn->stats->wait_time, now - b->rq[i].queued);
			rn->inflight -= b->n;
			call_succeeded(rn);
		} else if (reply) {
			call_failed(rn, clock_now_us());
			STAT_INC(rn->stats->errors);
			log_warn("redis: %s: decision failed: %s", rn->name,
				 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
			fail_batch(rn, b);
			if (topology_error(reply))
				trouble(rn);
		} else {
			STAT_ADD(rn->stats->unavailable, b->n);
			fail_batch(rn, b);
		}
	}
	xfree(b);
	arm_deadline(rn);
}

/* ---- sending -------------------------------------------------------------------- */

/* Text for the argv; NULL when the arena is full (cannot happen with the
 * arena sized for batch_max queries, checked anyway). */
static const char *arena_put(struct redis_node *rn, size_t *used, const char *s, size_t len)
{
	char *p;

	if (len + 1 > rn->arena_cap - *used)
		return NULL;
	p = rn->arena + *used;
	memcpy(p, s, len);
	p[len] = '\0';
	*used += len + 1;
	return p;
}

/* The script's arguments (see decide.lua): the distinct rules of the batch
 * once each, [lid, algo, quota, period_us, burst] per limit, then three
 * integers per query, key_index, cost and rule_index. A rule is its
 * limits array: the queries of one rule of the same rules share it. */
static int send_batch_cmd(struct redis_node *rn, struct rbatch *b)
{
	size_t argc = 0, nkeys = 0, nrules = 0, used = 0;
	size_t keyidx[1024], ruleidx[1024];
	const struct decide_query *rule_q[1024];
	char tmp[NUM_MAX + RULES_LID_MAX];
	const char *p;
	int n;

	if (b->n > sizeof(keyidx) / sizeof(keyidx[0]))
		return -1;
	rn->argv[argc] = "EVALSHA";
	rn->argvlen[argc++] = 7;
	rn->argv[argc] = rn->sha;
	rn->argvlen[argc++] = strlen(rn->sha);
	argc++; /* numkeys, below */
	/* One key per distinct client (store_key_name). One rule per distinct
	 * limits array. */
	for (size_t i = 0; i < b->n; i++) {
		const struct decide_query *q = &b->rq[i].q;
		size_t k;

		for (k = 0; k < nrules; k++)
			if (rule_q[k]->limits == q->limits)
				break;
		if (k == nrules)
			rule_q[nrules++] = q;
		ruleidx[i] = k + 1;
		for (k = 0; k < i; k++)
			if (memcmp(b->rq[k].q.key, q->key, IDENTITY_KEY_LEN) == 0)
				break;
		if (k < i) {
			keyidx[i] = keyidx[k];
			continue;
		}
		keyidx[i] = ++nkeys;
		n = (int)store_key_name(q->key, tmp);
		if (!(p = arena_put(rn, &used, tmp, (size_t)n)))
			return -1;
		rn->argv[argc] = p;
		rn->argvlen[argc++] = (size_t)n;
	}
	n = snprintf(tmp, sizeof(tmp), "%zu", nkeys);
	if (!(p = arena_put(rn, &used, tmp, (size_t)n)))
		return -1;
	rn->argv[2] = p;
	rn->argvlen[2] = (size_t)n;

	if (rn->cfg->encoding == REDIS_ENC_MSGPACK) {
		msgpack_packer pk;

		msgpack_sbuffer_clear(&rn->sbuf);
		msgpack_packer_init(&pk, &rn->sbuf, msgpack_sbuffer_write);
		msgpack_pack_array(&pk, 2);
		msgpack_pack_array(&pk, nrules);
		for (size_t r = 0; r < nrules; r++) {
			const struct decide_query *q = rule_q[r];

			msgpack_pack_array(&pk, q->nlimits);
			for (size_t j = 0; j < q->nlimits; j++) {
				const struct limit_spec *l = &q->limits[j];
				const char *lid = q->rule->lid[j];

				msgpack_pack_array(&pk, 5);
				msgpack_pack_str(&pk, strlen(lid));
				msgpack_pack_str_body(&pk, lid, strlen(lid));
				msgpack_pack_uint32(&pk, (uint32_t)l->algo);
				msgpack_pack_uint64(&pk, l->quota);
				msgpack_pack_int64(&pk, l->period_us);
				msgpack_pack_uint64(&pk, l->burst);
			}
		}
		msgpack_pack_array(&pk, 3 * b->n);
		for (size_t i = 0; i < b->n; i++) {
			msgpack_pack_uint64(&pk, keyidx[i]);
			msgpack_pack_uint32(&pk, b->rq[i].q.cost);
			msgpack_pack_uint64(&pk, ruleidx[i]);
		}
		rn->argv[argc] = rn->sbuf.data;
		rn->argvlen[argc++] = rn->sbuf.size;
	} else {
#define PUT_NUM(fmt, v)                                                       \
	do {                                                                  \
		n = snprintf(tmp, sizeof(tmp), fmt, v);                       \
		if (!(p = arena_put(rn, &used, tmp, (size_t)n)))              \
			return -1;                                            \
		rn->argv[argc] = p;                                           \
		rn->argvlen[argc++] = (size_t)n;                              \
	} while (0)
		PUT_NUM("%zu", nrules);
		for (size_t r = 0; r < nrules; r++) {
			const struct decide_query *q = rule_q[r];

			PUT_NUM("%zu", q->nlimits);
			for (size_t j = 0; j < q->nlimits; j++) {
				const struct limit_spec *l = &q->limits[j];
				const char *lid = q->rule->lid[j];

				/* hiredis copies the arguments: no need to */
				rn->argv[argc] = lid;
				rn->argvlen[argc++] = strlen(lid);
				PUT_NUM("%d", (int)l->algo);
				PUT_NUM("%llu", (unsigned long long)l->quota);
				PUT_NUM("%lld", (long long)l->period_us);
				PUT_NUM("%llu", (unsigned long long)l->burst);
			}
		}
		for (size_t i = 0; i < b->n; i++) {
			PUT_NUM("%zu", keyidx[i]);
			PUT_NUM("%u", b->rq[i].q.cost);
			PUT_NUM("%zu", ruleidx[i]);
		}
#undef PUT_NUM
	}
	if (b->n == 1 && b->rq[0].asking &&
	    redisAsyncCommand(rn->ac, NULL, NULL, "ASKING") != REDIS_OK)
		return -1;
	if (rn->cluster) {
		/* EVALSHA sha 0 <rules and requests> key...: no declared key */
		const char *arg = rn->argv[argc - 1];
		size_t arglen = rn->argvlen[argc - 1];

		if (argc != 4 + nkeys)
			return -1; /* msgpack only (checked at start) */
		memmove(&rn->argv[4], &rn->argv[3], nkeys * sizeof(*rn->argv));
		memmove(&rn->argvlen[4], &rn->argvlen[3], nkeys * sizeof(*rn->argvlen));
		rn->argv[3] = arg;
		rn->argvlen[3] = arglen;
		rn->argv[2] = "0";
		rn->argvlen[2] = 1;
	}
	if (redisAsyncCommandArgv(rn->ac, on_batch_reply, b, (int)argc, rn->argv,
				  rn->argvlen) != REDIS_OK)
		return -1;
	return 0;
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

	while (rn->qlen && rn->state == NODE_READY && rn->calls < rn->cfg->pipeline &&
	       (!rn->cb->may_send || rn->cb->may_send(rn->owner, rn))) {
		size_t n = rn->qlen < (size_t)rn->cfg->batch_max ? rn->qlen
								 : (size_t)rn->cfg->batch_max;
		struct rbatch *b;

		/* A query sent after ASKING (a migrating slot) goes alone:
		 * ASKING admits one command, for the slot being imported. */
		for (size_t i = 0; i < n; i++)
			if (rn->queue[(rn->qhead + i) % (size_t)rn->cfg->max_pending].asking) {
				n = i ? i : 1;
				break;
			}
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
			rn->qhead = (rn->qhead + 1) % (size_t)rn->cfg->max_pending;
		}
		rn->qlen -= n;
		rn->inflight += n;
		/* append to the in-flight list before sending: a failing send
		 * calls the reply callback with NULL at once */
		b->prev = rn->newest;
		if (rn->newest)
			rn->newest->next = b;
		else
			rn->oldest = b;
		rn->newest = b;
		STAT_INC(rn->stats->calls);
		if (send_batch_cmd(rn, b) < 0) {
			unlink_batch(rn, b);
			STAT_ADD(rn->stats->unavailable, b->n);
			fail_batch(rn, b);
			xfree(b);
		} else {
			rn->calls++;
			if (rn->shared_calls)
				(*rn->shared_calls)++;
		}
	}
	arm_deadline(rn);
}

static void on_prepare(struct ev_loop *loop, ev_prepare *p, int revents)
{
	struct redis_node *rn = p->data;

	if (rn->qlen && rn->state == NODE_READY)
		send_batches(rn);
}

/* ---- connection ----------------------------------------------------------------- */

static void answer_queue_degraded(struct redis_node *rn)
{
	while (rn->qlen) {
		answer_degraded(rn, &rn->queue[rn->qhead]);
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

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct redis_node *rn = ac->data;

	if (!rn)
		return;
	if (status != REDIS_OK) {
		log_warn("redis: worker %d cannot connect to %s: %s", rn->worker, rn->name,
			 ac->errstr);
		/* hiredis frees the context after this callback */
		rn->ac = NULL;
		rn->state = NODE_DISCONNECTED;
		rn->down = true;
		ev_timer_stop(rn->loop, &rn->handshake_w);
		answer_queue_degraded(rn);
		schedule_reconnect(rn);
		trouble(rn);
		return;
	}
	log_debug("redis: worker %d connected to %s", rn->worker, rn->name);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct redis_node *rn = ac->data;

	if (!rn)
		return;
	if (rn->ac == ac) {
		rn->ac = NULL;
		rn->state = NODE_DISCONNECTED;
		if (status != REDIS_OK)
			log_warn("redis: worker %d lost its connection to %s: %s", rn->worker,
				 rn->name, ac->errstr);
		ev_timer_stop(rn->loop, &rn->handshake_w);
		answer_queue_degraded(rn);
		schedule_reconnect(rn);
		trouble(rn);
	}
}

static void on_auth(redisAsyncContext *ac, void *r, void *priv)
{
	struct redis_node *rn = ac->data;
	redisReply *reply = r;

	if (rn && reply && reply->type == REDIS_REPLY_ERROR) {
		log_err("redis: worker %d: %s: AUTH failed: %s", rn->worker, rn->name, reply->str);
		handshake_failed(rn);
		redisAsyncDisconnect(ac);
	}
}

int redis_node_auth_argv(const struct redis_config *cfg, const char *argv[3], size_t argvlen[3])
{
	int n = 0;

	if (!cfg->password[0])
		return 0;
	argv[n] = "AUTH";
	argvlen[n++] = 4;
	if (cfg->user[0]) {
		argv[n] = cfg->user;
		argvlen[n++] = strlen(cfg->user);
	}
	argv[n] = cfg->password;
	argvlen[n++] = strlen(cfg->password);
	return n;
}

/* The connection or its handshake failed: whatever waits is answered by
 * the failure policy now, and so is every decision until the node is
 * ready again (the reconnection goes on with backoff). */
static void handshake_failed(struct redis_node *rn)
{
	rn->down = true;
	answer_queue_degraded(rn);
}

/* Connected (or not) but not ready in time: a server that accepts and
 * never answers. Dropped; the reconnection tries again. */
static void on_handshake_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_node *rn = t->data;

	if (rn->state != NODE_CONNECTING || !rn->ac)
		return;
	log_warn("redis: worker %d: %s: no answer within %.0f s of connecting", rn->worker,
		 rn->name, HANDSHAKE_S);
	handshake_failed(rn);
	redisAsyncDisconnect(rn->ac);
}

/* hiredis's reply builders with a bound on arrays (see REPLY_ELEMENTS_MAX):
 * hiredis 0.14 would allocate whatever count a server announces. */
static redisReplyObjectFunctions bounded_fn;
static const redisReplyObjectFunctions *hiredis_fn;
static pthread_once_t bounded_once = PTHREAD_ONCE_INIT;

static void *bounded_array(const redisReadTask *task, int elements)
{
	if (elements < 0 || elements > REPLY_ELEMENTS_MAX)
		return NULL; /* the reader reports an error: the connection goes */
	return hiredis_fn->createArray(task, elements);
}

static const redisReplyObjectFunctions *defaults_of;

static void bounded_init(void)
{
	hiredis_fn = defaults_of;
	bounded_fn = *defaults_of;
	bounded_fn.createArray = bounded_array;
}

/* Puts the bounded builders on a new context's reader. */
void redis_node_bound_replies(redisAsyncContext *ac)
{
	if (!ac->c.reader->fn)
		return;
	if (ac->c.reader->fn != &bounded_fn) {
		defaults_of = ac->c.reader->fn;
		pthread_once(&bounded_once, bounded_init);
		if (ac->c.reader->fn == hiredis_fn)
			ac->c.reader->fn = &bounded_fn;
	}
}

static void start_connect(struct redis_node *rn)
{
	const struct redis_config *cfg = rn->cfg;
	const char *argv[3];
	size_t argvlen[3];
	int argc;
	redisAsyncContext *ac;

	rn->state = NODE_CONNECTING;
	ac = rn->addr.path[0] ? redisAsyncConnectUnix(rn->addr.path)
			      : redisAsyncConnect(rn->addr.host, atoi(rn->addr.port));
	if (!ac || ac->err) {
		log_warn("redis: cannot connect to %s: %s", rn->name, ac ? ac->errstr : "out of memory");
		if (ac)
			redisAsyncFree(ac);
		rn->state = NODE_DISCONNECTED;
		schedule_reconnect(rn);
		return;
	}
	ac->data = rn;
	rn->ac = ac;
	redis_node_bound_replies(ac);
	redisLibevAttach(rn->loop, ac);
	ev_timer_stop(rn->loop, &rn->handshake_w);
	ev_timer_set(&rn->handshake_w, HANDSHAKE_S, 0.);
	ev_timer_start(rn->loop, &rn->handshake_w);
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	STAT_INC(rn->stats->connects);
	/* Pipelined behind the connection: AUTH, then the script. */
	argc = redis_node_auth_argv(cfg, argv, argvlen);
	if (argc)
		redisAsyncCommandArgv(ac, on_auth, NULL, argc, argv, argvlen);
	load_script(rn);
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
	xfree(rn->own_script);
	xfree(rn->queue);
	xfree(rn->decoded);
	xfree(rn->argv);
	xfree(rn->argvlen);
	xfree(rn->arena);
	xfree(rn);
}

struct redis_node *redis_node_new(struct ev_loop *loop, int worker, const struct addr *addr,
				  const struct redis_config *cfg, const struct redis_node_cb *cb,
				  void *owner, struct store_stats *stats)
{
	struct redis_node *rn = xcalloc(1, sizeof(*rn));
	size_t max_argc;

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
	rn->cluster = cfg->topology == REDIS_CLUSTER;
	rn->script = cfg->encoding == REDIS_ENC_PLAIN ? redis_script_plain : redis_script_msgpack;
	if (rn->cluster) {
		size_t n = strlen(CLUSTER_SHEBANG) + strlen(rn->script) + 1;

		rn->own_script = xmalloc(n);
		if (!rn->own_script) {
			xfree(rn);
			return NULL;
		}
		snprintf(rn->own_script, n, "%s%s", CLUSTER_SHEBANG, rn->script);
		rn->script = rn->own_script;
	}
	rn->backoff = RECONNECT_MIN;
	/* EVALSHA sha numkeys, a key per query, then ARGV: 1 (msgpack) or
	 * 1 + per rule 1 + 5 per limit + per query 3 (plain), at most a rule
	 * per query. */
	max_argc = 4 + (size_t)cfg->batch_max * (1 + 1 + 5 * LIMIT_SET_MAX + 3);
	rn->queue = xcalloc((size_t)cfg->max_pending, sizeof(*rn->queue));
	rn->decoded = xcalloc((size_t)cfg->batch_max, sizeof(*rn->decoded));
	rn->argv = xcalloc(max_argc, sizeof(*rn->argv));
	rn->argvlen = xcalloc(max_argc, sizeof(*rn->argvlen));
	rn->arena_cap = max_argc * (NUM_MAX + RULES_LID_MAX);
	rn->arena = xmalloc(rn->arena_cap);
	if (!rn->queue || !rn->decoded || !rn->argv || !rn->argvlen || !rn->arena) {
		free_buffers(rn);
		return NULL;
	}
	msgpack_sbuffer_init(&rn->sbuf);
	ev_timer_init(&rn->reconnect_w, on_reconnect, 0., 0.);
	rn->reconnect_w.data = rn;
	ev_timer_init(&rn->deadline_w, on_deadline, 0., 0.);
	rn->deadline_w.data = rn;
	ev_timer_init(&rn->handshake_w, on_handshake_timeout, HANDSHAKE_S, 0.);
	rn->handshake_w.data = rn;
	ev_prepare_init(&rn->send_w, on_prepare);
	rn->send_w.data = rn;
	ev_prepare_start(loop, &rn->send_w);
	start_connect(rn);
	return rn;
}

void redis_node_free(struct redis_node *rn)
{
	if (!rn)
		return;
	rn->freeing = true;
	ev_timer_stop(rn->loop, &rn->handshake_w);
	answer_queue_degraded(rn);
	if (rn->ac) {
		redisAsyncContext *ac = rn->ac;

		rn->ac = NULL;
		/* runs every pending callback with a NULL reply */
		redisAsyncFree(ac);
	}
	while (rn->oldest) {
		struct rbatch *b = rn->oldest;

		unlink_batch(rn, b);
		fail_batch(rn, b);
		xfree(b);
	}
	ev_timer_stop(rn->loop, &rn->reconnect_w);
	ev_timer_stop(rn->loop, &rn->deadline_w);
	ev_prepare_stop(rn->loop, &rn->send_w);
	msgpack_sbuffer_destroy(&rn->sbuf);
	free_buffers(rn);
}


int redis_node_submit(struct redis_node *rn, const struct redis_query *r)
{
	int64_t now = r->queued;

	if (rn->open_until) {
		if (now < rn->open_until || rn->probing || rn->state != NODE_READY) {
			STAT_INC(rn->stats->breaker_skips);
			return -1;
		}
		rn->probing = 1; /* this one probes; the others wait for it */
	}
	if (rn->state == NODE_DISCONNECTED || (rn->down && rn->state != NODE_READY) ||
	    rn->qlen + rn->inflight >= (size_t)rn->cfg->max_pending) {
		STAT_INC(rn->stats->unavailable);
		return -1;
	}
	rn->queue[(rn->qhead + rn->qlen) % (size_t)rn->cfg->max_pending] = *r;
	rn->qlen++;
	if (rn->qlen == 1 && !ev_is_active(&rn->deadline_w))
		arm_deadline(rn);
	return 0;
}
