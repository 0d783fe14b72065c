/* SPDX-License-Identifier: Apache-2.0 */
/* delay.c: the held requests of one worker, in the order they are due,
 * on one timer (delay.h). */
#include "delay.h"

#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "store.h"

struct delay_hold {
	struct delay_hold *prev, *next; /* in due order; next alone when free */
	int64_t due_us;
	struct decide_query q;
	struct store_ref ref;
};

struct delay_queue {
	struct ev_loop *loop;
	ev_timer timer;
	delay_due_fn *due;
	void *priv;
	struct delay_hold *head, *tail; /* held, the first due first */
	struct delay_hold *spare;       /* left, kept for the next */
	uint32_t count;
};

static bool same_client(const struct decide_query *a, const struct decide_query *b)
{
	return a->rule == b->rule && memcmp(a->key, b->key, IDENTITY_KEY_LEN) == 0;
}

/* Sets the timer for the first one due, or stops it when none is held.
 * The loop's time is brought up to date first: libev counts from it, and
 * it may lag the clock the due times are on. */
static void arm(struct delay_queue *dq)
{
	double after;

	ev_timer_stop(dq->loop, &dq->timer);
	if (!dq->head)
		return;
	ev_now_update(dq->loop);
	after = (double)(dq->head->due_us - clock_now_us()) / 1e6;
	ev_timer_set(&dq->timer, after > 0 ? after : 0., 0.);
	ev_timer_start(dq->loop, &dq->timer);
}

static void unlink_hold(struct delay_queue *dq, struct delay_hold *h)
{
	if (h->prev)
		h->prev->next = h->next;
	else
		dq->head = h->next;
	if (h->next)
		h->next->prev = h->prev;
	else
		dq->tail = h->prev;
	dq->count--;
}

/* Every hold due by now, first due first; each is unlinked and its
 * memory kept before the call, so that the callback may hold its query
 * again (delay_add). A timer that fires early (libev's time against the
 * monotonic clock) finds none due and is set again. */
static void on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct delay_queue *dq = (struct delay_queue *)((char *)t - offsetof(struct delay_queue, timer));
	int64_t now = clock_now_us();

	(void)loop;
	(void)revents;
	while (dq->head && dq->head->due_us <= now) {
		struct delay_hold *h = dq->head;
		struct decide_query q = h->q;
		struct store_ref ref = h->ref;

		unlink_hold(dq, h);
		h->next = dq->spare;
		dq->spare = h;
		dq->due(dq->priv, &q, &ref, false, 0);
	}
	arm(dq);
}

struct delay_queue *delay_new(struct ev_loop *loop, delay_due_fn *due, void *priv)
{
	struct delay_queue *dq = xcalloc(1, sizeof(*dq));

	if (!dq)
		return NULL;
	dq->loop = loop;
	dq->due = due;
	dq->priv = priv;
	ev_timer_init(&dq->timer, on_timer, 0., 0.);
	return dq;
}

void delay_free(struct delay_queue *dq)
{
	int64_t now;

	if (!dq)
		return;
	ev_timer_stop(dq->loop, &dq->timer);
	now = clock_now_us();
	while (dq->head) {
		struct delay_hold *h = dq->head;
		int64_t left = h->due_us - now;

		unlink_hold(dq, h);
		dq->due(dq->priv, &h->q, &h->ref, true, left > 0 ? left : 1);
		xfree(h);
	}
	while (dq->spare) {
		struct delay_hold *h = dq->spare;

		dq->spare = h->next;
		xfree(h);
	}
	xfree(dq);
}

int delay_add(struct delay_queue *dq, const struct decide_query *q, const struct store_ref *ref,
	      int64_t now_us, int64_t wait_us, uint32_t max)
{
	struct delay_hold *h, *at;
	int64_t due = now_us + (wait_us > 0 ? wait_us : 0);

	if (dq->count >= max)
		return -1;
	/* never before the one of the same client held last (the latest
	 * due of its holds: the list is in due order) */
	for (at = dq->tail; at; at = at->prev)
		if (same_client(&at->q, q)) {
			if (at->due_us > due)
				due = at->due_us;
			break;
		}
	if (dq->spare) {
		h = dq->spare;
		dq->spare = h->next;
	} else if (!(h = xmalloc(sizeof(*h)))) {
		return -1;
	}
	h->due_us = due;
	h->q = *q;
	h->ref = *ref;
	/* after every one due at the same time or before: most come last */
	for (at = dq->tail; at && at->due_us > due; at = at->prev)
		;
	h->prev = at;
	h->next = at ? at->next : dq->head;
	if (h->next)
		h->next->prev = h;
	else
		dq->tail = h;
	if (at)
		at->next = h;
	else
		dq->head = h;
	dq->count++;
	if (dq->head == h)
		arm(dq);
	return 0;
}

uint32_t delay_count(const struct delay_queue *dq)
{
	return dq ? dq->count : 0;
}
