/* SPDX-License-Identifier: Apache-2.0 */
/* limit.h: rate-limit math. Pure: no I/O, no clock, no allocation; the
 * caller passes the time (microseconds, any epoch, monotonic per key).
 *
 * A limit "N/P" allows N requests in period P to a client that starts with a
 * full bucket: capacity N (or `burst` when set), refilled at N per P.
 *
 * Token bucket state is GCRA's single value, the theoretical arrival time
 * (TAT): the bucket is full when tat <= now. Time is kept in integer
 * microseconds and the emission interval is kept exactly as the rational
 * period/quota (never rounded to a whole microsecond per token), so refill
 * is exact and fractional refill is never lost, whatever the spacing of
 * requests (the classic "last_refill = now on every call" starvation bug
 * cannot happen: there is no last_refill).
 *
 * A sliding log keeps the admitted requests themselves (limit_log_eval):
 * exact, at the price of an entry per request in the window.
 */
#ifndef RL_LIMIT_H
#define RL_LIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LIMIT_US_PER_S 1000000LL
/* Limits one rule of the rules file declares, and limits checked together
 * for one request (all or nothing): its rule's and those of the layers
 * stacked on it. */
#define LIMIT_RULE_MAX 16
#define LIMIT_SET_MAX 32

/* Bounds of the notation. limit_eval clamps a spec to them, so no spec a
 * caller builds by hand can overflow its arithmetic. */
#define LIMIT_QUOTA_MAX (1ULL << 40)
#define LIMIT_PERIOD_MIN_US 1000LL
#define LIMIT_PERIOD_MAX_US (366LL * 86400 * LIMIT_US_PER_S)

enum limit_algo {
	LIMIT_TOKEN_BUCKET = 0,
	LIMIT_SLIDING_WINDOW = 1,
	LIMIT_FIXED_WINDOW = 2,
	LIMIT_LOG = 3,
	/* At most quota requests in flight; a place is kept for at most
	 * period (inflight.h). Decided by the stores, not by limit_eval(),
	 * which reads it as always allowing. */
	LIMIT_CONCURRENCY = 4,
	/* A penalty box: refuses while the client is banned (its state a:
	 * until when), else allows without counting; the ban is put by
	 * the stores when the rule's penalty counts enough events. quota is
	 * 1, period the ban's length. */
	LIMIT_BAN = 5,
};
#define LIMIT_CONCURRENCY_MAX 1000

/* A log holds every request it admitted in the last period, up to its
 * quota of them (each weighs at least 1): its quota is bounded so that a
 * client's log is too. limit_log_eval() clamps a log's quota to it, and
 * the rules refuse more at load. */
#define LIMIT_LOG_QUOTA_MAX 1000

struct limit_spec {
	uint64_t quota;      /* N: requests per period, >= 1 */
	int64_t period_us;   /* P, >= 1 ms */
	uint64_t burst;      /* capacity; 0 means quota */
	enum limit_algo algo;
};

/* Per key state. Token bucket: a = TAT in whole microseconds (floor) and
 * b = its fractional part in units of 1/quota microsecond (0 <= b < quota),
 * so the exact TAT is a + b/quota. A store should keep both; one that keeps
 * only `a` (b = 0) still works, but each request then rounds the TAT down
 * by under 1 us, in the client's favour. Windows: a = start of the
 * current window, b = count in it, c = count in the previous window.
 * All zero is a fresh key. */
struct limit_state {
	int64_t a;
	int64_t b;
	int64_t c;
};

struct limit_result {
	bool allowed;
	uint64_t limit;        /* the quota N */
	uint64_t remaining;    /* requests left after this one (0 if refused) */
	int64_t retry_after_us;/* > 0 when refused: when it would be allowed */
	int64_t reset_us;      /* time until the limit is full again */
	int64_t more_us;       /* time until more quota: see below */
	int64_t next_ttl_us;   /* limit_ttl_us() of the state that follows */
};

/* more_us, the RateLimit field's `t` (draft-ietf-httpapi-ratelimit-headers
 * -10: the seconds until the policy makes more quota available, no longer
 * until it resets): the time until the limit would take a request of cost
 * remaining + 1, where remaining is the result's (0 when refused). So:
 *   token bucket    until the next whole token (when the bucket is empty,
 *                   the token that lets a request of cost 1 pass)
 *   fixed window    until the window ends (more quota comes only then)
 *   sliding window  until the estimate has faded enough to let one more
 *                   request in
 *   log             until the oldest entry in the window leaves it
 * 0 when that never happens because the limit is full (remaining is its
 * capacity: nothing counted), and 0 when refused while a request of cost
 * 1 would pass now (a heavier request was refused). When the refused
 * request can pass at all, it is no later than retry_after_us, as the
 * draft asks of Retry-After next to the field. Rounded up like the other
 * times: waiting that long is enough. */

/* Parses "N/P" notation into *out: N a positive integer (at most
 * LIMIT_QUOTA_MAX), P a duration such as 500ms, 1s, 10s, 1m, 1h, 1d, or a
 * bare unit (s, m, h, d meaning 1 of it), between LIMIT_PERIOD_MIN_US and
 * LIMIT_PERIOD_MAX_US. No burst in the string: callers set out->burst.
 * Sets burst 0 and LIMIT_TOKEN_BUCKET. Returns 0, or -1 with a message in
 * err (and *out untouched). */
int limit_parse(const char *s, struct limit_spec *out, char *err, size_t errlen);

/* Parses a duration ("250ms", "10s", "1m", "2h", "1d", "m", also "us")
 * into microseconds. Returns 0 or -1 (no unit, bad unit, trailing bytes,
 * sign, or over INT64_MAX microseconds). */
int limit_parse_duration(const char *s, int64_t *out_us);

/* Formats a period compactly for policy names and logs: the largest unit
 * that divides it exactly ("1m", "10s", "90s", "500ms", "2d"). */
void limit_format_period(int64_t period_us, char *buf, size_t len);

/* An algorithm as the rules file and the admin's answers name it: token,
 * sliding, fixed, log, concurrency, ban. */
const char *limit_algo_name(enum limit_algo a);

/* Evaluates one request of weight `cost` (>= 1) against `spec` at `now_us`.
 * Reads *st and writes the state that would follow into *next (the same
 * as *st when refused, but for a token bucket that owed more than its
 * capacity, below) without touching *st, so several limits can be
 * checked and committed all or nothing. Fills *res. A log keeps entries,
 * not a limit_state (limit_log_eval()): here it is taken as an empty log,
 * a fresh client, and *next is *st. cost 0 is a peek: the
 * result describes the key as it stands (remaining, reset) and consumes
 * nothing. A cost over the capacity can never pass: it is refused with
 * retry_after_us = the period. Windows use the quota as capacity (burst
 * applies to the token bucket only). res->next_ttl_us is *next's TTL, so
 * that a store keeping *next need not work it out again. A token bucket
 * owes at most one capacity beyond empty (the debt a charge may leave,
 * limit_settle): a TAT more than 2 * capacity * P / quota ahead of now (a
 * clock that stepped back) reads as a bucket that much in debt, never as
 * a debt of the whole step; a refusal's *next is then that bucket. */
void limit_eval(const struct limit_spec *spec, const struct limit_state *st,
		int64_t now_us, uint32_t cost, struct limit_state *next,
		struct limit_result *res);

/* A token bucket's more_us from the figures of its result, for a store
 * that hands back remaining and reset_us but not more_us (the Redis
 * library): the bucket takes remaining + 1 once it has refilled for
 * reset_us - (capacity - remaining - 1) * P / quota. reset_us is rounded
 * up, so the value is limit_eval()'s or at most 1 us more: never short.
 * remaining is taken as 0 when refused. */
int64_t limit_bucket_more_us(const struct limit_spec *spec, bool allowed, uint64_t remaining,
			     int64_t reset_us);

/* The results of a request known to be refused by limit d of limits[0..n)
 * until now + retry_us (> 0), without asking the store: d refuses, with
 * reset_us and more_us as given (negative: 0); the others read as allowing
 * (only the refusing one is known). For the answers a store gives from
 * what it remembers of an earlier refusal. */
void limit_refused_by(struct limit_result *res, const struct limit_spec *limits, size_t n,
		      size_t d, int64_t retry_us, int64_t reset_us, int64_t more_us);

/* A charge's settlement: an admitted request took its estimate at
 * take_us (the store's clock), and its response says it cost delta more
 * (> 0) or -delta less (< 0). From the state *st at now_us, writes into
 * *next the state with delta taken or given back and returns 1, or
 * returns 0 when nothing changes. More is taken whatever the state, up to
 * a capacity in debt (a token bucket's tat at most now + 2 * cap * P, a
 * window's count at most twice its quota): later requests wait it out.
 * Less goes back only where it cannot lift the limit: a token bucket's by
 * -delta * P less the refill since take_us, never past full; a window's
 * in the window that counted the take while it still counts, never below
 * 0. Logs, places in flight and bans are not settled (0). */
int limit_settle(const struct limit_spec *spec, const struct limit_state *st, int64_t now_us,
		 int64_t take_us, int64_t delta, struct limit_state *next);

/* ---- sliding log ----------------------------------------------------------
 * The requests a log admitted, oldest first, each with its weight. An entry
 * counts while it is in the window, for P after its time; a request of
 * cost c at now passes when the entries of (now - P, now] weigh at most
 * quota - c. The times of a log never decrease: a request is recorded at
 * now, or at the newest entry's time when the clock went back (it then
 * counts a little longer than P, never less), so an entry still in the
 * future counts as in the window. What has left the window when a request
 * is admitted is dropped, and never counts again though the clock go
 * back. */
struct limit_log_entry {
	int64_t t;
	uint32_t cost;
};

/* What a store does with a request the log admitted: entries before `keep`
 * have left the window for good (drop them); the request is recorded at
 * `at` (an entry at that time already may take its weight). */
struct limit_log_step {
	size_t keep;
	int64_t at;
};

/* Evaluates one request of weight `cost` against the log e[0..n) (times in
 * order) at now_us; fills *res as limit_eval() does, and *step for a store
 * that commits the request. Reads e only. remaining: the quota less the
 * weight in the window, this request's included; retry_after_us: until
 * enough of the oldest entries have left for this request to pass (a cost
 * over the quota: the period); reset_us: until the newest entry leaves;
 * more_us: until the oldest leaves (limit.h's more_us); next_ttl_us: the
 * log's reset once committed, >= 1. cost 0 is a look, as for limit_eval().
 * The quota is clamped to LIMIT_LOG_QUOTA_MAX. Never more than n + log2(n)
 * steps. */
void limit_log_eval(const struct limit_spec *spec, const struct limit_log_entry *e, size_t n,
		    int64_t now_us, uint32_t cost, struct limit_log_step *step,
		    struct limit_result *res);

/* Time after which a key in state *st at now_us is indistinguishable from a
 * fresh one (its TTL), in microseconds, >= 1: token bucket TAT - now; fixed
 * window the end of the state's window; sliding window the end of the
 * window after it; a log, which has no limit_state, 1. */
int64_t limit_ttl_us(const struct limit_spec *spec, const struct limit_state *st,
		     int64_t now_us);

/* The limit that decides a request checked against res[0..n): the
 * refusing one with the longest retry-after, else the allowing one with
 * the fewest remaining; ties go to the lowest index. (The Redis library
 * picks the same.) */
static inline int limit_decider(const struct limit_result *res, size_t n)
{
	int best = -1;

	if (n == 1)
		return 0; /* one limit decides alone (most rules have one) */
	for (size_t i = 0; i < n; i++)
		if (!res[i].allowed &&
		    (best < 0 || res[i].retry_after_us > res[best].retry_after_us))
			best = (int)i;
	if (best >= 0)
		return best;
	best = 0;
	for (size_t i = 1; i < n; i++)
		if (res[i].remaining < res[best].remaining)
			best = (int)i;
	return best;
}

/* Microseconds rounded up to whole seconds, at least 1 when us > 0, 0 when
 * us <= 0. Inline: every decision rounds its reset time and the RateLimit
 * field's t. Unsigned, us + 999999 cannot overflow and the division by a
 * constant is a multiplication without sign fix-ups. */
static inline int64_t limit_ceil_s(int64_t us)
{
	if (us <= 0)
		return 0;
	return (int64_t)(((uint64_t)us + (LIMIT_US_PER_S - 1)) / (uint64_t)LIMIT_US_PER_S);
}

#endif
