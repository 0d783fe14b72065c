/* SPDX-License-Identifier: Apache-2.0 */
/* store_redis_topology.c: where a worker's queries go (see store_redis.h):
 * its nodes, chosen by topology, and the node that decides a client;
 * Sentinel's master and the Cluster's slot map as they change; where a
 * client's keys live as the latest topology a worker learned says, for
 * the admin endpoint (redis_admin.c).
 *
 *   standalone  one node
 *   shards      one node per server; a client goes to one by jump
 *               consistent hash of its key, so adding a shard moves about
 *               1/N of the clients (who then start with a full bucket)
 *   sentinel    one node, the master the sentinels name (redis_sentinel.c);
 *               replaced on a failover
 *   cluster     one node per master of the slot map (redis_slots.c asks a
 *               node for CLUSTER SLOTS); a call holds the clients of every
 *               slot of its node. A query whose key the node no longer
 *               serves comes back "moved": held, the map refreshed, sent
 *               again where its slot is now (store_redis.c).
 */
#include "store_redis_int.h"

#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "redis_admin.h"
#include "redis_health.h"
#include "redis_slots.h"

#define REFRESH_GAP 0.1            /* cluster map: at most this often (s) */
#define REFRESH_TIMEOUT 1.0
#define RECHECK 1.0                /* while something is wrong, look again */
#define RECHECK_DOWN 0.25          /* cluster: a master is down: read the map */

/* ---- nodes ---------------------------------------------------------------------- */

struct redis_node *new_node(struct redis_worker *rw, const struct addr *a)
{
	struct redis_node *rn = redis_node_new(rw->sw->loop, rw->sw->idx, a, rw->cfg, &node_cb, rw,
					       node_stats(rw->rst, a));

	if (!rn)
		log_err("redis: worker %d: out of memory for a connection", rw->sw->idx);
	else if (rw->cfg->topology == REDIS_CLUSTER || rw->cfg->topology == REDIS_SHARDS)
		redis_node_share_calls(rn, &rw->calls);
	return rn;
}

/* Takes node i out of use; it is freed before the loop blocks, outside
 * any of its callbacks (its queries are then answered by the policy). */
static void retire(struct redis_worker *rw, size_t i)
{
	if (rw->node[i] && rw->nretired < WORKER_NODES_MAX)
		rw->retired[rw->nretired++] = rw->node[i];
	else
		redis_node_free(rw->node[i]);
	rw->node[i] = NULL;
}

void on_reap(struct ev_loop *loop, ev_prepare *p, int revents)
{
	struct redis_worker *rw = p->data;

	if (!rw->nretired)
		return;
	while (rw->nretired)
		redis_node_free(rw->retired[--rw->nretired]);
	ev_idle_start(loop, &rw->kick_w);
}

void on_reap_kick(struct ev_loop *loop, ev_idle *w, int revents)
{
	ev_idle_stop(loop, w);
}

/* A client's shard: jump consistent hash (Lamping and Veach) of its key,
 * which is uniform already (SipHash). */
static size_t shard_of(const uint8_t *key, size_t n)
{
	uint64_t k;
	int64_t b = -1, j = 0;

	memcpy(&k, key, sizeof(k));
	while (j < (int64_t)n) {
		b = j;
		k = k * 2862933555777941757ULL + 1;
		j = (int64_t)((double)(b + 1) * ((double)(1LL << 31) / (double)((k >> 33) + 1)));
	}
	return (size_t)b;
}

/* The slot of a client's keys, as the cluster hashes their tag. */
static unsigned slot_of(const struct redis_keys *k, const uint8_t *key)
{
	char tag[REDIS_KEY_TAG_MAX + 1];

	return redis_cluster_slot(tag, redis_key_tag(k, key, tag));
}

/* The node that decides a client now, or NULL when none can (no master
 * known, no map, a slot without a master). */
struct redis_node *route(struct redis_worker *rw, const uint8_t *key)
{
	int m;

	switch (rw->cfg->topology) {
	case REDIS_STANDALONE:
	case REDIS_SENTINEL:
		return rw->node[0];
	case REDIS_SHARDS:
		return rw->node[shard_of(key, rw->nnodes)];
	case REDIS_CLUSTER:
		if (!rw->map)
			return NULL;
		m = redis_cluster_master_of(rw->map, slot_of(&rw->cfg->keys, key));
		if (m < 0)
			return NULL;
		if (!rw->node[m])
			rw->node[m] = new_node(rw, &rw->map->master[m]);
		return rw->node[m];
	}
	return NULL;
}

/* ---- Sentinel ---------------------------------------------------------------------- */

static void on_master(void *owner, const struct addr *a)
{
	struct redis_worker *rw = owner;

	if (rw->node[0] && addr_equal(redis_node_addr(rw->node[0]), a))
		return;
	if (rw->node[0])
		STAT_INC(rw->stats.topology_changes);
	retire(rw, 0);
	rw->node[0] = new_node(rw, a);
	pthread_mutex_lock(&rw->rst->lock);
	rw->rst->master = *a;
	rw->rst->has_master = true;
	pthread_mutex_unlock(&rw->rst->lock);
	resubmit_held(rw);
}

const struct redis_sentinel_cb sentinel_cb = { on_master };

/* ---- Cluster ------------------------------------------------------------------------ */

/* A new map: nodes of masters that left or moved are retired, the others
 * kept by address. */
static void install_map(struct redis_worker *rw, const struct redis_cluster_map *map)
{
	struct redis_node *keep[WORKER_NODES_MAX] = { NULL };
	struct redis_cluster_map *copy;

	if (rw->map && redis_cluster_map_equal(rw->map, map))
		return;
	copy = rw->map ? rw->map : xmalloc(sizeof(*copy));
	if (!copy)
		return;
	for (size_t i = 0; i < rw->nnodes; i++) {
		size_t m;

		if (!rw->node[i])
			continue;
		for (m = 0; m < map->nmasters; m++)
			if (addr_equal(redis_node_addr(rw->node[i]), &map->master[m]))
				break;
		if (m < map->nmasters && !keep[m]) {
			keep[m] = rw->node[i];
			rw->node[i] = NULL;
		} else {
			retire(rw, i);
		}
	}
	if (rw->map)
		STAT_INC(rw->stats.topology_changes);
	memcpy(copy, map, sizeof(*copy));
	rw->map = copy;
	memcpy(rw->node, keep, sizeof(keep));
	rw->nnodes = map->nmasters;
	log_info("redis: cluster: worker %d: %zu masters serve %zu of 16384 slots", rw->sw->idx,
		 map->nmasters, map->covered);
	pthread_mutex_lock(&rw->rst->lock);
	if (!rw->rst->map)
		rw->rst->map = xmalloc(sizeof(*rw->rst->map));
	if (rw->rst->map)
		memcpy(rw->rst->map, map, sizeof(*map));
	pthread_mutex_unlock(&rw->rst->lock);
}

/* CLUSTER SLOTS failed at node `where`: counted by kind; a password
 * wanted or refused and a server that is no Cluster node are logged once
 * with their cure, the others each time. */
static void slots_failed(struct redis_worker *rw, const struct addr *node, const char *where,
			 const char *why)
{
	static const char reply[] = "error reply: ";
	bool replied = !strncmp(why, reply, sizeof(reply) - 1);
	const char *text = replied ? why + sizeof(reply) - 1 : why;
	enum redis_error_kind k = replied ? redis_error_classify(text, strlen(text))
				  : !strcmp(why, "AUTH refused") ? REDIS_ERROR_AUTH
								 : REDIS_ERROR_CONNECT;

	if (redis_error_permanent(k)) {
		redis_health_failed(node_stats(rw->rst, node), where, k, text, true);
		return;
	}
	redis_health_count(node_stats(rw->rst, node), k);
	log_warn("redis: cluster: worker %d: CLUSTER SLOTS from %s: %s", rw->sw->idx, where, why);
}

static void on_slots(void *owner, const struct addr *node, const struct redis_cluster_map *map,
		     const char *why)
{
	struct redis_worker *rw = owner;
	char where[ADDR_HOST_MAX + 16];

	rw->asking = NULL;
	if (!map || map->covered == 0) {
		addr_format(node, where, sizeof(where));
		slots_failed(rw, node, where, map ? "no slot served" : why);
		/* ask another node next time, backing off while none answers */
		rw->seed++;
		rw->backoff = rw->backoff ? rw->backoff * 2 : REFRESH_GAP;
		if (rw->backoff > RECHECK)
			rw->backoff = RECHECK;
		ev_timer_stop(rw->sw->loop, &rw->recheck_w);
		ev_timer_set(&rw->recheck_w, rw->backoff, 0.);
		ev_timer_start(rw->sw->loop, &rw->recheck_w);
		return;
	}
	rw->backoff = 0;
	rw->stale = false;
	rw->map_checked = clock_now_us();
	install_map(rw, map);
	resubmit_held(rw);
	/* A master that does not answer may be replaced any moment (its
	 * replica promoted): look again soon, until the map says so. */
	for (size_t i = 0; i < WORKER_NODES_MAX; i++)
		if (rw->node[i] && !redis_node_ready(rw->node[i])) {
			ev_timer_stop(rw->sw->loop, &rw->recheck_w);
			ev_timer_set(&rw->recheck_w, RECHECK_DOWN, 0.);
			ev_timer_start(rw->sw->loop, &rw->recheck_w);
			break;
		}
}

/* The nodes to ask, in turn: the masters of the map in use, then the
 * seeds (a map can point only at nodes that are gone). */
static const struct addr *next_seed(struct redis_worker *rw)
{
	size_t known = rw->map ? rw->map->nmasters : 0;
	size_t i = rw->seed % (known + rw->cfg->nnodes);

	return i < known ? &rw->map->master[i] : &rw->cfg->nodes[i - known];
}

/* Asks a node for the slot map, at most every REFRESH_GAP. */
void refresh_map(struct redis_worker *rw)
{
	int64_t now = clock_now_us();

	if (rw->asking || ev_is_active(&rw->recheck_w))
		return;
	if (now - rw->last_refresh < (int64_t)(REFRESH_GAP * 1e6)) {
		ev_timer_set(&rw->recheck_w,
			     (double)(rw->last_refresh + (int64_t)(REFRESH_GAP * 1e6) - now) / 1e6, 0.);
		ev_timer_start(rw->sw->loop, &rw->recheck_w);
		return;
	}
	rw->last_refresh = now;
	rw->asking = redis_slots_ask(rw->sw->loop, next_seed(rw), rw->cfg, REFRESH_TIMEOUT,
				     on_slots, rw);
}

void on_recheck(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_worker *rw = t->data;

	if (rw->cfg->topology == REDIS_CLUSTER)
		refresh_map(rw);
}

/* ---- where a client's keys live, for the admin endpoint ---------------------------- */

/* redis_admin_locate_fn: the node that serves a client's keys as the
 * latest topology a worker learned says. */
static int locate(struct store *st, const uint8_t *key, struct addr *to)
{
	struct redis_store *rst = st->impl;
	const struct redis_config *cfg = &rst->cfg;
	int rc = 0;

	pthread_mutex_lock(&rst->lock);
	switch (cfg->topology) {
	case REDIS_STANDALONE:
		*to = cfg->addr;
		break;
	case REDIS_SHARDS:
		*to = cfg->nodes[shard_of(key, cfg->nnodes)];
		break;
	case REDIS_SENTINEL:
		if (rst->has_master)
			*to = rst->master;
		else
			rc = -1;
		break;
	case REDIS_CLUSTER:
		if (rst->map && redis_cluster_node_of(rst->map, slot_of(&cfg->keys, key)))
			*to = *redis_cluster_node_of(rst->map, slot_of(&cfg->keys, key));
		else
			rc = -1;
		break;
	}
	pthread_mutex_unlock(&rst->lock);
	return rc;
}

void redis_admin_op(struct store *st, struct store_admin *a)
{
	struct redis_store *rst = st->impl;

	redis_admin(st, a, &rst->cfg, locate);
}
