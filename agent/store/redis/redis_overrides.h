/* SPDX-License-Identifier: Apache-2.0 */
/* redis_overrides.h: the fleet's operator overrides (overrides.h), as
 * worker 0 of each agent reads them from Redis, and the expired ones it
 * takes out. Private to the Redis store.
 *
 * The set lives in a hash and a version (redis_overrides_key): the admin
 * endpoint writes the hash, then increments the version. A poll reads the
 * version, and when it changed, the hash in pages (HSCAN), so that no
 * reply carries more than a page however many overrides there are. An
 * override written during the read moves the version again, and the next
 * poll reads anew. A poll also deletes, from the hash, the entries of the
 * last set read whose expiry passed (each one only if its value still
 * says so, so a later PUT of the same client is never lost), and keeps
 * the hash in use on a server that evicts (TOUCH).
 *
 * All of it on a connection of its own, to the server that holds the
 * hash: a large set, a slow read or a broken reply costs that connection
 * only, never the decisions'. Only the loop's thread touches it. */
#ifndef RL_REDIS_OVERRIDES_H
#define RL_REDIS_OVERRIDES_H

#include <ev.h>
#include <stdbool.h>

#include "addr.h"

struct overrides;
struct redis_config;
struct redis_overrides;

/* Receives a new set read (one reference, the receiver's). */
typedef void redis_overrides_fn(void *owner, struct overrides *o);

/* The reader, on loop, connecting as cfg says (cfg must outlive it).
 * NULL when out of memory. */
struct redis_overrides *redis_overrides_new(struct ev_loop *loop, const struct redis_config *cfg,
					    redis_overrides_fn *fn, void *owner);
void redis_overrides_free(struct redis_overrides *p);

/* One poll of the server at `at` (the one that holds the hash now; a
 * connection elsewhere is left for one there): the version, then the set
 * if it changed, expired entries out, and with `touch` a TOUCH of the
 * hash. Nothing new while a read is under way. */
void redis_overrides_poll(struct redis_overrides *p, const struct addr *at, bool touch);

#endif
