/* store_redis.c: the Redis store (see store_redis.h): routes each query
 * to its node (redis_node.c), answers clients known to be refused from a
 * local cache, and serves admin looks and resets. */
#include "store_redis.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "memstore.h"
#include "redis_node.h"
#include "store.h"

#define CACHE_SIZE 4096            /* refused-until entries per worker */


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

/* A worker's part of the Redis store. */
struct redis_worker {
	struct store_worker *sw;
	const struct redis_config *cfg;
	struct redis_node *node;
	struct refusal *cache;
};

void store_redis_defaults(struct redis_config *cfg)
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

int store_redis_set_addr(struct redis_config *cfg, const char *addr)
{
	return addr_parse(addr, ADDR_UNIX, &cfg->addr);
}

/* ---- the refused-until cache ------------------------------------------------- */

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
static void cache_store(struct redis_worker *rw, const struct redis_query *r, int decider,
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

/* ---- answers from the nodes -------------------------------------------------- */

static void on_decided(void *owner, const struct redis_query *r, const struct limit_result *res,
		       int decider, int64_t sent)
{
	struct redis_worker *rw = owner;

	if (!res[decider].allowed)
		cache_store(rw, r, decider, res, sent);
	store_complete(rw->sw, &r->q, &r->ref, res, decider);
}

/* Redis did not decide: the failure policy answers. */
static void on_failed(void *owner, const struct redis_query *r)
{
	struct redis_worker *rw = owner;

	store_complete(rw->sw, &r->q, &r->ref, NULL, -1);
}

static const struct redis_node_cb node_cb = { on_decided, on_failed };

/* ---- admin --------------------------------------------------------------------- */

/* A synchronous connection for one admin request; NULL with a message in
 * a->error. */
static redisContext *admin_connect(const struct redis_config *cfg, struct store_admin *a)
{
	struct timeval tv = { 1, 0 };
	const char *argv[3];
	size_t argvlen[3];
	int argc = redis_node_auth_argv(cfg, argv, argvlen);
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

	if (!rw)
		return -1;
	rw->sw = sw;
	rw->cfg = cfg;
	rw->cache = xcalloc(CACHE_SIZE, sizeof(*rw->cache));
	if (rw->cache)
		rw->node = redis_node_new(sw->loop, sw->idx, &cfg->addr, cfg, &node_cb, rw,
					  &sw->stats);
	if (!rw->node) {
		xfree(rw->cache);
		xfree(rw);
		return -1;
	}
	sw->impl = rw;
	return 0;
}

static void redis_worker_free(struct store_worker *sw)
{
	struct redis_worker *rw = sw->impl;

	if (!rw)
		return;
	redis_node_free(rw->node);
	xfree(rw->cache);
	xfree(rw);
	sw->impl = NULL;
}

static enum store_outcome redis_check(struct store_worker *sw, const struct decide_query *q,
				      const struct store_ref *ref, struct limit_result *res,
				      int *decider)
{
	struct redis_worker *rw = sw->impl;
	struct redis_query r;

	r.queued = clock_now_us();
	STAT_INC(sw->stats.queries);
	if (rw->cfg->local_cache && cache_answer(rw, q, r.queued, res, decider)) {
		STAT_INC(sw->stats.local_refusals);
		return STORE_DECIDED;
	}
	r.ref = *ref;
	r.q = *q;
	r.deadline = r.queued + (int64_t)(rw->cfg->timeout * 1e6);
	return redis_node_submit(rw->node, &r) == 0 ? STORE_PENDING : STORE_UNAVAILABLE;
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
