/* SPDX-License-Identifier: Apache-2.0 */
/* store_redis_int.h: the Redis store's insides, shared by store_redis.c
 * (a worker's queries: held, sent, answered; the store interface),
 * store_redis_config.c (the configuration, the counters by server) and
 * store_redis_topology.c (a worker's nodes, routing, Sentinel, Cluster).
 * Nothing else includes it. */
#ifndef RL_STORE_REDIS_INT_H
#define RL_STORE_REDIS_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "addr.h"
#include "lease.h"
#include "redis_cluster.h"
#include "redis_node.h"
#include "redis_sentinel.h"
#include "store.h"
#include "store_redis.h"

#define ENTRIES_MAX 512            /* node addresses with counters */
#define WORKER_NODES_MAX REDIS_CLUSTER_MASTERS_MAX

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
	/* what their freeing answered goes out in one more turn of the loop
	 * (see redis_node_int.h's kick_w) */
	ev_idle kick_w;
};
/* The store's functions: a store is Redis's when st->ops is this one. */
extern const struct store_ops redis_ops;

/* store_redis.c: what a worker's nodes call back (answers, failures, moves). */
extern const struct redis_node_cb node_cb;

/* store_redis.c: a node (or map) became available: what waited goes out again. */
void resubmit_held(struct redis_worker *rw);

/* store_redis_config.c: the counters of address a, made on first use. Any thread. */
struct redis_stats *node_stats(struct redis_store *rst, const struct addr *a);

/* store_redis_topology.c: a node of the worker's to a, or NULL (logged). */
struct redis_node *new_node(struct redis_worker *rw, const struct addr *a);

/* store_redis_topology.c: frees the nodes retired since the loop last blocked. */
void on_reap(struct ev_loop *loop, ev_prepare *p, int revents);
/* The idle watcher of on_reap: one turn, then stops. */
void on_reap_kick(struct ev_loop *loop, ev_idle *w, int revents);

/* store_redis_topology.c: the node that decides a client now, or NULL when none can. */
struct redis_node *route(struct redis_worker *rw, const uint8_t *key);

/* store_redis_topology.c: a new master named by the sentinels. */
extern const struct redis_sentinel_cb sentinel_cb;

/* store_redis_topology.c: asks a node for the Cluster's slot map, at most every REFRESH_GAP. */
void refresh_map(struct redis_worker *rw);

/* store_redis_topology.c: recheck_w's callback: the topology looked at again. */
void on_recheck(struct ev_loop *loop, ev_timer *t, int revents);

/* store_redis_topology.c: the admin endpoint's look at a client's keys, where they live. */
void redis_admin_op(struct store *st, struct store_admin *a);

#endif
