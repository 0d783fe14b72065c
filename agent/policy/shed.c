/* SPDX-License-Identifier: Apache-2.0 */
/* shed.c: priority load shedding (see shed.h).
 *
 * Range. in_use and free are int64, so their sum fits in 65 bits; times
 * SHED_FULL (< 2^14) and 2^32 every intermediate stays under 2^111, well
 * inside a signed 128-bit integer. */
#include "shed.h"

#include <string.h>

__extension__ typedef __int128 i128;

#define CHANCE_ALL (UINT64_C(1) << 32)

void shed_config_defaults(struct shed_config *c)
{
	memset(c, 0, sizeof(*c));
	c->threshold_bp[0] = SHED_NEVER;
	c->threshold_bp[1] = 9000;
	c->threshold_bp[2] = 8000;
	c->threshold_bp[3] = 7000;
	c->ramp_bp = 0;
	c->retry_after_us = 1000000;
	memcpy(c->in_use_arg, "be_in_use", sizeof("be_in_use"));
	memcpy(c->free_arg, "be_free", sizeof("be_free"));
}

double shed_load(int64_t in_use, int64_t free_conns)
{
	double total;

	if (in_use < 0 || free_conns < 0 || (in_use == 0 && free_conns == 0))
		return -1.0;
	total = (double)in_use + (double)free_conns;
	return (double)in_use / total;
}

/* shed_chance() past its checks, in 128-bit arithmetic (any counts):
 * threshold t and ramp start lo in basis points. */
static __attribute__((noinline)) uint64_t chance_wide(int64_t in_use, int64_t free_conns, int t,
						       int lo)
{
	i128 total = (i128)in_use + free_conns, busy, width, num, den;

	if (total == 0)
		return 0;
	/* load >= t/FULL  <=>  in_use * FULL >= t * total */
	busy = (i128)in_use * SHED_FULL;
	if (busy >= (i128)t * total)
		return CHANCE_ALL;
	if (busy <= (i128)lo * total)
		return 0;
	/* Strictly inside the ramp: probability (load - lo) / (t - lo),
	 * which is in (0, 1), so the floor below is under 2^32. */
	width = (i128)t - lo;
	num = (busy - (i128)lo * total) * (i128)CHANCE_ALL;
	den = width * total;
	return (uint64_t)(num / den);
}

uint64_t shed_chance(const struct shed_config *c, int priority, int64_t in_use,
		     int64_t free_conns)
{
	int t, ramp, lo;

	if (priority < 1 || priority >= SHED_PRIORITIES)
		return 0;
	if (in_use < 0 || free_conns < 0)
		return 0;
	t = c->threshold_bp[priority];
	/* Out-of-range thresholds from a hand-built config mean "never":
	 * a load can never reach more than 100%. */
	if (t <= SHED_NEVER || t > SHED_FULL)
		return 0;
	ramp = c->ramp_bp;
	if (ramp < 0)
		ramp = 0;
	if (ramp > SHED_FULL)
		ramp = SHED_FULL;
	lo = t > ramp ? t - ramp : 0;
	/* Connection counts (under 2^31, as a rule) keep the products of
	 * the two certain cases within 64 bits; see chance_wide(). */
	if (in_use < INT32_MAX && free_conns < INT32_MAX) {
		int64_t total = in_use + free_conns, busy = in_use * SHED_FULL;

		if (total == 0)
			return 0;
		if (busy >= (int64_t)t * total)
			return CHANCE_ALL;
		if (busy <= (int64_t)lo * total)
			return 0;
	}
	return chance_wide(in_use, free_conns, t, lo);
}

bool shed_decide(const struct shed_config *c, int priority, int64_t in_use,
		 int64_t free_conns, uint32_t random_u32)
{
	return (uint64_t)random_u32 < shed_chance(c, priority, in_use, free_conns);
}
