/* SPDX-License-Identifier: Apache-2.0 */
/* redis_breaker.h: the circuit breaker of one Redis server as one worker
 * sees it (redis_node.c), and how it tells a failing server from a busy one.
 *
 * The breaker opens after REDIS_BREAKER_FAILS calls in a row that failed
 * (an error reply), or as soon as a deadline passes while the server has
 * sent no reply to anything for REDIS_BREAKER_SILENT_US. While it is open,
 * decisions skip the server (answered at once by the failure policy
 * instead of each waiting out the deadline); every REDIS_BREAKER_PROBE_US
 * one decision goes through as a probe, and the first that the server
 * answers closes the breaker: Redis decides again within that interval
 * (plus a call) of its recovery, however long it was away. A lost
 * connection is the node's to see (it answers by the failure policy until
 * it is connected again).
 *
 * A deadline that passes while replies keep coming is no failure: the
 * server is busy (or the agent's CPU is), not gone. Such decisions are
 * saturated (answered by the rule's local bucket) and the breaker stays
 * closed. REDIS_BREAKER_SILENT_US is above the pauses a busy server makes
 * (a slow command, a fork, a CLIENT PAUSE of tens of milliseconds) and
 * well below what an operator would call a stall.
 *
 * Silence is judged only on evidence about the server. The agent's clock
 * alone is none: on a loaded machine the agent's thread (often the
 * server's too, descheduled or throttled at the same moment) may not run
 * for longer than the window, and its first look after that finds the
 * window passed with replies that the server has not had the CPU to
 * write. So the first look that finds the window passed only suspects
 * the server (its decisions are saturated); the server is silent when a
 * second look, REDIS_BREAKER_CONFIRM_US or more later, still finds no
 * reply since, and that look came on time (its loop less than
 * REDIS_BREAKER_LATE_US late): between the two the agent ran, and the
 * server had the time to answer anything. A look that came late starts
 * the suspicion again. A stopped server opens the breaker
 * REDIS_BREAKER_CONFIRM_US (plus a deadline) later than the window.
 * REDIS_BREAKER_CONFIRM_US is as long as the window: an agent that wakes
 * with its server from a spell off the CPU works through the backlog of
 * its own requests at full CPU meanwhile, and its server's replies were
 * seen to come some 25 ms after a look 20 ms later. */
#ifndef RL_REDIS_BREAKER_H
#define RL_REDIS_BREAKER_H

#include <stdbool.h>
#include <stdint.h>

#define REDIS_BREAKER_FAILS 3
#define REDIS_BREAKER_PROBE_US 250000
#define REDIS_BREAKER_SILENT_US 100000
#define REDIS_BREAKER_CONFIRM_US 100000
#define REDIS_BREAKER_LATE_US 10000

struct redis_stats;

struct redis_breaker {
	int fails;          /* calls in a row that failed */
	int64_t open_until; /* open: the next probe then; 0 closed */
	int64_t heard;      /* when the last reply to a call came */
	int64_t suspect;    /* when a look first found the window passed; 0 none */
	bool probing;       /* a probe is in flight */
	/* for counts and logs */
	struct redis_stats *stats;
	int worker;
	const char *name;
};

/* A call failed (an error reply, a silent server). */
void redis_breaker_failed(struct redis_breaker *b, int64_t now);

/* A call was answered and decided. */
void redis_breaker_succeeded(struct redis_breaker *b);

/* A reply (any) came now. */
static inline void redis_breaker_heard(struct redis_breaker *b, int64_t now)
{
	b->heard = now;
	b->suspect = 0;
}

enum redis_silence {
	REDIS_ANSWERING, /* a reply came within the window, or no call is out */
	REDIS_SUSPECT,   /* the window passed, not yet confirmed: busy */
	REDIS_SILENT,    /* the window passed, confirmed by a look on time */
};

/* A look at the server at now, by a loop turn late by `late` (now minus
 * when the look was due): a call is out (out), the oldest of them left
 * at oldest_sent, and the window runs from then or from the last reply,
 * whichever is later (replies come in order). Records a suspicion. */
enum redis_silence redis_breaker_judge(struct redis_breaker *b, bool out, int64_t oldest_sent,
				       int64_t now, int64_t late);

/* When the suspicion can be confirmed (a look is due then), or 0. */
int64_t redis_breaker_recheck(const struct redis_breaker *b, int64_t now);

/* Whether the window has passed at now by the clock alone (then the
 * connection is read before judging). */
bool redis_breaker_quiet(const struct redis_breaker *b, bool out, int64_t oldest_sent,
			 int64_t now);

/* A deadline passed with the server silent (the oldest call out left at
 * oldest_sent, for the log): it failed, and the breaker opens at once
 * (or, open, probes again later). */
void redis_breaker_went_silent(struct redis_breaker *b, int64_t oldest_sent, int64_t now);

/* Whether a decision submitted now may go to the server (ready: it is
 * connected and its library loaded): always while closed; while open,
 * one probe at a time once the probe is due. A decision refused is
 * counted as a skip. */
bool redis_breaker_admit(struct redis_breaker *b, int64_t now, bool ready);

#endif
