/* SPDX-License-Identifier: Apache-2.0 */
/* redis_ready.h: whether a Redis store decides, from its servers'
 * counters (struct redis_stats): each server a worker talks to has all
 * its workers' connections ready, and there is one at least. Else the
 * first server found wanting, and why: its last failure's kind
 * (redis_health.h), or "connecting"; with no server at all, the failure
 * of a seed or a former master, if any. */
#ifndef RL_REDIS_READY_H
#define RL_REDIS_READY_H

#include <stdbool.h>
#include <stddef.h>

struct store;

/* store_redis_ready() over st's servers (store_redis_each_node);
 * `cluster`: the store expects a Cluster, which the reason for a server
 * of the wrong kind names. */
bool redis_health_ready(struct store *st, bool cluster, char *why, size_t len);

#endif
