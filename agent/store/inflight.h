/* SPDX-License-Identifier: Apache-2.0 */
/* inflight.h: the requests of each client in flight, for the concurrency
 * limits of the in-memory store and of the local failure mode.
 *
 * A concurrency limit (limit.h, LIMIT_CONCURRENCY) lets a client have at
 * most `quota` requests in flight: a request takes a place when it is
 * admitted and gives it back when its response comes (a `release`
 * message naming it by its request id), or at the latest `period` after it
 * was admitted, so that a release that never comes (a client gone, a
 * timeout) cannot keep the place. Each request is kept with its id and
 * that deadline, so a release frees exactly its own place and a lost one
 * frees its place at its own deadline.
 *
 * Places are preallocated (a pool per shard, as many as the store was
 * made for): nothing is allocated per decision. A decision holds the
 * client's shard locked from inflight_begin() to inflight_end(), so the
 * store can check the client's other limits in between, all or nothing.
 * Lock order: an inflight shard, then the memory store's shards (never
 * the other way round). */
#ifndef RL_INFLIGHT_H
#define RL_INFLIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "identity.h"
#include "limit.h"

struct inflight;
struct inflight_shard;

/* A decision in progress: its shard stays locked until inflight_end(). */
struct inflight_hold {
	struct inflight_shard *sh;
	uint64_t h;             /* the client's hash */
	uint8_t key[IDENTITY_KEY_LEN];
	uint64_t lidh;
	uint64_t id;
	int64_t deadline;       /* of the place this request would take */
	bool take;              /* admitted, and not holding a place yet */
};

/* A store for at most max_flights requests in flight in all. NULL when
 * out of memory. */
struct inflight *inflight_new(size_t max_flights);
void inflight_free(struct inflight *in);

/* Locks the shard of (key, lidh), a client under one limit, and decides a
 * request with id `id` (not 0) against spec (quota: most in flight;
 * period_us: the longest a place is kept) at now_us. res as limit_eval()
 * fills it: allowed when the client has fewer than quota requests in
 * flight (or this id holds a place already); remaining, the places left
 * after this one; reset_us, until the last in flight ends at the latest;
 * a refused request retries after a second (a place frees when a
 * response comes). Returns 0 with *h to pass to inflight_end(), or -1
 * (nothing locked) when there is no room to keep one more request. */
int inflight_begin(struct inflight *in, const uint8_t key[IDENTITY_KEY_LEN], uint64_t lidh,
		   uint64_t id, const struct limit_spec *spec, int64_t now_us,
		   struct limit_result *res, struct inflight_hold *h);

/* Ends the decision: with take (the request was admitted by every limit)
 * the request takes its place; then unlocks. */
void inflight_end(struct inflight_hold *h, bool take);

/* Gives back the place of request id of (key, lidh). Returns 1 when it
 * held one, else 0. */
int inflight_release(struct inflight *in, const uint8_t key[IDENTITY_KEY_LEN], uint64_t lidh,
		     uint64_t id);

/* Forgets every request in flight of key under any limit (admin reset).
 * Returns how many. */
size_t inflight_reset(struct inflight *in, const uint8_t key[IDENTITY_KEY_LEN]);

/* The requests of (key, lidh) in flight at now_us. */
uint32_t inflight_look(struct inflight *in, const uint8_t key[IDENTITY_KEY_LEN], uint64_t lidh,
		       int64_t now_us);

/* Requests in flight now (places taken, expired ones not yet reclaimed
 * included). */
uint64_t inflight_count(struct inflight *in);

#endif
