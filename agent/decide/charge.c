/* SPDX-License-Identifier: Apache-2.0 */
/* charge.c: a charge's place and the response's cost (charge.h). */
#include "charge.h"

#include <stdbool.h>
#include <string.h>

_Static_assert(DECIDE_PLACE_MAX <= 255, "a place's length fits its uint8_t");

uint64_t charge_limits_id(const struct rule *rule)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t j = 0; j < rule->nown; j++) {
		h ^= rule->lidh[j];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* Appends v in decimal at *at in buf[0..cap) (a '-' first when negative);
 * false when it does not fit. */
static bool put_dec(char *buf, size_t cap, size_t *at, int64_t v)
{
	char tmp[20];
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	size_t n = 0;

	do {
		tmp[n++] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (*at + n + (v < 0) > cap)
		return false;
	if (v < 0)
		buf[(*at)++] = '-';
	while (n)
		buf[(*at)++] = tmp[--n];
	return true;
}

/* Appends s[0..len) then '/' (unless last); false when it does not fit. */
static bool put_str(char *buf, size_t cap, size_t *at, const char *s, size_t len)
{
	if (*at + len + 1 > cap)
		return false;
	memcpy(buf + *at, s, len);
	*at += len;
	buf[(*at)++] = '/';
	return true;
}

/* RULE/KEYHEX/ESTIMATE/TAKE_US/LIMITS (16 hex digits), written by hand:
 * snprintf cost a charged request a third of its instructions. */
void charge_put_place(const struct decide_query *q, int64_t take_us, struct decide_decision *d)
{
	static const char xd[] = "0123456789abcdef";
	char hex[IDENTITY_HEX_LEN + 1];
	uint64_t id = charge_limits_id(q->rule);
	size_t cap = sizeof(d->place) - 1, at = 0; /* room for a NUL, as snprintf kept */

	identity_hex(q->key, hex);
	d->place_len = 0;
	if (!put_str(d->place, cap, &at, q->rule->name, q->rule->name_len) ||
	    !put_str(d->place, cap, &at, hex, IDENTITY_HEX_LEN) ||
	    !put_dec(d->place, cap, &at, (int64_t)q->cost) || at + 1 > cap)
		return;
	d->place[at++] = '/';
	if (!put_dec(d->place, cap, &at, take_us) || at + 17 > cap)
		return;
	d->place[at++] = '/';
	for (int i = 60; i >= 0; i -= 4)
		d->place[at++] = xd[(id >> i) & 15];
	d->place[at] = '\0';
	d->place_len = (uint8_t)at;
}

/* Decimal digits at p[0..len): at most `max`. Returns 0 or -1. */
static int digits(const char *p, size_t len, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (len == 0 || len > 20)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -1;
		if (v > (max - (uint64_t)(p[i] - '0')) / 10)
			return -1;
		v = v * 10 + (uint64_t)(p[i] - '0');
	}
	*out = v;
	return 0;
}

/* The field of p[*at..len) up to the next '/' (or the end when last):
 * its start and length; *at past its '/'. Returns 0 or -1. */
static int field(const char *p, size_t len, size_t *at, bool last, const char **f, size_t *flen)
{
	const char *s = p + *at, *e = memchr(s, '/', len - *at);

	if (last != (e == NULL))
		return -1;
	*f = s;
	*flen = e ? (size_t)(e - s) : len - *at;
	*at += *flen + (e != NULL);
	return 0;
}

int charge_parse_place(const char *p, size_t len, struct charge_place *out)
{
	const char *f;
	size_t at = 0, n;
	uint64_t est, take, lim = 0;

	if (field(p, len, &at, false, &f, &n) < 0 || n == 0 || n >= sizeof(out->rule))
		return -1;
	memcpy(out->rule, f, n);
	out->rule[n] = '\0';
	if (len - at == IDENTITY_HEX_LEN)
		return identity_from_hex(p + at, IDENTITY_HEX_LEN, out->key) < 0 ? -1 : 0;
	if (field(p, len, &at, false, &f, &n) < 0 || n != IDENTITY_HEX_LEN ||
	    identity_from_hex(f, n, out->key) < 0)
		return -1;
	if (field(p, len, &at, false, &f, &n) < 0 || digits(f, n, UINT32_MAX, &est) < 0 ||
	    est == 0)
		return -1;
	if (field(p, len, &at, false, &f, &n) < 0 || digits(f, n, INT64_MAX, &take) < 0)
		return -1;
	if (field(p, len, &at, true, &f, &n) < 0 || n != 16)
		return -1;
	for (size_t i = 0; i < n; i++) {
		char c = f[i];
		unsigned v = c >= '0' && c <= '9' ? (unsigned)(c - '0')
			   : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 16;

		if (v > 15)
			return -1;
		lim = lim << 4 | v;
	}
	out->estimate = (uint32_t)est;
	out->take_us = (int64_t)take;
	out->limits = lim;
	return 1;
}

int charge_parse_cost(const struct spop_data *d, uint64_t *out)
{
	int64_t v;

	if (!d)
		return -1;
	if (d->type == SPOP_T_STR || d->type == SPOP_T_BIN)
		return digits(d->u.str.ptr, d->u.str.len, LIMIT_QUOTA_MAX, out);
	if (!spop_data_int(d, &v) || v < 0 || (uint64_t)v > LIMIT_QUOTA_MAX)
		return -1;
	*out = (uint64_t)v;
	return 0;
}
