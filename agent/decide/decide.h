/* SPDX-License-Identifier: Apache-2.0 */
/* decide.h: from a check-rate message to the variables HAProxy receives.
 *
 * No I/O, no clock, no allocation on the way. A decision happens in steps
 * so that the store step in the middle can be asynchronous (Redis):
 *   decide_prepare()   message arguments -> query (client key, rule,
 *                      limits, cost, priority, shedding verdict)
 *   decide_shed()      when the query is shed: the 503 answer
 *   (the store checks the query's limits at a time of its choosing)
 *   decide_result()    store answer -> decision
 *   decide_open(), decide_closed()  no store answer (store.c chooses by
 *                      the rule's failure mode)
 *   decide_put_actions() decision -> SET-VAR actions of the ACK
 *
 * A query points into the rules it was made under (rules.h: loaded and
 * derived once, reference-counted): the store keeps them referenced while
 * the query waits, so a reload never pulls them from under it.
 */
#ifndef RL_DECIDE_H
#define RL_DECIDE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "identity.h"
#include "limit.h"
#include "rules.h"
#include "spop.h"

/* The messages the agent understands (part of the contract with HAProxy):
 * a request to decide; a response whose request took a concurrency
 * place, which it gives back. */
#define DECIDE_MESSAGE "check-rate"
#define DECIDE_RELEASE "release"
#define DECIDE_RESPONSE "response"
/* Their argument that names the place (the variable place of the answer,
 * txn.rl.place), and its name before 0.3, still read when it is absent
 * (deprecated: it goes in a later release). */
#define DECIDE_PLACE "place"
#define DECIDE_PLACE_OLD "slot"
/* The response message's argument that settles a charge (charge.h): what
 * the request cost, by the response. */
#define DECIDE_COST "cost"
/* A place's name: "<rule>/<client key in hex>", and for a rule that
 * charges what the response says, three fields more (charge.h): the
 * estimate, the take's time and the limits' hash, up to 49 bytes. */
#define DECIDE_PLACE_MAX (RULES_NAME_MAX + 2 * IDENTITY_KEY_LEN + 1 + 49)

struct decide_query {
	uint8_t key[IDENTITY_KEY_LEN];
	/* The key of each layer stacked on the rule (rule->stack[p]): its
	 * limits' client, under the layer's identity. */
	uint8_t lkey[RULES_STACK_MAX][IDENTITY_KEY_LEN];
	const char *identity;       /* the argument that named the client */
	struct rules *rules;
	const struct rule *rule;
	const struct limit_spec *limits;
	size_t nlimits;
	uint32_t cost;
	int priority;
	bool shadow;                /* the rule (or everything) is in shadow mode */
	bool shed;                  /* over its priority's load threshold */
	bool shed_shadow;
	bool load_known;            /* in_use and free_conns came with the request */
	enum rules_failure on_failure;
	int64_t in_use;             /* the backend's load figures (shed.h) */
	int64_t free_conns;
	/* The request's id (a hash of its request_id argument, never 0) when
	 * its rule has a concurrency limit and it sent one, else 0: the
	 * concurrency limit is then not checked. */
	uint64_t request_id;
	/* When the store first held it instead of refusing it (its rule's
	 * delay, store/delay.h), on the monotonic clock; 0: never held. */
	int64_t delayed_since_us;
	/* Under adaptive shedding: the id of the request in flight to its
	 * backend (worker/flights.h), which a refusal gives back; 0: none. */
	uint64_t flight;
};

enum decide_reason {
	DECIDE_OK = 0,
	DECIDE_LIMITED,
	DECIDE_SHED,
	DECIDE_STORE_DOWN,
	DECIDE_CONCURRENCY,     /* refused: too many requests in flight */
	DECIDE_BANNED,          /* refused: in the rule's penalty box */
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
	const char *policy;    /* points into the rules, or "" */
	uint16_t rule_len;     /* strlen(rule), strlen(policy) */
	uint16_t policy_len;
	char ratelimit[RULES_PNAME_MAX + 64];
	uint16_t ratelimit_len; /* strlen(ratelimit), 0 when there is none */
	bool shadow;
	bool degraded;
	bool saturated;        /* the store kept answering, not in time: the
				* rule's local bucket decided (degraded too) */
	bool counted;          /* remaining and reset are known */
	/* What the answer carries: the rules' setting (rules_answer), 0
	 * (SETTINGS_ANSWER_FULL) for every variable. */
	uint16_t answer;
	bool near_limit;       /* allowed, leaving under a tenth of the quota */
	uint32_t counters;     /* the rule's counters (rulestats.h) */
	/* Allowed by a rule with a concurrency limit (or a penalty on
	 * responses): "<rule>/<key in hex>", the place it took, for the
	 * release and response messages (place_len 0: none). */
	char place[DECIDE_PLACE_MAX];
	uint8_t place_len;
	/* How long the store held the request before this answer (its
	 * rule's delay), 0: not held. Set on answers made later only (the
	 * store's answer callback), never read on those made at once. */
	int64_t delayed_us;
	uint64_t flight;       /* the query's */
};

/* The key limit j of q is kept under: the client's under the rule (key),
 * or a layer's. */
static inline const uint8_t *decide_limit_key(const struct decide_query *q, size_t j)
{
	unsigned p = q->rule->part_of[j];

	return p ? q->lkey[p - 1] : q->key;
}

/* The rule limit j of q comes from: q's, or a layer stacked on it. */
static inline const struct rule *decide_limit_rule(const struct decide_query *q, size_t j)
{
	unsigned p = q->rule->part_of[j];

	return p ? q->rule->stack[p - 1] : q->rule;
}

/* A request's id from its request_id argument (check-rate's and release's
 * alike): FNV-1a of its text, never 0 (0 is "no id"). */
uint64_t decide_request_id(const struct spop_data *d);

/* The key of one rule of a client (identity_key under the rules' secret). */
void decide_key(const struct rules *rules, const char *kind, const char *value, size_t vlen,
		const char *rule, uint8_t key[IDENTITY_KEY_LEN]);

/* Builds the query for one check-rate message from its KV arguments (a
 * cursor from spop_msg_next, already validated). `rnd` is a uniform random
 * number for probabilistic shedding. The query points into the rules and
 * into the message; the caller keeps the rules referenced as long as the
 * query lives. */
void decide_prepare(struct rules *rules, struct spop_cursor args, unsigned nargs,
		    uint32_t rnd, struct decide_query *q);
/* The same from a request decoded under the same rules
 * (rules_request_decode). */
void decide_prepare_request(struct rules *rules, const struct rules_request *req,
			    uint32_t rnd, struct decide_query *q);

/* Applies the operator's override of q's client, if o has one in force
 * at now_ms (wall clock): q's rule becomes its rule with that limit
 * instead of its rates, bounded by its max_override (a rule without
 * max_override takes none). It takes precedence over an override from a
 * message argument. */
struct overrides;
/* The rule the operator's override of the client `key` in o makes of
 * `rule` (the file's rule of that index, whatever override `rule` is),
 * held for the caller (rules_rule_unhold when done), or NULL when none is
 * in force or none can be made: what decide_override() applies, and what
 * the admin's look and reset go to. */
const struct rule *decide_override_rule(struct rules *rules, const struct overrides *o,
					int64_t now_ms, const uint8_t key[IDENTITY_KEY_LEN],
					const struct rule *rule);
void decide_override(struct rules *rules, const struct overrides *o, int64_t now_ms,
		     struct decide_query *q);

/* A query for a client's override points into a rule made for it
 * (rules_override), which the thread that prepared the query holds until
 * it prepares another (a worker answers one before the next), or until
 * this: a thread calls it before it lets go of the rules it decides
 * with. A query kept past its answer takes a hold of its own
 * (rules_rule_hold). */
void decide_forget(void);

/* The answer to a shed query: 503 (or 0 in shadow mode), reason shed. */
void decide_shed(const struct decide_query *q, struct decide_decision *d);

/* Turns the store's per-limit results (res[0..q->nlimits)) and the index of
 * the deciding limit into the decision. A query without limits is allowed. */
void decide_result(const struct decide_query *q, const struct limit_result *res,
		   int decider, struct decide_decision *d);

/* Answers without the shared store (store.c picks one by the rule's
 * failure mode). Both are marked degraded. decide_open() forwards;
 * decide_closed() refuses with 503, reason store_down (forwards in shadow
 * mode, and when the rule has no limit). */
void decide_open(const struct decide_query *q, struct decide_decision *d);
void decide_closed(const struct decide_query *q, struct decide_decision *d);

/* The most bytes the actions take, with strings of these lengths: six
 * integers, five strings (the reason at most 11 bytes), two booleans;
 * then with the longest strings a decision holds. */
#define DECIDE_ACTIONS_MAX_WITH(strings) \
	(6 * SPOP_VAR_INT64_MAX + 5 * SPOP_VAR_STR_MAX(0) + 11 + (strings) + 2 * SPOP_VAR_BOOL_MAX)
#define DECIDE_ACTIONS_MAX \
	DECIDE_ACTIONS_MAX_WITH(RULES_NAME_MAX + RULES_POLICY_MAX + \
				sizeof(((struct decide_decision *)0)->ratelimit) + DECIDE_PLACE_MAX)

/* Appends the SET-VAR actions (scope txn) of a decision, those its answer
 * setting chooses: at most DECIDE_ACTIONS_MAX bytes, else w->err. By
 * default (SETTINGS_ANSWER_READ) what HAProxy's rules read: policy,
 * ratelimit, a place held, the priority when the rules classify; and when
 * refused, status, retry_after, reason and rule; in shadow mode or without
 * the store, shadow or degraded (true), reason and rule. An answer left
 * with no variable carries one UNSET-VAR of status: an ACK must carry an
 * action. */
void decide_put_actions(struct spop_wbuf *w, const struct decide_decision *d);

const char *decide_reason_str(enum decide_reason r);

#endif
