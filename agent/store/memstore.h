/* SPDX-License-Identifier: Apache-2.0 */
/* memstore.h: the in-memory store. Buckets of every client, shared by all
 * worker threads (a client may reach any worker), sharded with one mutex per
 * shard so that workers rarely contend. A decision over several limits of
 * one client is all or nothing under one shard lock.
 *
 * Memory is bounded: at most `max_keys` entries, and as many chunks for
 * the requests of log limits (a log of N/P holds at most N requests: see
 * memstore.c). When a shard is full, a
 * new client's entries take the place, in this order, of entries back to
 * "fresh" (past their TTL: nothing is lost), then of the least valuable
 * among a sample: the soonest back to full, never one that refused a
 * request and would still refuse it. So a client refused now stays refused
 * however many new identities arrive. When nothing may go, the request is
 * not decided here (MEMSTORE_NO_ROOM; counted in memstore_stats.full) and
 * the caller applies the rule's failure mode. */
#ifndef RL_MEMSTORE_H
#define RL_MEMSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "identity.h"
#include "limit.h"

struct memstore;

#define MEMSTORE_NO_ROOM (-2)

struct memstore_stats {
	uint64_t keys;
	uint64_t full;     /* decisions made without room for state */
	uint64_t reclaimed;
	uint64_t evicted;  /* entries forgotten to make room */
	uint64_t log_chunks; /* chunks of logs in use (MEMSTORE_LOG_CHUNK_BYTES each) */
	uint64_t max_keys;   /* memstore_new()'s */
};

/* A log limit's requests are kept in chunks of this many bytes, 12 requests
 * each, from a pool of one chunk per entry of the store (memstore.c). */
#define MEMSTORE_LOG_CHUNK_BYTES 128

/* Returns NULL on allocation failure. */
struct memstore *memstore_new(size_t max_keys);
void memstore_free(struct memstore *ms);

/* Checks one request of weight `cost` for client `key` against `n` limits
 * (n <= LIMIT_RULE_MAX, a rule's own), all or nothing: when any limit refuses, no state changes.
 * res[i] receives each limit's result; when the request is refused, a
 * limit that would have allowed it reports what it holds without this
 * request (its remaining and reset), since nothing was taken from it.
 * Returns the index of the limit that decides the answer: the refusing
 * limit with the longest retry-after, or when all allow, the one with the
 * fewest remaining (ties: the lowest index). Returns -1 for n == 0 or
 * n > LIMIT_RULE_MAX, MEMSTORE_NO_ROOM when a new client finds no room
 * (nothing taken, res[] unspecified). */
int memstore_check(struct memstore *ms, const uint8_t key[IDENTITY_KEY_LEN],
		   const struct limit_spec *limits, size_t n, int64_t now_us,
		   uint32_t cost, struct limit_result *res);

/* The same when each limit has a key of its own: keys[i] is limit i's
 * (several limits may share one), n <= LIMIT_SET_MAX (a rule with its
 * layers). All or nothing across the keys. */
int memstore_check_keys(struct memstore *ms, const uint8_t *const *keys,
			const struct limit_spec *limits, size_t n, int64_t now_us,
			uint32_t cost, struct limit_result *res);

/* Sets the state of limit idx of key (counted under spec) to *st, good
 * for ttl_us from now_us: a penalty box's ban, say. Returns 0, or -1 when
 * there is no room. */
int memstore_put(struct memstore *ms, const uint8_t key[IDENTITY_KEY_LEN], unsigned idx,
		 const struct limit_spec *spec, const struct limit_state *st, int64_t now_us,
		 int64_t ttl_us);

/* Settles a charge on limit idx of key (counted under spec): limit_settle
 * of its state at now_us, for a request that took at take_us, delta more
 * (> 0) or less (< 0). Returns 1 when the state changed, 0 when nothing
 * was to change, -1 when there was no room for a new entry. */
int memstore_settle(struct memstore *ms, const uint8_t key[IDENTITY_KEY_LEN], unsigned idx,
		    const struct limit_spec *spec, int64_t now_us, int64_t take_us, int64_t delta);

/* Drops every entry of `key` (admin reset). Returns how many were dropped. */
size_t memstore_reset(struct memstore *ms, const uint8_t key[IDENTITY_KEY_LEN]);

/* Reclaims entries that are back to fresh at now_us. Returns how many. */
size_t memstore_sweep(struct memstore *ms, int64_t now_us);

/* Counts in memstore_stats.full a decision about key left to the failure
 * mode for want of room elsewhere in memory (a concurrency limit's
 * places, inflight.h): the same alert covers both. */
void memstore_count_full(struct memstore *ms, const uint8_t key[IDENTITY_KEY_LEN]);

void memstore_get_stats(struct memstore *ms, struct memstore_stats *out);

#endif
