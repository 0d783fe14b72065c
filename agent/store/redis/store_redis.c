/* SPDX-License-Identifier: Apache-2.0 */
/* store_redis.c: the Redis store (see store_redis.h).
 *
 * Per worker: the nodes it sends to (redis_node.c), chosen by topology;
 * a queue of queries held while no node can take them (no master known
 * yet, a slot that moved); the refused-until cache. Process-wide: the
 * configuration, per-node counters for the metrics (by address, kept for
 * the process's life), and the latest topology a worker learned, for the
 * admin endpoint (redis_admin.c).
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
 *               again where its slot is now.
 */
#include "store_redis.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "memstore.h"
#include "overrides.h"
#include "redis_admin.h"
#include "redis_auth.h"
#include "redis_cluster.h"
#include "redis_node.h"
#include "redis_oneway.h"
#include "redis_health.h"
#include "redis_info.h"
#include "redis_overrides.h"
#include "redis_ready.h"
#include "redis_sentinel.h"
#include "redis_slots.h"
#include "redis_split.h"
#include "refusals.h"
#include "store.h"

#define LEASE_CLIENTS 1024         /* clients followed for leases, per worker */
#define LEASE_SWEEP 0.05           /* leases over go back this often (s) */
#define ENTRIES_MAX 512            /* node addresses with counters */
#define WORKER_NODES_MAX REDIS_CLUSTER_MASTERS_MAX
#define MOVES_MAX 3                /* a query follows its key this often */
#define REFRESH_GAP 0.1            /* cluster map: at most this often (s) */
#define REFRESH_TIMEOUT 1.0
#define RECHECK 1.0                /* while something is wrong, look again */
#define RECHECK_DOWN 0.25          /* cluster: a master is down: read the map */

/* Counters of one server address, shared by the workers' nodes to it. */
struct node_entry {
	struct addr addr;
	char name[ADDR_HOST_MAX + 16];
	struct redis_stats stats;
};

/* The process-wide part (st->impl). */
struct redis_store {
	struct redis_config cfg;
	pthread_mutex_t lock;          /* entries' growth; master; map */
	struct node_entry *entry[ENTRIES_MAX];
	atomic_size_t nentries;
	struct node_entry overflow;    /* addresses past ENTRIES_MAX */
	bool has_master;               /* sentinel: the latest master */
	struct addr master;
	struct redis_cluster_map *map; /* cluster: the latest map, or NULL */
};

/* A worker's part. */
struct redis_worker {
	struct store_worker *sw;
	struct redis_stats stats;      /* read by the metrics, written here */
	struct redis_store *rst;
	const struct redis_config *cfg;
	struct refusals *cache;        /* refused-until (refusals.h) */
	struct lease_table *leases;    /* leased tokens (lease.h) */
	struct lease_config lease;
	ev_timer lease_w;              /* gives back the leases whose time is over */
	struct redis_node *node[WORKER_NODES_MAX];
	size_t nnodes;
	/* queries no node can take now, oldest first (a ring) */
	struct redis_query *held;
	size_t hhead, hlen, hcap;
	ev_timer held_w;               /* the oldest held query's deadline */
	ev_timer recheck_w;            /* look at the topology again */
	struct redis_sentinel *sentinel;
	/* cluster */
	struct redis_cluster_map *map; /* NULL until the first answer */
	struct redis_slots *asking;    /* a CLUSTER SLOTS under way */
	size_t seed;                   /* the next node to ask */
	int64_t last_refresh;
	int64_t map_checked;           /* the last CLUSTER SLOTS answered */
	bool stale;                    /* a node said the map is wrong */
	int calls;                     /* calls in flight, all nodes (see may_send) */
	double backoff;                /* between failed questions */
	/* worker 0: the fleet's overrides, polled (see on_ov_poll) */
	ev_timer ov_w;
	struct redis_overrides *ovr;
	/* worker 0: each server's memory and keys (see on_info_poll) */
	ev_timer info_w;
	struct redis_info *info;
	/* nodes replaced by a new map or master, freed outside callbacks */
	struct redis_node *retired[WORKER_NODES_MAX];
	size_t nretired;
	ev_prepare reap_w;
};

static void resubmit_held(struct redis_worker *rw);
static void refresh_map(struct redis_worker *rw);

/* ---- configuration -------------------------------------------------------------- */

void store_redis_defaults(struct redis_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	addr_parse("127.0.0.1:6379", 0, &cfg->addr);
	cfg->timeout = 0.020;
	cfg->max_pending = 10000;
	cfg->batch_max = 64;
	cfg->pipeline = 2;
	cfg->local_cache = 1;
	cfg->lease_us = 0;
	cfg->lease_share = 10;
	cfg->info_interval = 10.;
	redis_keys_defaults(&cfg->keys);
}

int store_redis_set_addr(struct redis_config *cfg, const char *addr)
{
	return addr_parse(addr, ADDR_UNIX, &cfg->addr);
}

int store_redis_set_nodes(struct redis_config *cfg, const char *list)
{
	char buf[4096], *tok, *save = NULL;
	size_t n = 0;

	if (strlen(list) >= sizeof(buf))
		return -1;
	snprintf(buf, sizeof(buf), "%s", list);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (n == REDIS_NODES_MAX || addr_parse(tok, 0, &cfg->nodes[n]) < 0)
			return -1;
		for (size_t k = 0; k < n; k++)
			if (addr_equal(&cfg->nodes[k], &cfg->nodes[n]))
				return -1;
		n++;
	}
	if (n == 0)
		return -1;
	cfg->nnodes = n;
	return 0;
}

const char *store_redis_check(const struct redis_config *cfg)
{
	switch (cfg->topology) {
	case REDIS_STANDALONE:
		return NULL;
	case REDIS_SENTINEL:
		if (cfg->nnodes == 0)
			return "Sentinel needs the sentinels' addresses";
		if (!cfg->master[0])
			return "Sentinel needs the master's name (--redis-master)";
		return NULL;
	case REDIS_CLUSTER:
		if (cfg->nnodes == 0)
			return "Cluster needs seed nodes";
		return NULL;
	case REDIS_SHARDS:
		if (cfg->nnodes == 0)
			return "shards need their addresses";
		return NULL;
	}
	return "unknown topology";
}

const char *store_redis_topology_name(enum redis_topology t)
{
	switch (t) {
	case REDIS_STANDALONE:
		return "standalone";
	case REDIS_SENTINEL:
		return "sentinel";
	case REDIS_CLUSTER:
		return "cluster";
	case REDIS_SHARDS:
		return "shards";
	}
	return "?";
}

/* ---- per-node counters ---------------------------------------------------------- */

/* The counters of address a, made on first use. Any thread. */
static struct redis_stats *node_stats(struct redis_store *rst, const struct addr *a)
{
	size_t n = atomic_load(&rst->nentries);
	struct node_entry *e;

	for (size_t i = 0; i < n; i++)
		if (addr_equal(&rst->entry[i]->addr, a))
			return &rst->entry[i]->stats;
	pthread_mutex_lock(&rst->lock);
	n = atomic_load(&rst->nentries);
	for (size_t i = 0; i < n; i++)
		if (addr_equal(&rst->entry[i]->addr, a)) {
			pthread_mutex_unlock(&rst->lock);
			return &rst->entry[i]->stats;
		}
	e = n < ENTRIES_MAX ? xcalloc(1, sizeof(*e)) : NULL;
	if (!e) {
		pthread_mutex_unlock(&rst->lock);
		return &rst->overflow.stats;
	}
	e->addr = *a;
	addr_format(a, e->name, sizeof(e->name));
	rst->entry[n] = e;
	/* published after it is whole: readers load the count first */
	atomic_store(&rst->nentries, n + 1);
	pthread_mutex_unlock(&rst->lock);
	return &e->stats;
}

static const struct store_ops redis_ops;

void store_redis_each_node(struct store *st, redis_node_stats_fn *fn, void *arg)
{
	struct redis_store *rst = st->impl;
	size_t n;

	if (st->ops != &redis_ops)
		return;
	n = atomic_load(&rst->nentries);
	for (size_t i = 0; i < n; i++)
		fn(arg, rst->entry[i]->name, &rst->entry[i]->stats);
	if (n == ENTRIES_MAX)
		fn(arg, "other", &rst->overflow.stats);
}

/* struct redis_stats holds counters only (struct hist and struct
 * lease_stats too): summed as an array of them. */
_Static_assert(sizeof(struct redis_stats) % sizeof(counter_t) == 0, "counters only");

static void stats_add(void *to, const char *name, const struct redis_stats *from)
{
	counter_t *t = to;
	const counter_t *f = (const counter_t *)from;

	(void)name;
	for (size_t i = 0; i < sizeof(*from) / sizeof(counter_t); i++)
		STAT_ADD(t[i], STAT_GET(f[i]));
}

void store_redis_set_passwords(struct store *st, const char *password,
			       const char *sentinel_password)
{
	struct redis_store *rst = st->impl;

	if (st->ops == &redis_ops && rst->cfg.secrets)
		redis_secrets_set(rst->cfg.secrets, password, sentinel_password);
}

bool store_redis_ready(struct store *st, char *why, size_t len)
{
	if (st->ops != &redis_ops)
		return true;
	return redis_health_ready(st, ((struct redis_store *)st->impl)->cfg.topology == REDIS_CLUSTER,
				  why, len);
}

bool store_redis_stats(struct store *st, struct redis_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (st->ops != &redis_ops)
		return false;
	for (const struct store_worker *sw = st->workers; sw; sw = sw->next)
		if (sw->impl)
			stats_add(out, NULL, &((const struct redis_worker *)sw->impl)->stats);
	store_redis_each_node(st, stats_add, out);
	return true;
}

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

/* ---- nodes ---------------------------------------------------------------------- */

static const struct redis_node_cb node_cb;

static struct redis_node *new_node(struct redis_worker *rw, const struct addr *a)
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

static void on_reap(struct ev_loop *loop, ev_prepare *p, int revents)
{
	struct redis_worker *rw = p->data;

	while (rw->nretired)
		redis_node_free(rw->retired[--rw->nretired]);
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
static struct redis_node *route(struct redis_worker *rw, const uint8_t *key)
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
static void resubmit_held(struct redis_worker *rw)
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

static const struct redis_node_cb node_cb = { on_decided, on_failed, on_moved, on_trouble,
					      on_where, may_send };

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

static const struct redis_sentinel_cb sentinel_cb = { on_master };

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
static void refresh_map(struct redis_worker *rw)
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

static void on_recheck(struct ev_loop *loop, ev_timer *t, int revents)
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

static void redis_admin_op(struct store *st, struct store_admin *a)
{
	struct redis_store *rst = st->impl;

	redis_admin(st, a, &rst->cfg, locate);
}

/* ---- the store interface ------------------------------------------------------- */

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

static const struct store_ops redis_ops = {
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
