/* SPDX-License-Identifier: Apache-2.0 */
/* redis_ready.c: whether a Redis store decides, for GET /readyz (see
 * redis_ready.h). */
#include "redis_ready.h"

#include <stdio.h>

#include "redis_health.h"
#include "store_redis.h"

struct readiness {
	bool cluster;
	size_t serving;      /* servers with nodes */
	char *why;           /* the first reason found */
	size_t len;
	bool said;
};

static void say_why(struct readiness *r, const char *node, const struct redis_stats *st,
		    bool connecting)
{
	uint64_t last = STAT_GET(st->last_kind);
	enum redis_error_kind k = last ? (enum redis_error_kind)(last - 1) : REDIS_ERROR_CONNECT;

	if (r->said)
		return;
	r->said = true;
	if (last && k == REDIS_ERROR_CLUSTER_MISMATCH)
		snprintf(r->why, r->len, "redis %s: %s", node,
			 r->cluster ? "not a Cluster node: use --redis, not --redis-cluster"
				    : "a Cluster node: use --redis-cluster, not --redis");
	else if (last)
		snprintf(r->why, r->len, "redis %s: %s", node, redis_error_reason(k));
	else if (connecting)
		snprintf(r->why, r->len, "redis %s: connecting", node);
}

static void look_ready(void *arg, const char *node, const struct redis_stats *st)
{
	struct readiness *r = arg;
	uint64_t nodes = STAT_GET(st->nodes);

	if (!nodes)
		return;
	r->serving++;
	if (STAT_GET(st->ready) < nodes)
		say_why(r, node, st, true);
}

/* Servers without nodes: a seed or a former master, whose failure may say
 * why no server serves. */
static void look_idle(void *arg, const char *node, const struct redis_stats *st)
{
	if (!STAT_GET(st->nodes) && STAT_GET(st->last_kind))
		say_why(arg, node, st, false);
}

bool redis_health_ready(struct store *st, bool cluster, char *why, size_t len)
{
	struct readiness r = { cluster, 0, why, len, false };

	if (len)
		why[0] = '\0';
	store_redis_each_node(st, look_ready, &r);
	if (r.said)
		return false;
	if (r.serving)
		return true;
	store_redis_each_node(st, look_idle, &r);
	if (!r.said)
		snprintf(why, len, "redis: no server to decide with yet");
	return false;
}
