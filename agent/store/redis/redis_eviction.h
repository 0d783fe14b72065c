/* SPDX-License-Identifier: Apache-2.0 */
/* redis_eviction.h: what a Redis server's maxmemory and policy mean for
 * the limiter's keys, as each connection's look (CONFIG GET maxmemory
 * maxmemory-policy, redis_node.c) finds them.
 *
 * Keys without an expiry (--redis-expiry) need a server that evicts them
 * itself: the gauge not_evicting is 1 while such keys may be on a server
 * that may not. The other way round, a server that can evict the
 * limiter's keys resets the limits whose keys it evicts: the gauge
 * eviction_risk is 1 then. Each finding is logged once per change,
 * whichever worker finds it. */
#ifndef RL_REDIS_EVICTION_H
#define RL_REDIS_EVICTION_H

#include <stdbool.h>

struct redis_stats;

/* A look at the server `node` found it evicting keys without an expiry
 * or not (maxmemory and policy as it said them, or NULL), or CONFIG was
 * refused (`refused`: its answer). `forced`: --redis-expiry never. */
void redis_eviction_found(struct redis_stats *st, const char *node, bool forced, bool evicting,
			  const char *maxmemory, const char *policy, const char *refused);

/* And whether it can evict the limiter's keys: with maxmemory set, an
 * allkeys policy evicts any key, a volatile one those with an expiry
 * (`unexpiring`: the limiter's are written without one, and count on
 * the eviction: then said at info level, else warned). */
void redis_eviction_risk(struct redis_stats *st, const char *node, const char *maxmemory,
			 const char *policy, bool unexpiring);

#endif
