/* SPDX-License-Identifier: Apache-2.0 */
/* redis_breaker.c: a Redis server's circuit breaker (see redis_breaker.h). */
#include "redis_breaker.h"

#include "log.h"
#include "store_redis.h"

void redis_breaker_failed(struct redis_breaker *b, int64_t now)
{
	if (b->open_until) {
		/* a probe (or a call from before) failed: probe again later */
		b->probing = false;
		b->open_until = now + REDIS_BREAKER_PROBE_US;
		return;
	}
	if (++b->fails < REDIS_BREAKER_FAILS)
		return;
	b->open_until = now + REDIS_BREAKER_PROBE_US;
	b->probing = false;
	STAT_INC(b->stats->breaker_trips);
	log_warn("redis: worker %d: %s: %d failed calls in a row, deciding without Redis and "
		 "probing every %d ms", b->worker, b->name, b->fails, REDIS_BREAKER_PROBE_US / 1000);
}

void redis_breaker_succeeded(struct redis_breaker *b)
{
	if (b->open_until)
		log_info("redis: worker %d: %s: Redis answers again", b->worker, b->name);
	b->fails = 0;
	b->open_until = 0;
	b->probing = false;
}

bool redis_breaker_quiet(const struct redis_breaker *b, bool out, int64_t oldest_sent,
			 int64_t now)
{
	int64_t since = oldest_sent > b->heard ? oldest_sent : b->heard;

	return out && now - since >= REDIS_BREAKER_SILENT_US;
}

enum redis_silence redis_breaker_judge(struct redis_breaker *b, bool out, int64_t oldest_sent,
				       int64_t now, int64_t late)
{
	if (!redis_breaker_quiet(b, out, oldest_sent, now)) {
		b->suspect = 0;
		return REDIS_ANSWERING;
	}
	if (!b->suspect || late >= REDIS_BREAKER_LATE_US) {
		/* the first look, or one that says more about the agent's
		 * loop than about the server: suspected from now */
		b->suspect = now;
		return REDIS_SUSPECT;
	}
	return now - b->suspect >= REDIS_BREAKER_CONFIRM_US ? REDIS_SILENT : REDIS_SUSPECT;
}

int64_t redis_breaker_recheck(const struct redis_breaker *b, int64_t now)
{
	int64_t at = b->suspect + REDIS_BREAKER_CONFIRM_US;

	return b->suspect && at > now ? at : 0;
}

void redis_breaker_went_silent(struct redis_breaker *b, int64_t oldest_sent, int64_t now)
{
	if (!b->open_until && b->fails < REDIS_BREAKER_FAILS - 1) {
		int64_t since = oldest_sent > b->heard ? oldest_sent : b->heard;

		log_warn("redis: worker %d: %s: no reply to anything for %lld ms", b->worker,
			 b->name, (long long)((now - since) / 1000));
		b->fails = REDIS_BREAKER_FAILS - 1;
	}
	redis_breaker_failed(b, now);
}

bool redis_breaker_admit(struct redis_breaker *b, int64_t now, bool ready)
{
	if (!b->open_until)
		return true;
	if (now < b->open_until || b->probing || !ready) {
		STAT_INC(b->stats->breaker_skips);
		return false;
	}
	b->probing = true; /* this one probes; the others wait for it */
	return true;
}
