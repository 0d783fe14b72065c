/* SPDX-License-Identifier: Apache-2.0 */
/* shed.h: priority load shedding. Pure: no I/O, no clock, no randomness of
 * its own; the caller passes the load figures and a random number.
 *
 * The load is in_use / (in_use + free), the share of the backend's
 * connections that are busy (HAProxy's be_conn and be_conn_free). Each
 * priority P1..P3 has a threshold; P0 is never shed. With a ramp r, a
 * request of threshold t is shed with a probability that grows linearly
 * from 0 at load max(0, t - r) to 1 at load t, and is always shed at or
 * above t. With r = 0 the cut is hard: shed exactly when load >= t.
 *
 * All comparisons are exact integer arithmetic (no floating point), so the
 * outcome at a given load and random number is the same on every agent.
 */
#ifndef RL_SHED_H
#define RL_SHED_H

#include <stdbool.h>
#include <stdint.h>

#define SHED_PRIORITIES 4        /* P0 .. P3 */
#define SHED_FULL 10000          /* 100% in basis points (1 bp = 0.01%) */
#define SHED_NEVER 0             /* threshold value: this priority is never shed */
#define SHED_ARG_MAX 32          /* argument names, NUL included */

struct shed_config {
	/* Basis points, 1..SHED_FULL, or SHED_NEVER. Index 0 (P0) is
	 * ignored: P0 is never shed whatever it holds. */
	int threshold_bp[SHED_PRIORITIES];
	int ramp_bp;                 /* 0..SHED_FULL */
	int64_t retry_after_us;      /* Retry-After of a shed request */
	char in_use_arg[SHED_ARG_MAX];  /* argument with busy connections */
	char free_arg[SHED_ARG_MAX];    /* argument with free connections */
	bool shadow;                 /* compute and export, never refuse */
};

/* Defaults: P1 90%, P2 80%, P3 70%, ramp 0, Retry-After 1 s, arguments
 * be_in_use and be_free, not in shadow mode. */
void shed_config_defaults(struct shed_config *c);

/* The load as a fraction in [0, 1], or -1.0 when the figures say nothing:
 * a negative figure (HAProxy's be_conn_free is -1 when a server has no
 * maxconn) or no connection at all. For logs and metrics; decisions do not
 * go through floating point. */
double shed_load(int64_t in_use, int64_t free_conns);

/* How many of the 2^32 values of a uniform random u32 shed a request of
 * this priority at this load: 0 (never) to 2^32 (always). Floor of
 * probability * 2^32. 0 for P0, for a priority out of 0..3, for a
 * SHED_NEVER threshold and for unknown load figures (see shed_load). */
uint64_t shed_chance(const struct shed_config *c, int priority, int64_t in_use,
		     int64_t free_conns);

/* True when the request is shed: random_u32 < shed_chance(...). The caller
 * draws random_u32 uniformly (any fast generator will do). */
bool shed_decide(const struct shed_config *c, int priority, int64_t in_use,
		 int64_t free_conns, uint32_t random_u32);

#endif
