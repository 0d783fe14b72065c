/* store_redis.h: the Redis store, buckets shared by every agent of a fleet.
 *
 * Each worker has its own asynchronous hiredis connection on its own loop.
 * Queries wait in a bounded queue and leave in batches, one FCALL of the
 * decision library per batch and loop iteration, several batches
 * pipelined.
 * Every query has a deadline: one whose answer is not back in time is
 * answered without the store (the rule's failure policy, store.c). A
 * client refused until time T is answered locally until T. A circuit
 * breaker stops calling a Redis that keeps failing, for a while.
 *
 * Everything else is behind the store interface (store.h). */
#ifndef RL_STORE_REDIS_H
#define RL_STORE_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include "addr.h"
#include "redis_keys.h"

struct store;

/* Where the buckets live. */
enum redis_topology {
	REDIS_STANDALONE = 0,    /* one server: addr */
	REDIS_SENTINEL = 1,      /* the master Sentinel names: nodes[] are sentinels */
	REDIS_CLUSTER = 2,       /* a Redis Cluster: nodes[] are seeds */
	REDIS_SHARDS = 3,        /* independent servers: nodes[], a client each */
};

#define REDIS_NODES_MAX 32       /* sentinels, seeds or shards listed */

struct redis_config {
	enum redis_topology topology;
	struct addr addr;        /* standalone: HOST:PORT or a Unix socket path */
	struct addr nodes[REDIS_NODES_MAX];
	size_t nnodes;
	char master[128];        /* Sentinel: the master's name */
	char sentinel_user[128]; /* Sentinel: AUTH to the sentinels, optional */
	char sentinel_password[256];
	char user[128];          /* ACL user, optional */
	char password[256];      /* AUTH, optional */
	double timeout;          /* deadline of a decision, seconds */
	int max_pending;         /* queries waiting per worker, queued or sent */
	int batch_max;           /* queries per call */
	int pipeline;            /* calls in flight per worker */
	int local_cache;         /* answer known-refused clients locally */
	int64_t lease_us;        /* leases (lease.h) of this interval; 0: none */
	unsigned lease_share;    /* a lease's most, in percent of a capacity */
	struct redis_keys keys;  /* how keys are named: packing, expiry */
};

void store_redis_defaults(struct redis_config *cfg);

/* Parses "HOST:PORT", "[V6]:PORT" or a Unix socket path ("/..."). */
int store_redis_set_addr(struct redis_config *cfg, const char *addr);

/* Parses a comma-separated list of HOST:PORT into cfg->nodes. Returns 0,
 * or -1 (an empty list, a bad address, more than REDIS_NODES_MAX, the same
 * address twice). */
int store_redis_set_nodes(struct redis_config *cfg, const char *list);

/* What a configuration lacks or contradicts, or NULL when it is usable:
 * Sentinel without a master name, Cluster without seeds, ... */
const char *store_redis_check(const struct redis_config *cfg);

/* "standalone", "sentinel", "cluster" or "shards". */
const char *store_redis_topology_name(enum redis_topology t);

/* The Redis store with a copy of cfg; mem_max_keys bounds the buckets of
 * the local failure policy. Connections start with the workers. NULL when
 * out of memory. */
struct store *store_redis_new(const struct redis_config *cfg, size_t mem_max_keys);

#endif
