/* SPDX-License-Identifier: Apache-2.0 */
/* redis_sentinel.h: where the master is, as Redis Sentinel says, for one
 * worker.
 *
 * Asks the sentinels in turn (SENTINEL get-master-addr-by-name), confirms
 * with ROLE on the server named that it is a master, and reports it. Keeps
 * a subscription to +switch-master on one sentinel, so that a failover is
 * seen when the sentinels announce it; the owner also calls
 * redis_sentinel_ask() when its connection to the master shows trouble
 * (lost, READONLY, LOADING). A sentinel that does not answer, or names a
 * server that is not a master, is left for the next one; when none knows
 * a master the owner keeps deciding by the failure policy and the module
 * keeps asking with backoff.
 *
 * Only the worker's thread touches it; callbacks come from its loop. */
#ifndef RL_REDIS_SENTINEL_H
#define RL_REDIS_SENTINEL_H

#include <ev.h>

#include "addr.h"

struct redis_config;
struct redis_sentinel;

struct redis_sentinel_cb {
	/* The master is at addr: at the first answer and after each change.
	 * The owner may free or replace its connections here. */
	void (*master)(void *owner, const struct addr *addr);
};

/* Starts asking cfg->nodes (the sentinels) for cfg->master. NULL when out
 * of memory. cfg must outlive the module. */
struct redis_sentinel *redis_sentinel_new(struct ev_loop *loop, int worker,
					  const struct redis_config *cfg,
					  const struct redis_sentinel_cb *cb, void *owner);

void redis_sentinel_free(struct redis_sentinel *s);

/* Asks again soon (at most every 100 ms, however often it is called). */
void redis_sentinel_ask(struct redis_sentinel *s);

#endif
