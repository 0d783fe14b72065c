/* SPDX-License-Identifier: Apache-2.0 */
/* redis_batch.h: the call that carries a batch of decisions to Redis,
 * encoded: one FCALL of the decision library per batch (see
 * ratelimit.lua), and where a batch ends in the queue. Pure: no I/O, no
 * clock, nothing called back; the node (redis_node.c) sends the bytes. */
#ifndef RL_REDIS_BATCH_H
#define RL_REDIS_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decide.h"
#include "store.h"

struct redis_keys;

/* One query for Redis: where its answer goes, what to decide, when. */
struct redis_query {
	struct store_ref ref;
	struct decide_query q;
	int64_t queued;     /* local monotonic microseconds */
	int64_t deadline;
	unsigned moves;     /* Cluster: times sent again after "moved" */
	bool asking;        /* Cluster: send after ASKING (a migrating slot) */
	/* The owner's: a part of a decision whose limits live on several
	 * servers (NULL otherwise), and which. */
	void *split;
	unsigned part;
	uint32_t lease;     /* tokens asked for with it, 0: none (lease.h) */
};

/* The encoder's buffers, sized for calls of batch_max queries. */
struct redis_batch_enc {
	size_t batch_max;
	const struct redis_keys *keys;  /* how the keys are named */
	const char **argv;
	size_t *argvlen;
	char *arena;          /* the bytes of the argv */
	size_t arena_cap;
	char *cmd;            /* the call's RESP */
	size_t cmd_cap;
};

/* Keys are named by `keys` (kept: it outlives e). Returns 0, or -1 when
 * out of memory (e then holds nothing to free). */
int redis_batch_init(struct redis_batch_enc *e, size_t batch_max, const struct redis_keys *keys);
void redis_batch_free(struct redis_batch_enc *e);

/* The RESP of the call for rq[0..n) (n <= batch_max): rl8_decide, or
 * rl8_decide_cluster with `cluster`; `unexpiring`: the limits' keys go
 * without an expiry (redis_limits_bytes). Sets *out (valid until the next
 * call) and returns its length, or 0 when it cannot be made. */
size_t redis_batch_encode(struct redis_batch_enc *e, const struct redis_query *rq, size_t n,
			  bool cluster, bool unexpiring, const char **out);

/* How many of the first n queries of the ring q[cap] from head go in one
 * call (at least 1 when n is): a query sent after ASKING goes alone, and
 * a query whose client is in the call already under another rule that
 * shares a limit with its own waits for the next call. */
size_t redis_batch_take(const struct redis_query *q, size_t cap, size_t head, size_t n);

#endif
