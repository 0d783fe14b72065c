/* SPDX-License-Identifier: Apache-2.0 */
/* identity.c: client identity keys (see identity.h). */
#include "identity.h"

#include <arpa/inet.h>
#include <endian.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- SipHash-2-4, 128-bit output -------------------------------------------
 * Streaming form, so that identity_key() can feed "kind", the value and the
 * rule with 0 bytes between them, however long, without clipping any of
 * them (identity_key_from() lays short ones out in one buffer instead).
 * It runs for every decision: the helpers are inline and the state is a
 * local of the caller, so that it stays in registers; bytes that do not
 * make a whole block gather in a 64-bit word. */

/* The state is struct identity_prefix (identity.h): callers keep one to
 * resume a hash. */

static inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

static inline uint64_t load_le64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return le64toh(v);
}

static inline void store_le64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, sizeof(v));
}

static inline void sip_round(struct identity_prefix *s)
{
	s->v0 += s->v1;
	s->v1 = rotl(s->v1, 13);
	s->v1 ^= s->v0;
	s->v0 = rotl(s->v0, 32);
	s->v2 += s->v3;
	s->v3 = rotl(s->v3, 16);
	s->v3 ^= s->v2;
	s->v0 += s->v3;
	s->v3 = rotl(s->v3, 21);
	s->v3 ^= s->v0;
	s->v2 += s->v1;
	s->v1 = rotl(s->v1, 17);
	s->v1 ^= s->v2;
	s->v2 = rotl(s->v2, 32);
}

static inline void sip_block(struct identity_prefix *s, uint64_t m)
{
	s->v3 ^= m;
	sip_round(s);
	sip_round(s);
	s->v0 ^= m;
}

static inline void sip_init(struct identity_prefix *s, const uint8_t key[16])
{
	uint64_t k0 = load_le64(key), k1 = load_le64(key + 8);

	s->v0 = k0 ^ 0x736f6d6570736575ULL;
	s->v1 = k1 ^ 0x646f72616e646f6dULL ^ 0xee; /* 0xee: 128-bit output */
	s->v2 = k0 ^ 0x6c7967656e657261ULL;
	s->v3 = k1 ^ 0x7465646279746573ULL;
	s->tail = 0;
	s->ntail = 0;
	s->total = 0;
}

/* The n < 8 bytes at p as a little-endian word: two loads that overlap
 * cover them all, and none reaches past p + n. */
static inline uint64_t load_le_short(const uint8_t *p, size_t n)
{
	uint32_t a, b;
	uint16_t c, d;

	if (n >= 4) {
		memcpy(&a, p, 4);
		memcpy(&b, p + n - 4, 4);
		return (uint64_t)le32toh(a) | (uint64_t)le32toh(b) << (8 * (n - 4));
	}
	if (n >= 2) {
		memcpy(&c, p, 2);
		memcpy(&d, p + n - 2, 2);
		return (uint64_t)le16toh(c) | (uint64_t)le16toh(d) << (8 * (n - 2));
	}
	return n ? p[0] : 0;
}

/* Bytes that do not make a whole block join the word under way, a few at
 * a time: identity_key() feeds five short parts per decision. */
static inline __attribute__((always_inline)) void sip_update(struct identity_prefix *s, const void *data,
							     size_t len)
{
	const uint8_t *p = data;

	s->total += len;
	if (s->ntail > 0) {
		size_t need = 8 - s->ntail;

		if (len < need) {
			s->tail |= load_le_short(p, len) << (8 * s->ntail);
			s->ntail += (unsigned)len;
			return;
		}
		sip_block(s, s->tail | load_le_short(p, need) << (8 * s->ntail));
		p += need;
		len -= need;
		s->tail = 0;
		s->ntail = 0;
	}
	for (; len >= 8; p += 8, len -= 8)
		sip_block(s, load_le64(p));
	s->tail = load_le_short(p, len);
	s->ntail = (unsigned)len;
}

static inline void sip_final(struct identity_prefix *s, uint8_t out[16])
{
	sip_block(s, (s->total & 0xff) << 56 | s->tail);
	/* Four rounds twice (SipHash-2-4), written out: the compiler keeps
	 * such a loop as a loop. */
	s->v2 ^= 0xee;
	sip_round(s);
	sip_round(s);
	sip_round(s);
	sip_round(s);
	store_le64(out, s->v0 ^ s->v1 ^ s->v2 ^ s->v3);
	s->v1 ^= 0xdd;
	sip_round(s);
	sip_round(s);
	sip_round(s);
	sip_round(s);
	store_le64(out + 8, s->v0 ^ s->v1 ^ s->v2 ^ s->v3);
}

void identity_siphash128(const uint8_t key[16], const void *data, size_t len, uint8_t out[16])
{
	struct identity_prefix s;

	sip_init(&s, key);
	if (len > 0)
		sip_update(&s, data, len);
	sip_final(&s, out);
}

/* ---- identity ------------------------------------------------------------------ */

const char *identity_value(const struct spop_data *d, char *buf, size_t cap, size_t *len)
{
	if (d && (d->type == SPOP_T_STR || d->type == SPOP_T_BIN) && d->u.str.ptr) {
		*len = d->u.str.len;
		return d->u.str.ptr;
	}
	*len = identity_text(d, buf, cap);
	return buf;
}

size_t identity_text(const struct spop_data *d, char *buf, size_t cap)
{
	char tmp[INET6_ADDRSTRLEN + 24];
	const char *src = tmp;
	size_t len = 0;
	int n = -1;

	if (!buf || cap == 0)
		return 0;
	tmp[0] = '\0';
	if (d) {
		switch ((enum spop_type)d->type) {
		case SPOP_T_NULL:
			break;
		case SPOP_T_BOOL:
			n = snprintf(tmp, sizeof(tmp), "%s", d->u.boolean ? "true" : "false");
			break;
		case SPOP_T_INT32:
			n = snprintf(tmp, sizeof(tmp), "%" PRId32, d->u.i32);
			break;
		case SPOP_T_UINT32:
			n = snprintf(tmp, sizeof(tmp), "%" PRIu32, d->u.u32);
			break;
		case SPOP_T_INT64:
			n = snprintf(tmp, sizeof(tmp), "%" PRId64, d->u.i64);
			break;
		case SPOP_T_UINT64:
			n = snprintf(tmp, sizeof(tmp), "%" PRIu64, d->u.u64);
			break;
		case SPOP_T_IPV4:
			if (inet_ntop(AF_INET, d->u.ipv4, tmp, sizeof(tmp)))
				n = (int)strlen(tmp);
			break;
		case SPOP_T_IPV6:
			if (inet_ntop(AF_INET6, d->u.ipv6, tmp, sizeof(tmp)))
				n = (int)strlen(tmp);
			break;
		case SPOP_T_STR:
		case SPOP_T_BIN:
			src = d->u.str.ptr;
			len = src ? d->u.str.len : 0;
			break;
		default: /* unknown type: no identity */
			break;
		}
	}
	if (n > 0)
		len = (size_t)n;
	if (len > cap - 1)
		len = cap - 1;
	if (len > 0)
		memmove(buf, src, len);
	buf[len] = '\0';
	return len;
}

void identity_prefix_init(struct identity_prefix *p, const uint8_t secret[16],
			  const char *kind, size_t kind_len)
{
	static const uint8_t sep = 0;

	sip_init(p, secret);
	if (kind && kind_len > 0)
		sip_update(p, kind, kind_len);
	sip_update(p, &sep, 1);
}

/* The value and the rule that identity_key_from() lays out in one buffer
 * (longer ones are streamed): identity values are addresses and keys,
 * rule names are under RULES_NAME_MAX. The buffer holds the prefix's
 * pending bytes, both parts and their 0, and 8 bytes of zeros. */
#define ONE_PASS_PART 32
#define ONE_PASS_BUF (8 + ONE_PASS_PART + 1 + ONE_PASS_PART + 8)

void identity_key_from(const struct identity_prefix *p, const char *value,
		       size_t value_len, const char *rule, size_t rule_len,
		       uint8_t out[IDENTITY_KEY_LEN])
{
	static const uint8_t sep = 0;
	struct identity_prefix s = *p;
	uint8_t buf[ONE_PASS_BUF];
	size_t n, off;

	if (!value)
		value_len = 0;
	if (!rule)
		rule_len = 0;
	if (value_len > ONE_PASS_PART || rule_len > ONE_PASS_PART) {
		sip_update(&s, value, value_len);
		sip_update(&s, &sep, 1);
		sip_update(&s, rule, rule_len);
		goto final;
	}
	/* The same blocks as sip_update() makes of the three parts, without
	 * its bookkeeping of a partial block for each (a decision makes a
	 * key per rule): the pending bytes (the tail word is zero above
	 * them), then each part copied in line over the zeros written after
	 * the one before. */
	store_le64(buf, s.tail);
	n = s.ntail;
	spop_copy_short(buf + n, value, value_len);
	n += value_len;
	store_le64(buf + n, 0); /* the separator */
	n++;
	spop_copy_short(buf + n, rule, rule_len);
	n += rule_len;
	store_le64(buf + n, 0);
	for (off = 0; n - off >= 8; off += 8)
		sip_block(&s, load_le64(buf + off));
	s.tail = load_le64(buf + off); /* the n - off < 8 bytes left */
	s.total += value_len + 1 + rule_len;
final:
	sip_final(&s, out);
}

void identity_key(const uint8_t secret[16], const char *kind, size_t kind_len,
		  const char *value, size_t value_len, const char *rule, size_t rule_len,
		  uint8_t out[IDENTITY_KEY_LEN])
{
	struct identity_prefix p;

	identity_prefix_init(&p, secret, kind, kind_len);
	identity_key_from(&p, value, value_len, rule, rule_len, out);
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int identity_from_hex(const char *hex, size_t len, uint8_t key[IDENTITY_KEY_LEN])
{
	if (len != IDENTITY_HEX_LEN)
		return -1;
	for (size_t i = 0; i < IDENTITY_KEY_LEN; i++) {
		int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		key[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

void identity_hex(const uint8_t key[IDENTITY_KEY_LEN], char *hex)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < IDENTITY_KEY_LEN; i++) {
		hex[2 * i] = digits[key[i] >> 4];
		hex[2 * i + 1] = digits[key[i] & 0x0f];
	}
	hex[IDENTITY_HEX_LEN] = '\0';
}
