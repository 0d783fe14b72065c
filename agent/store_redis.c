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
	struct rstore *rs;
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

struct rstore {
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

static void start_connect(struct rstore *rs);
static void send_batches(struct rstore *rs);

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
static void answer_degraded(struct rstore *rs, const struct rq *r)
{
	store_complete(rs->sw, &r->q, &r->ref, NULL, -1);
}

static void redis_rules_changed(struct store_worker *sw)
{
	struct rstore *rs = sw->impl;

	memset(rs->cache, 0, CACHE_SIZE * sizeof(*rs->cache));
}

static struct refusal *cache_slot(struct rstore *rs, const uint8_t *key)
{
	uint32_t h;

	memcpy(&h, key, sizeof(h)); /* the key is a hash already */
	return &rs->cache[h & (CACHE_SIZE - 1)];
}

/* Fills res[] and *decider when the client is known to be refused now.
 * Returns 1 then, else 0. */
static int cache_answer(struct rstore *rs, const struct decide_query *q, int64_t now,
			struct limit_result *res, int *decider)
{
	struct refusal *e = cache_slot(rs, q->key);

	if (e->until <= now || e->limits != q->limits || q->cost < e->cost ||
	    e->epoch != store_reset_epoch(rs->sw->st) ||
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
static void cache_store(struct rstore *rs, const struct rq *r, int decider,
			const struct limit_result *res, int64_t sent)
{
	struct refusal *e;

	if (!rs->cfg->local_cache || res[decider].retry_after_us <= 0)
		return;
	/* A request heavier than a bucket never passes, however long it
	 * waits, while lighter ones do: nothing worth remembering. */
	{
		const struct limit_spec *l = &r->q.limits[decider];
		uint64_t cap = l->algo == LIMIT_TOKEN_BUCKET && l->burst ? l->burst : l->quota;

		if (r->q.cost > cap)
			return;
	}
	e = cache_slot(rs, r->q.key);
	memcpy(e->key, r->q.key, IDENTITY_KEY_LEN);
	e->limits = r->q.limits;
	e->cost = r->q.cost;
	e->epoch = store_reset_epoch(rs->sw->st);
	e->decider = decider;
	e->until = sent + res[decider].retry_after_us;
	e->full_at = sent + res[decider].reset_us;
}

/* ---- batches in flight ------------------------------------------------------ */

static void unlink_batch(struct rstore *rs, struct rbatch *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		rs->oldest = b->next;
	if (b->next)
		b->next->prev = b->prev;
	else
		rs->newest = b->prev;
	b->prev = b->next = NULL;
}

static void fail_batch(struct rstore *rs, struct rbatch *b)
{
	if (b->answered)
		return;
	b->answered = 1;
	rs->inflight -= b->n;
	for (size_t i = 0; i < b->n; i++)
		answer_degraded(rs, &b->rq[i]);
}

static void arm_deadline(struct rstore *rs)
{
	int64_t next = INT64_MAX, now;
	struct rbatch *b;

	for (b = rs->oldest; b && b->answered; b = b->next)
		;
	if (b)
		next = b->rq[0].deadline;
	if (rs->qlen && rs->queue[rs->qhead].deadline < next)
		next = rs->queue[rs->qhead].deadline;
	ev_timer_stop(rs->sw->loop, &rs->deadline_w);
	if (next == INT64_MAX)
		return;
	now = clock_now_us();
	ev_timer_set(&rs->deadline_w, next > now ? (double)(next - now) / 1e6 : 0., 0.);
	ev_timer_start(rs->sw->loop, &rs->deadline_w);
}

static void call_failed(struct rstore *rs, int64_t now)
{
	if (++rs->fails < BREAKER_FAILS && !rs->half_open)
		return;
	if (rs->open_until > now)
		return;
	rs->open_for = rs->open_for ? rs->open_for * 2 : BREAKER_MIN_US;
	if (rs->open_for > BREAKER_MAX_US)
		rs->open_for = BREAKER_MAX_US;
	rs->open_until = now + rs->open_for;
	rs->half_open = 0;
	STAT_INC(rs->stats->breaker_trips);
	log_warn("redis: worker %d: %d failed calls in a row, deciding without Redis for %lld ms",
		 rs->sw->idx, rs->fails, (long long)(rs->open_for / 1000));
}

static void call_succeeded(struct rstore *rs)
{
	if (rs->open_for && rs->half_open)
		log_info("redis: worker %d: Redis answers again", rs->sw->idx);
	rs->fails = 0;
	rs->open_for = 0;
	rs->open_until = 0;
	rs->half_open = 0;
}

/* Answers, degraded, every query whose deadline has passed: queued ones
 * and sent ones. A late reply for a sent one is then ignored. */
static void on_deadline(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct rstore *rs = t->data;
	int64_t now = clock_now_us();

	int expired = 0;

	while (rs->qlen && rs->queue[rs->qhead].deadline <= now) {
		answer_degraded(rs, &rs->queue[rs->qhead]);
		rs->qhead = (rs->qhead + 1) % (size_t)rs->cfg->max_pending;
		rs->qlen--;
		STAT_INC(rs->stats->timeouts);
		expired = 1;
	}
	/* Queries still queued at their deadline waited behind a call that
	 * has not come back: that counts against Redis too. */
	if (expired && rs->state == RS_READY)
		call_failed(rs, now);
	for (struct rbatch *b = rs->oldest; b; b = b->next) {
		if (b->answered)
			continue;
		if (b->rq[0].deadline > now)
			break;
		STAT_ADD(rs->stats->timeouts, b->n);
		fail_batch(rs, b);
		call_failed(rs, now);
	}
	arm_deadline(rs);
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

static void answer_one(struct rstore *rs, struct rbatch *b, size_t i, int64_t allowed,
		       int64_t decider, const int64_t *vals, size_t nvals)
{
	struct limit_result res[LIMIT_SET_MAX];
	const struct rq *r = &b->rq[i];

	if (decider < 1 || (size_t)decider > r->q.nlimits ||
	    result_from(r, allowed, vals, nvals, res) < 0) {
		STAT_INC(rs->stats->errors);
		answer_degraded(rs, r);
		return;
	}
	if (!allowed) {
		/* the deciding limit refuses; no other limit was charged */
		res[decider - 1].allowed = false;
		cache_store(rs, r, (int)decider - 1, res, b->sent);
	}
	STAT_INC(rs->stats->replies);
	store_complete(rs->sw, &r->q, &r->ref, res, (int)decider - 1);
}

/* msgpack reply, decoded by redis_reply.c */
static int answer_msgpack(struct rstore *rs, struct rbatch *b, const char *data, size_t len)
{
	if (redis_reply_msgpack(data, len, b->n, rs->decoded) < 0)
		return -1;
	for (size_t i = 0; i < b->n; i++) {
		const struct redis_decision *d = &rs->decoded[i];

		answer_one(rs, b, i, d->allowed, d->ok ? d->decider : 0, d->vals, d->nvals);
	}
	return 0;
}

/* plain reply: now_us, then per request allowed, decider, 3 per limit */
static int answer_plain(struct rstore *rs, struct rbatch *b, const redisReply *reply)
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
		answer_one(rs, b, i, allowed, decider, vals, nvals);
	}
	return 0;
}

static int send_batch_cmd(struct rstore *rs, struct rbatch *b);

static void on_script_loaded(redisAsyncContext *ac, void *r, void *priv)
{
	struct rstore *rs = ac->data;
	redisReply *reply = r;

	if (!rs)
		return;
	if (!reply || reply->type != REDIS_REPLY_STRING || reply->len >= sizeof(rs->sha)) {
		if (reply)
			log_err("redis: cannot load the decision script: %s",
				reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
		return;
	}
	memcpy(rs->sha, reply->str, reply->len);
	rs->sha[reply->len] = '\0';
	if (rs->state == RS_CONNECTING) {
		rs->state = RS_READY;
		rs->backoff = RECONNECT_MIN;
		log_info("redis: worker %d ready (script %s)", rs->sw->idx, rs->sha);
		send_batches(rs);
	}
}

static void load_script(struct rstore *rs)
{
	const char *script = rs->cfg->encoding == REDIS_ENC_PLAIN ? redis_script_plain
								 : redis_script_msgpack;
	const char *argv[3] = { "SCRIPT", "LOAD", script };
	size_t argvlen[3] = { 6, 4, strlen(script) };

	redisAsyncCommandArgv(rs->ac, on_script_loaded, NULL, 3, argv, argvlen);
}

static void on_batch_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct rbatch *b = priv;
	struct rstore *rs = b->rs;
	redisReply *reply = r;
	int rc = -1;

	if (reply && reply->type == REDIS_REPLY_ERROR &&
	    strncmp(reply->str, "NOSCRIPT", 8) == 0 && !b->retried && rs->ac == ac &&
	    !b->answered) {
		/* Redis restarted or flushed its scripts: load again, retry once.
		 * The batch keeps its place (and deadline) in the list. */
		STAT_INC(rs->stats->noscript);
		b->retried = 1;
		load_script(rs);
		if (send_batch_cmd(rs, b) == 0)
			return;
	}
	unlink_batch(rs, b);
	rs->calls--;
	if (!b->answered) {
		/* both decoders check the whole reply before answering anyone */
		if (reply && reply->type == REDIS_REPLY_STRING &&
		    rs->cfg->encoding == REDIS_ENC_MSGPACK)
			rc = answer_msgpack(rs, b, reply->str, reply->len);
		else if (reply && reply->type == REDIS_REPLY_ARRAY &&
			 rs->cfg->encoding == REDIS_ENC_PLAIN)
			rc = answer_plain(rs, b, reply);
		if (rc == 0) {
			int64_t now = clock_now_us();

			hist_observe(&rs->stats->call_time, now - b->sent);
			for (size_t i = 0; i < b->n; i++)
				hist_observe(&rs->stats->wait_time, now - b->rq[i].queued);
			rs->inflight -= b->n;
			call_succeeded(rs);
		} else if (reply) {
			call_failed(rs, clock_now_us());
			STAT_INC(rs->stats->errors);
			log_warn("redis: decision failed: %s",
				 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
			fail_batch(rs, b);
		} else {
			STAT_ADD(rs->stats->unavailable, b->n);
			fail_batch(rs, b);
		}
	}
	xfree(b);
	arm_deadline(rs);
}

/* ---- sending -------------------------------------------------------------------- */

/* Text for the argv; NULL when the arena is full (cannot happen with the
 * arena sized for batch_max queries, checked anyway). */
static const char *arena_put(struct rstore *rs, size_t *used, const char *s, size_t len)
{
	char *p;

	if (len + 1 > rs->arena_cap - *used)
		return NULL;
	p = rs->arena + *used;
	memcpy(p, s, len);
	p[len] = '\0';
	*used += len + 1;
	return p;
}

/* The script's arguments (see decide.lua): the distinct rules of the batch
 * once each, [lid, algo, quota, period_us, burst] per limit, then three
 * integers per query, key_index, cost and rule_index. A rule is its
 * limits array: the queries of one rule of one ruleset share it. */
static int send_batch_cmd(struct rstore *rs, struct rbatch *b)
{
	size_t argc = 0, nkeys = 0, nrules = 0, used = 0;
	size_t keyidx[1024], ruleidx[1024];
	const struct decide_query *rule_q[1024];
	char tmp[NUM_MAX + DECIDE_LID_MAX];
	const char *p;
	int n;

	if (b->n > sizeof(keyidx) / sizeof(keyidx[0]))
		return -1;
	rs->argv[argc] = "EVALSHA";
	rs->argvlen[argc++] = 7;
	rs->argv[argc] = rs->sha;
	rs->argvlen[argc++] = strlen(rs->sha);
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
		if (!(p = arena_put(rs, &used, tmp, (size_t)n)))
			return -1;
		rs->argv[argc] = p;
		rs->argvlen[argc++] = (size_t)n;
	}
	n = snprintf(tmp, sizeof(tmp), "%zu", nkeys);
	if (!(p = arena_put(rs, &used, tmp, (size_t)n)))
		return -1;
	rs->argv[2] = p;
	rs->argvlen[2] = (size_t)n;

	if (rs->cfg->encoding == REDIS_ENC_MSGPACK) {
		msgpack_packer pk;

		msgpack_sbuffer_clear(&rs->sbuf);
		msgpack_packer_init(&pk, &rs->sbuf, msgpack_sbuffer_write);
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
		rs->argv[argc] = rs->sbuf.data;
		rs->argvlen[argc++] = rs->sbuf.size;
	} else {
#define PUT_NUM(fmt, v)                                                       \
	do {                                                                  \
		n = snprintf(tmp, sizeof(tmp), fmt, v);                       \
		if (!(p = arena_put(rs, &used, tmp, (size_t)n)))              \
			return -1;                                            \
		rs->argv[argc] = p;                                           \
		rs->argvlen[argc++] = (size_t)n;                              \
	} while (0)
		PUT_NUM("%zu", nrules);
		for (size_t r = 0; r < nrules; r++) {
			const struct decide_query *q = rule_q[r];

			PUT_NUM("%zu", q->nlimits);
			for (size_t j = 0; j < q->nlimits; j++) {
				const struct limit_spec *l = &q->limits[j];
				const char *lid = q->rs->rule[q->rule->index].lid[j];

				/* hiredis copies the arguments: no need to */
				rs->argv[argc] = lid;
				rs->argvlen[argc++] = strlen(lid);
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
	if (redisAsyncCommandArgv(rs->ac, on_batch_reply, b, (int)argc, rs->argv,
				  rs->argvlen) != REDIS_OK)
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
static void send_batches(struct rstore *rs)
{
	int64_t now = clock_now_us();

	while (rs->qlen && rs->state == RS_READY && rs->calls < rs->cfg->pipeline) {
		size_t n = rs->qlen < (size_t)rs->cfg->batch_max ? rs->qlen
								 : (size_t)rs->cfg->batch_max;
		struct rbatch *b = xmalloc(sizeof(*b) + n * sizeof(struct rq));

		if (!b)
			return; /* the deadline answers them */
		b->rs = rs;
		b->answered = 0;
		b->retried = 0;
		b->sent = now;
		b->n = n;
		b->prev = b->next = NULL;
		for (size_t i = 0; i < n; i++) {
			b->rq[i] = rs->queue[rs->qhead];
			rs->qhead = (rs->qhead + 1) % (size_t)rs->cfg->max_pending;
		}
		rs->qlen -= n;
		rs->inflight += n;
		/* append to the in-flight list before sending: a failing send
		 * calls the reply callback with NULL at once */
		b->prev = rs->newest;
		if (rs->newest)
			rs->newest->next = b;
		else
			rs->oldest = b;
		rs->newest = b;
		STAT_INC(rs->stats->calls);
		if (send_batch_cmd(rs, b) < 0) {
			unlink_batch(rs, b);
			STAT_ADD(rs->stats->unavailable, b->n);
			fail_batch(rs, b);
			xfree(b);
		} else {
			rs->calls++;
		}
	}
	arm_deadline(rs);
}

static void on_prepare(struct ev_loop *loop, ev_prepare *p, int revents)
{
	struct rstore *rs = p->data;

	if (rs->qlen && rs->state == RS_READY)
		send_batches(rs);
}

/* ---- connection ----------------------------------------------------------------- */

static void answer_queue_degraded(struct rstore *rs)
{
	while (rs->qlen) {
		answer_degraded(rs, &rs->queue[rs->qhead]);
		rs->qhead = (rs->qhead + 1) % (size_t)rs->cfg->max_pending;
		rs->qlen--;
		STAT_INC(rs->stats->unavailable);
	}
}

static void schedule_reconnect(struct rstore *rs)
{
	ev_timer_stop(rs->sw->loop, &rs->reconnect_w);
	ev_timer_set(&rs->reconnect_w, rs->backoff, 0.);
	ev_timer_start(rs->sw->loop, &rs->reconnect_w);
	rs->backoff *= 2;
	if (rs->backoff > RECONNECT_MAX)
		rs->backoff = RECONNECT_MAX;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct rstore *rs = ac->data;

	if (!rs)
		return;
	if (status != REDIS_OK) {
		log_warn("redis: worker %d cannot connect: %s", rs->sw->idx, ac->errstr);
		/* hiredis frees the context after this callback */
		rs->ac = NULL;
		rs->state = RS_DISCONNECTED;
		answer_queue_degraded(rs);
		schedule_reconnect(rs);
		return;
	}
	log_debug("redis: worker %d connected", rs->sw->idx);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct rstore *rs = ac->data;

	if (!rs)
		return;
	if (rs->ac == ac) {
		rs->ac = NULL;
		rs->state = RS_DISCONNECTED;
		if (status != REDIS_OK)
			log_warn("redis: worker %d lost its connection: %s", rs->sw->idx,
				 ac->errstr);
		answer_queue_degraded(rs);
		schedule_reconnect(rs);
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

static void start_connect(struct rstore *rs)
{
	const struct redis_config *cfg = rs->cfg;
	const char *argv[3];
	size_t argvlen[3];
	int argc;
	redisAsyncContext *ac;

	rs->state = RS_CONNECTING;
	ac = cfg->addr.path[0] ? redisAsyncConnectUnix(cfg->addr.path)
			       : redisAsyncConnect(cfg->addr.host, atoi(cfg->addr.port));
	if (!ac || ac->err) {
		log_warn("redis: cannot connect: %s", ac ? ac->errstr : "out of memory");
		if (ac)
			redisAsyncFree(ac);
		rs->state = RS_DISCONNECTED;
		schedule_reconnect(rs);
		return;
	}
	ac->data = rs;
	rs->ac = ac;
	redisLibevAttach(rs->sw->loop, ac);
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	STAT_INC(rs->stats->connects);
	/* Pipelined behind the connection: AUTH, then the script. */
	argc = auth_argv(cfg, argv, argvlen);
	if (argc)
		redisAsyncCommandArgv(ac, on_auth, NULL, argc, argv, argvlen);
	load_script(rs);
}

static void on_reconnect(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct rstore *rs = t->data;

	if (rs->state == RS_DISCONNECTED)
		start_connect(rs);
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
	struct rstore *rs = xcalloc(1, sizeof(*rs));
	size_t max_argc;

	if (!rs)
		return -1;
	rs->sw = sw;
	rs->cfg = cfg;
	rs->stats = &sw->stats;
	rs->backoff = RECONNECT_MIN;
	/* EVALSHA sha numkeys, a key per query, then ARGV: 1 (msgpack) or
	 * 1 + per rule 1 + 5 per limit + per query 3 (plain), at most a rule
	 * per query. */
	max_argc = 4 + (size_t)cfg->batch_max * (1 + 1 + 5 * LIMIT_SET_MAX + 3);
	rs->queue = xcalloc((size_t)cfg->max_pending, sizeof(*rs->queue));
	rs->cache = xcalloc(CACHE_SIZE, sizeof(*rs->cache));
	rs->decoded = xcalloc((size_t)cfg->batch_max, sizeof(*rs->decoded));
	rs->argv = xcalloc(max_argc, sizeof(*rs->argv));
	rs->argvlen = xcalloc(max_argc, sizeof(*rs->argvlen));
	rs->arena_cap = max_argc * (NUM_MAX + DECIDE_LID_MAX);
	rs->arena = xmalloc(rs->arena_cap);
	if (!rs->queue || !rs->cache || !rs->decoded || !rs->argv || !rs->argvlen || !rs->arena) {
		xfree(rs->queue);
		xfree(rs->cache);
		xfree(rs->decoded);
		xfree(rs->argv);
		xfree(rs->argvlen);
		xfree(rs->arena);
		xfree(rs);
		return -1;
	}
	msgpack_sbuffer_init(&rs->sbuf);
	ev_timer_init(&rs->reconnect_w, on_reconnect, 0., 0.);
	rs->reconnect_w.data = rs;
	ev_timer_init(&rs->deadline_w, on_deadline, 0., 0.);
	rs->deadline_w.data = rs;
	ev_prepare_init(&rs->send_w, on_prepare);
	rs->send_w.data = rs;
	ev_prepare_start(sw->loop, &rs->send_w);
	sw->impl = rs;
	start_connect(rs);
	return 0;
}

static void redis_worker_free(struct store_worker *sw)
{
	struct rstore *rs = sw->impl;

	if (!rs)
		return;
	answer_queue_degraded(rs);
	if (rs->ac) {
		redisAsyncContext *ac = rs->ac;

		rs->ac = NULL;
		/* runs every pending callback with a NULL reply */
		redisAsyncFree(ac);
	}
	while (rs->oldest) {
		struct rbatch *b = rs->oldest;

		unlink_batch(rs, b);
		fail_batch(rs, b);
		xfree(b);
	}
	ev_timer_stop(sw->loop, &rs->reconnect_w);
	ev_timer_stop(sw->loop, &rs->deadline_w);
	ev_prepare_stop(sw->loop, &rs->send_w);
	msgpack_sbuffer_destroy(&rs->sbuf);
	xfree(rs->queue);
	xfree(rs->cache);
	xfree(rs->decoded);
	xfree(rs->argv);
	xfree(rs->argvlen);
	xfree(rs->arena);
	xfree(rs);
	sw->impl = NULL;
}

static enum store_outcome redis_check(struct store_worker *sw, const struct decide_query *q,
				      const struct store_ref *ref, struct limit_result *res,
				      int *decider)
{
	struct rstore *rs = sw->impl;
	int64_t now = clock_now_us();
	struct rq *r;

	STAT_INC(rs->stats->queries);
	if (rs->cfg->local_cache && cache_answer(rs, q, now, res, decider)) {
		STAT_INC(rs->stats->local_refusals);
		return STORE_DECIDED;
	}
	if (rs->open_until) {
		if (now < rs->open_until) {
			STAT_INC(rs->stats->breaker_skips);
			return STORE_UNAVAILABLE;
		}
		rs->half_open = 1; /* this and the next queries probe */
	}
	if (rs->state == RS_DISCONNECTED ||
	    rs->qlen + rs->inflight >= (size_t)rs->cfg->max_pending) {
		STAT_INC(rs->stats->unavailable);
		return STORE_UNAVAILABLE;
	}
	r = &rs->queue[(rs->qhead + rs->qlen) % (size_t)rs->cfg->max_pending];
	r->ref = *ref;
	r->q = *q;
	r->queued = now;
	r->deadline = now + (int64_t)(rs->cfg->timeout * 1e6);
	rs->qlen++;
	if (rs->qlen == 1 && !ev_is_active(&rs->deadline_w))
		arm_deadline(rs);
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
