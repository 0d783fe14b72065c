/* SPDX-License-Identifier: Apache-2.0 */
/* redis_health.h: what went wrong with a Redis server, said once.
 *
 * A failure has a kind (redis_errors.h): the transport says its own; an
 * error reply is classified here by its first word. Each failure is
 * counted by kind in the server's counters (struct redis_stats), which
 * the metrics show as spoa_rl_redis_errors_total{node,kind}.
 *
 * A misconfiguration that retrying cannot cure (a password wanted or
 * refused, a permission missing, a server of the wrong kind) is logged
 * at error level once, with its cause and the option that cures it,
 * whichever worker meets it first; the same again is logged at debug
 * level only, while the connection is retried with its backoff. The
 * server answering again is logged once too. */
#ifndef RL_REDIS_HEALTH_H
#define RL_REDIS_HEALTH_H

#include <stdbool.h>
#include <stddef.h>

#include "redis_errors.h"

struct redis_stats;

/* "connect", "timeout", "tls", "auth", "noperm", "loading",
 * "cluster_mismatch", "protocol" or "other". */
const char *redis_error_kind_name(enum redis_error_kind k);

/* The kind of an error reply (its text, str[0..len)): NOAUTH, WRONGPASS
 * and an unauthenticated client's protocol error are auth; NOPERM;
 * LOADING; MOVED, ASK and CLUSTERDOWN (a Cluster's answers) are
 * cluster_mismatch; any other error reply is other. */
enum redis_error_kind redis_error_classify(const char *str, size_t len);

/* Whether k is a misconfiguration rather than an outage. */
bool redis_error_permanent(enum redis_error_kind k);

/* Counts a failure of kind k on the server whose counters are *st. */
void redis_health_count(struct redis_stats *st, enum redis_error_kind k);

/* Counts a failure of kind k and logs its cause: `node` names the server,
 * `detail` is what it said (an error reply, or NULL), `cluster` whether
 * the store expects a Cluster. A permanent kind is logged at error level
 * when it is not the one logged last for this server; any other kind at
 * warning level. */
void redis_health_failed(struct redis_stats *st, const char *node, enum redis_error_kind k,
			 const char *detail, bool cluster);

/* The server answers decisions again: logged once after a permanent
 * failure was. */
void redis_health_recovered(struct redis_stats *st, const char *node);

/* What a kind means to an operator, for /readyz ("no connection", ...). */
const char *redis_error_reason(enum redis_error_kind k);

#endif
