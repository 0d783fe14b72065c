/* decide.h: from a check-rate message to the variables HAProxy receives.
 *
 * Pure: no I/O, no clock. A decision happens in three steps so that the
 * store step in the middle can be asynchronous (Redis):
 *   decide_prepare()  message arguments -> query (client key, limits, cost)
 *   (the store checks the query's limits at a time of its choosing)
 *   decide_result()   store answer -> decision
 *   decide_put_actions() decision -> SET-VAR actions of the ACK
 */
#ifndef RL_DECIDE_H
#define RL_DECIDE_H

#include <stdbool.h>
#include <stdint.h>

#include "identity.h"
#include "limiter.h"
#include "spop.h"

#define DECIDE_MAX_LIMITS 16
#define DECIDE_MAX_IDENTITY 8
#define DECIDE_NAME_MAX 32
#define DECIDE_DEFAULT_PRIORITY 2

/* The message the agent understands (part of the contract with HAProxy). */
#define DECIDE_MESSAGE "check-rate"

struct decide_config {
	struct limit_spec limits[DECIDE_MAX_LIMITS];
	size_t nlimits;
	char rule[DECIDE_NAME_MAX];
	char identity[DECIDE_MAX_IDENTITY][DECIDE_NAME_MAX];
	size_t nidentity;
	char cost_arg[DECIDE_NAME_MAX]; /* integer argument with the weight */
	uint8_t secret[16];
};

struct decide_query {
	uint8_t key[IDENTITY_KEY_LEN];
	char key_hex[IDENTITY_HEX_LEN + 1];
	const char *identity;   /* the argument name that identified the client */
	const struct limit_spec *limits;
	size_t nlimits;
	uint32_t cost;
	int priority;
	const char *rule;
};

enum decide_reason {
	DECIDE_OK = 0,
	DECIDE_LIMITED,
	DECIDE_SHED,
	DECIDE_STORE_DOWN,
};

struct decide_decision {
	int status;            /* 0, 429 or 503 */
	int64_t retry_after;   /* seconds, >= 1 when status != 0 */
	int64_t limit;
	int64_t remaining;
	int64_t reset;
	int priority;
	enum decide_reason reason;
	const char *rule;
	char policy[160];
	char ratelimit[160];
	bool shadow;
	bool degraded;
	bool counted;          /* limit, remaining and reset are known */
};

/* Fills the configuration's defaults: limit 100/1m, rule "default",
 * identity api_key,user,ip, a fixed hashing secret. */
void decide_config_defaults(struct decide_config *cfg);

/* Parses a comma-separated identity list into cfg. Returns 0 or -1. */
int decide_set_identity(struct decide_config *cfg, const char *list);

/* Builds the query for one check-rate message from its KV arguments (a
 * cursor from spop_msg_next, already validated). The query points into cfg,
 * which must outlive it. A request that carries none of the identity
 * arguments is keyed as the anonymous client. */
void decide_prepare(const struct decide_config *cfg, struct spop_cursor args,
		    unsigned nargs, struct decide_query *q);

/* Turns the store's per-limit results (res[0..q->nlimits)) and the index of
 * the deciding limit into the decision. */
void decide_result(const struct decide_query *q, const struct limit_result *res,
		   int decider, struct decide_decision *d);

/* The decision without the store: forwarded, marked degraded; the policy
 * is known, the client's counts are not. */
void decide_degraded(const struct decide_query *q, struct decide_decision *d);

/* Appends the SET-VAR actions (scope txn) of a decision. */
void decide_put_actions(struct spop_wbuf *w, const struct decide_decision *d);

const char *decide_reason_str(enum decide_reason r);

#endif
