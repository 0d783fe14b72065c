/* SPDX-License-Identifier: Apache-2.0 */
/* clock.h: the agent's clock for its own deadlines and in-memory buckets.
 * Monotonic, so a wall-clock step neither refills nor drains a bucket.
 * (Redis buckets use Redis's clock, read inside the script.) */
#ifndef RL_CLOCK_H
#define RL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t clock_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Wall-clock milliseconds since 1970, for what a fleet shares with a date
 * (an override's expiry), never for a bucket. */
static inline int64_t clock_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
