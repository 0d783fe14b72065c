/* SPDX-License-Identifier: Apache-2.0 */
/* limit.c: rate-limit math (see limit.h).
 *
 * Exactness. The token bucket's emission interval T = period/quota is a
 * rational number of microseconds. Instead of rounding it, every token
 * bucket computation is done on times scaled by quota ("ticks": 1 tick =
 * 1/quota microsecond), where T is exactly `period` ticks. The TAT is kept
 * as a + b/quota (a whole microseconds, b the remainder in ticks), so the
 * stored state is exact too and no rounding accumulates from one request to
 * the next. Results handed back in microseconds are rounded up (retry-after,
 * reset: waiting that long is always enough) or down (remaining tokens).
 *
 * Range. Quota <= 2^40, period <= 366 d < 2^45 us, cost < 2^32 and any
 * int64 time: every intermediate fits in 128 bits (|(a - now) * quota| <
 * 2^105). Values handed back are saturated to int64, which only matters for
 * states no honest caller produces. Honest ones keep the token bucket's
 * times within a few periods of now, so its divisions take the 64-bit
 * path of div_floor().
 */
#include "limit.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

__extension__ typedef __int128 i128;

/* Floor and ceiling of a / b for b > 0, whatever the sign of a. The
 * divisions of a decision are of times relative to now (see eval_bucket),
 * which nearly always fit 64 bits: then a 64-bit division gives the same
 * quotient as the 128-bit one, a few instructions instead of a libgcc
 * call. */
static inline i128 div_floor(i128 a, i128 b)
{
	i128 q;

	if (a >= INT64_MIN && a <= INT64_MAX && b <= INT64_MAX) {
		int64_t a64 = (int64_t)a, b64 = (int64_t)b, q64 = a64 / b64;

		if (a64 % b64 != 0 && a64 < 0)
			q64--;
		return q64;
	}
	q = a / b;
	if (a % b != 0 && a < 0)
		q--;
	return q;
}

static inline i128 div_ceil(i128 a, i128 b) { return -div_floor(-a, b); }

static int64_t sat64(i128 v)
{
	if (v > INT64_MAX)
		return INT64_MAX;
	if (v < INT64_MIN)
		return INT64_MIN;
	return (int64_t)v;
}

static uint64_t sat_u64(i128 v)
{
	if (v < 0)
		return 0;
	if (v > (i128)UINT64_MAX)
		return UINT64_MAX;
	return (uint64_t)v;
}

/* The spec's figures clamped to the notation's bounds (see limit.h). */
struct norm {
	i128 n;   /* quota */
	i128 p;   /* period, us */
	i128 cap; /* token bucket capacity */
};

static struct norm normalize(const struct limit_spec *s)
{
	struct norm v;
	uint64_t q = s->quota, b = s->burst;
	int64_t p = s->period_us;

	if (q < 1)
		q = 1;
	if (q > LIMIT_QUOTA_MAX)
		q = LIMIT_QUOTA_MAX;
	if (b > LIMIT_QUOTA_MAX)
		b = LIMIT_QUOTA_MAX;
	if (p < 1)
		p = 1;
	if (p > LIMIT_PERIOD_MAX_US)
		p = LIMIT_PERIOD_MAX_US;
	v.n = q;
	v.cap = b ? b : q;
	v.p = p;
	return v;
}

/* limit_ttl_us() under figures normalized already. */
static int64_t ttl_norm(const struct norm *v, enum limit_algo algo,
			const struct limit_state *st, int64_t now_us)
{
	i128 ttl;

	switch (algo) {
	case LIMIT_LOG:
	case LIMIT_CONCURRENCY:
		return 1; /* its state is its entries (limit_log_eval, inflight.h) */
	case LIMIT_BAN:
		ttl = (i128)st->a - now_us; /* banned until a */
		break;
	case LIMIT_SLIDING_WINDOW:
		if (st->b <= 0 && st->c <= 0)
			return 1;
		ttl = (i128)st->a + 2 * v->p - now_us;
		break;
	case LIMIT_FIXED_WINDOW:
		if (st->b <= 0)
			return 1;
		ttl = (i128)st->a + v->p - now_us;
		break;
	case LIMIT_TOKEN_BUCKET:
	default:
		ttl = div_ceil(((i128)st->a - now_us) * v->n + st->b, v->n);
		break;
	}
	return ttl < 1 ? 1 : sat64(ttl);
}

/* A token bucket's TTL from the reset time of the same state: both are
 * TAT - now rounded up, the TTL at least 1 (saturation apart, see the
 * callers). This spares every decision a division. */
static int64_t ttl_of_reset(int64_t reset_us)
{
	return reset_us < 1 ? 1 : reset_us;
}

/* A token bucket's more_us (limit.h) from the ticks until the level it
 * needs: rounded up, 0 when it is there already. */
static int64_t bucket_more(i128 ticks, i128 n)
{
	return ticks > 0 ? sat64(div_ceil(ticks, n)) : 0;
}

/* ---- token bucket (GCRA) ---------------------------------------------------
 * In ticks: tat' = max(tat, now) + cost * P, allowed when
 * tat' - now <= cap * P (a fresh key takes `cap` requests at once).
 * A bucket owes at most one capacity beyond empty: no admitted request
 * leaves tat past now + cap * P, and a charge settled for more than its
 * estimate (limit_settle) at most now + 2 * cap * P, a debt that later
 * requests wait out. A tat further ahead comes from a clock that stepped
 * back (a wall clock's step, a store whose clock is behind the one that
 * wrote it), and is read as a bucket a capacity in debt,
 * tat = now + 2 * cap * P, rather than owing the whole step; a refusal
 * hands that back as the state that follows (empty_bucket), for a store
 * that keeps it to run on from the present. That reading never lets more
 * through than the limit allows: the true tat, on the clock that reads
 * it, is no later than now + 2 * cap * P.
 * Everything is computed relative to now (tat - now, tat' - now): the same
 * exact values as absolute ticks, but small ones, so that divisions stay
 * within 64 bits (div_floor). */
/* *next: the bucket whose tat is now + rel / quota (rel >= 0, in ticks:
 * now * quota is a whole number of microseconds). Returns false when that
 * is past the clock's range: tat saturated, no remainder. */
static bool put_tat(const struct norm *v, int64_t now, i128 rel, struct limit_state *next)
{
	i128 q = div_floor(rel, v->n), a = (i128)now + q;

	next->c = 0;
	if (a > INT64_MAX) {
		next->a = INT64_MAX;
		next->b = 0;
		return false;
	}
	next->a = (int64_t)a;
	next->b = (int64_t)(rel - q * v->n);
	return true;
}

/* *next: the bucket a capacity in debt at now, tat = now + 2 * cap * P
 * (saturated), and res->next_ttl_us its TTL, for a refusal of a bucket
 * that owed more. */
static __attribute__((noinline)) void empty_bucket(const struct norm *v, int64_t now,
						  struct limit_state *next,
						  struct limit_result *res)
{
	if (!put_tat(v, now, 2 * v->cap * v->p, next))
		res->next_ttl_us = ttl_norm(v, LIMIT_TOKEN_BUCKET, next, now);
}

static void eval_bucket128(const struct norm *v, const struct limit_state *st, int64_t now,
			   uint32_t cost, struct limit_state *next, struct limit_result *res)
{
	i128 d = ((i128)st->a - now) * v->n + st->b;          /* tat - now */
	i128 room = v->cap * v->p;
	i128 rel;
	bool owed = d > 2 * room;

	if (owed)
		d = 2 * room; /* owes a capacity at most (see above) */
	rel = (d > 0 ? d : 0) + (i128)cost * v->p;             /* tat' - now */

	*next = *st;
	/* Refused, remaining is 0: one token is there once
	 * tat - t * quota <= (cap - 1) * P. */
	res->more_us = bucket_more((d > 0 ? d : 0) + v->p - room, v->n);
	if ((i128)cost > v->cap) {
		/* It can never pass, however long the client waits: refuse it
		 * and point at the period rather than at a moment when it
		 * would still be refused. */
		res->allowed = false;
		res->retry_after_us = sat64(v->p);
		res->reset_us = d > 0 ? sat64(div_ceil(d, v->n)) : 0;
		res->next_ttl_us = ttl_of_reset(res->reset_us);
		if (owed)
			empty_bucket(v, now, next, res);
		return;
	}
	if (rel > room) {
		/* Refused; then tat > now (else cost > cap). The request fits
		 * at the first whole microsecond t with
		 * tat + cost * P - t * quota <= cap * P. */
		res->allowed = false;
		res->retry_after_us = sat64(div_ceil(rel - room, v->n));
		res->reset_us = sat64(div_ceil(d, v->n));
		res->next_ttl_us = ttl_of_reset(res->reset_us);
		if (owed)
			empty_bucket(v, now, next, res);
		return;
	}
	res->allowed = true;
	res->remaining = sat_u64(div_floor(room - rel, v->p));
	res->reset_us = sat64(div_ceil(rel, v->n));
	/* The next whole token: once tat' - t * quota <= room - (remaining + 1)
	 * * P. None comes to a full bucket (rel 0, a look at a fresh key). */
	res->more_us = rel > 0 ? bucket_more(rel + (i128)(res->remaining + 1) * v->p - room, v->n)
			       : 0;
	res->next_ttl_us = put_tat(v, now, rel, next) ? ttl_of_reset(res->reset_us)
						      : ttl_norm(v, LIMIT_TOKEN_BUCKET, next, now);
}

/* eval_bucket128() in 64-bit arithmetic, for the figures of honest callers
 * (a TAT within some periods of now, a product quota x period under
 * 2^63): the same results, without the 128-bit products and the range
 * checks of div_floor(). Returns false, having written nothing, when an
 * intermediate would overflow; the caller then takes the 128-bit path. */
static bool eval_bucket64(const struct norm *v, const struct limit_state *st, int64_t now,
			  uint32_t cost, struct limit_state *next, struct limit_result *res)
{
	int64_t n = (int64_t)v->n, p = (int64_t)v->p, cap = (int64_t)v->cap;
	int64_t x, d, rel, room, debt, q, a;
	bool owed;

	if (__builtin_sub_overflow(st->a, now, &x))
		return false;
	if (__builtin_mul_overflow(x, n, &d) || __builtin_add_overflow(d, st->b, &d)) {
		if (x >= 0)
			return false;
		/* A TAT long past (a fresh state's is 0): d is negative, and
		 * only its sign is used below. */
		d = -1;
	}
	if (__builtin_mul_overflow(cap, p, &room) || __builtin_add_overflow(room, room, &debt))
		return false;
	owed = d > debt;
	if (owed)
		d = debt; /* owes a capacity at most (see above) */
	if (__builtin_mul_overflow((int64_t)cost, p, &x) ||
	    __builtin_add_overflow(d > 0 ? d : 0, x, &rel))
		return false;
	if ((int64_t)cost > cap || rel > room) {
		/* Refused (see eval_bucket128); d > 0 when rel > room. The
		 * ticks to one token, d - room + P, cannot overflow: room >= P. */
		res->allowed = false;
		res->retry_after_us = (int64_t)cost > cap ? p : (rel - room - 1) / n + 1;
		res->reset_us = d > 0 ? (d - 1) / n + 1 : 0;
		x = d > 0 ? d - room + p : 0;
		res->more_us = x > 0 ? (x - 1) / n + 1 : 0;
		res->next_ttl_us = ttl_of_reset(res->reset_us);
		*next = *st;
		if (owed)
			empty_bucket(v, now, next, res);
		return true;
	}
	/* rel >= 0 (0 only for a look that takes nothing) */
	q = rel / n;
	if (__builtin_add_overflow(now, q, &a))
		return false;
	res->allowed = true;
	x = room - rel;
	res->remaining = (uint64_t)(x / p);
	res->reset_us = q + (rel % n != 0);
	/* the next whole token (see eval_bucket128): P - x % P ticks away,
	 * rounded up (P + n < 2^63: their product is under 2^63) */
	res->more_us = rel > 0 ? (p - x % p + n - 1) / n : 0;
	res->next_ttl_us = ttl_of_reset(res->reset_us);
	next->a = a;
	next->b = rel - q * n;
	next->c = 0;
	return true;
}

static void eval_bucket(const struct norm *v, const struct limit_state *st, int64_t now,
			uint32_t cost, struct limit_state *next, struct limit_result *res)
{
	if (!eval_bucket64(v, st, now, cost, next, res))
		eval_bucket128(v, st, now, cost, next, res);
}

/* ---- windows ------------------------------------------------------------------
 * The counts that apply at `now` in the window starting at *w: a state of an
 * older window shifts (or drops) its counts. A state from a later window
 * (the clock stepped back) is taken as the current window's, so its counts
 * keep holding. */
static void window_counts(const struct norm *v, const struct limit_state *st, int64_t now,
			  i128 *w, i128 *cur, i128 *prev)
{
	i128 b = st->b > 0 ? st->b : 0, c = st->c > 0 ? st->c : 0;

	*w = div_floor(now, v->p) * v->p;
	*cur = 0;
	*prev = 0;
	if (b == 0 && c == 0)
		return;
	if ((i128)st->a >= *w) {
		*cur = b;
		*prev = c;
	} else if ((i128)st->a == *w - v->p) {
		*prev = b;
	}
}

static void set_window_state(struct limit_state *next, i128 w, i128 cur, i128 prev)
{
	next->a = sat64(w);
	next->b = sat64(cur);
	next->c = sat64(prev);
}

static void eval_fixed(const struct norm *v, const struct limit_state *st, int64_t now,
		       uint32_t cost, struct limit_state *next, struct limit_result *res)
{
	i128 w, cur, prev;
	i128 end;

	window_counts(v, st, now, &w, &cur, &prev);
	end = w + v->p - now;
	*next = *st;
	if (cur + cost > v->n) {
		res->allowed = false;
		/* The next window is empty, so it takes any cost <= quota. */
		res->retry_after_us = sat64((i128)cost > v->n ? v->p : end);
		res->reset_us = cur > 0 ? sat64(end) : 0;
		/* a request of cost 1 passes now when a heavier one was
		 * refused, else in the next window */
		res->more_us = cur < v->n ? 0 : sat64(end);
		return;
	}
	res->allowed = true;
	res->remaining = sat_u64(v->n - cur - cost);
	res->reset_us = cur + cost > 0 ? sat64(end) : 0;
	/* what is left of this window is `remaining`: more comes with the
	 * next window, unless nothing is counted */
	res->more_us = res->reset_us;
	if (cost > 0)
		set_window_state(next, w, cur + cost, 0);
}

/* Sliding window counter: estimate = prev * (P - e) / P + cur, e the time
 * elapsed in the current window; a request passes when
 * estimate + cost <= quota, compared exactly as
 * prev * (P - e) + (cur + cost) * P <= quota * P. */
static i128 sliding_retry(const struct norm *v, i128 w, i128 cur, i128 prev, int64_t now,
			  i128 cost)
{
	i128 n = v->n, p = v->p;
	i128 e;

	if (cost > n)
		return p;
	/* Still in this window, as the previous window's weight fades:
	 * prev * (t - w) >= P * (prev + cur + cost - quota). */
	if (prev > 0 && cur + cost <= n)
		return w + div_ceil(p * (prev + cur + cost - n), prev) - now;
	/* In the next window, where cur becomes the fading previous count. */
	if (cur == 0 || cur + cost <= n)
		return w + p - now;
	e = div_ceil(p * (cur + cost - n), cur);
	if (e < p)
		return w + p + e - now;
	/* Once cur has faded out completely. */
	return w + 2 * p - now;
}

/* more_us (limit.h) of a sliding window: the time until a request of
 * cost k passes, 0 when it passes now or never can (k over the quota: the
 * limit is empty, remaining is the quota). */
static int64_t sliding_more(const struct norm *v, i128 w, i128 cur, i128 prev, int64_t now,
			    i128 k)
{
	i128 t;

	if (k > v->n || prev * (w + v->p - now) + (cur + k) * v->p <= v->n * v->p)
		return 0;
	t = sliding_retry(v, w, cur, prev, now, k);
	return t > 0 ? sat64(t) : 0;
}

static void eval_sliding(const struct norm *v, const struct limit_state *st, int64_t now,
			 uint32_t cost, struct limit_state *next, struct limit_result *res)
{
	i128 w, cur, prev, used, qp = v->n * v->p;

	window_counts(v, st, now, &w, &cur, &prev);
	used = prev * (w + v->p - now) + cur * v->p;
	*next = *st;
	if (used + (i128)cost * v->p > qp) {
		res->allowed = false;
		res->retry_after_us = sat64(sliding_retry(v, w, cur, prev, now, cost));
		if (cur > 0)
			res->reset_us = sat64(w + 2 * v->p - now);
		else
			res->reset_us = prev > 0 ? sat64(w + v->p - now) : 0;
		res->more_us = sliding_more(v, w, cur, prev, now, 1);
		return;
	}
	res->allowed = true;
	res->remaining = sat_u64((qp - used - (i128)cost * v->p) / v->p);
	cur += cost;
	/* Full again when the estimate is 0: the current count fades over the
	 * whole next window, the previous one by the end of this window. */
	if (cur > 0)
		res->reset_us = sat64(w + 2 * v->p - now);
	else
		res->reset_us = prev > 0 ? sat64(w + v->p - now) : 0;
	res->more_us = sliding_more(v, w, cur, prev, now, (i128)res->remaining + 1);
	if (cost > 0)
		set_window_state(next, w, cur, prev);
}

/* ---- sliding log ----------------------------------------------------------------
 * Exact by construction: the weight in the window is the sum of the entries'
 * costs, and a time until something happens is the moment an entry leaves,
 * e[i].t + P, minus now. */

/* The time until the entries e[from..n), of weight `used` now, weigh at
 * most `target` (0 <= target < used), the oldest leaving first. Entries
 * of one time leave together, so the first entry whose leaving is enough
 * gives the moment, and none earlier is. */
static i128 log_wait(const struct limit_log_entry *e, size_t from, size_t n, i128 used,
		     i128 target, i128 p, int64_t now)
{
	for (size_t i = from; i < n; i++) {
		used -= e[i].cost;
		if (used <= target)
			return (i128)e[i].t + p - now;
	}
	return 0; /* unreachable: the weights of e[from..n) are `used` */
}

void limit_log_eval(const struct limit_spec *spec, const struct limit_log_entry *e, size_t n,
		    int64_t now_us, uint32_t cost, struct limit_log_step *step,
		    struct limit_result *res)
{
	struct norm v = normalize(spec);
	i128 q = v.n < LIMIT_LOG_QUOTA_MAX ? v.n : LIMIT_LOG_QUOTA_MAX;
	i128 used = 0, reset = 0, more = 0;
	size_t lo = 0, hi = n;

	memset(res, 0, sizeof(*res));
	res->limit = (uint64_t)q;
	/* the first entry still in the window: e[i].t > now - P */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if ((i128)e[mid].t + v.p > now_us)
			hi = mid;
		else
			lo = mid + 1;
	}
	step->keep = lo;
	step->at = n > 0 && e[n - 1].t > now_us ? e[n - 1].t : now_us;
	for (size_t i = lo; i < n; i++)
		used += e[i].cost;
	if (lo < n)
		reset = (i128)e[n - 1].t + v.p - now_us;
	if ((i128)cost <= q && used + cost <= q) {
		res->allowed = true;
		res->remaining = (uint64_t)(q - used - cost);
		if (cost > 0) {
			/* the request is the newest entry now; more comes when the
			 * oldest leaves, which it is when the log was empty */
			reset = (i128)step->at + v.p - now_us;
			more = (lo < n ? (i128)e[lo].t : (i128)step->at) + v.p - now_us;
		} else if (lo < n) {
			more = (i128)e[lo].t + v.p - now_us;
		}
	} else {
		/* A cost over the quota never passes: one period, as the other
		 * algorithms say. A request of cost 1 may pass now (a heavier
		 * one was refused) or once the weight drops below the quota. */
		res->retry_after_us = sat64((i128)cost > q ? v.p
							    : log_wait(e, lo, n, used, q - cost, v.p, now_us));
		more = used < q ? 0 : log_wait(e, lo, n, used, q - 1, v.p, now_us);
	}
	res->reset_us = reset > 0 ? sat64(reset) : 0;
	res->more_us = more > 0 ? sat64(more) : 0;
	res->next_ttl_us = res->reset_us < 1 ? 1 : res->reset_us;
	if (!res->allowed && res->retry_after_us < 1)
		res->retry_after_us = 1;
}

void limit_eval(const struct limit_spec *spec, const struct limit_state *st,
		int64_t now_us, uint32_t cost, struct limit_state *next,
		struct limit_result *res)
{
	struct norm v = normalize(spec);
	struct limit_log_step step;

	memset(res, 0, sizeof(*res));
	res->limit = (uint64_t)v.n;
	switch (spec->algo) {
	case LIMIT_BAN:
		/* banned until st->a, else nothing to count */
		*next = *st;
		if (st->a > now_us) {
			res->allowed = false;
			res->retry_after_us = st->a - now_us;
			res->reset_us = st->a - now_us;
			res->next_ttl_us = st->a - now_us;
		} else {
			res->allowed = true;
			res->remaining = 1;
			res->next_ttl_us = 1;
		}
		return;
	case LIMIT_CONCURRENCY:
		/* the stores decide it (inflight.h): here, nothing in flight */
		*next = *st;
		res->allowed = true;
		res->remaining = spec->quota;
		res->next_ttl_us = 1;
		return;
	case LIMIT_LOG:
		/* no entries in a limit_state: an empty log */
		*next = *st;
		limit_log_eval(spec, NULL, 0, now_us, cost, &step, res);
		return;
	case LIMIT_SLIDING_WINDOW:
		eval_sliding(&v, st, now_us, cost, next, res);
		break;
	case LIMIT_FIXED_WINDOW:
		eval_fixed(&v, st, now_us, cost, next, res);
		break;
	case LIMIT_TOKEN_BUCKET:
	default:
		eval_bucket(&v, st, now_us, cost, next, res); /* sets next_ttl_us */
		break;
	}
	if (spec->algo == LIMIT_SLIDING_WINDOW || spec->algo == LIMIT_FIXED_WINDOW)
		res->next_ttl_us = ttl_norm(&v, spec->algo, next, now_us);
	if (!res->allowed) {
		res->remaining = 0;
		if (res->retry_after_us < 1)
			res->retry_after_us = 1;
	}
	if (res->reset_us < 0)
		res->reset_us = 0;
}

void limit_refused_by(struct limit_result *res, const struct limit_spec *limits, size_t n,
		      size_t d, int64_t retry_us, int64_t reset_us, int64_t more_us)
{
	for (size_t i = 0; i < n; i++) {
		memset(&res[i], 0, sizeof(res[i]));
		res[i].allowed = true;
		res[i].limit = limits[i].quota;
	}
	res[d].allowed = false;
	res[d].retry_after_us = retry_us;
	res[d].reset_us = reset_us > 0 ? reset_us : 0;
	res[d].more_us = more_us > 0 ? more_us : 0;
}

int64_t limit_bucket_more_us(const struct limit_spec *spec, bool allowed, uint64_t remaining,
			     int64_t reset_us)
{
	struct norm v = normalize(spec);
	i128 r = allowed ? (i128)remaining : 0, t;

	if (r >= v.cap)
		return 0; /* full: no more to come */
	/* reset - (cap - r - 1) * P / quota, rounded up: reset is whole */
	t = (i128)reset_us - div_floor((v.cap - r - 1) * v.p, v.n);
	return t > 0 ? sat64(t) : 0;
}

int64_t limit_ttl_us(const struct limit_spec *spec, const struct limit_state *st,
		     int64_t now_us)
{
	struct norm v = normalize(spec);

	return ttl_norm(&v, spec->algo, st, now_us);
}

/* ---- notation ------------------------------------------------------------------ */

enum dur_err {
	DUR_OK = 0,
	DUR_NO_UNIT,
	DUR_BAD_UNIT,
	DUR_OVERFLOW,
};

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* Reads [digits]unit at s; *end is left past the unit. Without digits the
 * count is 1 ("m" is one minute). */
static enum dur_err scan_duration(const char *s, int64_t *out, const char **end)
{
	static const struct {
		const char *name;
		int64_t us;
	} units[] = {
		/* Longer names first, so "ms" is not read as "m". */
		{"ms", 1000}, {"us", 1}, {"s", LIMIT_US_PER_S}, {"m", 60 * LIMIT_US_PER_S},
		{"h", 3600 * LIMIT_US_PER_S}, {"d", 86400 * LIMIT_US_PER_S},
	};
	int64_t count = 1;
	int overflow = 0;

	if (is_digit(*s)) {
		count = 0;
		for (; is_digit(*s); s++) {
			int d = *s - '0';

			if (count > (INT64_MAX - d) / 10)
				overflow = 1;
			else
				count = count * 10 + d;
		}
	}
	if (!is_alpha(*s))
		return DUR_NO_UNIT;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		size_t len = strlen(units[i].name);

		if (strncmp(s, units[i].name, len) != 0 || is_alpha(s[len]))
			continue;
		if (overflow || count > INT64_MAX / units[i].us)
			return DUR_OVERFLOW;
		*out = count * units[i].us;
		*end = s + len;
		return DUR_OK;
	}
	return DUR_BAD_UNIT;
}

int limit_parse_duration(const char *s, int64_t *out_us)
{
	const char *end;
	int64_t us;

	if (!s || scan_duration(s, &us, &end) != DUR_OK || *end != '\0')
		return -1;
	*out_us = us;
	return 0;
}

int limit_parse(const char *s, struct limit_spec *out, char *err, size_t errlen)
{
	const char *p = s, *end;
	uint64_t quota = 0;
	int64_t period;
	char dummy[1];

	if (!err || errlen == 0) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	if (!s || !*s) {
		snprintf(err, errlen, "empty limit (expected N/P such as 100/1m)");
		return -1;
	}
	if (*p == '-') {
		snprintf(err, errlen, "'%s': negative quota", s);
		return -1;
	}
	if (!is_digit(*p)) {
		snprintf(err, errlen, "'%s': expected N/P such as 100/1m", s);
		return -1;
	}
	for (; is_digit(*p); p++) {
		quota = quota * 10 + (uint64_t)(*p - '0');
		if (quota > LIMIT_QUOTA_MAX) {
			snprintf(err, errlen, "'%s': quota over %llu", s,
				 (unsigned long long)LIMIT_QUOTA_MAX);
			return -1;
		}
	}
	if (quota == 0) {
		snprintf(err, errlen, "'%s': quota must be at least 1", s);
		return -1;
	}
	if (*p != '/') {
		if (*p == '\0')
			snprintf(err, errlen, "'%s': missing period (expected N/P such as 100/1m)", s);
		else
			snprintf(err, errlen, "'%s': unexpected '%c' after the quota", s, *p);
		return -1;
	}
	p++;
	if (*p == '\0') {
		snprintf(err, errlen, "'%s': missing period after '/'", s);
		return -1;
	}
	if (*p == '-') {
		snprintf(err, errlen, "'%s': negative period", s);
		return -1;
	}
	switch (scan_duration(p, &period, &end)) {
	case DUR_OK:
		break;
	case DUR_NO_UNIT:
		snprintf(err, errlen, "'%s': period needs a unit (ms, s, m, h, d)", s);
		return -1;
	case DUR_BAD_UNIT:
		snprintf(err, errlen, "'%s': unknown period unit (use ms, s, m, h, d)", s);
		return -1;
	case DUR_OVERFLOW:
		snprintf(err, errlen, "'%s': period over 366d", s);
		return -1;
	}
	if (*end != '\0') {
		snprintf(err, errlen, "'%s': unexpected '%s' after the period", s, end);
		return -1;
	}
	if (period < LIMIT_PERIOD_MIN_US) {
		snprintf(err, errlen, "'%s': period must be at least 1ms", s);
		return -1;
	}
	if (period > LIMIT_PERIOD_MAX_US) {
		snprintf(err, errlen, "'%s': period over 366d", s);
		return -1;
	}
	memset(out, 0, sizeof(*out));
	out->quota = quota;
	out->period_us = period;
	out->burst = 0;
	out->algo = LIMIT_TOKEN_BUCKET;
	return 0;
}

void limit_format_period(int64_t period_us, char *buf, size_t len)
{
	static const struct {
		const char *name;
		int64_t us;
	} units[] = {
		{"d", 86400 * LIMIT_US_PER_S}, {"h", 3600 * LIMIT_US_PER_S},
		{"m", 60 * LIMIT_US_PER_S}, {"s", LIMIT_US_PER_S}, {"ms", 1000},
	};

	if (!buf || len == 0)
		return;
	if (period_us > 0) {
		for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
			if (period_us % units[i].us == 0) {
				snprintf(buf, len, "%" PRId64 "%s", period_us / units[i].us,
					 units[i].name);
				return;
			}
		}
	}
	snprintf(buf, len, "%" PRId64 "us", period_us);
}

const char *limit_algo_name(enum limit_algo a)
{
	switch (a) {
	case LIMIT_TOKEN_BUCKET:
		return "token";
	case LIMIT_SLIDING_WINDOW:
		return "sliding";
	case LIMIT_FIXED_WINDOW:
		return "fixed";
	case LIMIT_LOG:
		return "log";
	case LIMIT_CONCURRENCY:
		return "concurrency";
	case LIMIT_BAN:
		return "ban";
	}
	return "token";
}

/* ---- a charge's settlement --------------------------------------------------- */

/* A token bucket: more is taken from max(tat, now), up to a capacity in
 * debt; less goes back by delta * P less the refill since the take (what
 * time may have absorbed of the reservation, as the Redis library's
 * refund does), never past a full bucket. */
static int settle_bucket(const struct norm *v, const struct limit_state *st, int64_t now,
			 int64_t take, int64_t delta, struct limit_state *next)
{
	i128 d = ((i128)st->a - now) * v->n + st->b, debt = 2 * v->cap * v->p;

	if (d > debt)
		d = debt;
	if (delta > 0) {
		d = (d > 0 ? d : 0) + (i128)delta * v->p;
		if (d > debt)
			d = debt;
	} else {
		i128 give = (i128)-delta * v->p - (now > take ? ((i128)now - take) * v->n : 0);

		if (give <= 0 || d <= 0)
			return 0;
		d -= give;
		if (d <= 0) {
			memset(next, 0, sizeof(*next)); /* full: as good as fresh */
			return 1;
		}
	}
	put_tat(v, now, d, next);
	return 1;
}

/* A window: more is counted in the present window, up to twice the quota
 * (a quota in debt); less goes back in the window that counted the take
 * while it counts (the present one, or for a sliding window the one
 * before), never below 0, and nowhere else: a later window never counted
 * it. */
static int settle_window(const struct norm *v, enum limit_algo algo,
			 const struct limit_state *st, int64_t now, int64_t take, int64_t delta,
			 struct limit_state *next)
{
	i128 w, cur, prev, tw = div_floor(take, v->p) * v->p;

	window_counts(v, st, now, &w, &cur, &prev);
	if (algo == LIMIT_FIXED_WINDOW)
		prev = 0;
	if (delta > 0) {
		cur += delta;
		if (cur > 2 * v->n)
			cur = 2 * v->n;
	} else if (tw == w && cur > 0) {
		cur = cur + delta > 0 ? cur + delta : 0;
	} else if (algo == LIMIT_SLIDING_WINDOW && tw == w - v->p && prev > 0) {
		prev = prev + delta > 0 ? prev + delta : 0;
	} else {
		return 0;
	}
	set_window_state(next, w, cur, prev);
	return 1;
}

int limit_settle(const struct limit_spec *spec, const struct limit_state *st, int64_t now_us,
		 int64_t take_us, int64_t delta, struct limit_state *next)
{
	struct norm v = normalize(spec);

	if (delta == 0)
		return 0;
	if (delta > (int64_t)LIMIT_QUOTA_MAX)
		delta = (int64_t)LIMIT_QUOTA_MAX;
	if (delta < -(int64_t)LIMIT_QUOTA_MAX)
		delta = -(int64_t)LIMIT_QUOTA_MAX;
	switch (spec->algo) {
	case LIMIT_TOKEN_BUCKET:
		return settle_bucket(&v, st, now_us, take_us, delta, next);
	case LIMIT_SLIDING_WINDOW:
	case LIMIT_FIXED_WINDOW:
		return settle_window(&v, spec->algo, st, now_us, take_us, delta, next);
	case LIMIT_LOG:
	case LIMIT_CONCURRENCY:
	case LIMIT_BAN:
		break;
	}
	return 0;
}
