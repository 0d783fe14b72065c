#include "store_redis.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/adapters/libev.h>

#include "addr.h"
#include "alloc.h"
#include "clock.h"
#include "memstore.h"
#include "log.h"
#include "redis_reply.h"
#include "store.h"

/* The decision scripts, generated from the Lua files of agent/redis at build time. */
#include "redis_scripts.h"

#define CACHE_SIZE 4096            /* refused-until entries per worker */
#define RECONNECT_MIN 0.05
#define RECONNECT_MAX 2.0
#define NUM_MAX 24
/* Circuit breaker: after BREAKER_FAILS script calls in a row that missed
 * their deadline or failed, decisions skip Redis for a while (answered at
 * once by the failure policy instead of each waiting out the deadline);
 * then one call probes. The pause doubles on each failed probe. */
#define BREAKER_FAILS 3
#define BREAKER_MIN_US 500000
#define BREAKER_MAX_US 10000000

enum rs_state {
	RS_DISCONNECTED,
	RS_CONNECTING,   /* connected or not, the script is not loaded yet */
	RS_READY,
};

/* One query waiting for Redis. */
struct rq {
	struct store_ref ref;
	struct decide_query q;
	int64_t queued;     /* local monotonic microseconds */
	int64_t deadline;
};

struct rbatch {
	struct redis_worker *rw;
	struct rbatch *prev, *next;  /* in flight, oldest first */
	int answered;                /* its queries were answered degraded */
	int retried;                 /* sent again after NOSCRIPT */
	int64_t sent;
	size_t n;
	struct rq rq[];
};

/* A client refused until `until` (local clock), by limit `decider` of the
 * limits at `limits`, for a request of weight `cost`: only requests at
 * least as heavy are refused from the cache (a lighter one may pass). */
struct refusal {
	uint8_t key[IDENTITY_KEY_LEN];
	const struct limit_spec *limits;
	uint64_t epoch;      /* admin resets so far; a later reset voids it */
	uint32_t cost;
	int64_t until;
	int64_t full_at;
	int decider;
};

struct redis_worker {
	struct store_worker *sw;
	const struct redis_config *cfg;
	redisAsyncContext *ac;
	enum rs_state state;
	char sha[48];
	double backoff;
	ev_timer reconnect_w;
	ev_timer deadline_w;
	ev_prepare send_w;
	/* queue of unsent queries: a ring of cfg->max_pending */
	struct rq *queue;
	size_t qhead, qlen;
	size_t inflight;             /* queries sent, not answered */
	int calls;                   /* script calls sent, reply not back */
	struct rbatch *oldest, *newest;
	struct refusal *cache;
	struct redis_decision *decoded; /* a batch's decoded reply */
	int fails;                   /* calls in a row that failed */
	int64_t open_until;          /* breaker open until then (local clock) */
	int64_t open_for;            /* the next pause */
	int half_open;               /* a probe is allowed */
	msgpack_sbuffer sbuf;
	/* argv of one script call */
	const char **argv;
	size_t *argvlen;
	char *arena;                 /* key and number texts of the argv */
	size_t arena_cap;
	struct store_stats *stats;   /* the worker's */
};

static void start_connect(struct redis_worker *rw);
static void send_batches(struct redis_worker *rw);

void redis_config_defaults(struct redis_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	addr_parse("127.0.0.1:6379", 0, &cfg->addr);
	cfg->timeout = 0.020;
	cfg->max_pending = 10000;
	cfg->batch_max = 64;
	cfg->pipeline = 2;
	cfg->encoding = REDIS_ENC_MSGPACK;
	cfg->local_cache = 1;
}

int redis_config_set_addr(struct redis_config *cfg, const char *addr)
{
	return addr_parse(addr, ADDR_UNIX, &cfg->addr);
}

/* ---- answers --------------------------------------------------------------- */

/* Reports a query Redis did not decide: the failure policy answers it. */
static void answer_degraded(struct redis_worker *rw, const struct rq *r)
{
	store_complete(rw->sw, &r->q, &r->ref, NULL, -1);
}

static void redis_rules_changed(struct store_worker *sw)
{
	struct redis_worker *rw = sw->impl;

	memset(rw->cache, 0, CACHE_SIZE * sizeof(*rw->cache));
}

static struct refusal *cache_slot(struct redis_worker *rw, const uint8_t *key)
{
	uint32_t h;

	memcpy(&h, key, sizeof(h)); /* the key is a hash already */
	return &rw->cache[h & (CACHE_SIZE - 1)];
}

/* Fills res[] and *decider when the client is known to be refused now.
 * Returns 1 then, else 0. */
static int cache_answer(struct redis_worker *rw, const struct decide_query *q, int64_t now,
			struct limit_result *res, int *decider)
{
	struct refusal *e = cache_slot(rw, q->key);

	if (e->until <= now || e->limits != q->limits || q->cost < e->cost ||
	    e->epoch != store_reset_epoch(rw->sw->st) ||
	    memcmp(e->key, q->key, IDENTITY_KEY_LEN) != 0 || (size_t)e->decider >= q->nlimits)
		return 0;
	memset(&res[e->decider], 0, sizeof(res[0]));
	res[e->decider].allowed = false;
	res[e->decider].limit = q->limits[e->decider].quota;
	res[e->decider].remaining = 0;
	res[e->decider].retry_after_us = e->until - now;
	res[e->decider].reset_us = e->full_at > now ? e->full_at - now : 0;
	*decider = e->decider;
	return 1;
}

/* Remembers a refusal. Times are taken from when the batch was sent, which
 * is before Redis read its clock: the cached refusal ends no later than
 * Redis's, so the cache never refuses a request that Redis would allow. */
static void cache_store(struct redis_worker *rw, const struct rq *r, int decider,
			const struct limit_result *res, int64_t sent)
{
	struct refusal *e;

	if (!rw->cfg->local_cache || res[decider].retry_after_us <= 0)
		return;
	/* A request heavier than a bucket never passes, however long it
	 * waits, while lighter ones do: nothing worth remembering. */
	{
		const struct limit_spec *l = &r->q.limits[decider];
		uint64_t cap = l->algo == LIMIT_TOKEN_BUCKET && l->burst ? l->burst : l->quota;

		if (r->q.cost > cap)
			return;
	}
	e = cache_slot(rw, r->q.key);
	memcpy(e->key, r->q.key, IDENTITY_KEY_LEN);
	e->limits = r->q.limits;
	e->cost = r->q.cost;
	e->epoch = store_reset_epoch(rw->sw->st);
	e->decider = decider;
	e->until = sent + res[decider].retry_after_us;
	e->full_at = sent + res[decider].reset_us;
}

/* ---- batches in flight ------------------------------------------------------ */

static void unlink_batch(struct redis_worker *rw, struct rbatch *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		rw->oldest = b->next;
	if (b->next)
		b->next->prev = b->prev;
	else
		rw->newest = b->prev;
	b->prev = b->next = NULL;
}

static void fail_batch(struct redis_worker *rw, struct rbatch *b)
{
	if (b->answered)
		return;
	b->answered = 1;
	rw->inflight -= b->n;
	for (size_t i = 0; i < b->n; i++)
		answer_degraded(rw, &b->rq[i]);
}

static void arm_deadline(struct redis_worker *rw)
{
	int64_t next = INT64_MAX, now;
	struct rbatch *b;

	for (b = rw->oldest; b && b->answered; b = b->next)
		;
	if (b)
		next = b->rq[0].deadline;
	if (rw->qlen && rw->queue[rw->qhead].deadline < next)
		next = rw->queue[rw->qhead].deadline;
	ev_timer_stop(rw->sw->loop, &rw->deadline_w);
	if (next == INT64_MAX)
		return;
	now = clock_now_us();
	ev_timer_set(&rw->deadline_w, next > now ? (double)(next - now) / 1e6 : 0., 0.);
	ev_timer_start(rw->sw->loop, &rw->deadline_w);
}

static void call_failed(struct redis_worker *rw, int64_t now)
{
	if (++rw->fails < BREAKER_FAILS && !rw->half_open)
		return;
	if (rw->open_until > now)
		return;
	rw->open_for = rw->open_for ? rw->open_for * 2 : BREAKER_MIN_US;
	if (rw->open_for > BREAKER_MAX_US)
		rw->open_for = BREAKER_MAX_US;
	rw->open_until = now + rw->open_for;
	rw->half_open = 0;
	STAT_INC(rw->stats->breaker_trips);
	log_warn("redis: worker %d: %d failed calls in a row, deciding without Redis for %lld ms",
		 rw->sw->idx, rw->fails, (long long)(rw->open_for / 1000));
}

static void call_succeeded(struct redis_worker *rw)
{
	if (rw->open_for && rw->half_open)
		log_info("redis: worker %d: Redis answers again", rw->sw->idx);
	rw->fails = 0;
	rw->open_for = 0;
	rw->open_until = 0;
	rw->half_open = 0;
}

/* Answers, degraded, every query whose deadline has passed: queued ones
 * and sent ones. A late reply for a sent one is then ignored. */
static void on_deadline(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_worker *rw = t->data;
	int64_t now = clock_now_us();

	int expired = 0;

	while (rw->qlen && rw->queue[rw->qhead].deadline <= now) {
		answer_degraded(rw, &rw->queue[rw->qhead]);
		rw->qhead = (rw->qhead + 1) % (size_t)rw->cfg->max_pending;
		rw->qlen--;
		STAT_INC(rw->stats->timeouts);
		expired = 1;
	}
	/* Queries still queued at their deadline waited behind a call that
	 * has not come back: that counts against Redis too. */
	if (expired && rw->state == RS_READY)
		call_failed(rw, now);
	for (struct rbatch *b = rw->oldest; b; b = b->next) {
		if (b->answered)
			continue;
		if (b->rq[0].deadline > now)
			break;
		STAT_ADD(rw->stats->timeouts, b->n);
		fail_batch(rw, b);
		call_failed(rw, now);
	}
	arm_deadline(rw);
}

/* ---- replies ------------------------------------------------------------------ */

/* Fills res[] from one request's [remaining, retry_after_us, reset_us] per
 * limit. Returns 0 or -1. */
static int result_from(const struct rq *r, int64_t allowed, const int64_t *vals,
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

static void answer_one(struct redis_worker *rw, struct rbatch *b, size_t i, int64_t allowed,
		       int64_t decider, const int64_t *vals, size_t nvals)
{
	struct limit_result res[LIMIT_SET_MAX];
	const struct rq *r = &b->rq[i];

	if (decider < 1 || (size_t)decider > r->q.nlimits ||
	    result_from(r, allowed, vals, nvals, res) < 0) {
		STAT_INC(rw->stats->errors);
		answer_degraded(rw, r);
		return;
	}
	if (!allowed) {
		/* the deciding limit refuses; no other limit was charged */
		res[decider - 1].allowed = false;
		cache_store(rw, r, (int)decider - 1, res, b->sent);
	}
	STAT_INC(rw->stats->replies);
	store_complete(rw->sw, &r->q, &r->ref, res, (int)decider - 1);
}

/* msgpack reply, decoded by redis_reply.c */
static int answer_msgpack(struct redis_worker *rw, struct rbatch *b, const char *data, size_t len)
{
	if (redis_reply_msgpack(data, len, b->n, rw->decoded) < 0)
		return -1;
	for (size_t i = 0; i < b->n; i++) {
		const struct redis_decision *d = &rw->decoded[i];

		answer_one(rw, b, i, d->allowed, d->ok ? d->decider : 0, d->vals, d->nvals);
	}
	return 0;
}

/* plain reply: now_us, then per request allowed, decider, 3 per limit */
static int answer_plain(struct redis_worker *rw, struct rbatch *b, const redisReply *reply)
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
		answer_one(rw, b, i, allowed, decider, vals, nvals);
	}
	return 0;
}

static int send_batch_cmd(struct redis_worker *rw, struct rbatch *b);

static void on_script_loaded(redisAsyncContext *ac, void *r, void *priv)
{
	struct redis_worker *rw = ac->data;
	redisReply *reply = r;

	if (!rw)
		return;
	if (!reply || reply->type != REDIS_REPLY_STRING || reply->len >= sizeof(rw->sha)) {
		if (reply)
			log_err("redis: cannot load the decision script: %s",
				reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
		return;
	}
	memcpy(rw->sha, reply->str, reply->len);
	rw->sha[reply->len] = '\0';
	if (rw->state == RS_CONNECTING) {
		rw->state = RS_READY;
		rw->backoff = RECONNECT_MIN;
		log_info("redis: worker %d ready (script %s)", rw->sw->idx, rw->sha);
		send_batches(rw);
	}
}

static void load_script(struct redis_worker *rw)
{
	const char *script = rw->cfg->encoding == REDIS_ENC_PLAIN ? redis_script_plain
								 : redis_script_msgpack;
	const char *argv[3] = { "SCRIPT", "LOAD", script };
	size_t argvlen[3] = { 6, 4, strlen(script) };

	redisAsyncCommandArgv(rw->ac, on_script_loaded, NULL, 3, argv, argvlen);
}

static void on_batch_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct rbatch *b = priv;
	struct redis_worker *rw = b->rw;
	redisReply *reply = r;
	int rc = -1;

	if (reply && reply->type == REDIS_REPLY_ERROR &&
	    strncmp(reply->str, "NOSCRIPT", 8) == 0 && !b->retried && rw->ac == ac &&
	    !b->answered) {
		/* Redis restarted or flushed its scripts: load again, retry once.
		 * The batch keeps its place (and deadline) in the list. */
		STAT_INC(rw->stats->noscript);
		b->retried = 1;
		load_script(rw);
		if (send_batch_cmd(rw, b) == 0)
			return;
	}
	unlink_batch(rw, b);
	rw->calls--;
	if (!b->answered) {
		/* both decoders check the whole reply before answering anyone */
		if (reply && reply->type == REDIS_REPLY_STRING &&
		    rw->cfg->encoding == REDIS_ENC_MSGPACK)
			rc = answer_msgpack(rw, b, reply->str, reply->len);
		else if (reply && reply->type == REDIS_REPLY_ARRAY &&
			 rw->cfg->encoding == REDIS_ENC_PLAIN)
			rc = answer_plain(rw, b, reply);
		if (rc == 0) {
			int64_t now = clock_now_us();

			hist_observe(&rw->stats->call_time, now - b->sent);
			for (size_t i = 0; i < b->n; i++)
				hist_observe(&rw->stats->wait_time, now - b->rq[i].queued);
			rw->inflight -= b->n;
			call_succeeded(rw);
		} else if (reply) {
			call_failed(rw, clock_now_us());
			STAT_INC(rw->stats->errors);
			log_warn("redis: decision failed: %s",
				 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
			fail_batch(rw, b);
		} else {
			STAT_ADD(rw->stats->unavailable, b->n);
			fail_batch(rw, b);
		}
	}
	xfree(b);
	arm_deadline(rw);
}

/* ---- sending -------------------------------------------------------------------- */

/* Text for the argv; NULL when the arena is full (cannot happen with the
 * arena sized for batch_max queries, checked anyway). */
static const char *arena_put(struct redis_worker *rw, size_t *used, const char *s, size_t len)
{
	char *p;

	if (len + 1 > rw->arena_cap - *used)
		return NULL;
	p = rw->arena + *used;
	memcpy(p, s, len);
	p[len] = '\0';
	*used += len + 1;
	return p;
}

/* The script's arguments (see decide.lua): the distinct rules of the batch
 * once each, [lid, algo, quota, period_us, burst] per limit, then three
 * integers per query, key_index, cost and rule_index. A rule is its
 * limits array: the queries of one rule of one ruleset share it. */
static int send_batch_cmd(struct redis_worker *rw, struct rbatch *b)
{
	size_t argc = 0, nkeys = 0, nrules = 0, used = 0;
	size_t keyidx[1024], ruleidx[1024];
	const struct decide_query *rule_q[1024];
	char tmp[NUM_MAX + DECIDE_LID_MAX];
	const char *p;
	int n;

	if (b->n > sizeof(keyidx) / sizeof(keyidx[0]))
		return -1;
	rw->argv[argc] = "EVALSHA";
	rw->argvlen[argc++] = 7;
	rw->argv[argc] = rw->sha;
	rw->argvlen[argc++] = strlen(rw->sha);
	argc++; /* numkeys, below */
	/* One key per distinct client: "rl:{hex}". One rule per distinct
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
		n = snprintf(tmp, sizeof(tmp), "rl:{%s}", q->key_hex);
		if (!(p = arena_put(rw, &used, tmp, (size_t)n)))
			return -1;
		rw->argv[argc] = p;
		rw->argvlen[argc++] = (size_t)n;
	}
	n = snprintf(tmp, sizeof(tmp), "%zu", nkeys);
	if (!(p = arena_put(rw, &used, tmp, (size_t)n)))
		return -1;
	rw->argv[2] = p;
	rw->argvlen[2] = (size_t)n;

	if (rw->cfg->encoding == REDIS_ENC_MSGPACK) {
		msgpack_packer pk;

		msgpack_sbuffer_clear(&rw->sbuf);
		msgpack_packer_init(&pk, &rw->sbuf, msgpack_sbuffer_write);
		msgpack_pack_array(&pk, 2);
		msgpack_pack_array(&pk, nrules);
		for (size_t r = 0; r < nrules; r++) {
			const struct decide_query *q = rule_q[r];

			msgpack_pack_array(&pk, q->nlimits);
			for (size_t j = 0; j < q->nlimits; j++) {
				const struct limit_spec *l = &q->limits[j];
				const char *lid = q->rs->rule[q->rule->index].lid[j];

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
		rw->argv[argc] = rw->sbuf.data;
		rw->argvlen[argc++] = rw->sbuf.size;
	} else {
#define PUT_NUM(fmt, v)                                                       \
	do {                                                                  \
		n = snprintf(tmp, sizeof(tmp), fmt, v);                       \
		if (!(p = arena_put(rw, &used, tmp, (size_t)n)))              \
			return -1;                                            \
		rw->argv[argc] = p;                                           \
		rw->argvlen[argc++] = (size_t)n;                              \
	} while (0)
		PUT_NUM("%zu", nrules);
		for (size_t r = 0; r < nrules; r++) {
			const struct decide_query *q = rule_q[r];

			PUT_NUM("%zu", q->nlimits);
			for (size_t j = 0; j < q->nlimits; j++) {
				const struct limit_spec *l = &q->limits[j];
				const char *lid = q->rs->rule[q->rule->index].lid[j];

				/* hiredis copies the arguments: no need to */
				rw->argv[argc] = lid;
				rw->argvlen[argc++] = strlen(lid);
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
	if (redisAsyncCommandArgv(rw->ac, on_batch_reply, b, (int)argc, rw->argv,
				  rw->argvlen) != REDIS_OK)
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
static void send_batches(struct redis_worker *rw)
{
	int64_t now = clock_now_us();

	while (rw->qlen && rw->state == RS_READY && rw->calls < rw->cfg->pipeline) {
		size_t n = rw->qlen < (size_t)rw->cfg->batch_max ? rw->qlen
								 : (size_t)rw->cfg->batch_max;
		struct rbatch *b = xmalloc(sizeof(*b) + n * sizeof(struct rq));

		if (!b)
			return; /* the deadline answers them */
		b->rw = rw;
		b->answered = 0;
		b->retried = 0;
		b->sent = now;
		b->n = n;
		b->prev = b->next = NULL;
		for (size_t i = 0; i < n; i++) {
			b->rq[i] = rw->queue[rw->qhead];
			rw->qhead = (rw->qhead + 1) % (size_t)rw->cfg->max_pending;
		}
		rw->qlen -= n;
		rw->inflight += n;
		/* append to the in-flight list before sending: a failing send
		 * calls the reply callback with NULL at once */
		b->prev = rw->newest;
		if (rw->newest)
			rw->newest->next = b;
		else
			rw->oldest = b;
		rw->newest = b;
		STAT_INC(rw->stats->calls);
		if (send_batch_cmd(rw, b) < 0) {
			unlink_batch(rw, b);
			STAT_ADD(rw->stats->unavailable, b->n);
			fail_batch(rw, b);
			xfree(b);
		} else {
			rw->calls++;
		}
	}
	arm_deadline(rw);
}

static void on_prepare(struct ev_loop *loop, ev_prepare *p, int revents)
{
	struct redis_worker *rw = p->data;

	if (rw->qlen && rw->state == RS_READY)
		send_batches(rw);
}

/* ---- connection ----------------------------------------------------------------- */

static void answer_queue_degraded(struct redis_worker *rw)
{
	while (rw->qlen) {
		answer_degraded(rw, &rw->queue[rw->qhead]);
		rw->qhead = (rw->qhead + 1) % (size_t)rw->cfg->max_pending;
		rw->qlen--;
		STAT_INC(rw->stats->unavailable);
	}
}

static void schedule_reconnect(struct redis_worker *rw)
{
	ev_timer_stop(rw->sw->loop, &rw->reconnect_w);
	ev_timer_set(&rw->reconnect_w, rw->backoff, 0.);
	ev_timer_start(rw->sw->loop, &rw->reconnect_w);
	rw->backoff *= 2;
	if (rw->backoff > RECONNECT_MAX)
		rw->backoff = RECONNECT_MAX;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct redis_worker *rw = ac->data;

	if (!rw)
		return;
	if (status != REDIS_OK) {
		log_warn("redis: worker %d cannot connect: %s", rw->sw->idx, ac->errstr);
		/* hiredis frees the context after this callback */
		rw->ac = NULL;
		rw->state = RS_DISCONNECTED;
		answer_queue_degraded(rw);
		schedule_reconnect(rw);
		return;
	}
	log_debug("redis: worker %d connected", rw->sw->idx);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct redis_worker *rw = ac->data;

	if (!rw)
		return;
	if (rw->ac == ac) {
		rw->ac = NULL;
		rw->state = RS_DISCONNECTED;
		if (status != REDIS_OK)
			log_warn("redis: worker %d lost its connection: %s", rw->sw->idx,
				 ac->errstr);
		answer_queue_degraded(rw);
		schedule_reconnect(rw);
	}
}

static void on_auth(redisAsyncContext *ac, void *r, void *priv)
{
	redisReply *reply = r;

	if (reply && reply->type == REDIS_REPLY_ERROR) {
		log_err("redis: AUTH failed: %s", reply->str);
		redisAsyncDisconnect(ac);
	}
}

/* The AUTH command of cfg into argv: returns its argc, 0 without a
 * password. */
static int auth_argv(const struct redis_config *cfg, const char *argv[3], size_t argvlen[3])
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

static void start_connect(struct redis_worker *rw)
{
	const struct redis_config *cfg = rw->cfg;
	const char *argv[3];
	size_t argvlen[3];
	int argc;
	redisAsyncContext *ac;

	rw->state = RS_CONNECTING;
	ac = cfg->addr.path[0] ? redisAsyncConnectUnix(cfg->addr.path)
			       : redisAsyncConnect(cfg->addr.host, atoi(cfg->addr.port));
	if (!ac || ac->err) {
		log_warn("redis: cannot connect: %s", ac ? ac->errstr : "out of memory");
		if (ac)
			redisAsyncFree(ac);
		rw->state = RS_DISCONNECTED;
		schedule_reconnect(rw);
		return;
	}
	ac->data = rw;
	rw->ac = ac;
	redisLibevAttach(rw->sw->loop, ac);
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	STAT_INC(rw->stats->connects);
	/* Pipelined behind the connection: AUTH, then the script. */
	argc = auth_argv(cfg, argv, argvlen);
	if (argc)
		redisAsyncCommandArgv(ac, on_auth, NULL, argc, argv, argvlen);
	load_script(rw);
}

static void on_reconnect(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_worker *rw = t->data;

	if (rw->state == RS_DISCONNECTED)
		start_connect(rw);
}

/* ---- admin --------------------------------------------------------------------- */

/* A synchronous connection for one admin request; NULL with a message in
 * a->error. */
static redisContext *admin_connect(const struct redis_config *cfg, struct store_admin *a)
{
	struct timeval tv = { 1, 0 };
	const char *argv[3];
	size_t argvlen[3];
	int argc = auth_argv(cfg, argv, argvlen);
	redisContext *rc = cfg->addr.path[0]
				   ? redisConnectUnixWithTimeout(cfg->addr.path, tv)
				   : redisConnectWithTimeout(cfg->addr.host, atoi(cfg->addr.port), tv);
	redisReply *r;

	if (!rc || rc->err) {
		snprintf(a->error, sizeof(a->error), "cannot connect to Redis: %s",
			 rc ? rc->errstr : "out of memory");
		if (rc)
			redisFree(rc);
		return NULL;
	}
	redisSetTimeout(rc, tv);
	if (!argc)
		return rc;
	r = redisCommandArgv(rc, argc, argv, argvlen);
	if (!r || r->type == REDIS_REPLY_ERROR) {
		snprintf(a->error, sizeof(a->error), "Redis AUTH failed: %s",
			 r ? r->str : rc->errstr);
		if (r)
			freeReplyObject(r);
		redisFree(rc);
		return NULL;
	}
	freeReplyObject(r);
	return rc;
}

/* One rule's hash: its fields and TTL, or with reset, deleted. */
static void admin_item(redisContext *rc, const char *key, int reset, struct out *o)
{
	const char *argv[2] = { reset ? "DEL" : "HGETALL", key };
	size_t argvlen[2] = { strlen(argv[0]), strlen(key) };
	redisReply *r = redisCommandArgv(rc, 2, argv, argvlen);

	if (!r || r->type == REDIS_REPLY_ERROR) {
		outf(o, ", \"error\": ");
		out_json_str(o, r ? r->str : rc->errstr, strlen(r ? r->str : rc->errstr));
		if (r)
			freeReplyObject(r);
		return;
	}
	if (reset) {
		outf(o, ", \"deleted\": %lld", r->integer);
		freeReplyObject(r);
		return;
	}
	outf(o, ", \"fields\": {");
	for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
		outf(o, "%s", i ? ", " : "");
		out_json_str(o, r->element[i]->str, r->element[i]->len);
		outf(o, ": ");
		out_json_str(o, r->element[i + 1]->str, r->element[i + 1]->len);
	}
	outf(o, "}");
	freeReplyObject(r);
	argv[0] = "PTTL";
	argvlen[0] = 4;
	r = redisCommandArgv(rc, 2, argv, argvlen);
	if (r && r->type == REDIS_REPLY_INTEGER)
		outf(o, ", \"ttl_ms\": %lld", r->integer);
	if (r)
		freeReplyObject(r);
}

static void redis_admin(struct store *st, struct store_admin *a)
{
	redisContext *rc = admin_connect(st->impl, a);

	for (size_t i = 0; rc && i < a->n; i++) {
		char key[STORE_KEY_NAME_LEN + 1];

		store_key_name(a->item[i].key, key);
		admin_item(rc, key, a->reset, &a->item[i].out);
	}
	if (rc)
		redisFree(rc);
	store_admin_done(st, a);
}

/* ---- the store interface ------------------------------------------------------- */

static int redis_worker_init(struct store_worker *sw)
{
	const struct redis_config *cfg = sw->st->impl;
	struct redis_worker *rw = xcalloc(1, sizeof(*rw));
	size_t max_argc;

	if (!rw)
		return -1;
	rw->sw = sw;
	rw->cfg = cfg;
	rw->stats = &sw->stats;
	rw->backoff = RECONNECT_MIN;
	/* EVALSHA sha numkeys, a key per query, then ARGV: 1 (msgpack) or
	 * 1 + per rule 1 + 5 per limit + per query 3 (plain), at most a rule
	 * per query. */
	max_argc = 4 + (size_t)cfg->batch_max * (1 + 1 + 5 * LIMIT_SET_MAX + 3);
	rw->queue = xcalloc((size_t)cfg->max_pending, sizeof(*rw->queue));
	rw->cache = xcalloc(CACHE_SIZE, sizeof(*rw->cache));
	rw->decoded = xcalloc((size_t)cfg->batch_max, sizeof(*rw->decoded));
	rw->argv = xcalloc(max_argc, sizeof(*rw->argv));
	rw->argvlen = xcalloc(max_argc, sizeof(*rw->argvlen));
	rw->arena_cap = max_argc * (NUM_MAX + DECIDE_LID_MAX);
	rw->arena = xmalloc(rw->arena_cap);
	if (!rw->queue || !rw->cache || !rw->decoded || !rw->argv || !rw->argvlen || !rw->arena) {
		xfree(rw->queue);
		xfree(rw->cache);
		xfree(rw->decoded);
		xfree(rw->argv);
		xfree(rw->argvlen);
		xfree(rw->arena);
		xfree(rw);
		return -1;
	}
	msgpack_sbuffer_init(&rw->sbuf);
	ev_timer_init(&rw->reconnect_w, on_reconnect, 0., 0.);
	rw->reconnect_w.data = rw;
	ev_timer_init(&rw->deadline_w, on_deadline, 0., 0.);
	rw->deadline_w.data = rw;
	ev_prepare_init(&rw->send_w, on_prepare);
	rw->send_w.data = rw;
	ev_prepare_start(sw->loop, &rw->send_w);
	sw->impl = rw;
	start_connect(rw);
	return 0;
}

static void redis_worker_free(struct store_worker *sw)
{
	struct redis_worker *rw = sw->impl;

	if (!rw)
		return;
	answer_queue_degraded(rw);
	if (rw->ac) {
		redisAsyncContext *ac = rw->ac;

		rw->ac = NULL;
		/* runs every pending callback with a NULL reply */
		redisAsyncFree(ac);
	}
	while (rw->oldest) {
		struct rbatch *b = rw->oldest;

		unlink_batch(rw, b);
		fail_batch(rw, b);
		xfree(b);
	}
	ev_timer_stop(sw->loop, &rw->reconnect_w);
	ev_timer_stop(sw->loop, &rw->deadline_w);
	ev_prepare_stop(sw->loop, &rw->send_w);
	msgpack_sbuffer_destroy(&rw->sbuf);
	xfree(rw->queue);
	xfree(rw->cache);
	xfree(rw->decoded);
	xfree(rw->argv);
	xfree(rw->argvlen);
	xfree(rw->arena);
	xfree(rw);
	sw->impl = NULL;
}

static enum store_outcome redis_check(struct store_worker *sw, const struct decide_query *q,
				      const struct store_ref *ref, struct limit_result *res,
				      int *decider)
{
	struct redis_worker *rw = sw->impl;
	int64_t now = clock_now_us();
	struct rq *r;

	STAT_INC(rw->stats->queries);
	if (rw->cfg->local_cache && cache_answer(rw, q, now, res, decider)) {
		STAT_INC(rw->stats->local_refusals);
		return STORE_DECIDED;
	}
	if (rw->open_until) {
		if (now < rw->open_until) {
			STAT_INC(rw->stats->breaker_skips);
			return STORE_UNAVAILABLE;
		}
		rw->half_open = 1; /* this and the next queries probe */
	}
	if (rw->state == RS_DISCONNECTED ||
	    rw->qlen + rw->inflight >= (size_t)rw->cfg->max_pending) {
		STAT_INC(rw->stats->unavailable);
		return STORE_UNAVAILABLE;
	}
	r = &rw->queue[(rw->qhead + rw->qlen) % (size_t)rw->cfg->max_pending];
	r->ref = *ref;
	r->q = *q;
	r->queued = now;
	r->deadline = now + (int64_t)(rw->cfg->timeout * 1e6);
	rw->qlen++;
	if (rw->qlen == 1 && !ev_is_active(&rw->deadline_w))
		arm_deadline(rw);
	return STORE_PENDING;
}

static void redis_free(struct store *st)
{
	xfree(st->impl);
}

static const struct store_ops redis_ops = {
	.name = "redis",
	.shared = true,
	.worker_init = redis_worker_init,
	.worker_free = redis_worker_free,
	.check = redis_check,
	.rules_changed = redis_rules_changed,
	.admin = redis_admin,
	.free = redis_free,
};

struct store *store_redis_new(const struct redis_config *cfg, size_t mem_max_keys)
{
	struct store *st = xcalloc(1, sizeof(*st));
	struct redis_config *copy = xmalloc(sizeof(*copy));

	if (!st || !copy || store_init(st, &redis_ops, mem_max_keys) < 0) {
		if (st)
			memstore_free(st->mem);
		xfree(st);
		xfree(copy);
		return NULL;
	}
	*copy = *cfg;
	st->impl = copy;
	return st;
}
