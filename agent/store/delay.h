/* SPDX-License-Identifier: Apache-2.0 */
/* delay.h: requests held instead of refused (a rule's `delay`).
 *
 * A request that its rule's rates refuse, but that would pass within the
 * rule's delay, is held by its worker and decided again when it would
 * pass: taken then, exactly as a request arriving then would be, by
 * whichever store decides (store.c). This module is the waiting room:
 * a queue per worker, in the order the requests are due, on one timer of
 * the worker's loop. It knows nothing of stores or connections: it hands
 * each query back, with the caller's store_ref, to the function it was
 * given.
 *
 * Order: a request is never due before one held earlier for the same
 * client under the same rule, so that held requests of a client are
 * decided again in the order they came (among requests due at the same
 * time, the first held goes first).
 *
 * Bounds: at most `max` held at once per worker (the rules' max_delayed,
 * passed at each add); every held request costs one allocation, kept for
 * the next one when it leaves.
 */
#ifndef RL_DELAY_H
#define RL_DELAY_H

#include <ev.h>
#include <stdint.h>

#include "decide.h"

struct store_ref;
struct delay_queue;

/* Receives a held query: when it is due (late false), or when the queue
 * is freed before (late true, retry_us the time it still had to wait,
 * >= 1). q and ref are valid during the call only. */
typedef void delay_due_fn(void *priv, const struct decide_query *q, const struct store_ref *ref,
			  bool late, int64_t retry_us);

/* A queue on `loop` (the worker's thread only) handing queries to
 * due(priv, ...). NULL when out of memory. */
struct delay_queue *delay_new(struct ev_loop *loop, delay_due_fn *due, void *priv);

/* Hands every query still held to due(..., late true), then frees dq.
 * NULL does nothing. */
void delay_free(struct delay_queue *dq);

/* Holds a copy of q (its delayed_since_us set already) and ref until
 * now_us + wait_us on the monotonic clock (clock.h), or until the one
 * held last for its client and rule is due if that is later. Returns 0,
 * or -1 when `max` are held already or out of memory (nothing held). */
int delay_add(struct delay_queue *dq, const struct decide_query *q, const struct store_ref *ref,
	      int64_t now_us, int64_t wait_us, uint32_t max);

/* Requests held now. */
uint32_t delay_count(const struct delay_queue *dq);

#endif
