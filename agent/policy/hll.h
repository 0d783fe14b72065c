/* SPDX-License-Identifier: Apache-2.0 */
/* hll.h: how many distinct clients, over the last minutes: HyperLogLog.
 *
 * A window is HLL_SLOTS sketches of HLL_REGISTERS one-byte registers,
 * each sketch filled during one period of HLL_SLOT_US and cleared when
 * the window comes round to it again: the sketches of the current period
 * and the HLL_SLOTS - 1 before it, merged (a register's maximum), count
 * the clients seen in the last 10 to 15 minutes, with a standard error of
 * 1.04 / sqrt(4096), about 1.6%, in a fixed 12 KiB whatever the traffic.
 *
 * The hash of a client is its identity key (identity.h), keyed SipHash:
 * uniform already, so its bits are used as they are.
 *
 * One thread adds to a window (a worker's); another may merge it at the
 * same time (the metrics): the registers and periods are relaxed atomics,
 * and a merge that meets a sketch being cleared counts a little less for
 * that instant. Pure: the time is the caller's. */
#ifndef RL_HLL_H
#define RL_HLL_H

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define HLL_BITS 12                         /* registers: 2^12 */
#define HLL_REGISTERS (1u << HLL_BITS)
#define HLL_SLOTS 3
#define HLL_SLOT_US (300LL * 1000000)       /* a sketch's period: 5 minutes */

struct hll_window {
	/* the writer's own: the period it adds to, and that sketch */
	int64_t now_period;
	unsigned now_slot;
	_Atomic int64_t period[HLL_SLOTS];  /* of each sketch's registers; -1 none */
	_Atomic uint8_t reg[HLL_SLOTS][HLL_REGISTERS];
};

/* An empty window. */
void hll_window_init(struct hll_window *w);

/* The period of now_us (>= 0), for hll_add: one division per request,
 * whatever the windows it counts in. */
static inline int64_t hll_period(int64_t now_us)
{
	return now_us / HLL_SLOT_US;
}

/* Makes `period`'s sketch the one added to, cleared first if it held an
 * older period's clients. */
void hll_turn(struct hll_window *w, int64_t period);

/* Counts the client whose 64-bit hash is h, seen in `period`
 * (hll_period). Inline: every decision counts its client. */
static inline void hll_add(struct hll_window *w, uint64_t h, int64_t period)
{
	unsigned i = (unsigned)(h >> (64 - HLL_BITS));
	/* the rank of the rest's first 1 bit; a guard bit bounds it */
	uint8_t rank = (uint8_t)(__builtin_clzll((h << HLL_BITS) | (1ull << (HLL_BITS - 1))) + 1);
	_Atomic uint8_t *r;

	if (period != w->now_period)
		hll_turn(w, period);
	r = &w->reg[w->now_slot][i];
	if (atomic_load_explicit(r, memory_order_relaxed) < rank)
		atomic_store_explicit(r, rank, memory_order_relaxed);
}

/* The 64-bit hash of an identity key's first 8 bytes. */
static inline uint64_t hll_hash(const uint8_t *key)
{
	uint64_t h;

	memcpy(&h, key, sizeof(h));
	return h;
}

/* Merges into out[] (each register the maximum) the sketches of w that
 * count for now_us: the current period's and the HLL_SLOTS - 1 before. */
void hll_merge(const struct hll_window *w, int64_t now_us, uint8_t out[HLL_REGISTERS]);

/* The distinct clients that registers reg[] counted: HyperLogLog's
 * estimate with Ertl's corrections (no bias from 0 clients up). */
double hll_estimate(const uint8_t reg[HLL_REGISTERS]);

#endif
