/* SPDX-License-Identifier: Apache-2.0 */
/* overrides.c: clients' own limits set by the operator (see overrides.h).
 * A snapshot is an array and an open-addressing index over it, at most
 * half full. */
#include "overrides.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

struct overrides {
	atomic_uint refs;
	size_t n;
	uint32_t mask;
	uint32_t *cell;           /* entry + 1, 0 empty */
	struct override_entry e[];
};

/* All of the key, mixed (MurmurHash3's finaliser): an agent's keys are
 * SipHash outputs, uniform, but a set read from Redis holds whatever
 * fields the hash has, and keys alike in a few bytes must not pile up in
 * one chain of the index. */
static uint32_t key_hash(const uint8_t *key)
{
	uint64_t a, b;

	memcpy(&a, key, sizeof(a));
	memcpy(&b, key + 8, sizeof(b));
	a ^= b * 0x9e3779b97f4a7c15ULL;
	a ^= a >> 33;
	a *= 0xff51afd7ed558ccdULL;
	a ^= a >> 33;
	a *= 0xc4ceb9fe1a85ec53ULL;
	a ^= a >> 33;
	return (uint32_t)a;
}

struct overrides *overrides_new(const struct override_entry *e, size_t n)
{
	struct overrides *o;
	uint32_t ncells = 2;

	if (n > OVERRIDES_MAX)
		return NULL;
	while (ncells < 2 * n)
		ncells <<= 1;
	o = xmalloc(sizeof(*o) + n * sizeof(o->e[0]));
	if (!o)
		return NULL;
	o->cell = xcalloc(ncells, sizeof(*o->cell));
	if (!o->cell) {
		xfree(o);
		return NULL;
	}
	atomic_init(&o->refs, 1);
	o->mask = ncells - 1;
	o->n = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t s = key_hash(e[i].key) & o->mask;

		for (; o->cell[s]; s = (s + 1) & o->mask)
			if (memcmp(o->e[o->cell[s] - 1].key, e[i].key, IDENTITY_KEY_LEN) == 0)
				break;
		if (o->cell[s]) {
			o->e[o->cell[s] - 1] = e[i]; /* a key twice: the last */
			continue;
		}
		o->e[o->n] = e[i];
		o->cell[s] = (uint32_t)++o->n;
	}
	return o;
}

void overrides_acquire(struct overrides *o)
{
	atomic_fetch_add_explicit(&o->refs, 1, memory_order_relaxed);
}

void overrides_release(struct overrides *o)
{
	if (!o || atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) != 1)
		return;
	xfree(o->cell);
	xfree(o);
}

size_t overrides_count(const struct overrides *o)
{
	return o ? o->n : 0;
}

const struct override_entry *overrides_at(const struct overrides *o, size_t i)
{
	return i < o->n ? &o->e[i] : NULL;
}

const struct override_entry *overrides_find(const struct overrides *o,
					    const uint8_t key[IDENTITY_KEY_LEN], int64_t now_ms)
{
	if (!o || !o->n)
		return NULL;
	for (uint32_t s = key_hash(key) & o->mask; o->cell[s]; s = (s + 1) & o->mask) {
		const struct override_entry *x = &o->e[o->cell[s] - 1];

		if (memcmp(x->key, key, IDENTITY_KEY_LEN) == 0)
			return x->expires_ms && x->expires_ms <= now_ms ? NULL : x;
	}
	return NULL;
}

void overrides_field(const uint8_t key[IDENTITY_KEY_LEN], char out[2 * IDENTITY_KEY_LEN + 1])
{
	identity_hex(key, out);
}

size_t overrides_value(const struct override_entry *e, char out[OVERRIDE_VALUE_MAX])
{
	char period[32];
	int n;

	limit_format_period(e->spec.period_us, period, sizeof(period));
	n = snprintf(out, OVERRIDE_VALUE_MAX, "%llu/%s %lld", (unsigned long long)e->spec.quota,
		     period, (long long)e->expires_ms);
	return n > 0 && n < OVERRIDE_VALUE_MAX ? (size_t)n : 0;
}

int overrides_read(const char *field, size_t flen, const char *value, size_t vlen,
		   struct override_entry *e)
{
	char buf[OVERRIDE_VALUE_MAX], err[128];
	char *sp, *end;
	long long exp;

	if (vlen >= sizeof(buf) || identity_from_hex(field, flen, e->key) < 0)
		return -1;
	memcpy(buf, value, vlen);
	buf[vlen] = '\0';
	sp = strchr(buf, ' ');
	if (!sp)
		return -1;
	*sp = '\0';
	if (limit_parse(buf, &e->spec, err, sizeof(err)) < 0)
		return -1;
	exp = strtoll(sp + 1, &end, 10);
	if (end == sp + 1 || *end || exp < 0)
		return -1;
	e->expires_ms = exp;
	return 0;
}
