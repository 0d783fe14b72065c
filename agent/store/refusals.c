/* SPDX-License-Identifier: Apache-2.0 */
/* refusals.c: the refused-until cache (see refusals.h). */
#include <string.h>

#include "alloc.h"
#include "refusals.h"

#define REFUSALS_SIZE 4096         /* entries per worker */

/* A client refused until `until` (local clock), by limit `decider` of the
 * limits at `limits`, for a request of weight `cost`: only requests at
 * least as heavy are refused from the cache (a lighter one may pass). */
struct refusal {
	uint8_t key[IDENTITY_KEY_LEN];
	/* the refusing limit's key: the client's, or a layer's (an address,
	 * every client), which another request of the client may not share */
	uint8_t lkey[IDENTITY_KEY_LEN];
	const struct limit_spec *limits;
	uint64_t epoch;      /* admin resets so far; a later reset voids it */
	uint32_t cost;
	int64_t until;
	int64_t full_at;
	int64_t more_at;     /* when more quota comes (limit.h: more_us) */
	int decider;
};

/* live: a bit per entry, set while it may refuse (until not yet past).
 * Most clients asked about are not refused; the bits (512 bytes, in the
 * CPU's cache) say so without reading their entry (a cache miss in a
 * table of 360 KB). A bit is cleared when its entry is found past: the
 * clock is monotonic, so a past refusal stays past. */
struct refusals {
	uint64_t live[REFUSALS_SIZE / 64];
	struct refusal e[REFUSALS_SIZE];
};

struct refusals *refusals_new(void)
{
	return xcalloc(1, sizeof(struct refusals));
}

void refusals_free(struct refusals *c)
{
	xfree(c);
}

void refusals_clear(struct refusals *c)
{
	memset(c->live, 0, sizeof(c->live));
	memset(c->e, 0, sizeof(c->e));
}

static uint32_t entry_of(const uint8_t *key)
{
	uint32_t h;

	memcpy(&h, key, sizeof(h)); /* the key is a hash already */
	return h & (REFUSALS_SIZE - 1);
}

int refusals_answer(struct refusals *c, const struct decide_query *q, uint64_t epoch,
		    int64_t now, struct limit_result *res, int *decider)
{
	uint32_t i = entry_of(q->key);
	uint64_t bit = 1ULL << (i % 64);
	struct refusal *e = &c->e[i];

	if (!(c->live[i / 64] & bit))
		return 0;
	if (e->until <= now) {
		c->live[i / 64] &= ~bit;
		return 0;
	}
	if (e->limits != q->limits || q->cost < e->cost || e->epoch != epoch ||
	    memcmp(e->key, q->key, IDENTITY_KEY_LEN) != 0 || (size_t)e->decider >= q->nlimits ||
	    (q->rule->nstack &&
	     memcmp(e->lkey, decide_limit_key(q, (size_t)e->decider), IDENTITY_KEY_LEN) != 0))
		return 0;
	limit_refused_by(res, q->limits, q->nlimits, (size_t)e->decider, e->until - now,
			 e->full_at - now, e->more_at - now);
	*decider = e->decider;
	return 1;
}

void refusals_store(struct refusals *c, const struct decide_query *q, uint64_t epoch,
		    int decider, const struct limit_result *res, int64_t sent)
{
	const struct limit_spec *l = &q->limits[decider];
	uint64_t cap = l->algo == LIMIT_TOKEN_BUCKET && l->burst ? l->burst : l->quota;
	struct refusal *e;
	uint32_t i;

	if (res[decider].retry_after_us <= 0 || l->algo == LIMIT_CONCURRENCY)
		return; /* (a place frees when a response comes, not at a time) */
	/* A rule with a penalty box: only a ban is remembered. A refusal by
	 * its rates must reach Redis, where a ban put since would speak. */
	if (q->rule->penalty.ban && l->algo != LIMIT_BAN)
		return;
	/* A request heavier than a bucket never passes, however long it
	 * waits, while lighter ones do: nothing worth remembering. */
	if (q->cost > cap)
		return;
	i = entry_of(q->key);
	c->live[i / 64] |= 1ULL << (i % 64);
	e = &c->e[i];
	memcpy(e->key, q->key, IDENTITY_KEY_LEN);
	memcpy(e->lkey, decide_limit_key(q, (size_t)decider), IDENTITY_KEY_LEN);
	e->limits = q->limits;
	e->cost = q->cost;
	e->epoch = epoch;
	e->decider = decider;
	e->until = sent + res[decider].retry_after_us;
	e->full_at = sent + res[decider].reset_us;
	e->more_at = sent + res[decider].more_us;
}
