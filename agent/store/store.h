/* SPDX-License-Identifier: Apache-2.0 */
/* store.h: where the buckets live, behind one interface.
 *
 * A store checks a query's limits: the in-memory store at once, a shared
 * store (Redis, in any topology) usually later. Callers see one call,
 * store_submit(), which answers now or later through the callback the
 * worker registered, and never learn which store they talk to. What to
 * answer when the shared store cannot decide (the rule's failure mode:
 * open, closed or local) is decided here, in store.c, once for every
 * backend; backends only say "decided" or "could not".
 *
 * Two levels, so that a store may hold several connections per worker
 * (Cluster nodes, shards) and process-wide state:
 *   struct store         one per process: the backend's configuration and
 *                        shared state, the buckets of the memory store and
 *                        of the local failure mode, the admin-reset epoch;
 *   struct store_worker  one per worker thread, on that worker's loop: the
 *                        backend's connections, queues and counters. Only
 *                        its thread touches it.
 *
 * A backend implements struct store_ops and reports the outcome of a query
 * it accepted as pending with store_complete(). Nothing here knows SPOP
 * connections: an answer goes to the worker's callback with the
 * struct store_ref its caller gave, which the store carries but never
 * reads.
 */
#ifndef RL_STORE_H
#define RL_STORE_H

#include <ev.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decide.h"
#include "stats.h"

struct delay_queue;
struct memstore;
struct overrides;
struct store;
struct store_worker;

/* Where an answer goes: for the store, an opaque token (the worker's:
 * its connection's id and generation, the NOTIFY's stream and frame). */
struct store_ref {
	uint32_t id;
	uint32_t gen;
	uint64_t stream_id;
	uint64_t frame_id;
};

/* Receives the decision of a query answered later. `d` and what it points
 * to are valid during the call only. */
typedef void store_answer_fn(void *priv, const struct store_ref *ref,
			     const struct decide_decision *d);

/* Whether the answer to ref is still awaited (its connection open): a
 * held request whose connection has gone is not decided again, so it
 * takes no token. No side effect. */
typedef bool store_awaited_fn(void *priv, const struct store_ref *ref);

/* Counters of one worker's store, summed over workers by the metrics.
 * (A backend keeps its own, and exports them: store_redis.h.) */
struct store_stats {
	counter_t penalty_events; /* responses and refusals counted for a penalty */
	counter_t delay_full;     /* refused at once: max_delayed were held (delay.h) */
	counter_t delayed_held;   /* requests held now (a gauge) */
	counter_t delay_gone;     /* held requests whose connection went first */
	/* charges settled by the response's cost (store_settle), the tokens
	 * taken beyond estimates and given back, and responses whose cost
	 * was missing or not a number, or whose place names limits no
	 * longer in force (nothing settled) */
	counter_t charge_settlements;
	counter_t charge_taken;
	counter_t charge_given;
	counter_t charge_invalid;
	counter_t charge_stale;
};

/* What a backend's check returns. */
enum store_outcome {
	STORE_DECIDED,      /* res[] and *decider hold the store's answer */
	STORE_PENDING,      /* store_complete() will be called later */
	STORE_UNAVAILABLE,  /* the store cannot decide: failure mode */
};

/* An admin look at (or reset of) one client: one key per rule. The store
 * says, for item i, what it found (data, never text: ops/admin.c writes
 * the answer), or sets `error`; then calls store_admin_done(), perhaps
 * before store_admin() returns, which calls done(). */
enum store_admin_found {
	STORE_ADMIN_NOTHING,  /* not looked at: the request failed (error) */
	STORE_ADMIN_STATE,    /* a look at buckets the agent holds: limit[].state */
	STORE_ADMIN_RAW,      /* a look at a shared store: limit[].name, raw,
	                       * and the longest time to live of the keys */
	STORE_ADMIN_DELETED,  /* a reset: `deleted` entries or keys went */
	STORE_ADMIN_REFUSED,  /* the store answered the look with an error
	                       * (refusal, its text); a shared store's
	                       * limit[].name still set */
};

/* A key's name in a shared store, and a NUL. */
#define STORE_ADMIN_NAME_MAX 32

/* Limit j of an item's rule (rule->limits[j], j < rule->nown). */
struct store_admin_limit {
	/* STORE_ADMIN_STATE: what the bucket holds now (a concurrency
	 * limit: its requests in flight) */
	uint64_t remaining;
	int64_t reset_us;
	unsigned in_flight;
	/* STORE_ADMIN_RAW: its key, and the value the store holds (raw NULL:
	 * none); raw is the caller's to xfree. has_state: remaining and
	 * reset_us read from that value too (a token bucket or a window) */
	bool has_state;
	char name[STORE_ADMIN_NAME_MAX];
	char *raw;
	size_t raw_len;
};

/* How the answer names a client, and a NUL. */
#define STORE_ADMIN_LABEL_MAX 8

struct store_admin_item {
	const struct rule *rule;
	uint8_t key[IDENTITY_KEY_LEN];
	/* the client as the answer names it: store_admin() writes 24 bits
	 * of its key in URL-safe base64 within braces; a shared store may
	 * write its keys' tag instead */
	char label[STORE_ADMIN_LABEL_MAX];
	/* what the store found, zeroed by the caller */
	enum store_admin_found found;
	int64_t deleted;
	struct store_admin_limit limit[LIMIT_RULE_MAX]; /* rule->nown of them */
	bool has_ttl;           /* STORE_ADMIN_RAW or _REFUSED: every key's TTL read */
	int64_t ttl_ms;         /* the longest: -2 no key, -1 no expiry */
	char *refusal;          /* STORE_ADMIN_REFUSED: the error, the caller's
	                         * to xfree */
	size_t refusal_len;
	bool out_of_memory;     /* a value could not be kept */
};

struct store_admin {
	struct ev_loop *loop;   /* the caller's: an asynchronous store answers on it */
	bool reset;
	/* Or an override (overrides.h) set (ov_remove false) or removed, for
	 * the clients of ov[0..nov): the items are then not looked at. */
	bool override;
	bool ov_remove;
	const struct override_entry *ov;
	size_t nov;
	size_t n;
	struct store_admin_item *item;
	char error[256];
	int status;             /* with error: the HTTP status, 0 for 502 */
	void (*done)(struct store_admin *a);
	void *priv;
};

struct store_ops {
	const char *name;   /* "memory", "redis" */
	bool shared;        /* decisions shared by a fleet */
	/* Sets up sw->impl on sw->loop. Returns 0 or -1. */
	int (*worker_init)(struct store_worker *sw);
	/* Reports every query still pending (store_complete with NULL) and
	 * frees sw->impl. */
	void (*worker_free)(struct store_worker *sw);
	/* Checks q->limits (q->nlimits > 0) for the answer to go to `ref`. */
	enum store_outcome (*check)(struct store_worker *sw, const struct decide_query *q,
				    const struct store_ref *ref, struct limit_result *res,
				    int *decider);
	/* The rules changed: forget what was derived from the old ones. */
	void (*rules_changed)(struct store_worker *sw);
	/* See struct store_admin. Runs on the caller's (main) thread. */
	void (*admin)(struct store *st, struct store_admin *a);
	/* Gives back the concurrency place of request id (decide.h), which
	 * took it under limit j of rule for client key: at once, answering
	 * nothing (NULL: the local places only, see store_response). */
	void (*release)(struct store_worker *sw, const struct rule *rule, size_t j,
			const uint8_t key[IDENTITY_KEY_LEN], uint64_t id);
	/* Counts one event of rule's penalty for client key (a response of
	 * a listed status, a refusal) and, when they reach its limit, bans
	 * the client for the penalty's length: at once, answering nothing
	 * (NULL: in the memory store). */
	void (*penalize)(struct store_worker *sw, const struct rule *rule,
			 const uint8_t key[IDENTITY_KEY_LEN]);
	/* Settles a charge (store_settle) of client key under rule, whose
	 * estimate was taken at take_us (the store's clock): delta more
	 * tokens taken (> 0) or given back (< 0), at once, answering nothing,
	 * never retried (NULL: in the memory store). */
	void (*charge)(struct store_worker *sw, const struct rule *rule,
		       const uint8_t key[IDENTITY_KEY_LEN], int64_t take_us, int64_t delta);
	/* Frees st->impl. */
	void (*free)(struct store *st);
};

struct store {
	const struct store_ops *ops;
	void *impl;
	/* what the rules hash their limits under (rules_set_limit_space):
	 * the backend's, NULL for none */
	const char *limit_space;
	struct memstore *mem;             /* memory store; the local failure mode */
	struct inflight *flights;         /* their concurrency places */
	struct overrides *ov;             /* memory store: its overrides (main thread) */
	/* The holder of the overrides in force (server.c): told of each set
	 * the store learns (a Redis store reads the fleet's), from any
	 * thread, taking a reference. */
	void (*on_overrides)(void *priv, struct overrides *o);
	void *on_overrides_priv;
	atomic_uint_fast64_t reset_epoch; /* +1 per admin reset: caches forget */
	struct store_worker *workers;     /* every worker's part (main thread) */
};

struct store_worker {
	struct store *st;
	struct store_worker *next;        /* in st->workers */
	struct ev_loop *loop;
	int idx;
	store_answer_fn *answer;
	store_awaited_fn *awaited; /* NULL: every answer is awaited */
	void *priv;
	void *impl;
	struct delay_queue *delays; /* requests held (delay.h), made at the first */
	struct store_stats stats;
};

/* The in-memory store: this agent's buckets alone. NULL when out of
 * memory. */
struct store *store_memory_new(size_t max_keys);

/* Used by backends' constructors: st->ops, the local failure mode's buckets.
 * Returns 0 or -1. */
int store_init(struct store *st, const struct store_ops *ops, size_t mem_max_keys);

void store_free(struct store *st);

/* The worker's part of the store, answering through answer(priv, ...).
 * NULL on failure, after logging why. */
struct store_worker *store_worker_new(struct store *st, struct ev_loop *loop, int idx,
				      store_answer_fn *answer, void *priv);

/* Tells sw how to know an answer nobody awaits (store_awaited_fn). */
void store_worker_awaited(struct store_worker *sw, store_awaited_fn *awaited);

/* Answers what is still pending (without the store) and frees sw. */
void store_worker_free(struct store_worker *sw);

/* Decides a query that was not shed. Returns 1 when *d holds the decision
 * now, 0 when it will reach the worker's answer callback (the query's
 * rules stay referenced until then): a shared store's answer, or one that
 * its rule's delay holds (a refusal that would pass within the delay is
 * decided again when it would, delay.h; its answer says how long it
 * waited, decide_decision.delayed_us). */
int store_submit(struct store_worker *sw, const struct decide_query *q,
		 const struct store_ref *ref, struct decide_decision *d);

/* A backend's answer to a pending query: res and decider from the store,
 * or res NULL when it could not decide: by the failure mode, or, with
 * decider STORE_SATURATED (the store kept answering, but not within the
 * query's deadline), by the rule's local bucket whatever its failure
 * mode. */
#define STORE_SATURATED (-2)
void store_complete(struct store_worker *sw, const struct decide_query *q,
		    const struct store_ref *ref, const struct limit_result *res, int decider);
/* The same from a store that says when it took (its clock, take_us > 0):
 * what a rule that charges what the response says keeps in its place. */
void store_complete_at(struct store_worker *sw, const struct decide_query *q,
		       const struct store_ref *ref, const struct limit_result *res, int decider,
		       int64_t take_us);

/* The decision without the shared store, by the rule's failure mode:
 * open (forward), closed (503 store_down), local (the limits divided by
 * the fleet size, in this agent's memory). Always marked degraded. */
void store_without(struct store *st, const struct decide_query *q, struct decide_decision *d);

/* The decision of a saturated store (see store_complete): the rule's local
 * bucket (the local failure mode's), marked degraded and saturated; open
 * only when the bucket finds no room. */
void store_saturated(struct store *st, const struct decide_query *q, struct decide_decision *d);

/* Checks q's limits (or another spec of each: the local failure mode's) in an
 * in-memory store, each under its key (decide_limit_key): memstore_check's
 * answer. */
int store_mem_check(struct store *st, const struct decide_query *q,
		    const struct limit_spec *limits, int64_t now_us, struct limit_result *res);

/* A response (the release or response message): for the request that
 * place ("<rule>/<key in hex>", decide.h) names under the rules in force,
 * gives back the concurrency place of request id (0: none), and counts
 * status (0: none) for the rule's penalty when it lists it. A place that
 * names no such rule (changed by a reload, say) does nothing: the place
 * then ends by itself. Returns 0, or -1 for a malformed place. */
int store_response(struct store_worker *sw, const struct rules *rules, const char *place,
		   size_t len, uint64_t id, int status);

/* For a rule that charges what the response says: when every limit of q
 * took its cost, d's place becomes the charge's (decide/charge.h), take_us
 * the store's clock when it took (0: unknown, the memory store's own
 * clock then; a shared store's answer without it takes no place). */
void store_charge_place(struct store_worker *sw, const struct decide_query *q,
			const struct limit_result *res, struct decide_decision *d,
			int64_t take_us);

/* The response's cost argument (cost, NULL when absent) for the request
 * whose place is place: when it is a charge's, settles it (more taken,
 * less given back, store_ops.charge) and counts it. Returns 1 when
 * settled, 0 when the place is not a charge's, -1 when nothing could be
 * settled (counted). */
int store_settle(struct store_worker *sw, const struct rules *rules, const char *place,
		 size_t len, const struct spop_data *cost);

/* Counts one event of rule's penalty for client key (store_ops.penalize). */
void store_penalize(struct store_worker *sw, const struct rule *rule,
		    const uint8_t key[IDENTITY_KEY_LEN]);

void store_rules_changed(struct store_worker *sw);

/* Starts an admin look or reset (see struct store_admin). */
void store_admin(struct store *st, struct store_admin *a);

/* A backend has finished a->item[]: once a reset is done, every worker
 * forgets the refusals it cached; then a->done(a). */
void store_admin_done(struct store *st, struct store_admin *a);

uint64_t store_reset_epoch(const struct store *st);

/* What the limits' hashes are taken under, for rules_set_limit_space():
 * the backend's ("" for none). */
const char *store_limit_space(const struct store *st);

/* For the metrics, on the main thread: whether decisions are shared by a
 * fleet; the counters of every worker's part, summed into *out; the
 * memory store's figures (of the local failure mode's buckets too). */
bool store_shared(const struct store *st);
void store_get_stats(struct store *st, struct store_stats *out);
struct memstore_stats;
void store_mem_stats(const struct store *st, struct memstore_stats *out);

#endif
