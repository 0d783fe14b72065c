/* SPDX-License-Identifier: Apache-2.0 */
/* charge.c: a charge's place and the response's cost (charge.h). */
#include "charge.h"

#include <stdio.h>
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

void charge_put_place(const struct decide_query *q, int64_t take_us, struct decide_decision *d)
{
	char hex[IDENTITY_HEX_LEN + 1];
	int n;

	identity_hex(q->key, hex);
	n = snprintf(d->place, sizeof(d->place), "%.*s/%s/%u/%lld/%016llx",
		     (int)q->rule->name_len, q->rule->name, hex, (unsigned)q->cost,
		     (long long)take_us, (unsigned long long)charge_limits_id(q->rule));
	d->place_len = n > 0 && (size_t)n < sizeof(d->place) ? (uint8_t)n : 0;
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
