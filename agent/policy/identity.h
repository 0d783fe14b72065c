/* SPDX-License-Identifier: Apache-2.0 */
/* identity.h: who a request comes from, as a fixed-size key.
 *
 * The identity is the first non-empty argument of a configured list (by
 * default api_key, user, ip). Its kind, its value and the rule's name are
 * hashed with keyed SipHash-2-4 (128-bit output) into the key of the
 * client's buckets under that rule, so a key has a bounded size, carries
 * no user-chosen byte into Redis (no Cluster hash tag, no collision with
 * other keys), two kinds with the same value ("1.2.3.4" as api_key and as
 * ip) are different clients, and each rule of a client has its own key. */
#ifndef RL_IDENTITY_H
#define RL_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include "spop.h"

#define IDENTITY_KEY_LEN 16
/* The kind of a client no identity argument names. */
#define IDENTITY_ANONYMOUS "anonymous"
/* The one client of a layer with `identity: global`. */
#define IDENTITY_GLOBAL "global"
#define IDENTITY_HEX_LEN (2 * IDENTITY_KEY_LEN)

/* SipHash-2-4 with 128-bit output (the reference variant). */
void identity_siphash128(const uint8_t key[16], const void *data, size_t len, uint8_t out[16]);

/* Renders typed data as the text that identifies a client: strings and
 * binaries as they are, IPv4/IPv6 in their usual text forms, integers in
 * decimal, booleans as "true"/"false". NULL gives length 0. Returns the
 * length written (truncated to cap - 1, NUL-terminated). */
size_t identity_text(const struct spop_data *d, char *buf, size_t cap);

/* The key of one client under one rule: SipHash of "kind\0value\0rule"
 * under `secret`, every byte of each part hashed (no truncation). */
void identity_key(const uint8_t secret[16], const char *kind, size_t kind_len,
		  const char *value, size_t value_len, const char *rule, size_t rule_len,
		  uint8_t out[IDENTITY_KEY_LEN]);

/* identity_key() in two steps, for the keys of many clients of one kind
 * under one secret: the SipHash state after "kind\0" is derived once (the
 * rules keep one per identity argument), and each key continues from it.
 * identity_key_from(the prefix of secret and kind, value, rule) equals
 * identity_key(secret, kind, value, rule). */
struct identity_prefix {
	uint64_t v0, v1, v2, v3;
	uint64_t tail;   /* bytes of the block under way, little-endian */
	unsigned ntail;  /* how many of them, 0..7 */
	uint64_t total;  /* bytes hashed so far */
};

void identity_prefix_init(struct identity_prefix *p, const uint8_t secret[16],
			  const char *kind, size_t kind_len);
void identity_key_from(const struct identity_prefix *p, const char *value,
		       size_t value_len, const char *rule, size_t rule_len,
		       uint8_t out[IDENTITY_KEY_LEN]);

/* The bytes that name a client, whole: a string or binary's own bytes
 * (pointing into d, however long), or the text of another type rendered
 * into buf (cap >= IDENTITY_RENDER_MAX bytes). Sets *len; returns the
 * bytes (a NULL or unknown type gives length 0). */
#define IDENTITY_RENDER_MAX 64
const char *identity_value(const struct spop_data *d, char *buf, size_t cap, size_t *len);

/* Lowercase hex of a key; hex holds IDENTITY_HEX_LEN + 1 bytes. */
void identity_hex(const uint8_t key[IDENTITY_KEY_LEN], char *hex);
/* The key from its lowercase hex (len must be IDENTITY_HEX_LEN). Returns
 * 0, or -1 for anything else. */
int identity_from_hex(const char *hex, size_t len, uint8_t key[IDENTITY_KEY_LEN]);

#endif
