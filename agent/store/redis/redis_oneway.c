/* SPDX-License-Identifier: Apache-2.0 */
/* redis_oneway.c: the calls a node sends without waiting for their
 * answer (redis_oneway.h). Sent twice, a refund would give back twice.
 * The connection copies a command out before redis_node_command()
 * returns, so the arguments live on the stack. */
#include "redis_oneway.h"

#include <stdio.h>
#include <string.h>

#include "log.h"
#include "redis_encode.h"
#include "redis_node.h"
#include "store_redis.h"

/* FCALL <fn> 0, the head of every call here: argv[0..3). Returns 3. */
static size_t fcall_head(const char **argv, size_t *argvlen, const char *fn)
{
	argv[0] = "FCALL";
	argvlen[0] = 5;
	argv[1] = fn;
	argvlen[1] = strlen(fn);
	argv[2] = "0";
	argvlen[2] = 1;
	return 3;
}

static void on_refund_reply(struct redis_conn *ac, redisReply *reply_, void *priv)
{
	struct redis_node *rn = priv;
	const redisReply *reply = reply_;

	(void)ac;
	if (!reply || reply->type != REDIS_REPLY_INTEGER) {
		STAT_INC(redis_node_stats(rn)->refunds_lost);
		if (reply && reply->type == REDIS_REPLY_ERROR)
			log_warn("redis: %s: refund failed: %s", redis_node_name(rn), reply->str);
	}
}

/* One request given back (rl8_refund, rl8_return): what took it, its cost,
 * its id (0: none), its rule's limits and each limit's key. */
struct give {
	const char *fn;
	int64_t take_us;
	const uint8_t *expect;       /* rl8_return: the values compared */
	size_t expect_len;
	uint64_t cost;
	uint64_t id;                 /* rl8_refund: the place it took, if any */
	const struct limit_spec *limits;
	size_t nl;
	const uint8_t *key[LIMIT_SET_MAX];
	uint64_t lidh[LIMIT_SET_MAX];
};

/* FCALL fn 0 <take_us> [<expect>] <requests> <rule> [<id>] <key>...: one
 * request of g's cost whose keys are 1 .. nl. Returns 0 when sent, else
 * -1. */
static int send_give(struct redis_node *rn, const struct give *g, redis_reply_fn *cb)
{
	const char *argv[8 + LIMIT_SET_MAX];
	size_t argvlen[8 + LIMIT_SET_MAX], argc = fcall_head(argv, argvlen, g->fn);
	uint8_t req[12], rule[RULE_BYTES_MAX], id[8];
	char take[24], key[LIMIT_SET_MAX][REDIS_KEY_NAME_MAX + 1];

	argv[argc] = take;
	argvlen[argc++] = (size_t)snprintf(take, sizeof(take), "%lld", (long long)g->take_us);
	if (g->expect) {
		argv[argc] = (const char *)g->expect;
		argvlen[argc++] = g->expect_len;
	}
	/* one rule, and its id after it when it has one */
	redis_put_be(req, g->id ? 0x4001 : 1, 2);
	redis_put_be(req + 2, 1, 4);
	redis_put_be(req + 6, g->cost, 4);
	redis_put_be(req + 10, 1, 2);
	argv[argc] = (const char *)req;
	argvlen[argc++] = sizeof(req);
	argv[argc] = (const char *)rule;
	argvlen[argc++] = redis_limits_bytes(redis_node_keys(rn), g->limits, g->nl,
					     redis_node_unexpiring(rn), rule);
	if (g->id) {
		redis_put_be(id, g->id, 8);
		argv[argc] = (const char *)id;
		argvlen[argc++] = sizeof(id);
	}
	for (size_t j = 0; j < g->nl; j++) {
		argv[argc] = key[j];
		argvlen[argc++] = redis_key_name(redis_node_keys(rn), g->key[j], g->lidh[j],
						 &g->limits[j], key[j]);
	}
	return redis_node_command(rn, cb, rn, (int)argc, argv, argvlen);
}

int redis_node_refund(struct redis_node *rn, const struct redis_query *r, int64_t redis_now)
{
	const struct decide_query *q = &r->q;
	struct give g;

	STAT_INC(redis_node_stats(rn)->refunds);
	memset(&g, 0, sizeof(g));
	g.fn = redis_node_is_cluster(rn) ? "rl8_refund_cluster" : "rl8_refund";
	g.take_us = redis_now;
	g.cost = q->cost;
	/* (the place its concurrency limit took: the rule's own part) */
	g.id = q->request_id;
	g.limits = q->limits;
	g.nl = q->nlimits;
	for (size_t j = 0; j < q->nlimits; j++) {
		g.key[j] = decide_limit_key(q, j);
		g.lidh[j] = q->rule->lidh[j];
	}
	if (!redis_node_ready(rn) || send_give(rn, &g, on_refund_reply) < 0) {
		STAT_INC(redis_node_stats(rn)->refunds_lost);
		return -1;
	}
	return 0;
}

static void on_charge_reply(struct redis_conn *ac, redisReply *reply_, void *priv)
{
	struct redis_node *rn = priv;
	const redisReply *reply = reply_;

	(void)ac;
	if (!reply || reply->type != REDIS_REPLY_INTEGER) {
		STAT_INC(redis_node_stats(rn)->charges_lost);
		if (reply && reply->type == REDIS_REPLY_ERROR)
			log_warn("redis: %s: charge failed: %s", redis_node_name(rn), reply->str);
	}
}

int redis_node_charge(struct redis_node *rn, const struct rule *rule,
		      const uint8_t key[IDENTITY_KEY_LEN], int64_t take_us, int64_t delta)
{
	bool cluster = redis_node_is_cluster(rn);
	struct give g;

	memset(&g, 0, sizeof(g));
	if (delta > 0)
		g.fn = cluster ? "rl8_charge_cluster" : "rl8_charge";
	else
		g.fn = cluster ? "rl8_refund_cluster" : "rl8_refund";
	g.take_us = take_us;
	g.cost = (uint64_t)(delta > 0 ? delta : -delta);
	if (g.cost > UINT32_MAX)
		g.cost = UINT32_MAX;
	g.limits = rule->limits;
	g.nl = rule->nown;
	for (size_t j = 0; j < rule->nown; j++) {
		g.key[j] = key;
		g.lidh[j] = rule->lidh[j];
	}
	if (!redis_node_ready(rn) || send_give(rn, &g, on_charge_reply) < 0) {
		STAT_INC(redis_node_stats(rn)->charges_lost);
		return -1;
	}
	return 0;
}

/* An error reply to a call that waits for nothing but its failure: counted
 * and logged (`what` names the call). No reply: the connection went. */
static void oneway_error(void *priv, void *reply_, const char *what)
{
	struct redis_node *rn = priv;
	const redisReply *reply = reply_;

	if (reply && reply->type == REDIS_REPLY_ERROR) {
		STAT_INC(redis_node_stats(rn)->errors);
		log_warn("redis: %s: %s failed: %s", redis_node_name(rn), what, reply->str);
	}
}

static void on_release_reply(struct redis_conn *ac, redisReply *reply, void *priv)
{
	(void)ac;
	oneway_error(priv, reply, "release");
}

static void on_penalize_reply(struct redis_conn *ac, redisReply *reply, void *priv)
{
	(void)ac;
	oneway_error(priv, reply, "penalty event");
}

int redis_node_release(struct redis_node *rn, const struct rule *rule, size_t j,
		       const uint8_t key[IDENTITY_KEY_LEN], uint64_t id)
{
	const char *fn = redis_node_is_cluster(rn) ? "rl8_release_cluster" : "rl8_release";
	const char *argv[5];
	size_t argvlen[5];
	uint8_t idb[8];
	char name[REDIS_KEY_NAME_MAX + 1];

	if (!redis_node_ready(rn))
		return -1;
	redis_put_be(idb, id, 8);
	fcall_head(argv, argvlen, fn);
	argv[3] = (const char *)idb;
	argvlen[3] = sizeof(idb);
	argv[4] = name;
	argvlen[4] = redis_key_name(redis_node_keys(rn), key, rule->lidh[j], &rule->limits[j], name);
	return redis_node_command(rn, on_release_reply, rn, 5, argv, argvlen);
}

int redis_node_penalize(struct redis_node *rn, const struct rule *rule,
			const uint8_t key[IDENTITY_KEY_LEN])
{
	const char *fn = redis_node_is_cluster(rn) ? "rl8_penalize_cluster" : "rl8_penalize";
	const struct rule_penalty *p = &rule->penalty;
	const char *argv[7];
	size_t argvlen[7];
	uint8_t rb[RULE_BYTES_MAX];
	char ban[24], ck[REDIS_KEY_NAME_MAX + 1], bk[REDIS_KEY_NAME_MAX + 1];

	if (!redis_node_ready(rn))
		return -1;
	fcall_head(argv, argvlen, fn);
	argv[3] = (const char *)rb;
	argvlen[3] = redis_limits_bytes(redis_node_keys(rn), &p->count, 1, redis_node_unexpiring(rn), rb);
	argv[4] = ban;
	argvlen[4] = (size_t)snprintf(ban, sizeof(ban), "%lld",
				      (long long)rule->limits[p->ban - 1].period_us);
	argv[5] = ck;
	argvlen[5] = redis_key_name(redis_node_keys(rn), key, p->count_lidh, &p->count, ck);
	argv[6] = bk;
	argvlen[6] = redis_key_name(redis_node_keys(rn), key, rule->lidh[p->ban - 1],
				    &rule->limits[p->ban - 1], bk);
	return redis_node_command(rn, on_penalize_reply, rn, 7, argv, argvlen);
}

static void on_return_reply(struct redis_conn *ac, redisReply *reply, void *priv)
{
	(void)ac;
	oneway_error(priv, reply, "lease return");
}

/* The values a return compares, as the library takes them: a msgpack
 * array of one string (a token bucket's value at the grant) or nil per
 * limit. Returns its length. */
static size_t return_values(const struct lease_return *ret, uint8_t *p)
{
	size_t n = 0;

	p[n++] = (uint8_t)(0x90 + ret->nlimits);
	for (size_t j = 0; j < ret->nlimits; j++) {
		if (!ret->value_len[j]) {
			p[n++] = 0xc0;
			continue;
		}
		p[n++] = 0xd9;
		p[n++] = ret->value_len[j];
		memcpy(p + n, ret->value[j], ret->value_len[j]);
		n += ret->value_len[j];
	}
	return n;
}

int redis_node_lease_return(struct redis_node *rn, const struct lease_return *ret)
{
	uint8_t values[1 + LEASE_LIMITS_MAX * (2 + LEASE_VALUE_MAX)];
	struct give g;

	if (!redis_node_ready(rn) || ret->nlimits == 0 || ret->nlimits > LEASE_LIMITS_MAX ||
	    ret->tokens == 0 || ret->tokens > UINT32_MAX)
		return -1;
	memset(&g, 0, sizeof(g));
	g.fn = redis_node_is_cluster(rn) ? "rl8_return_cluster" : "rl8_return";
	g.take_us = ret->take_us;
	g.expect = values;
	g.expect_len = return_values(ret, values);
	g.cost = ret->tokens;
	g.limits = ret->limits;
	g.nl = ret->nlimits;
	for (size_t j = 0; j < ret->nlimits; j++) {
		g.key[j] = ret->key;
		g.lidh[j] = ret->lidh[j];
	}
	return send_give(rn, &g, on_return_reply);
}
