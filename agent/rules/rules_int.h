/* SPDX-License-Identifier: Apache-2.0 */
/* rules_int.h: the loaded rules as rules_load.c builds them and
 * rules_classify.c reads them. Private to those two files; everything else
 * goes through rules.h.
 *
 * The split keeps the request path apart from the file: rules_classify.c
 * includes no YAML and links none, and nothing it reads is written after
 * rules_load_buffer() returns, so the rules stay immutable and shared
 * between threads without locks. Every count below is bounded by the
 * loader (RULES_*_MAX), which is what keeps classification linear and
 * short.
 */
#ifndef RL_RULES_INT_H
#define RL_RULES_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "identity.h"
#include "rules.h"
#include "settings.h"
#include "sha256.h"

struct pclass {
	int priority;
	struct rules_match m;
};

/* The positions of struct rules_request (rules.h). */
enum arg_position {
	POS_METHOD,
	POS_PATH,
	POS_HOST,
	POS_TIER,
	POS_COST,
	POS_IN_USE,
	POS_FREE,
	POS_REQUEST_ID, /* read when some rule has a concurrency limit */
	POS_OVERRIDE,   /* read when some rule has a max_override */
	POS_BACKEND,    /* read under shedding.adaptive */
	POS_IDENTITY, /* + k for the identity argument k */
	POS_N = POS_IDENTITY + RULES_IDENTITY_MAX,
};
_Static_assert(POS_N == RULES_POSITIONS_MAX, "one position per name classification reads");
_Static_assert(POS_N <= 32, "struct arg_lookup keeps its other positions in 32 bits");

/* A name classification looks for (pointing into the rules), the positions it
 * fills (one name may serve several: an identity argument may also be the
 * tier's) and the next name of its hash chain (index + 1, 0 for none). */
struct arg_lookup {
	const char *name;
	uint8_t len;
	uint8_t next;
	uint8_t position; /* enum arg_position: the first it fills */
	uint32_t also;    /* bit p for each other position p it fills */
};

/* The hash chain of a name (first byte, last byte and length): the names
 * of a request's arguments are looked up with one or two comparisons. */
#define ARG_BUCKETS 64
static inline unsigned arg_bucket(const char *name, size_t len)
{
	if (len == 0)
		return 0;
	return ((unsigned char)name[0] * 7u + (unsigned char)name[len - 1] * 3u +
		(unsigned)len) % ARG_BUCKETS;
}

/* Loaded rules: a few arrays plus an arena (struct arena_block, the
 * loader's) that holds every string and list of match values. */
struct rules {
	atomic_uint refs;
	uint64_t gen;
	uint8_t secret[16];
	/* what the limits' hashes are taken under (rules_set_limit_space) */
	char limit_space[RULES_LIMIT_SPACE_MAX];
	char source[256];
	uint8_t sha256[SHA256_LEN]; /* of the bytes loaded */
	/* What the file wrote itself (rather than took from the defaults):
	 * the arguments it names are checked against traffic (rules_seen.c). */
	bool identity_set, tiers_set, shedding_set;
	/* The arguments checked (rules_checked_name): derived at load. */
	const char *checked[RULES_CHECKED_MAX];
	uint8_t nchecked;
	struct settings settings;
	struct rules_names identity;
	char cost_arg[RULES_NAME_MAX];
	char override_arg[RULES_NAME_MAX]; /* "" when none */
	/* Rules made for overridden limits (rules_override): made on demand,
	 * under the lock; one that nothing holds is freed when room is
	 * needed, the others with the rules. ov_cell[] indexes them; ov_epoch
	 * counts the times some were freed (rules_override_epoch). */
	pthread_mutex_t ov_lock;
	struct rule *ov[RULES_OVERRIDES_MAX];
	uint16_t ov_cell[2 * RULES_OVERRIDES_MAX]; /* index + 1, 0 empty */
	size_t nov;
	atomic_uint_fast64_t ov_epoch;
	char tier_arg[RULES_NAME_MAX];
	bool shadow;
	enum rules_failure on_failure;
	int64_t lease_us;          /* the top-level `lease` (struct rule's) */
	uint8_t lease_share;
	int default_priority;
	unsigned answer;           /* rules_answer() */
	struct shed_config shed;
	struct adaptive_config adaptive; /* shedding.adaptive */
	struct rule *rule;   /* tiers, then endpoints, then layers */
	size_t nrules;
	size_t ntiers;
	size_t neps;
	size_t nlayers;
	/* Every identity argument: the file's (identity.n of them) first,
	 * then those only layers read (rules_identity_names). */
	struct rules_names idnames;
	size_t default_tier;
	struct rules_match *ep;          /* ep[i] is the match of rule[ntiers + i] */
	struct pclass *classes;
	size_t nclasses;
	struct arena_block *arena; /* freed with the rules */
	/* Derived at load (rules_load.c, derive_lookup): the distinct names
	 * of the positions, hashed, and whether some match reads any argument. */
	struct arg_lookup lookup[POS_N];
	/* Derived from the secret: rules_identity_prefix() for each identity
	 * argument, then for anonymous clients, then for global layers. */
	struct identity_prefix id_prefix[RULES_IDENTITY_MAX + 2];
	uint8_t bucket[ARG_BUCKETS]; /* first of a chain: index + 1, 0 empty */
	bool match_args;
	/* `paths: raw`: path conditions read the path as sent; else its
	 * normal form (urlpath.h), of which classification keeps the first
	 * path_cap bytes: one more than the longest value of a path
	 * condition, so that a prefix and the byte after it are exact. 0
	 * when no condition reads the path. */
	bool paths_raw;
	uint32_t max_delayed;      /* rules_max_delayed() */
	uint16_t path_cap;
};
_Static_assert(RULES_PATH_MAX + 1 <= UINT16_MAX, "path_cap fits its field");


/* The length of a Host value without its port: "[v6]:p" -> "[v6]",
 * "name:p" -> "name"; a bare IPv6 address (several colons, no brackets)
 * has no port. The loader uses it to mark the values that name a port, the
 * classifier to compare the others. */
size_t rules_host_noport(const char *h, size_t len);

/* Derives, once the file is read, what every answer needs of the rules
 * (rules_derive.c). */
void rules_derive(struct rules *r);

/* The arguments checked against traffic (rules_seen.c), once the rest
 * is derived. */
void rules_derive_checked(struct rules *r);

/* Frees every derived rule of r (rules_override), held or not: the
 * rules are going. */
void rules_derived_free(struct rules *r);

#endif
