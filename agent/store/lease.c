/* SPDX-License-Identifier: Apache-2.0 */
/* lease.c: leased tokens, one worker's table (see lease.h). */
#include <string.h>

#include "alloc.h"
#include "lease.h"

/* One client under one rule, as this worker sees it. */
struct lease {
	const struct limit_spec *limits; /* its rule's (compared, never read);
					  * NULL: a free entry */
	uint8_t key[IDENTITY_KEY_LEN];
	uint64_t epoch;                  /* admin resets when it was made */
	/* demand: the tokens it asked for in this interval and the last */
	int64_t win_start;
	uint64_t win_cost, last_cost;
	/* a call asking for a lease is out (since then) */
	bool pending;
	int64_t pending_since;
	/* the lease: tokens left, spent since the grant, over at `until` */
	uint64_t tokens, spent;
	int64_t until;
	bool returnable;                 /* ret holds what a return needs */
	/* what Redis said at the grant, per limit, for the answers */
	struct {
		uint64_t remaining;
		int64_t reset_at, more_at;
	} g[LEASE_LIMITS_MAX];
	/* refused by Redis: refused here until wait_until, for requests of
	 * at least wait_cost, by limit wait_decider */
	int64_t wait_until, wait_full_at, wait_more_at;
	uint32_t wait_cost;
	int wait_decider;
	/* a lease smaller than asked for (the bucket is short): once spent,
	 * wait this long before asking again (see lease_granted) */
	int64_t after;
	struct lease_return ret;
};

struct lease_table {
	struct lease *e;
	size_t cap;
	lease_return_fn *fn;
	void *priv;
	struct lease_stats *stats;
	uint64_t rnd;                    /* xorshift state: the waits' spread */
};

struct lease_table *lease_table_new(size_t cap, lease_return_fn *fn, void *priv,
				    struct lease_stats *stats)
{
	struct lease_table *t;

	if (cap < 2 || (cap & (cap - 1)))
		return NULL;
	t = xcalloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->e = xcalloc(cap, sizeof(*t->e));
	if (!t->e) {
		xfree(t);
		return NULL;
	}
	t->cap = cap;
	t->fn = fn;
	t->priv = priv;
	t->stats = stats;
	t->rnd = (uint64_t)(uintptr_t)t | 1;
	return t;
}

void lease_table_free(struct lease_table *t)
{
	if (!t)
		return;
	xfree(t->e);
	xfree(t);
}

bool lease_rule_ok(const struct decide_query *q)
{
	if (q->rule->nstack || q->nlimits == 0 || q->nlimits > LEASE_LIMITS_MAX)
		return false;
	for (size_t j = 0; j < q->nlimits; j++)
		if (q->limits[j].algo != LIMIT_TOKEN_BUCKET &&
		    q->limits[j].algo != LIMIT_SLIDING_WINDOW &&
		    q->limits[j].algo != LIMIT_FIXED_WINDOW)
			return false;
	return true;
}

static bool same(const struct lease *e, const struct decide_query *q)
{
	return e->limits == q->limits && memcmp(e->key, q->key, IDENTITY_KEY_LEN) == 0;
}

/* A lease that holds tokens, or a call that may bring one. */
static bool busy(const struct lease *e)
{
	return e->tokens > 0 || e->pending;
}

/* Sends back what e holds (when it can) and empties it. */
static void give_back(struct lease_table *t, struct lease *e)
{
	if (e->tokens == 0)
		return;
	e->ret.tokens = e->tokens;
	if (e->returnable && t->fn && t->fn(t->priv, &e->ret) == 0)
		STAT_ADD(t->stats->returned, e->tokens);
	else
		STAT_ADD(t->stats->dropped, e->tokens);
	e->tokens = 0;
}

/* The two places a client's entry may be in. */
static void places(struct lease_table *t, const uint8_t *key, struct lease **a, struct lease **b)
{
	uint32_t h;

	memcpy(&h, key, sizeof(h)); /* the key is a hash already */
	*a = &t->e[h & (t->cap - 1)];
	*b = &t->e[(h ^ 1) & (t->cap - 1)];
}

/* The client's entry, or NULL. */
static struct lease *lookup(struct lease_table *t, const struct decide_query *q)
{
	struct lease *a, *b;

	places(t, q->key, &a, &b);
	if (a->limits && same(a, q))
		return a;
	if (b->limits && same(b, q))
		return b;
	return NULL;
}

/* The client's entry, made when it has none: in a free place, else in
 * the place of the one of the two that asked for fewer tokens lately,
 * unless both hold leases (then the client is not followed: it is decided
 * in Redis as when cold). */
static struct lease *lookup_or_make(struct lease_table *t, const struct decide_query *q,
				    uint64_t epoch, int64_t now)
{
	struct lease *e = lookup(t, q), *a, *b;

	if (e)
		return e;
	places(t, q->key, &a, &b);
	if (!a->limits)
		e = a;
	else if (!b->limits)
		e = b;
	else if (busy(a) && busy(b))
		return NULL;
	else if (busy(a))
		e = b;
	else if (busy(b))
		e = a;
	else
		e = a->last_cost + a->win_cost <= b->last_cost + b->win_cost ? a : b;
	memset(e, 0, sizeof(*e));
	e->limits = q->limits;
	memcpy(e->key, q->key, IDENTITY_KEY_LEN);
	e->epoch = epoch;
	e->win_start = now;
	return e;
}

/* The tokens worth asking for: what the client asked this worker for
 * in an interval lately, at most share_pct of the tightest capacity. */
static uint32_t want_of(const struct lease *e, const struct decide_query *q,
			const struct lease_config *cfg)
{
	uint64_t demand = e->last_cost > e->win_cost ? e->last_cost : e->win_cost;
	uint64_t most = UINT32_MAX;

	for (size_t j = 0; j < q->nlimits; j++) {
		const struct limit_spec *l = &q->limits[j];
		uint64_t cap = l->algo == LIMIT_TOKEN_BUCKET && l->burst ? l->burst : l->quota;
		uint64_t share = cap / 100 * cfg->share_pct + cap % 100 * cfg->share_pct / 100;

		if (share < most)
			most = share;
	}
	if (demand > most)
		demand = most;
	return demand >= LEASE_MIN ? (uint32_t)demand : 0;
}

/* A number drawn evenly from 0 .. most. */
static int64_t draw(struct lease_table *t, int64_t most)
{
	if (most <= 0)
		return 0;
	t->rnd ^= t->rnd << 13;
	t->rnd ^= t->rnd >> 7;
	t->rnd ^= t->rnd << 17;
	return (int64_t)((t->rnd >> 11) % (uint64_t)(most + 1));
}

/* The time `tokens` tokens take to come back to the token bucket l, at
 * most an interval; 0 for a window (its quota comes back at once, when
 * it moves). */
static int64_t refill_us(const struct limit_spec *l, uint64_t tokens,
			 const struct lease_config *cfg)
{
	double us;

	if (l->algo != LIMIT_TOKEN_BUCKET || tokens == 0)
		return 0;
	us = (double)tokens * (double)l->period_us / (double)l->quota;
	return us < (double)cfg->interval_us ? (int64_t)us : cfg->interval_us;
}

/* From now until e->wait_until, e's client is refused here, by the limit
 * that has the fewest tokens left at the grant. */
static void wait_after_lease(struct lease *e, const struct decide_query *q, int64_t now)
{
	uint64_t low = UINT64_MAX;

	e->wait_decider = 0;
	for (size_t j = 0; j < q->nlimits; j++)
		if (e->g[j].remaining < low) {
			low = e->g[j].remaining;
			e->wait_decider = (int)j;
		}
	e->wait_until = now + e->after;
	e->wait_full_at = e->g[e->wait_decider].reset_at;
	e->wait_more_at = e->wait_until;
	e->wait_cost = 1;
	e->after = 0;
}

/* An allowed answer from e's lease, after this request's tokens were
 * taken from it: what the grant said, less what this worker spent of it
 * since (neither the refill since nor other agents' takes are counted). */
static void answer_lease(const struct lease *e, const struct decide_query *q, int64_t now,
			 struct limit_result *res, int *decider)
{
	for (size_t j = 0; j < q->nlimits; j++) {
		const struct limit_spec *l = &q->limits[j];
		uint64_t rem = e->g[j].remaining > e->spent ? e->g[j].remaining - e->spent : 0;
		int64_t reset = e->g[j].reset_at > now ? e->g[j].reset_at - now : 0;
		int64_t more;

		if (l->algo == LIMIT_TOKEN_BUCKET) {
			/* each token spent since fills in one emission interval later */
			reset += (int64_t)((double)e->spent * (double)l->period_us / (double)l->quota);
			more = limit_bucket_more_us(l, true, rem, reset);
		} else {
			more = e->g[j].more_at > now ? e->g[j].more_at - now : 0;
		}
		memset(&res[j], 0, sizeof(res[j]));
		res[j].allowed = true;
		res[j].limit = l->quota;
		res[j].remaining = rem;
		res[j].reset_us = reset;
		res[j].more_us = more > 0 ? more : 0;
	}
	*decider = limit_decider(res, q->nlimits);
}

/* A refusal while e waits for tokens: the refusing limit as Redis said. */
static void answer_wait(const struct lease *e, const struct decide_query *q, int64_t now,
			struct limit_result *res, int *decider)
{
	limit_refused_by(res, q->limits, q->nlimits, (size_t)e->wait_decider, e->wait_until - now,
			 e->wait_full_at - now, e->wait_more_at - now);
	*decider = e->wait_decider;
}

/* The leases of q's rule: its own `lease` or the agent's. Returns false
 * when it has none. */
static bool config_of(const struct lease_config *agent, const struct decide_query *q,
		      struct lease_config *out)
{
	const struct rule *r = q->rule;

	out->interval_us = r->lease_us ? r->lease_us : agent->interval_us;
	out->share_pct = r->lease_share ? r->lease_share : agent->share_pct;
	return out->interval_us > 0 && lease_rule_ok(q);
}

int lease_check(struct lease_table *t, const struct lease_config *agent,
		const struct decide_query *q, uint64_t epoch, int64_t now,
		struct limit_result *res, int *decider, uint32_t *want)
{
	struct lease_config own, *cfg = &own;
	struct lease *e;

	*want = 0;
	if (!t || !config_of(agent, q, &own) || !(e = lookup_or_make(t, q, epoch, now)))
		return 0;
	if (e->epoch != epoch) {
		/* an admin reset since: Redis forgot the client, so do we (its
		 * keys are gone: nothing to give back to) */
		STAT_ADD(t->stats->dropped, e->tokens);
		e->tokens = 0;
		e->wait_until = 0;
		e->after = 0;
		e->epoch = epoch;
	}
	if (now - e->win_start >= cfg->interval_us) {
		e->last_cost = now - e->win_start < 2 * cfg->interval_us ? e->win_cost : 0;
		e->win_cost = 0;
		e->win_start = now;
	}
	e->win_cost += q->cost;
	if (e->tokens && (now >= e->until || e->tokens < q->cost))
		give_back(t, e);
	if (e->tokens) {
		e->tokens -= q->cost;
		e->spent += q->cost;
		STAT_INC(t->stats->decisions);
		answer_lease(e, q, now, res, decider);
		if (!e->tokens && e->after)
			wait_after_lease(e, q, now);
		return 1;
	}
	if (now < e->wait_until && q->cost >= e->wait_cost && (size_t)e->wait_decider < q->nlimits) {
		STAT_INC(t->stats->waits);
		answer_wait(e, q, now, res, decider);
		return 1;
	}
	/* a call that asked is out: this one is decided in Redis as it is
	 * (a lost answer frees the place after a while) */
	if (e->pending && now - e->pending_since < RULES_LEASE_MAX_US * 4)
		return 0;
	e->pending = false;
	*want = want_of(e, q, cfg);
	return 0;
}

void lease_asked(struct lease_table *t, const struct decide_query *q, int64_t now)
{
	struct lease *e = t ? lookup(t, q) : NULL;

	if (e) {
		e->pending = true;
		e->pending_since = now;
	}
}

void lease_failed(struct lease_table *t, const struct decide_query *q)
{
	struct lease *e = t ? lookup(t, q) : NULL;

	if (e)
		e->pending = false;
}

/* What a return of this grant needs, kept in ret. Returns false when a
 * value does not fit (then the lease's tokens cannot go back). */
static bool keep_return(struct lease_return *ret, const struct decide_query *q,
			const struct lease_grant *g, int64_t redis_now)
{
	memcpy(ret->key, q->key, IDENTITY_KEY_LEN);
	ret->nlimits = q->nlimits;
	ret->take_us = redis_now;
	ret->tokens = 0;
	for (size_t j = 0; j < q->nlimits; j++) {
		ret->limits[j] = q->limits[j];
		ret->lidh[j] = q->rule->lidh[j];
		if (g->value_len[j] >= LEASE_VALUE_MAX || (g->value_len[j] && !g->value[j]))
			return false;
		ret->value_len[j] = (uint8_t)g->value_len[j];
		if (g->value_len[j])
			memcpy(ret->value[j], g->value[j], g->value_len[j]);
	}
	return true;
}

void lease_granted(struct lease_table *t, const struct lease_config *agent,
		   const struct decide_query *q, uint32_t want, uint64_t epoch,
		   const struct limit_result *res, int decider, const struct lease_grant *g,
		   int64_t sent, int64_t redis_now)
{
	struct lease_config own, *cfg = &own;
	struct lease *e;
	int64_t extra = g ? g->extra : 0;

	/* (a query that asked has a rule with leases: its rule, and so its
	 * config, cannot have changed since) */
	if (!t || !config_of(agent, q, &own))
		return;
	e = lookup(t, q);
	if (e)
		e->pending = false;
	if (extra > 0) {
		STAT_INC(t->stats->grants);
		STAT_ADD(t->stats->tokens, (uint64_t)extra);
	}
	if (!res[decider].allowed) {
		const struct limit_spec *l = &q->limits[decider];
		int64_t wait = 0;

		if (!e || e->epoch != epoch)
			return;
		e->after = 0;
		/* wait until (some of) the tokens asked for are back, not one:
		 * the next call then takes a lease rather than a single token
		 * (at most want - 1 tokens refused early, at most an interval).
		 * How many is drawn at random, so that holders refused at the
		 * same moment do not wake in the same order every time, one
		 * of them always too late. */
		if (want > 1)
			wait = draw(t, refill_us(l, want - 1, cfg));
		e->wait_until = sent + res[decider].retry_after_us + wait;
		e->wait_full_at = sent + res[decider].reset_us;
		e->wait_more_at = sent + res[decider].more_us;
		e->wait_cost = q->cost;
		e->wait_decider = decider;
		return;
	}
	if (e && e->epoch == epoch && extra < (int64_t)want) {
		/* The bucket had less than asked for: other holders want its
		 * tokens too. Once this lease is spent, wait a while drawn at
		 * random (up to the time the missing tokens take to come
		 * back) before asking again, as after a refusal: else the
		 * holder that asks first after each refill gets every lease. */
		const struct limit_spec *l = &q->limits[decider];

		e->after = draw(t, refill_us(l, want - (uint64_t)extra - 1, cfg));
	}
	if (extra <= 0) {
		if (e && e->epoch == epoch && e->after) {
			for (size_t j = 0; j < q->nlimits; j++) {
				e->g[j].remaining = res[j].remaining;
				e->g[j].reset_at = sent + res[j].reset_us;
			}
			wait_after_lease(e, q, sent);
		}
		return;
	}
	if (!e || e->epoch != epoch) {
		/* not held here (the entry went to another client, or a reset
		 * came): back at once */
		struct lease_return ret;

		bool ok = !e && keep_return(&ret, q, g, redis_now);

		ret.tokens = (uint64_t)extra;
		if (ok && t->fn && t->fn(t->priv, &ret) == 0)
			STAT_ADD(t->stats->returned, ret.tokens);
		else
			STAT_ADD(t->stats->dropped, ret.tokens);
		return;
	}
	give_back(t, e);
	e->tokens = (uint64_t)extra;
	e->spent = 0;
	e->until = sent + cfg->interval_us;
	e->wait_until = 0;
	e->returnable = keep_return(&e->ret, q, g, redis_now);
	for (size_t j = 0; j < q->nlimits; j++) {
		const struct limit_spec *l = &q->limits[j];

		e->g[j].remaining = res[j].remaining;
		e->g[j].reset_at = sent + res[j].reset_us;
		e->g[j].more_at = sent + res[j].more_us;
		/* A window's tokens count in the window that took them: spent
		 * in the next one, they would come on top of its quota. So a
		 * lease ends with the window (windows are aligned to multiples
		 * of their period on Redis's clock; `sent` is before Redis read
		 * it, so this ends no later than the window). */
		if (l->algo != LIMIT_TOKEN_BUCKET && redis_now >= 0) {
			int64_t left = l->period_us - redis_now % l->period_us;

			if (sent + left < e->until)
				e->until = sent + left;
		}
	}
}

size_t lease_expire(struct lease_table *t, int64_t now, bool all)
{
	size_t left = 0;

	if (!t)
		return 0;
	for (size_t i = 0; i < t->cap; i++) {
		struct lease *e = &t->e[i];

		if (e->limits && e->tokens && (all || now >= e->until))
			give_back(t, e);
		left += e->tokens > 0;
	}
	return left;
}

void lease_table_clear(struct lease_table *t)
{
	if (!t)
		return;
	lease_expire(t, 0, true);
	memset(t->e, 0, t->cap * sizeof(*t->e));
}
