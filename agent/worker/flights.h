/* SPDX-License-Identifier: Apache-2.0 */
/* flights.h: the requests in flight to each backend under adaptive
 * shedding (shedding.adaptive; the limit's math is policy/adaptive.h).
 *
 * Process-wide: a request admitted on one worker's connection may be
 * released on another's. Each backend (named by a message argument) has
 * its in-flight count and limit, read without a lock (atomics), and its
 * limit's state under its own lock, taken once per release. Each request
 * in flight is kept by its id in a preallocated table of FLIGHTS_CAPACITY
 * entries in FLIGHTS_SHARDS shards, each under its own lock, with the
 * time it began (the agent's monotonic clock) and the time by which it is
 * dropped when no release comes. A full table, or a backend past
 * FLIGHTS_BACKENDS_MAX, is not tracked: the request goes on unshed and is
 * counted. */
#ifndef RL_FLIGHTS_H
#define RL_FLIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptive.h"

#define FLIGHTS_BACKENDS_MAX 64
#define FLIGHTS_NAME_MAX 128      /* a backend's name, NUL included */
#define FLIGHTS_SHARDS 16
#define FLIGHTS_CAPACITY 65536    /* requests in flight, all backends */
#define FLIGHTS_PROBE 16          /* slots an id may sit in */
#define FLIGHTS_SWEEP_US 100000   /* how often expired requests are dropped */

struct flights;

enum flights_verdict {
	FLIGHTS_ADMITTED,         /* in flight until released or dropped */
	FLIGHTS_SHED,             /* over its priority's threshold */
	FLIGHTS_SHADOW_SHED,      /* would be shed, admitted (shadow mode) */
	FLIGHTS_UNTRACKED,        /* no room to track it: admitted, counted */
};

/* The table, its entries allocated with the first backend. NULL when out
 * of memory. */
struct flights *flights_new(void);
void flights_free(struct flights *f);

/* Decides request `id` (not 0) of priority 0..3 to the backend named
 * (name, len) at now_us under c: shed when the backend's requests in
 * flight reach its priority's threshold (adaptive_threshold), unless
 * shadow; else taken in flight. Also drops the requests whose release is
 * overdue, every FLIGHTS_SWEEP_US. */
enum flights_verdict flights_enter(struct flights *f, const char *name, size_t len, uint64_t id,
				   int priority, bool shadow, const struct adaptive_config *c,
				   int64_t now_us);

/* Request id was refused after all (by a rate limit): forgotten, no
 * sample. */
void flights_cancel(struct flights *f, uint64_t id);

/* Request id's release came at now_us: forgotten, and its time from
 * flights_enter() is a sample of its backend's latency under c. Returns
 * 1 when it was in flight, else 0. */
int flights_leave(struct flights *f, uint64_t id, const struct adaptive_config *c,
		  int64_t now_us);

/* Drops every request whose release is overdue at now_us (each a sample
 * as long as it waited, counted as a drop). Returns how many. */
size_t flights_expire(struct flights *f, const struct adaptive_config *c, int64_t now_us);

/* True once a backend was seen: releases look for their request. */
bool flights_active(const struct flights *f);

struct flights_backend_stats {
	char name[FLIGHTS_NAME_MAX];
	uint32_t limit;
	uint32_t inflight;
	uint64_t samples;         /* releases measured */
	uint64_t drops;           /* dropped for a release overdue */
	uint64_t shed;            /* shed by the limit (not in shadow mode) */
};

/* The backends seen (at most FLIGHTS_BACKENDS_MAX), in the order first
 * seen. Any thread. */
size_t flights_backends(const struct flights *f, struct flights_backend_stats *out, size_t max);

/* Requests not tracked: the table was full, or too many backends. */
uint64_t flights_untracked(const struct flights *f);

#endif
