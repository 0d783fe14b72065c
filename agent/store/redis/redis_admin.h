/* SPDX-License-Identifier: Apache-2.0 */
/* redis_admin.h: the Redis store's admin look at and reset of a client's
 * keys (redis_admin.c). Private to the Redis store. */
#ifndef RL_REDIS_ADMIN_H
#define RL_REDIS_ADMIN_H

#include <stdint.h>

#include "addr.h"
#include "store.h"
#include "store_redis.h"

/* Where a client's keys live in store st: 0 with *to, or -1 when no node
 * is known for it yet. Called on the admin's thread. */
typedef int redis_admin_locate_fn(struct store *st, const uint8_t *key, struct addr *to);

/* Looks at or resets (a->reset) a's clients, asynchronously on a->loop,
 * connecting as cfg says to where `locate` names; store_admin_done()
 * when all is answered or the deadline passes. */
void redis_admin(struct store *st, struct store_admin *a, const struct redis_config *cfg,
		 redis_admin_locate_fn *locate);

#endif
