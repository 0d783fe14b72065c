/* redis_admin.h: the Redis store's admin look and reset (redis_admin.c),
 * and what it asks of the store (store_redis.c). Private to the store. */
#ifndef RL_REDIS_ADMIN_H
#define RL_REDIS_ADMIN_H

#include <stdint.h>

#include "addr.h"
#include "store.h"
#include "store_redis.h"

/* store_ops.admin of the Redis store: asynchronous, on a->loop. */
void redis_admin(struct store *st, struct store_admin *a);

/* Where a client's keys live, as the latest topology a worker learned
 * says: 0, or -1 when no node is known for it yet. Any thread. */
int store_redis_locate(struct store *st, const uint8_t *key, struct addr *to);

/* The store's configuration (st is a Redis store). */
const struct redis_config *store_redis_config(const struct store *st);

#endif
