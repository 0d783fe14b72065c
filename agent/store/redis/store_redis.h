/* SPDX-License-Identifier: Apache-2.0 */
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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"
#include "lease.h"
#include "stats.h"
#include "redis_errors.h"
#include "redis_keys.h"

struct redis_secrets;
struct store;

/* Where the buckets live. */
enum redis_topology {
	REDIS_STANDALONE = 0,    /* one server: addr */
	REDIS_SENTINEL = 1,      /* the master Sentinel names: nodes[] are sentinels */
	REDIS_CLUSTER = 2,       /* a Redis Cluster: nodes[] are seeds */
	REDIS_SHARDS = 3,        /* independent servers: nodes[], a client each */
};

#define REDIS_NODES_MAX 32       /* sentinels, seeds or shards listed */

/* TLS to the servers (--redis-tls*, store.tls): strings "" when not set. */
struct redis_tls_settings {
	bool on;
	char ca[256];            /* the CA file to verify against; "": the system's */
	char cert[256];          /* the client certificate (chain) file, with key */
	char key[256];
	char server_name[256];   /* SNI and the name verified; "": the address's host */
	bool no_verify;          /* no verification of the server at all */
	bool sentinel_plain;     /* store.sentinel_tls: false: sentinels without TLS */
};

struct redis_tls; /* the TLS context the connections share (redis_transport_tls.h) */

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
	double info_interval;    /* each server's memory and keys read this often (s) */
	/* the passwords in force, which a reload may change (redis_auth.h):
	 * a store's own; NULL (a configuration not yet a store's): password
	 * and sentinel_password above */
	struct redis_secrets *secrets;
	struct redis_tls_settings tls;
	struct redis_tls *tls_ctx; /* made from tls at start, its files read again
				    * at each reload; NULL: no TLS */
};

/* Counters of the Redis store: a worker's part, and each server's (by
 * address, shared by the workers' connections to it). */
struct redis_stats {
	counter_t queries;        /* submitted */
	counter_t calls;          /* calls sent to the shared store (batches) */
	counter_t replies;        /* decisions the shared store made */
	counter_t local_refusals; /* answered from the refused-until cache */
	counter_t timeouts;       /* without the store: deadline passed */
	counter_t unavailable;    /* without the store: no connection, queue full */
	counter_t errors;         /* error replies */
	counter_t connects;       /* connection attempts */
	counter_t library_missing; /* calls that found the library gone: loaded again */
	counter_t breaker_trips;  /* circuit breaker opened */
	counter_t breaker_skips;  /* decided without the store while open */
	struct hist call_time;    /* a call sent -> its reply */
	struct hist wait_time;    /* a query submitted -> decided by the store */
	counter_t moved;          /* Cluster: sent where their key was not */
	counter_t asked;          /* Cluster: sent after ASKING (slot migrating) */
	counter_t topology_changes; /* a new master, slot map or shard set */
	counter_t split;          /* decisions whose limits live on several servers */
	counter_t refunds;        /* refunds sent: parts of refused split decisions */
	counter_t refunds_lost;   /* refunds that could not be sent or failed */
	counter_t releases_lost;  /* concurrency places not given back: no connection */
	counter_t penalty_lost;   /* penalty events Redis could not be told of */
	struct lease_stats lease; /* leased tokens (lease.h) */
	/* a gauge, per server: 1 while keys written without an expiry
	 * (--redis-expiry) may be on it and it may not evict them (the last
	 * look at its maxmemory and policy), else 0; that look's finding (0
	 * none yet, 1 evicting, 2 not), logged when it changes; and whether
	 * a look found it evicting once (with auto, keys without an expiry
	 * may have been written since) */
	counter_t not_evicting;
	counter_t eviction_seen;
	counter_t evicting_once;
	/* failures by kind (redis_health.h) */
	counter_t error_kind[REDIS_ERROR_KINDS];
	/* gauges, per server: the workers' nodes to it, and how many of them
	 * are ready (connected, authenticated, the library loaded); the kind
	 * (+1) of its last failure, 0 once ready again; the kind (+1) of the
	 * permanent failure logged last, 0: none; 1 when its maxmemory and
	 * policy can evict the limiter's keys */
	counter_t nodes;
	counter_t ready;
	counter_t last_kind;
	counter_t logged_kind;
	counter_t eviction_risk;
	/* per server, read every --redis-info-interval by worker 0
	 * (redis_info.h): INFO memory's used_memory and maxmemory (0:
	 * unlimited), DBSIZE; info_read 1 once read, 0 while no worker
	 * looks at the server; looks that failed; the longest its key expiry
	 * may hold it, from INFO server's hz (redis_info_expiry_stall_us),
	 * 0 when unknown */
	counter_t used_memory;
	counter_t maxmemory;
	counter_t keys;
	counter_t info_read;
	counter_t info_failures;
	counter_t expiry_stall_us;
	/* deadline passed while Redis kept answering: decided by the rule's
	 * local bucket (redis_breaker.h) */
	counter_t saturated;
	struct hist queue_wait;   /* a query submitted -> sent, or -> its deadline
				   * when it never left the queue */
	counter_t charges_lost;   /* charges' settlements not sent, or failed */
};

/* For the metrics, on the main thread. Whether st is a Redis store, and
 * then the counters of every worker's part and every server summed into
 * *out (zeroed first). */
bool store_redis_stats(struct store *st, struct redis_stats *out);

/* Calls fn for the counters of each server st talks to (none when st is
 * no Redis store). Any thread. */
typedef void redis_node_stats_fn(void *arg, const char *name, const struct redis_stats *stats);
void store_redis_each_node(struct store *st, redis_node_stats_fn *fn, void *arg);

/* Whether st decides (true for a store that is not Redis's): every
 * server it talks to has all its workers' connections ready, and there
 * is one at least. Else false, with why[0..len) saying which server and
 * why not. Main thread. */
bool store_redis_ready(struct store *st, char *why, size_t len);

/* New passwords for st's next connections to Redis (either NULL: kept),
 * as a reload read them; the connections made stay. No-op when st is no
 * Redis store. */
void store_redis_set_passwords(struct store *st, const char *password,
			       const char *sentinel_password);

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
