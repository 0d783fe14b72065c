/* SPDX-License-Identifier: Apache-2.0 */
/* redis_node.h: one Redis server as one worker sees it.
 *
 * A connection on the worker's loop (redis_conn.h, over the transport of
 * redis_transport.h), the decision library loaded on it, and the
 * decisions waiting for it: a bounded queue that leaves in batches (each
 * encoded by redis_batch.c), one FCALL per batch and loop
 * iteration, a few batches in flight (pipelined). Every query has a
 * deadline; a query whose answer is not back in time, or that a failed
 * call or a lost connection leaves without one, is reported failed,
 * exactly once (saturated when its deadline passed while the server kept
 * answering). A circuit breaker stops calling a server that keeps
 * failing (errors, a lost connection, silence), for a while; the
 * connection comes back by itself with backoff.
 *
 * The owner (a Redis store, which may hold several nodes per worker) gets
 * each outcome through the callbacks it registered; a node never calls up
 * by name. Only the worker's thread touches a node. */
#ifndef RL_REDIS_NODE_H
#define RL_REDIS_NODE_H

#include <ev.h>
#include <stdbool.h>
#include <stdint.h>

#include "addr.h"
#include "decide.h"
#include "lease.h"
#include "redis_batch.h"
#include "redis_cluster.h"
#include "redis_conn.h"
#include "store.h"

struct redis_keys;

struct redis_config;
struct redis_node;

struct redis_node_cb {
	/* Redis decided r: res[0..nlimits) and the deciding limit's index;
	 * redis_now is Redis's clock then (what a refund of r names).
	 * `sent` is when the call left (local clock), before Redis read its
	 * own clock. `grant`: the lease r asked for (r->lease), or NULL. */
	void (*decided)(void *owner, const struct redis_query *r,
			const struct limit_result *res, int decider, int64_t sent,
			int64_t redis_now, const struct lease_grant *grant);
	/* Redis did not decide r (deadline, error, lost connection). `sent`:
	 * r went out in a call, which Redis may have run (r must not be sent
	 * again); else r never left this node's queue. `saturated`: r's
	 * deadline passed while Redis kept answering (busy, not failing):
	 * r is for the rule's local bucket, not its failure policy. */
	void (*failed)(void *owner, const struct redis_query *r, bool sent, bool saturated);
	/* A Cluster node does not serve r's key (any more): nothing was
	 * taken; r is the owner's to send where the key lives. */
	void (*moved)(void *owner, struct redis_node *rn, const struct redis_query *r);
	/* A sign that the topology may have changed: the connection failed
	 * or was lost, or Redis answered READONLY, LOADING, MASTERDOWN or
	 * CLUSTERDOWN. The owner may look again (Sentinel, slot map); it must
	 * not free the node from inside a callback. May be NULL. */
	void (*trouble)(void *owner, struct redis_node *rn);
	/* The answer to redis_node_where(): `here` when the key lives on the
	 * node after all; else e says where (kind MOVED or ASK with an
	 * address, or another error), or is NULL when the node did not
	 * answer. */
	void (*where)(void *owner, const struct redis_query *r, int here,
		      const struct redis_cluster_error *e);
	/* Whether rn may send a call now, when the owner shares a budget of
	 * calls in flight among its nodes (see redis_node_share_calls). May
	 * be NULL: each node on its own. */
	bool (*may_send)(void *owner, const struct redis_node *rn);
};

/* Writes what the node has queued to its socket now, as far as it takes
 * it without waiting: after each round of calls, and before the node is
 * freed at a stop. */
void redis_node_flush(struct redis_node *rn);

/* The node's name (its address), counters, and whether it is a Cluster's. */
const char *redis_node_name(const struct redis_node *rn);
struct redis_stats *redis_node_stats(struct redis_node *rn);
bool redis_node_is_cluster(const struct redis_node *rn);
/* Whether the limits' keys go to it without an expiry (--redis-expiry:
 * never, or auto while the connection's last look found it evicting). */
bool redis_node_unexpiring(const struct redis_node *rn);
/* How the node's store names its keys (its configuration's). */
const struct redis_keys *redis_node_keys(const struct redis_node *rn);

/* Any command, when the node is ready (else -1): cb gets the reply, or
 * NULL when the connection goes first. */
int redis_node_command(struct redis_node *rn, redis_reply_fn *cb, void *priv, int argc,
		       const char **argv, const size_t *argvlen);

/* Connects to `addr` with cfg's credentials and limits (cfg must outlive
 * the node). Counters go to *stats. NULL when out of memory. */
struct redis_node *redis_node_new(struct ev_loop *loop, int worker, const struct addr *addr,
				  const struct redis_config *cfg, const struct redis_node_cb *cb,
				  void *owner, struct redis_stats *stats);

/* Reports every query still waiting as failed, then frees the node. */
void redis_node_free(struct redis_node *rn);

/* The address the node talks to. */
const struct addr *redis_node_addr(const struct redis_node *rn);

/* Connected, the library loaded. */
bool redis_node_ready(const struct redis_node *rn);

/* When the node's last connection or handshake failed, while it is not
 * ready again (decisions then go to the failure policy); else 0. */
int64_t redis_node_down_since(const struct redis_node *rn);

/* When the oldest query waiting here was queued (local clock), or
 * INT64_MAX when none waits or the node cannot send. */
int64_t redis_node_oldest(const struct redis_node *rn);

/* Counts this node's calls in flight in *calls too, the owner's count of
 * all its nodes' calls (its budget is checked by may_send). */
void redis_node_share_calls(struct redis_node *rn, int *calls);

/* Queues a copy of r for the next batch. Returns 0, or -1 when the node
 * cannot take it now (not connected, breaker open, queue full): r is then
 * the caller's to answer. */
int redis_node_submit(struct redis_node *rn, const struct redis_query *r);

/* Asks the node where r's key lives (a plain command on the key, whose
 * redirection says it): the answer comes to cb->where. Returns 0, or -1
 * when the node cannot ask now. */
int redis_node_where(struct redis_node *rn, const struct redis_query *r);

#endif
