/* SPDX-License-Identifier: Apache-2.0 */
/* redis_slots.h: one CLUSTER SLOTS question to one node, on a worker's
 * loop.
 *
 * A bare transport (redis_transport.h) rather than a connection with
 * hiredis's reader: the reply is read as bytes and given to
 * redis_cluster_map_parse(), whose bounds hold for any input (hiredis 0.14
 * would first build whatever a hostile node sends).
 * With a password, AUTH goes first. The question ends in one call of
 * done(), never from inside redis_slots_ask(): with the map, or with NULL
 * and why (no connection, an error reply, a malformed reply, the
 * deadline). */
#ifndef RL_REDIS_SLOTS_H
#define RL_REDIS_SLOTS_H

#include <ev.h>

#include "addr.h"
#include "redis_cluster.h"

struct redis_config;
struct redis_slots;

/* The map lives during the call only; the owner copies what it keeps. The
 * question is over (and freed) once done() returns. */
typedef void redis_slots_done(void *owner, const struct addr *node,
			      const struct redis_cluster_map *map, const char *why);

/* Asks `node` (host and port; auth from cfg) within `timeout` seconds.
 * NULL when out of memory (done() is not called then). */
struct redis_slots *redis_slots_ask(struct ev_loop *loop, const struct addr *node,
				    const struct redis_config *cfg, double timeout,
				    redis_slots_done *done, void *owner);

/* Abandons a question: done() is not called. */
void redis_slots_cancel(struct redis_slots *q);

#endif
