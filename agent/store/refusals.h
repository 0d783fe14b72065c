/* SPDX-License-Identifier: Apache-2.0 */
/* refusals.h: the refused-until cache, one worker's (used by store_redis.c).
 *
 * A client that the shared store refused until time T is answered here,
 * without a call, until T: the store remembers the refusal with the times
 * of its result, measured from when the call left (before Redis read its
 * clock), so the cache never refuses a request that Redis would allow.
 * Direct-mapped by the client's key (a hash already): a client may push
 * out another, which then asks Redis again. Pure: no I/O; time is the
 * caller's (local monotonic microseconds). Only the worker's thread
 * touches a cache. */
#ifndef RL_REFUSALS_H
#define RL_REFUSALS_H

#include <stdint.h>

#include "decide.h"
#include "limit.h"

struct refusals;

/* NULL when out of memory. */
struct refusals *refusals_new(void);
void refusals_free(struct refusals *c);

/* Forgets every client (the rules changed). */
void refusals_clear(struct refusals *c);

/* Fills res[] and *decider when q's client is known to be refused at
 * `now` by a refusal remembered under admin-reset count `epoch`. Returns
 * 1 then, else 0. */
int refusals_answer(struct refusals *c, const struct decide_query *q, uint64_t epoch,
		    int64_t now, struct limit_result *res, int *decider);

/* Remembers that the store refused q by limit `decider` (res[] as it
 * said), the call having left at `sent`; a refusal not worth
 * remembering (see refusals.c) is not. */
void refusals_store(struct refusals *c, const struct decide_query *q, uint64_t epoch,
		    int decider, const struct limit_result *res, int64_t sent);

#endif
