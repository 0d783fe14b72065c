/* SPDX-License-Identifier: Apache-2.0 */
/* redis_eviction.c: a server's eviction and the limiter's keys (see
 * redis_eviction.h). */
#include "redis_eviction.h"

#include <string.h>

#include "log.h"
#include "store_redis.h"

void redis_eviction_found(struct redis_stats *st, const char *node, bool forced, bool evicting,
			  const char *maxmemory, const char *policy, const char *refused)
{
	uint64_t seen = evicting ? 1 : 2;
	bool before;

	if (evicting)
		atomic_store_explicit(&st->evicting_once, 1, memory_order_relaxed);
	before = atomic_load_explicit(&st->evicting_once, memory_order_relaxed);
	atomic_store_explicit(&st->not_evicting, !evicting && (forced || before),
			      memory_order_relaxed);
	if (atomic_exchange_explicit(&st->eviction_seen, seen, memory_order_relaxed) ==
	    seen)
		return;
	if (refused && forced)
		log_warn("redis: %s: cannot read maxmemory-policy (%s): keys without an "
			 "expiry need maxmemory and an allkeys-lru or allkeys-lfu policy",
			 node, refused);
	else if (refused && before)
		log_warn("redis: %s: cannot read maxmemory-policy (%s): the limits' keys are "
			 "written with an expiry again, and those written without one stay until "
			 "written again", node, refused);
	else if (refused)
		log_info("redis: %s: cannot read maxmemory-policy (%s): the limits' keys are "
			 "written with an expiry", node, refused);
	else if (evicting)
		log_info("redis: %s: maxmemory %s, %s: it evicts the keys without an expiry%s",
			 node, maxmemory, policy,
			 forced ? "" : ": the limits' keys are written without one");
	else if (forced)
		log_warn("redis: %s: maxmemory %s, policy %s: keys without an expiry need "
			 "maxmemory and an allkeys-lru or allkeys-lfu policy, else they fill it",
			 node, maxmemory ? maxmemory : "?", policy ? policy : "?");
	else if (before)
		log_warn("redis: %s: maxmemory %s, policy %s: it no longer evicts the keys "
			 "without an expiry: the limits' keys are written with one again, and "
			 "those written without one stay until written again",
			 node, maxmemory ? maxmemory : "?", policy ? policy : "?");
	else
		log_info("redis: %s: maxmemory %s, policy %s: the limits' keys are written "
			 "with an expiry", node, maxmemory ? maxmemory : "?",
			 policy ? policy : "?");
}

void redis_eviction_risk(struct redis_stats *st, const char *node, const char *maxmemory,
			 const char *policy, bool unexpiring)
{
	uint64_t risk = maxmemory && policy && strcmp(maxmemory, "0") &&
			(!strncmp(policy, "allkeys-", 8) ||
			 (!strncmp(policy, "volatile-", 9) && !unexpiring));

	if (atomic_exchange_explicit(&st->eviction_risk, risk, memory_order_relaxed) == risk ||
	    !risk)
		return;
	/* keys written without an expiry count on it (--redis-expiry): said,
	 * not warned */
	if (unexpiring)
		log_info("redis: Redis at %s can evict the limiter's keys (maxmemory %s, "
			 "maxmemory-policy %s), as keys without an expiry need: size maxmemory "
			 "for the clients of the longest period", node, maxmemory, policy);
	else
		log_warn("redis: Redis at %s can evict the limiter's keys (maxmemory %s, "
			 "maxmemory-policy %s): a limit whose key goes starts over; give Redis "
			 "the memory it needs, or the policy noeviction", node, maxmemory, policy);
}
