/* SPDX-License-Identifier: Apache-2.0 */
/* lease.h: leased tokens, one worker's table (used by store_redis.c).
 *
 * A client whose requests come to this worker often gets a lease: the
 * Redis call that decides one of its requests also takes up to k more
 * tokens from each of its rule's buckets, which the worker then spends on
 * the client's next requests without asking Redis, until they run out or
 * the lease's interval is over. Then what is left goes back, by a
 * compare-and-set in Redis (the library's rl8_return): a token bucket gets
 * its tokens back only while nothing else has touched its key since the
 * grant, as only then is the reservation certainly still in the bucket.
 *
 * Leased tokens are taken, so the fleet never admits more than Redis
 * counted: what a lease costs is refusals that come early, while tokens
 * sit in another holder's lease (at most k per holder), and, after Redis
 * refused a client or gave it less than asked, a wait for some of the
 * missing tokens (a random part of the time k - 1 take, at most an
 * interval) before its next call. A window's lease also ends with the
 * window that counted it. k follows the tokens the client asked this worker
 * for in the last interval, at most `share_pct` percent of the tightest
 * limit's capacity, and a client asking fewer than LEASE_MIN tokens per
 * interval gets none: it is decided in Redis as before.
 *
 * Leases are for rules of at most LEASE_LIMITS_MAX limits, each a token
 * bucket or a window, without layers. Pure: no I/O; time is the caller's
 * (local monotonic microseconds). Only the worker's thread touches a
 * table. */
#ifndef RL_LEASE_H
#define RL_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decide.h"
#include "limit.h"
#include "stats.h"

#define LEASE_LIMITS_MAX 4
#define LEASE_MIN 4                /* tokens per interval below which: none */
#define LEASE_VALUE_MAX 48         /* bytes of a stored value to compare */

/* The agent's (--lease, --lease-share); a rule's own `lease` overrides
 * it (struct rule: lease_us, lease_share). */
struct lease_config {
	int64_t interval_us;       /* a lease's life and the demand's window;
				    * <= 0: none */
	unsigned share_pct;        /* of a limit's capacity, per lease: 1 .. 50 */
};

/* What Redis said of the lease a request asked for (the library's reply). */
struct lease_grant {
	int64_t extra;                          /* tokens leased, 0: none */
	const char *value[LIMIT_SET_MAX];       /* token bucket: the value stored */
	size_t value_len[LIMIT_SET_MAX];        /* 0: none (a window) */
};

/* Unspent tokens going back: the call the caller sends (rl8_return). */
struct lease_return {
	uint8_t key[IDENTITY_KEY_LEN];
	struct limit_spec limits[LEASE_LIMITS_MAX];
	uint64_t lidh[LEASE_LIMITS_MAX];
	size_t nlimits;
	uint64_t tokens;
	int64_t take_us;                        /* Redis's clock at the grant */
	char value[LEASE_LIMITS_MAX][LEASE_VALUE_MAX];
	uint8_t value_len[LEASE_LIMITS_MAX];    /* 0: nil */
};

/* Sends ret; returns 0 when sent, -1 when not (its tokens then refill in
 * their time). */
typedef int lease_return_fn(void *priv, const struct lease_return *ret);

/* Counters (a part of the store's, struct store_stats). */
struct lease_stats {
	counter_t grants;         /* leases received (extra > 0) */
	counter_t tokens;         /* tokens received in them */
	counter_t decisions;      /* requests allowed from a lease */
	counter_t waits;          /* requests refused while waiting for tokens */
	counter_t returned;       /* tokens sent back */
	counter_t dropped;        /* tokens left in a lease that did not go back */
};

struct lease_table;

/* A table of `cap` clients (a power of two), reporting what goes back to
 * fn(priv, ...) and counting into *stats. NULL when out of memory. */
struct lease_table *lease_table_new(size_t cap, lease_return_fn *fn, void *priv,
				    struct lease_stats *stats);
void lease_table_free(struct lease_table *t);

/* Whether q's rule may have leases (see above), whatever its config. */
bool lease_rule_ok(const struct decide_query *q);

/* Before q goes to Redis: returns 1 when the table decides it (res[] and
 * *decider filled: allowed from the client's lease, or refused while it
 * waits for tokens after Redis refused it), else 0, with *want the tokens
 * to ask for with q (0: none; none while a call that asked is out). `epoch`
 * is the store's admin-reset count: a reset since a lease voids it. */
int lease_check(struct lease_table *t, const struct lease_config *cfg,
		const struct decide_query *q, uint64_t epoch, int64_t now,
		struct limit_result *res, int *decider, uint32_t *want);

/* Redis decided q, which asked for `want` tokens: the lease it got (g),
 * res[] and decider as Redis said; `sent` is when the call left (local),
 * redis_now Redis's clock then. */
void lease_granted(struct lease_table *t, const struct lease_config *cfg,
		   const struct decide_query *q, uint32_t want, uint64_t epoch,
		   const struct limit_result *res, int decider, const struct lease_grant *g,
		   int64_t sent, int64_t redis_now);

/* q, asking for the tokens lease_check() named, went out to Redis at
 * `now`: until its answer (lease_granted) or its failure (lease_failed),
 * the client's other requests do not ask. */
void lease_asked(struct lease_table *t, const struct decide_query *q, int64_t now);

/* q asked for a lease and was not decided by Redis. */
void lease_failed(struct lease_table *t, const struct decide_query *q);

/* Sends back (through the table's fn) the tokens of every lease whose
 * interval is over at `now`, or of every lease when `all`. Returns how
 * many leases still hold tokens. */
size_t lease_expire(struct lease_table *t, int64_t now, bool all);

/* Gives back every lease and forgets every client (the rules changed). */
void lease_table_clear(struct lease_table *t);

#endif
