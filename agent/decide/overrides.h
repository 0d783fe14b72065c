/* SPDX-License-Identifier: Apache-2.0 */
/* overrides.h: clients' own limits set by the operator (PUT
 * /admin/override), as every worker reads them.
 *
 * An override gives one client, under one rule, a limit of its own
 * instead of the rule's rates (bounded by the rule's max_override, as an
 * override from a message argument is: rules.h, rules_override), until
 * an expiry or for good. A set of overrides is an immutable snapshot,
 * reference-counted: the server holds the current one, each worker a
 * reference to the one it uses, so a change never pulls a snapshot from
 * under a decision. With Redis the set lives in two keys (store_redis.c
 * polls them), so every agent of a fleet applies a change within a
 * second; in memory, in this agent alone.
 *
 * Text form (Redis's hash): field the client key in hex (32 characters),
 * value "N/P EXPIRES_MS" (a limit as limit_parse() reads it, then the
 * wall-clock time it ends in milliseconds, 0 for never). */
#ifndef RL_OVERRIDES_H
#define RL_OVERRIDES_H

#include <stddef.h>
#include <stdint.h>

#include "identity.h"
#include "limit.h"

#define OVERRIDES_MAX 100000   /* entries in a set */
#define OVERRIDE_VALUE_MAX 64  /* the text of one entry's value, NUL included */

struct override_entry {
	uint8_t key[IDENTITY_KEY_LEN]; /* the client under the rule (decide_key) */
	struct limit_spec spec;
	int64_t expires_ms;            /* wall clock; 0: never */
};

struct overrides;

/* A snapshot of n entries (copied; a key twice: the last one). One
 * reference, the caller's. NULL when out of memory or n too large. */
struct overrides *overrides_new(const struct override_entry *e, size_t n);
void overrides_acquire(struct overrides *o);
/* Drops one reference; the last frees the snapshot. NULL does nothing. */
void overrides_release(struct overrides *o);

size_t overrides_count(const struct overrides *o);
const struct override_entry *overrides_at(const struct overrides *o, size_t i);

/* The override of key in force at now_ms (wall clock), or NULL. */
const struct override_entry *overrides_find(const struct overrides *o,
					    const uint8_t key[IDENTITY_KEY_LEN], int64_t now_ms);

/* The text forms: a key's field (32 hex digits and a NUL) and an entry's
 * value; and back. The readers return 0, or -1 for a malformed text. */
void overrides_field(const uint8_t key[IDENTITY_KEY_LEN], char out[2 * IDENTITY_KEY_LEN + 1]);
size_t overrides_value(const struct override_entry *e, char out[OVERRIDE_VALUE_MAX]);
int overrides_read(const char *field, size_t flen, const char *value, size_t vlen,
		   struct override_entry *e);

#endif
