/* SPDX-License-Identifier: Apache-2.0 */
/* redis_reply.h: the decision library's msgpack reply, decoded. Pure: no
 * I/O. The reply comes from Redis, which the agent trusts no more than it
 * must: any shape is accepted without harm, and a request whose part is
 * malformed is marked so (its decision then falls back to the rule's
 * failure policy) without spoiling the others.
 *
 *   [now_us, [[allowed, decider, [[remaining, retry_after_us, reset_us]...]]...]]
 *
 * A request that asked for a lease has a fourth item, [extra, v_1 .. v_n]:
 * the tokens leased and, per limit, the value the library stored (a token
 * bucket's, a string) or nil.
 */
#ifndef RL_REDIS_REPLY_H
#define RL_REDIS_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "limit.h"

/* Never allocates; see redis_reply.c for why not msgpack-c here. */

struct redis_decision {
	int ok;                 /* this request's part was well formed */
	int64_t now;            /* Redis's clock when it decided (the reply's) */
	int64_t allowed;        /* 1 or 0 */
	int64_t decider;        /* 1-based index of the deciding limit */
	size_t nvals;           /* 3 per limit */
	int64_t vals[3 * LIMIT_SET_MAX];
	/* the lease, when the request asked for one (has_lease): values
	 * point into the reply's data (lval[j] NULL, llen[j] 0: nil) */
	int has_lease;
	int64_t lease_extra;
	const char *lval[LIMIT_SET_MAX];
	uint32_t llen[LIMIT_SET_MAX];
};

/* Decodes the reply of a batch of n requests into out[0..n). Returns 0, or
 * -1 when the reply as a whole is not such a list of n results. */
int redis_reply_msgpack(const char *data, size_t len, size_t n, struct redis_decision *out);

#endif
