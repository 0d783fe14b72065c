/* SPDX-License-Identifier: Apache-2.0 */
/* rules.h: the rules file (YAML) and the classification of requests.
 *
 * A rules file names the client (identity), gives each client tier its
 * limits, overrides them per endpoint, assigns priorities for load shedding,
 * and carries the settings the agent applies at start (settings.h).
 * docs/rules.md is the operators' reference of the format;
 * examples/rules.yaml a complete example.
 *
 * Loading (rules_load.c) is strict: an unknown key, a wrong type, a
 * duplicate, a value out of range or a YAML syntax error rejects the whole
 * file with one message "FILE:LINE:COL: where: problem" (lines and columns
 * from 1), so a typo can never pass silently and a reload can keep the
 * rules in force.
 *
 * A loaded `struct rules` is immutable: any number of threads may classify
 * against it at once without locks. What every answer needs of a rule
 * (its RateLimit-Policy value, the store's field names, the local failure
 * mode's share of each limit) is derived once, at load. Loaded rules
 * are reference-counted: the loader's reference, then one per holder
 * (a worker, a decision waiting for Redis), so a reload can replace them
 * while older decisions finish under the rules they started with; the
 * last rules_release() frees them as a whole.
 *
 * Classification (rules_classify.c) is pure: no I/O, no clock, no
 * allocation, and no YAML linked in. It reads only the message arguments
 * the caller collected, compares bytes exactly (same length, same bytes;
 * hosts ignoring ASCII case; the path in its normal form, urlpath.h,
 * unless the file says `paths: raw`) and never reads past an argument's
 * length. Its cost is linear in the number of endpoints and priority
 * classes, which are capped (RULES_ENDPOINTS_MAX, RULES_CLASSES_MAX), like
 * every list of the file, so neither loading nor classifying can be made
 * arbitrarily slow by a file; and in the length of the path, normalised
 * at most once per request, and only when some condition reads it.
 */
#ifndef RL_RULES_H
#define RL_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "limit.h"
#include "adaptive.h"
#include "shed.h"
#include "spop.h"

#define RULES_NAME_MAX 32        /* rule and argument names, NUL included */
#define RULES_POLICY_MAX 2048    /* a RateLimit-Policy value, NUL included */
#define RULES_PNAME_MAX (RULES_NAME_MAX + 40) /* a policy item's name */
#define RULES_PNAME_SF_MAX (2 * RULES_PNAME_MAX + 1) /* quoted, escaped */
#define RULES_LID_MAX 48         /* a limit's field name in the store */
#define RULES_IDENTITY_MAX 8     /* identity arguments */
#define RULES_ARGS_MAX 64        /* message arguments looked at */
#define RULES_TIERS_MAX 256
#define RULES_ENDPOINTS_MAX 1024
#define RULES_CLASSES_MAX 256
#define RULES_LAYERS_MAX 64
#define RULES_OVERRIDES_MAX 256  /* overridden limits held at once per rules */
#define RULES_STACK_MAX 3        /* layers stacked on one rule */
#define RULES_PARTS_MAX (1 + RULES_STACK_MAX)
#define RULES_VALUES_MAX 32      /* values of one match condition */
#define RULES_MATCH_ARGS_MAX 16  /* argument conditions of one match */
#define RULES_PATH_MAX 1024      /* bytes of a path condition's value */
#define RULES_FILE_MAX (4u << 20) /* bytes of a rules file */
#define RULES_DEFAULT_PRIORITY 2
#define RULES_DEFAULT_RULE "default"
/* The argument that names a request (HAProxy's unique-id), read for
 * concurrency limits. */
#define RULES_REQUEST_ID "request_id"

/* ---- message arguments ---------------------------------------------------- */

struct rules_arg {
	struct spop_str name;
	struct spop_data val;
};

/* The arguments of one message, as the caller decoded them. Names and
 * string values point into the caller's frame, which must outlive every use
 * of the set (and of a verdict built from it). */
struct rules_args {
	size_t n;
	struct rules_arg a[RULES_ARGS_MAX];
};

/* Appends one argument; arguments beyond RULES_ARGS_MAX are ignored
 * (returns -1 then, 0 otherwise). */
int rules_args_add(struct rules_args *args, struct spop_str name,
		   const struct spop_data *val);

/* Fills *args from a message's KV items (a cursor from spop_msg_next,
 * already validated): at most RULES_ARGS_MAX, in message order. */
void rules_args_from_kv(struct rules_args *args, struct spop_cursor kv,
			unsigned nargs);



/* The value of the first argument named exactly `name`, or NULL. */
const struct spop_data *rules_args_get(const struct rules_args *args,
				       const char *name);

/* ---- one request, as classification reads it ------------------------------
 * Classification reads a few arguments by name: method, path and host when
 * some match condition reads them, the tier, the cost, the identity
 * arguments and the load figures (each at its "position"); and any
 * argument when some match condition names arguments (`args`). A request
 * holds the value at each position (the first argument of that name among
 * the first RULES_ARGS_MAX) and, only when the rules need them, all the
 * arguments. */
#define RULES_POSITIONS_MAX (10 + RULES_IDENTITY_MAX)

struct rules;

struct rules_request {
	const struct spop_data *position[RULES_POSITIONS_MAX]; /* NULL: absent */
	const struct rules_args *args; /* every argument, or NULL if not needed */
	/* Storage of rules_request_decode(). */
	struct spop_data val[RULES_POSITIONS_MAX];
	struct rules_args all;
};

/* Reads the `nargs` KV items at *kv (after spop_msg_head) and checks every
 * one, those past RULES_ARGS_MAX too: the arguments the rules read are
 * decoded into *req, the others skipped (all are kept when the rules match
 * on any). The one walk over a check-rate message, so that a decision
 * decodes no argument it does not read. Returns 0 with *kv past the items,
 * or -1 when they are broken or fewer than nargs. *req points into the
 * message and into itself; it is classified under the same rules. */
int rules_request_decode(const struct rules *r, struct rules_request *req,
			 struct spop_cursor *kv, unsigned nargs);
/* The same from arguments decoded already (an admin query's): *req points
 * into *args, which must outlive it. */
void rules_request_from_args(const struct rules *r, const struct rules_args *args,
			     struct rules_request *req);

/* ---- rules ---------------------------------------------------------------- */

enum rules_failure {
	RULES_FAIL_OPEN = 0,    /* forward, marked degraded */
	RULES_FAIL_CLOSED = 1,  /* refuse with 503, reason store_down */
	RULES_FAIL_LOCAL = 2,   /* in-memory bucket, limit / store.agents */
};

enum rules_kind {
	RULES_KIND_DEFAULT = 0, /* the built-in rule when the file has no tiers */
	RULES_KIND_TIER = 1,
	RULES_KIND_ENDPOINT = 2,
	RULES_KIND_LAYER = 3,   /* applies only stacked on a tier or endpoint */
};

/* Who a layer's buckets belong to (a tier's or an endpoint's are the
 * client's, named by the file's identity). */
enum rules_scope {
	RULES_SCOPE_CLIENT = 0, /* the client, as the file's identity names it */
	RULES_SCOPE_ARGS = 1,   /* the first present of the layer's own arguments */
	RULES_SCOPE_GLOBAL = 2, /* one bucket shared by every client */
};

#define RULES_STATUSES_MAX 8
#define RULES_PENALTY_RESPONSES 1 /* responses of the statuses listed */
#define RULES_PENALTY_REFUSALS 2  /* the rule's own refusals (429) */

struct rule_penalty {
	uint8_t kind;              /* RULES_PENALTY_* bits, 0: no penalty */
	uint8_t nstatuses;
	uint16_t statuses[RULES_STATUSES_MAX];
	uint16_t status;           /* what a banned client gets: 429 or 403 */
	uint8_t ban;               /* the ban limit's index + 1 */
	/* N events in P (a sliding window) put the client in the box */
	struct limit_spec count;
	uint64_t count_lidh;       /* its keys' part of their names */
};

/* One rule: a tier, an endpoint, the built-in default, or a layer. Its
 * name is what the agent exports as txn.rl.rule. The periods of its limits
 * are distinct (policy names are "<rule>-<period>").
 *
 * A tier or an endpoint may stack layers (`stack:`): a request of the rule
 * is then checked against the rule's own limits and each layer's, all or
 * nothing, each layer's under its own identity (global, the client's, or
 * other arguments). The arrays below hold the rule's own limits first
 * (nown of them), then each layer's in turn: nlimits counts them all, and
 * part_of[] says whose each is (0 the rule, p the layer stack[p - 1]).
 * nlimits 0 means no rate limit. */
struct rule {
	char name[RULES_NAME_MAX];
	enum rules_kind kind;
	unsigned index;          /* position in rules_rule_at(), 0-based */
	struct limit_spec limits[LIMIT_SET_MAX];
	size_t nlimits;
	size_t nown;             /* its own limits (the file's), first */
	/* The layers stacked on it, in its `stack` order, and whose each
	 * limit is. */
	const struct rule *stack[RULES_STACK_MAX];
	uint8_t nstack;
	uint8_t part_of[LIMIT_SET_MAX];
	/* A layer's identity: RULES_SCOPE_ARGS reads the arguments
	 * rules_identity_names() lists at idk[0..nidk). */
	enum rules_scope scope;
	uint8_t idk[RULES_IDENTITY_MAX];
	uint8_t nidk;
	/* `concurrency`: its limit's index + 1 among the rule's own, 0 when
	 * none. */
	uint8_t conc;
	/* `penalty`: what puts a client in the penalty box (kind 0: nothing),
	 * and for how long (the LIMIT_BAN limit, penalty.ban its index + 1
	 * among the rule's own). */
	struct rule_penalty penalty;
	/* `max_override`: the most an override may give the client (its
	 * own rate limits then give way to the override's one). */
	struct limit_spec max_override;
	bool has_max_override;
	/* `charge: response`: admitted at its cost, settled by the response
	 * message's cost argument (store/charge.h); no lease, no layer. */
	bool charge;
	/* Derived: conc, penalty.kind, has_max_override, delay_us or charge, or a
	 * layer with either: what the common path tests once. */
	bool extras;
	/* Derived: no layer and no concurrency limit: one key, all in the
	 * memory store's hands. */
	bool simple;
	/* Made by rules_override() for an overridden limit (held while in
	 * use, see there), not loaded from the file. */
	bool derived;
	bool shadow;             /* the rule's own shadow flag */
	enum rules_failure on_failure; /* its own, or the file's default */
	/* `lease` (its own, or the file's): the interval of its leases
	 * (store/lease.h), 0 for the agent's --lease, -1 for none; their
	 * most, in percent of a capacity, 0 for the agent's --lease-share */
	int64_t lease_us;
	uint8_t lease_share;
#define RULES_LEASE_MIN_US 10000     /* the interval: 10 ms to 1 s */
#define RULES_LEASE_MAX_US 1000000
#define RULES_LEASE_SHARE_MAX 50     /* the share: 1 to 50 percent */
	uint32_t cost;           /* weight of a request, >= 1 (default 1) */
	/* `delay`: a request its rates refuse, that would pass within this
	 * long, is held and decided again when it would pass (store/delay.h);
	 * 0: refused at once. */
	int64_t delay_us;
#define RULES_DELAY_MIN_US 1000           /* 1 ms to 30 s */
#define RULES_DELAY_MAX_US 30000000
	/* Derived at load: */
	char policy[RULES_POLICY_MAX];                 /* RateLimit-Policy value */
	char pname[LIMIT_SET_MAX][RULES_PNAME_MAX];     /* policy item per limit */
	/* pname as the RateLimit value quotes it (rlheader_name) */
	char pname_sf[LIMIT_SET_MAX][RULES_PNAME_SF_MAX];
	uint8_t pname_sf_len[LIMIT_SET_MAX];
	/* Each limit named by algorithm and parameters, so that a changed
	 * limit starts fresh in the shared store instead of misreading old
	 * state. */
	char lid[LIMIT_SET_MAX][RULES_LID_MAX];
	/* lid hashed (FNV-1a, 64 bits, of the store's space and lid,
	 * rules_set_limit_space): the limit's part of its keys' names */
	uint64_t lidh[LIMIT_SET_MAX];
	/* The local failure mode: each limit divided by the fleet size
	 * (store.agents), at least 1. */
	struct limit_spec local[LIMIT_SET_MAX];
	/* strlen() of name and policy, for the answers that copy them. */
	uint8_t name_len;
	uint16_t policy_len;
	/* The index of the rule's counters (rulestats.h), by its name; set
	 * by the holder before the rules are used (rules_set_counters). */
	uint32_t counters;
};

struct rules_names {
	char name[RULES_IDENTITY_MAX][RULES_NAME_MAX];
	size_t n;
};

struct rules;
struct settings;

/* Loads a rules file. Returns the rules, or NULL with a message in err:
 * "PATH:LINE:COL: where: problem", or "PATH: problem" for a file that
 * cannot be read (strerror), is not a regular file, is empty or is larger
 * than RULES_FILE_MAX. An empty file is an error (a file truncated by a
 * failed deployment must not quietly become the defaults); "{}" is a valid
 * file that keeps every default. */
struct rules *rules_load(const char *path, char *err, size_t errlen);

/* The same from memory (len bytes at buf, no NUL needed); `name` stands
 * for the file name in messages. */
struct rules *rules_load_buffer(const char *buf, size_t len, const char *name,
				char *err, size_t errlen);

/* A client's own limit instead of the rule's rates: the override `s`
 * ("N/P", len bytes), bounded by rule's max_override: an override above
 * it in rate or in burst gives the max_override. Into *out (a token
 * bucket). Returns 0, or -1 when s is not a limit or the rule takes no
 * override. */
int rules_override_spec(const struct rule *rule, const char *s, size_t len,
			struct limit_spec *out);
/* The same from a limit already read. */
int rules_override_clamp(const struct rule *rule, const struct limit_spec *in,
			 struct limit_spec *out);

/* The rule base with its rates replaced by the one limit *ov (its other
 * limits, layers, name and counters kept), to be used as any rule of r:
 * made on demand, one per distinct (rule, limit), and held for the
 * caller, who gives the hold back with rules_rule_unhold() once nothing
 * it keeps points into the rule (its decision answered). A derived rule
 * that nothing holds is freed when room is needed for another, so that
 * overrides that come and go never run out of room: at most
 * RULES_OVERRIDES_MAX are held at once. Past that, or out of memory,
 * NULL, counted in rules_override_refused(). Any thread. */
const struct rule *rules_override(struct rules *r, const struct rule *base,
				  const struct limit_spec *ov);
/* One more hold on a rule the caller holds already (a decision that goes
 * on waiting for the store), and one given back. A rule of the file is
 * never freed before its rules: both do nothing for it. Any thread. */
void rules_rule_hold(const struct rule *rule);
void rules_rule_unhold(const struct rule *rule);
/* How many times derived rules of r were freed so far. A cache that tells
 * rules apart by address (the refused-until cache, leases) adds it to
 * its epoch for a derived rule, so that an address freed and used again
 * is never taken for the rule it held before. */
uint64_t rules_override_epoch(const struct rules *r);
/* Overrides this process could not apply (rules_override() found no
 * room): the rule's own limits applied, or an operator's override was
 * refused. Every rules loaded count here. */
uint64_t rules_override_refused(void);

/* The embedded defaults, the same as a file holding "{}": one rule
 * "default" of 100/1m, identity api_key, user, ip, priority 2 for all,
 * shedding P1 90% P2 80% P3 70% on be_in_use/be_free with no ramp,
 * fail-open, in-memory store. NULL only when out of memory. */
struct rules *rules_default(void);

/* Takes one more reference. */
void rules_acquire(struct rules *r);
/* Drops one; the last frees the rules. NULL does nothing. */
void rules_release(struct rules *r);
/* References held now (for tests: who took one gives it back). */
unsigned rules_refs(const struct rules *r);

/* The generation the holder of the rules gave them (0 when loaded); the
 * server numbers them 1 at start, +1 per reload. */
uint64_t rules_gen(const struct rules *r);
void rules_set_gen(struct rules *r, uint64_t gen);

/* Sets the counters index of rule i (rules_rule_at), before the rules are
 * used. */
void rules_set_counters(struct rules *r, size_t i, uint32_t counters);

/* The key that client keys are hashed under (identity_key): a built-in
 * one until the holder sets the process's (rules_set_secret, before the
 * rules are used). */
const uint8_t *rules_secret(const struct rules *r);
void rules_set_secret(struct rules *r, const uint8_t key[16]);

/* The limits' hashes (rule->lidh, rule_penalty.count_lidh) are FNV-1a of
 * a space and each limit's name: the store's (store_limit_space(), a
 * shared store's layout of its values, so that a changed layout never
 * reads old state as new), set by the holder before the rules are used;
 * "" until then. At most RULES_LIMIT_SPACE_MAX - 1 bytes. */
#define RULES_LIMIT_SPACE_MAX 16
void rules_set_limit_space(struct rules *r, const char *space);

/* The hash state after "kind\0" under the rules' secret, for the clients
 * identity argument k (of rules_identity_names) names (k < 0: anonymous
 * clients), from which identity_key_from() computes their keys; and the
 * one of the one client of global layers (kind "global"). */
#define RULES_ID_GLOBAL (-2)
const struct identity_prefix *rules_global_prefix(const struct rules *r);
struct identity_prefix;
const struct identity_prefix *rules_identity_prefix(const struct rules *r, int k);

/* The settings the file carried (settings.h). */
const struct settings *rules_settings(const struct rules *r);

/* The name the rules were loaded under ("(defaults)" for rules_default). */
const char *rules_source(const struct rules *r);

/* Arguments that name the client, in order of preference. */
const struct rules_names *rules_identity(const struct rules *r);
/* Every identity argument the rules read: the file's identity first (in
 * its order), then those only layers name. At most RULES_IDENTITY_MAX. */
const struct rules_names *rules_identity_names(const struct rules *r);

/* The integer argument that weighs a request; "" when none. */
const char *rules_cost_argument(const struct rules *r);

/* The argument that names the tier, and the default tier. */
const char *rules_tier_argument(const struct rules *r);
const struct rule *rules_default_tier(const struct rules *r);

bool rules_shadow(const struct rules *r);               /* global shadow */
/* `paths: raw`: path conditions compare the path as sent, not its normal
 * form (urlpath.h). */
bool rules_paths_raw(const struct rules *r);
/* `max_delayed`: the requests a worker holds at once for rules with a
 * `delay` (store/delay.h); past it they are refused as without one. */
#define RULES_MAX_DELAYED_DEFAULT 1024
#define RULES_MAX_DELAYED_MAX 1000000
uint32_t rules_max_delayed(const struct rules *r);
/* Whether some rule asks for leases of its own (`lease`, store/lease.h). */
bool rules_any_lease(const struct rules *r);
enum rules_failure rules_on_failure(const struct rules *r); /* file default */
int rules_default_priority(const struct rules *r);
const struct shed_config *rules_shed(const struct rules *r);
/* shedding.adaptive, or NULL when the rules have none (rules_adaptive.c). */
const struct adaptive_config *rules_adaptive(const struct rules *r);
/* Under shedding.adaptive: the request's backend argument (a non-empty
 * string) and its request_id (NULL when absent or empty). False when it
 * names no backend. */
bool rules_adaptive_args(const struct rules *r, const struct rules_request *req,
			 const struct spop_data **backend, const struct spop_data **request_id);
/* What an answer carries (settings.h: SETTINGS_ANSWER_*), the file's
 * `answer` with the priority added to the default when the file has
 * priorities. */
unsigned rules_answer(const struct rules *r);

/* Every rule: tiers in file order (or the built-in default), then
 * endpoints in file order. */
size_t rules_count(const struct rules *r);
const struct rule *rules_rule_at(const struct rules *r, size_t i);
/* The rule named exactly `name`, or NULL. */
const struct rule *rules_find(const struct rules *r, const char *name);

const char *rules_failure_str(enum rules_failure f);

/* SHA-256 of the bytes the rules were loaded from (of "{}" for
 * rules_default): agents that show the same loaded the same file. */
const uint8_t *rules_sha256(const struct rules *r);

/* ---- the rules as loaded, for those who show them ------------------------
 * Read-only views of what classification compares (GET /admin/rules): they
 * live as long as the rules. */

/* One value of a match condition. `port` (hosts only): the value names a
 * port, so it is compared with the request's host as sent, port included. */
struct rules_value {
	const char *ptr;
	size_t len;
	bool port;
};

/* A condition holds when the request's value equals any of its values;
 * n == 0 means no condition. */
struct rules_cond {
	struct rules_value *v;
	size_t n;
};

struct rules_arg_cond {
	char name[RULES_NAME_MAX];
	size_t name_len;
	struct rules_cond c;
};

/* Every condition present must hold; tiers[] are indexes of
 * rules_rule_at(). */
struct rules_match {
	struct rules_cond method;
	struct rules_cond path;
	struct rules_cond host;
	unsigned *tiers;   /* indexes of tiers */
	size_t ntiers;
	struct rules_arg_cond *args;
	size_t nargs;
};

/* The argument that carries a client's override ("" when none), and the
 * fleet size the local failure mode divides each limit by (store.agents). */
const char *rules_override_argument(const struct rules *r);
int rules_agents(const struct rules *r);

/* Endpoint i's match (0 <= i < rules_endpoint_count); the endpoint is
 * the rule at rules_endpoint_first() + i. */
size_t rules_endpoint_count(const struct rules *r);
size_t rules_endpoint_first(const struct rules *r);
const struct rules_match *rules_endpoint_match(const struct rules *r, size_t i);
/* Priority class i (0 <= i < rules_class_count), in file order: the first
 * whose match holds gives its priority. */
size_t rules_class_count(const struct rules *r);
const struct rules_match *rules_class_match(const struct rules *r, size_t i, int *priority);

/* ---- arguments checked against traffic -------------------------------------
 * The argument names the file wrote (identity, tier once there are tiers,
 * shedding figures once it has a `shedding` section, cost, override,
 * request_id, every name a match condition reads): a name HAProxy never
 * sends is most likely misspelt on one side. At most RULES_CHECKED_MAX,
 * in a fixed order. */
#define RULES_CHECKED_MAX 64
size_t rules_checked_count(const struct rules *r);
const char *rules_checked_name(const struct rules *r, size_t i); /* NULL past the end */
/* Bit i set for each checked name i among the nargs arguments at kv (a
 * message's, after spop_msg_head; a broken item ends the walk). */
uint64_t rules_args_seen(const struct rules *r, struct spop_cursor kv, unsigned nargs);

/* ---- classification --------------------------------------------------------- */

struct rules_verdict {
	const struct rule *rule;  /* the rule whose limits apply */
	const struct rule *tier;  /* the client's tier (or the default) */
	int priority;                   /* 0..3 */
	bool shadow;                    /* limits: rule's or global shadow */
	bool shed_shadow;               /* shedding: global or shedding.shadow */
	enum rules_failure on_failure;  /* of rule */
	uint32_t cost;                  /* >= 1 */
	/* The client: index in rules_identity() of the first non-empty
	 * identity argument and its value (pointing into the caller's
	 * arguments), or -1 and NULL for an anonymous client. */
	int identity;
	const struct spop_data *identity_val;
	/* Load figures for shed_decide(); load_known false when either
	 * argument is missing or not an integer (then never shed). */
	bool load_known;
	int64_t in_use;
	int64_t free_conns;
	/* The request_id argument, when the rule has a concurrency limit and
	 * it was sent (not empty), else NULL. */
	const struct spop_data *request_id;
	/* The override argument, when the rule has a max_override and it was
	 * sent (not empty), else NULL. */
	const struct spop_data *override;
	/* The same as identity for each layer stacked on the rule
	 * (rule->stack[p], p < rule->nstack; the others are not written):
	 * an index in rules_identity_names(), -1 for anonymous, or
	 * RULES_ID_GLOBAL. */
	int layer_identity[RULES_STACK_MAX];
	const struct spop_data *layer_val[RULES_STACK_MAX];
};

/* Classifies one request:
 *  - tier: the tier named by the tier argument (a string, exact match), or
 *    the default tier when it is absent, empty or unknown;
 *  - rule: the first endpoint whose match holds, else the tier;
 *  - priority: the first priority class whose match holds, else the
 *    default priority;
 *  - cost: the cost argument when it is a positive integer (or a string
 *    of decimal digits), capped at 2^32-1, else the rule's cost.
 * Never fails; *out is fully written, but for the layers the rule does
 * not stack. */
void rules_classify(const struct rules *r, const struct rules_args *args,
		    struct rules_verdict *out);

/* The same for a request from rules_request_decode() under the same rules. */
void rules_classify_request(const struct rules *r, const struct rules_request *req,
			    struct rules_verdict *out);

#endif
