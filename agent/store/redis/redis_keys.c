/* SPDX-License-Identifier: Apache-2.0 */
/* redis_keys.c: the names of the Redis store's keys (redis_keys.h). */
#include "redis_keys.h"

#include <string.h>

void redis_keys_defaults(struct redis_keys *k)
{
	k->packed = false;
	k->packed_bits = REDIS_KEY_PACKED_BITS_DEFAULT;
	k->expiry = REDIS_EXPIRY_AUTO;
}

void redis_keys_settle(struct redis_keys *k)
{
	if (k->packed_bits > REDIS_KEY_PACKED_BITS_MAX)
		k->packed_bits = REDIS_KEY_PACKED_BITS_MAX;
	if (k->packed && k->expiry == REDIS_EXPIRY_AUTO)
		k->expiry = REDIS_EXPIRY_ALWAYS;
}

/* URL-safe base64: no digit is a brace, so "{TTTT}" stays a hash tag, nor
 * '~', which marks a packed bucket's name */
static const char key_digits[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

bool redis_key_packed(const struct redis_keys *k, const struct limit_spec *l)
{
	uint64_t p;

	if (!k->packed || !l || l->algo != LIMIT_TOKEN_BUCKET || l->period_us < 1 || !l->quota)
		return false;
	/* The library's states stay integers below 2^53 (until 2119) when
	 * n = quota / gcd(quota, period) is at most 3, that is when n divides
	 * 1, 2 or 3: when the quota divides the period, twice or three times
	 * it (a period is below 2^48: no overflow). */
	p = (uint64_t)l->period_us;
	return p % l->quota == 0 || 2 * p % l->quota == 0 || 3 * p % l->quota == 0;
}

bool redis_key_expiry_dropped(const struct redis_keys *k, bool evicting)
{
	return k->expiry == REDIS_EXPIRY_NEVER || (k->expiry == REDIS_EXPIRY_AUTO && evicting);
}

bool redis_key_unexpiring(const struct redis_keys *k, const struct limit_spec *l, bool dropped)
{
	return dropped && l && l->algo <= LIMIT_LOG && !redis_key_packed(k, l);
}

size_t redis_key_held_len(const struct redis_keys *k, const struct limit_spec *l, size_t len)
{
	return redis_key_packed(k, l) ? len - REDIS_KEY_PACKED_MEMBER_LEN : len;
}

/* count base64 digits of the top bits of x */
static void put_digits(char *buf, uint64_t x, int count)
{
	for (int i = 0; i < count; i++)
		buf[i] = key_digits[(x >> (58 - 6 * i)) & 63];
}

/* the tag: 24 bits (wide), or when packing the top bits of 12 or 18 that
 * it keeps (2^bits sets per limit), the others 0 */
static size_t key_tag(const struct redis_keys *k, const uint8_t key[IDENTITY_KEY_LEN],
		      bool wide, char *buf)
{
	uint64_t t = (uint64_t)key[0] << 56 | (uint64_t)key[1] << 48 | (uint64_t)key[2] << 40;
	unsigned bits = k->packed_bits > REDIS_KEY_PACKED_BITS_MAX ? REDIS_KEY_PACKED_BITS_MAX
								   : k->packed_bits;
	int nd = wide ? 4 : bits > 12 ? 3 : 2;

	if (!wide)
		t &= bits ? ~0ULL << (64 - bits) : 0;
	buf[0] = '{';
	put_digits(buf + 1, t, nd);
	buf[1 + nd] = '}';
	buf[2 + nd] = '\0';
	return (size_t)nd + 2;
}

const uint8_t redis_overrides_at[IDENTITY_KEY_LEN];

size_t redis_key_tag(const struct redis_keys *k, const uint8_t key[IDENTITY_KEY_LEN], char *buf)
{
	return key_tag(k, key, !k->packed || key == redis_overrides_at, buf);
}

size_t redis_overrides_key(bool version, char *buf)
{
	/* (the wide tag whatever the naming: overrides outlive it) */
	static const struct redis_keys wide = { 0 };
	size_t n = key_tag(&wide, redis_overrides_at, true, buf);
	const char *name = version ? "overrides:version" : "overrides";

	memcpy(buf + n, name, strlen(name) + 1);
	return n + strlen(name);
}

size_t redis_key_name(const struct redis_keys *k, const uint8_t key[IDENTITY_KEY_LEN],
		      uint64_t lidh, const struct limit_spec *l, char *buf)
{
	uint64_t x = 0;
	size_t n = redis_key_tag(k, key, buf);

	_Static_assert(IDENTITY_KEY_LEN >= 16, "the name reads bytes 0..2 and 8..15");

	/* bytes 8..15, big-endian whatever the host: every agent of a fleet
	 * names a key alike */
	for (int i = 8; i < 16; i++)
		x = x << 8 | key[i];
	if (redis_key_packed(k, l)) {
		/* the limit's set, then the client in it */
		buf[n++] = '~';
		put_digits(buf + n, lidh, 8);
		put_digits(buf + n + 8, x, REDIS_KEY_PACKED_MEMBER_LEN);
		n += 8 + REDIS_KEY_PACKED_MEMBER_LEN;
		buf[n] = '\0';
		return n;
	}
	/* MurmurHash3's finaliser: each bit of the limit's hash moves half
	 * of the bits kept */
	x ^= lidh;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	put_digits(buf + n, x, k->packed ? 10 : 8);
	n += k->packed ? 10 : 8;
	buf[n] = '\0';
	return n;
}
