/* SPDX-License-Identifier: Apache-2.0 */
/* redis_health.c: failures of a Redis server by kind, and their causes
 * logged once (see redis_health.h). */
#include "redis_health.h"

#include <stdio.h>
#include <string.h>

#include "log.h"
#include "store_redis.h"

static const char *const kind_names[REDIS_ERROR_KINDS] = {
	[REDIS_ERROR_CONNECT] = "connect",
	[REDIS_ERROR_TIMEOUT] = "timeout",
	[REDIS_ERROR_TLS] = "tls",
	[REDIS_ERROR_AUTH] = "auth",
	[REDIS_ERROR_NOPERM] = "noperm",
	[REDIS_ERROR_LOADING] = "loading",
	[REDIS_ERROR_CLUSTER_MISMATCH] = "cluster_mismatch",
	[REDIS_ERROR_PROTOCOL] = "protocol",
	[REDIS_ERROR_OTHER] = "other",
};

static const char *const reasons[REDIS_ERROR_KINDS] = {
	[REDIS_ERROR_CONNECT] = "no connection",
	[REDIS_ERROR_TIMEOUT] = "no answer in time",
	[REDIS_ERROR_TLS] = "TLS failed",
	[REDIS_ERROR_AUTH] = "authentication failed (password wanted or refused)",
	[REDIS_ERROR_NOPERM] = "permission refused (NOPERM)",
	[REDIS_ERROR_LOADING] = "loading its data",
	[REDIS_ERROR_CLUSTER_MISMATCH] = "topology mismatch (Cluster or not)",
	[REDIS_ERROR_PROTOCOL] = "unexpected reply",
	[REDIS_ERROR_OTHER] = "error reply",
};

const char *redis_error_kind_name(enum redis_error_kind k)
{
	return (unsigned)k < REDIS_ERROR_KINDS ? kind_names[k] : "other";
}

const char *redis_error_reason(enum redis_error_kind k)
{
	return (unsigned)k < REDIS_ERROR_KINDS ? reasons[k] : "error";
}

static bool starts(const char *s, size_t len, const char *word)
{
	size_t n = strlen(word);

	return len >= n && memcmp(s, word, n) == 0;
}

enum redis_error_kind redis_error_classify(const char *str, size_t len)
{
	if (!str)
		return REDIS_ERROR_PROTOCOL;
	if (starts(str, len, "NOAUTH") || starts(str, len, "WRONGPASS") ||
	    starts(str, len, "ERR Protocol error: unauthenticated") ||
	    starts(str, len, "ERR AUTH") || starts(str, len, "ERR invalid password"))
		return REDIS_ERROR_AUTH;
	if (starts(str, len, "NOPERM"))
		return REDIS_ERROR_NOPERM;
	if (starts(str, len, "LOADING"))
		return REDIS_ERROR_LOADING;
	if (starts(str, len, "MOVED") || starts(str, len, "ASK ") ||
	    starts(str, len, "CLUSTERDOWN") || starts(str, len, "CROSSSLOT") ||
	    starts(str, len, "ERR This instance has cluster support disabled"))
		return REDIS_ERROR_CLUSTER_MISMATCH;
	return REDIS_ERROR_OTHER;
}

bool redis_error_permanent(enum redis_error_kind k)
{
	return k == REDIS_ERROR_AUTH || k == REDIS_ERROR_NOPERM ||
	       k == REDIS_ERROR_CLUSTER_MISMATCH;
}

void redis_health_count(struct redis_stats *st, enum redis_error_kind k)
{
	if ((unsigned)k >= REDIS_ERROR_KINDS)
		k = REDIS_ERROR_OTHER;
	atomic_fetch_add_explicit(&st->error_kind[k], 1, memory_order_relaxed);
	STAT_SET(st->last_kind, (uint64_t)k + 1);
}

/* The cause of a permanent failure, and what cures it. */
static void log_cause(const char *node, enum redis_error_kind k, const char *detail,
		      bool cluster, bool first)
{
	const char *d = detail ? detail : "";
	char msg[512];

	if (k == REDIS_ERROR_AUTH && !strstr(d, "NOAUTH") && !strstr(d, "unauthenticated"))
		snprintf(msg, sizeof(msg), "Redis at %s refused the user or password (WRONGPASS): "
			 "check --redis-password-file and --redis-user", node);
	else if (k == REDIS_ERROR_AUTH)
		snprintf(msg, sizeof(msg), "Redis at %s requires a password (NOAUTH): set "
			 "--redis-password-file", node);
	else if (k == REDIS_ERROR_NOPERM)
		snprintf(msg, sizeof(msg), "Redis at %s refused a command to this user (NOPERM): "
			 "give it +@scripting, +function and +config|get: %s", node, d);
	else if (cluster)
		snprintf(msg, sizeof(msg), "Redis at %s is not a Cluster node (%s): use --redis "
			 "(store: redis), not --redis-cluster; no decision goes through it", node,
			 d[0] ? d : "cluster support disabled");
	else
		snprintf(msg, sizeof(msg), "Redis at %s is a Cluster node (%s): use "
			 "--redis-cluster (store: cluster), not --redis; no decision goes through "
			 "it", node, d[0] ? d : "cluster_enabled:1");
	if (first)
		log_err("redis: %s", msg);
	else
		log_debug("redis: %s", msg);
}

void redis_health_failed(struct redis_stats *st, const char *node, enum redis_error_kind k,
			 const char *detail, bool cluster)
{
	redis_health_count(st, k);
	if (!redis_error_permanent(k)) {
		log_warn("redis: %s: %s%s%s", node, redis_error_reason(k), detail ? ": " : "",
			 detail ? detail : "");
		return;
	}
	log_cause(node, k, detail, cluster,
		  atomic_exchange_explicit(&st->logged_kind, (uint64_t)k + 1,
					   memory_order_relaxed) != (uint64_t)k + 1);
}

void redis_health_recovered(struct redis_stats *st, const char *node)
{
	STAT_SET(st->last_kind, 0);
	if (atomic_exchange_explicit(&st->logged_kind, 0, memory_order_relaxed))
		log_info("redis: Redis at %s answers decisions again", node);
}
