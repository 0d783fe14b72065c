/* redis_send.c: a Redis node's sending half (see redis_node-t.h). */
#include "redis_send.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "redis_encode.h"
#include "store_redis.h"

/* Bytes of the argv; NULL when the arena is full (it is sized for
 * batch_max queries of LIMIT_SET_MAX limits: cannot happen, checked
 * anyway). */
static uint8_t *arena_take(struct redis_node *rn, size_t *used, size_t len)
{
	uint8_t *p;

	if (len > rn->arena_cap - *used)
		return NULL;
	p = (uint8_t *)rn->arena + *used;
	*used += len;
	return p;
}

static size_t rule_bytes(const struct redis_node *rn, const struct decide_query *q, uint8_t *p)
{
	return redis_limits_bytes(&rn->cfg->keys, q->limits, q->nlimits, redis_node_unexpiring(rn),
				  p);
}

/* The requests' ids (8 bytes each, 0 for none), for concurrency limits. */
static int put_ids(struct redis_node *rn, const struct rbatch *b, size_t *argc, size_t *used)
{
	uint8_t *p = arena_take(rn, used, 8 * b->n);

	if (!p)
		return -1;
	for (size_t i = 0; i < b->n; i++)
		redis_put_be(p + 8 * i, b->rq[i].q.request_id, 8);
	rn->argv[*argc] = (const char *)p;
	rn->argvlen[(*argc)++] = 8 * b->n;
	return 0;
}

/* The keys of a batch with a rule with layers, whose queries may share
 * keys (a global limit, a limit per address): each query's limits get
 * positions of their own, first[i] the first, and the keymap (the next
 * argument) names the key at each position; each distinct key is named
 * once, after it, so the library decides the queries in turn on the same
 * state. */
static int put_keys_mapped(struct redis_node *rn, const struct rbatch *b, uint32_t *first,
			   size_t *argc, size_t *used, bool ids)
{
	size_t npos = 0, nkeys = 0, k0;
	uint8_t *map;

	for (size_t i = 0; i < b->n; i++)
		npos += b->rq[i].q.nlimits;
	if (!(map = arena_take(rn, used, 4 * npos)))
		return -1;
	rn->argv[*argc] = (const char *)map;
	rn->argvlen[(*argc)++] = 4 * npos;
	if (ids && put_ids(rn, b, argc, used) < 0)
		return -1;
	k0 = *argc;
	npos = 0;
	for (size_t i = 0; i < b->n; i++) {
		const struct decide_query *q = &b->rq[i].q;

		first[i] = (uint32_t)npos + 1;
		for (size_t j = 0; j < q->nlimits; j++) {
			char name[REDIS_KEY_NAME_MAX + 1];
			size_t k, len;
			uint8_t *p;

			len = redis_key_name(&rn->cfg->keys, decide_limit_key(q, j), q->rule->lidh[j],
					     &q->limits[j], name);
			for (k = 0; k < nkeys; k++)
				if (rn->argvlen[k0 + k] == len &&
				    memcmp(rn->argv[k0 + k], name, len) == 0)
					break;
			if (k == nkeys) {
				if (!(p = arena_take(rn, used, len + 1)))
					return -1;
				memcpy(p, name, len + 1);
				rn->argv[k0 + nkeys] = (const char *)p;
				rn->argvlen[k0 + nkeys] = len;
				nkeys++;
			}
			redis_put_be(map + 4 * npos++, k + 1, 4);
		}
	}
	*argc += nkeys;
	return 0;
}

/* The call (see ratelimit.lua):
 *
 *     FCALL rl7_decide 0 <requests> <rule>... <key>...
 *
 * (rl7_decide_cluster on a Cluster: its keys may be of several slots). The
 * distinct rules of the batch go once each; then each distinct client's
 * keys, one per limit of its rule; <requests> is the number of rules
 * (2 bytes), then per query its first key (4 bytes), cost (4) and rule (2),
 * and, when any query of the call asks for a lease, the tokens it asks for
 * (4), big-endian. No key is named twice (see batch_len()). */
int redis_send_batch(struct redis_node *rn, struct rbatch *b)
{
	size_t argc = 0, nrules = 0, nkeys = 0, used = 0, rec = 10, len;
	bool stacked = false, ids = false, leases = false;
	uint32_t first[1024];
	uint16_t ruleidx[1024];
	const struct decide_query *rule_q[1024];
	const char *fn = rn->cluster ? "rl7_decide_cluster" : "rl7_decide";
	uint8_t *req, *p;

	if (b->n > sizeof(first) / sizeof(first[0]))
		return -1;
	rn->argv[argc] = "FCALL";
	rn->argvlen[argc++] = 5;
	rn->argv[argc] = fn;
	rn->argvlen[argc++] = strlen(fn);
	rn->argv[argc] = "0";
	rn->argvlen[argc++] = 1;
	for (size_t i = 0; i < b->n; i++)
		leases |= b->rq[i].lease != 0;
	if (leases)
		rec = 14; /* each request names the tokens it would lease */
	if (!(req = arena_take(rn, &used, 2 + rec * b->n)))
		return -1;
	rn->argv[argc] = (const char *)req;
	rn->argvlen[argc++] = 2 + rec * b->n;
	for (size_t i = 0; i < b->n; i++) {
		const struct decide_query *q = &b->rq[i].q;
		size_t k;

		stacked |= q->rule->nstack > 0;
		ids |= q->request_id != 0;
		for (k = 0; k < nrules; k++)
			if (rule_q[k]->limits == q->limits && rule_q[k]->nlimits == q->nlimits)
				break;
		if (k == nrules) {
			if (!(p = arena_take(rn, &used, RULE_BYTES_MAX)))
				return -1;
			rule_q[nrules++] = q;
			rn->argv[argc] = (const char *)p;
			rn->argvlen[argc++] = rule_bytes(rn, q, p);
		}
		ruleidx[i] = (uint16_t)(k + 1);
	}
	if (stacked) {
		if (put_keys_mapped(rn, b, first, &argc, &used, ids) < 0)
			return -1;
		nrules |= 0x8000; /* a keymap follows the rules */
	} else if (ids && put_ids(rn, b, &argc, &used) < 0) {
		return -1;
	}
	if (ids)
		nrules |= 0x4000; /* then the requests' ids */
	if (leases)
		nrules |= 0x2000; /* records of 14 bytes */
	for (size_t i = 0; i < b->n && !stacked; i++) {
		const struct decide_query *q = &b->rq[i].q;
		size_t k;

		/* a client's queries of one rule share its keys; under another
		 * rule it has keys of their own (batch_len() saw to it that
		 * they are other keys) */
		for (k = 0; k < i; k++)
			if (b->rq[k].q.limits == q->limits &&
			    memcmp(b->rq[k].q.key, q->key, IDENTITY_KEY_LEN) == 0)
				break;
		if (k < i) {
			first[i] = first[k];
			continue;
		}
		first[i] = (uint32_t)nkeys + 1;
		for (size_t j = 0; j < q->nlimits; j++) {
			if (!(p = arena_take(rn, &used, REDIS_KEY_NAME_MAX + 1)))
				return -1;
			rn->argv[argc] = (const char *)p;
			rn->argvlen[argc++] = redis_key_name(&rn->cfg->keys, q->key, q->rule->lidh[j],
							     &q->limits[j], (char *)p);
		}
		nkeys += q->nlimits;
	}
	redis_put_be(req, nrules, 2);
	for (size_t i = 0; i < b->n; i++) {
		uint8_t *at = req + 2 + rec * i;

		redis_put_be(at, first[i], 4);
		redis_put_be(at + 4, b->rq[i].q.cost, 4);
		redis_put_be(at + 8, ruleidx[i], 2);
		if (leases)
			redis_put_be(at + 10, b->rq[i].lease, 4);
	}
	if (b->n == 1 && b->rq[0].asking &&
	    redisAsyncCommand(rn->ac, NULL, NULL, "ASKING") != REDIS_OK)
		return -1;
	len = redis_resp_len(argc, rn->argvlen);
	if (len > rn->cmd_cap) {
		char *grown = xrealloc(rn->cmd, len);

		if (!grown)
			return -1;
		rn->cmd = grown;
		rn->cmd_cap = len;
	}
	redis_resp_put(rn->cmd, argc, rn->argv, rn->argvlen);
	if (redisAsyncFormattedCommand(rn->ac, redis_node_on_batch_reply, b, rn->cmd, len) != REDIS_OK)
		return -1;
	return 0;
}

/* Writes the calls queued now, where hiredis would arm its write watcher
 * (an epoll_ctl, a turn of the loop, another epoll_ctl): stopped in the
 * turn it was started, it costs libev nothing in the kernel. What a full
 * socket leaves, and an error, stay with hiredis's watcher. */
void redis_node_flush(struct redis_node *rn)
{
	redisContext *c;
	size_t left;
	int done = 0;

	if (!rn->ac || rn->state != NODE_READY)
		return;
	c = &rn->ac->c;
	left = sdslen(c->obuf);
	while (!done) {
		size_t now;

		if (redisBufferWrite(c, &done) != REDIS_OK)
			return;
		now = done ? 0 : sdslen(c->obuf);
		if (now == left)
			return; /* the socket is full */
		left = now;
	}
	/* as hiredis's own write handler ends: no more to write, read on */
	if (rn->ac->ev.delWrite)
		rn->ac->ev.delWrite(rn->ac->ev.data);
	if (rn->ac->ev.addRead)
		rn->ac->ev.addRead(rn->ac->ev.data);
}

/* Whether two queries' rules share a limit (and so, for one client, a
 * key). */
static bool share_limit(const struct redis_query *a, const struct redis_query *b)
{
	for (size_t i = 0; i < a->q.nlimits; i++)
		for (size_t j = 0; j < b->q.nlimits; j++)
			if (a->q.rule->lidh[i] == b->q.rule->lidh[j])
				return true;
	return false;
}

/* How many of the first n queued queries go in one call: a query sent
 * after ASKING (a migrating slot) goes alone, as ASKING admits one
 * command, for the slot being imported; and a query whose client is in
 * the call already under another rule that shares a limit with its own
 * waits for the next call, so that no key is named twice in one. */
static size_t batch_len(const struct redis_node *rn, size_t n)
{
	size_t cap = (size_t)rn->cfg->max_pending;

	for (size_t i = 0; i < n; i++) {
		const struct redis_query *r = &rn->queue[(rn->qhead + i) % cap];

		if (r->asking)
			return i ? i : 1;
		/* a rule with layers: the call maps its keys (put_keys_mapped),
		 * any query may share them */
		for (size_t k = 0; k < i && !r->q.rule->nstack; k++) {
			const struct redis_query *e = &rn->queue[(rn->qhead + k) % cap];

			if (e->q.limits != r->q.limits &&
			    memcmp(e->q.key, r->q.key, IDENTITY_KEY_LEN) == 0 && share_limit(e, r))
				return i;
		}
	}
	return n;
}

/* Sends what is queued, in batches of at most batch_max, with at most
 * `pipeline` calls in flight. Called before the loop blocks and when a
 * reply frees a place. While calls are out, new queries gather into the
 * next batch: under light load a query leaves at once, under heavy load
 * batches grow by themselves, and Redis never holds a backlog of small
 * calls (each call costs Redis, on top of the decisions in it, about as
 * much as two or three more decisions). */
void redis_send_batches(struct redis_node *rn)
{
	int64_t now = clock_now_us();

	while (rn->qlen && rn->state == NODE_READY && rn->calls < rn->cfg->pipeline &&
	       (!rn->cb->may_send || rn->cb->may_send(rn->owner, rn))) {
		size_t n = rn->qlen < (size_t)rn->cfg->batch_max ? rn->qlen
								 : (size_t)rn->cfg->batch_max;
		struct rbatch *b;

		n = batch_len(rn, n);
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
		if (redis_send_batch(rn, b) < 0) {
			redis_node_unlink_batch(rn, b);
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

void redis_send_on_prepare(struct ev_loop *loop, ev_prepare *p, int revents)
{
	struct redis_node *rn = p->data;

	if (rn->qlen && rn->state == NODE_READY) {
		redis_send_batches(rn);
		redis_node_flush(rn);
	}
}
