/* SPDX-License-Identifier: Apache-2.0 */
/* redis_keys.h: how the Redis store names what it keeps.
 *
 * One key per limit of a client, 14 bytes: "{TTTT}LLLLLLLL". TTTT is the
 * client's tag (24 bits of its SipHash in URL-safe base64, no brace among
 * its digits): a Cluster hash tag, so all of a client's keys live in one
 * slot. LLLLLLLL is 48 bits of the client's hash mixed with the limit's
 * hash (rule->lidh, under REDIS_KEYS_LIMIT_SPACE), so a changed limit
 * starts fresh instead of misreading old state.
 *
 * With packed buckets (keys.packed, --redis-packed and --redis-packed-sets
 * 2^bits, bits from 0 to 18, 12 by default) the tag is "{TT}", 12 bits,
 * or "{TTT}", 18 bits, when bits is above 12; its top `bits` bits are the
 * client's and the others 0: a tag is shared by a 2^bits-th of the
 * clients. A key is then "{TT}LLLLLLLLLL" (60 bits of the mix), and a
 * token bucket that the library can pack (redis_key_packed()) is named
 * "{TT}~IIIIIIIIMMMMMMMMMM", 23 bytes (24 with "{TTT}"): the sorted set of
 * its limit (48 bits of rule->lidh) for the clients of the tag, then the
 * client's member in it (60 more bits of its hash).
 *
 * The naming is the store's (struct redis_keys, a part of its
 * configuration, store_redis.h), set before any key is named. Pure. */
#ifndef RL_REDIS_KEYS_H
#define RL_REDIS_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "identity.h"
#include "limit.h"

/* Keys without an expiry (--redis-expiry): the keys of token buckets,
 * windows and logs that are not packed are written without one to a
 * Redis that evicts them itself. auto: to a server found evicting (its
 * maxmemory set, an allkeys-lru or allkeys-lfu policy), never: to every
 * server, always: to none. */
enum redis_expiry {
	REDIS_EXPIRY_AUTO,
	REDIS_EXPIRY_ALWAYS,
	REDIS_EXPIRY_NEVER,
};

struct redis_keys {
	bool packed;             /* --redis-packed */
	unsigned packed_bits;    /* --redis-packed-sets: log2 of it */
	enum redis_expiry expiry;
};

#define REDIS_KEY_TAG_MAX 6
#define REDIS_KEY_NAME_MAX 24
/* a packed bucket's name: its set's name, then its member */
#define REDIS_KEY_PACKED_MEMBER_LEN 10
#define REDIS_KEY_PACKED_BITS_DEFAULT 12
#define REDIS_KEY_PACKED_BITS_MAX 18

/* The version of the layout of the values under the keys (the decision
 * library's, ratelimit.lua): the limits' hashes are taken under it
 * (rules_set_limit_space), so a layout that changes changes every key's
 * name, and old state is never read as new. */
#define REDIS_KEYS_LIMIT_SPACE "rl3:"

/* The defaults: not packed, 2^12 sets when packed, expiry auto. */
void redis_keys_defaults(struct redis_keys *k);

/* What the store names by: k as configured, with the expiry of packed
 * buckets (their sets' expiry is how their members go: always). */
void redis_keys_settle(struct redis_keys *k);

/* Whether limit l's bucket is packed (NULL: no). */
bool redis_key_packed(const struct redis_keys *k, const struct limit_spec *l);
/* whether the keys go without an expiry to a server found evicting or
 * not */
bool redis_key_expiry_dropped(const struct redis_keys *k, bool evicting);
/* whether limit l's key goes without an expiry to a server whose keys do
 * (dropped: redis_key_expiry_dropped()) */
bool redis_key_unexpiring(const struct redis_keys *k, const struct limit_spec *l, bool dropped);

/* The client's tag (and a NUL), the whole name (at most
 * REDIS_KEY_NAME_MAX bytes and a NUL) of limit l (NULL: a key that is no
 * bucket); both return the length. The tag of redis_overrides_at (that
 * very address) is the overrides' own, wide whatever the naming: what
 * routes by a key's tag finds the overrides where their keys are. */
size_t redis_key_tag(const struct redis_keys *k, const uint8_t key[IDENTITY_KEY_LEN], char *buf);
size_t redis_key_name(const struct redis_keys *k, const uint8_t key[IDENTITY_KEY_LEN],
		      uint64_t lidh, const struct limit_spec *l, char *buf);
/* Of a name of len bytes that redis_key_name() gave for limit l, the bytes
 * that name the key Redis holds: all of them, or a packed bucket's set's
 * (its own name is no key: EXISTS, PTTL and a Cluster's redirections go by
 * its set). */
size_t redis_key_held_len(const struct redis_keys *k, const struct limit_spec *l, size_t len);

/* The overrides (overrides.h) of a fleet on Redis: a hash of them and its
 * version, +1 at each change, in the slot of the wide tag of the all-zero
 * key, whatever the naming (REDIS_OVERRIDES_KEY_MAX bytes at most). */
#define REDIS_OVERRIDES_KEY_MAX 24
extern const uint8_t redis_overrides_at[IDENTITY_KEY_LEN];
size_t redis_overrides_key(bool version, char *buf);

#endif
