/* SPDX-License-Identifier: Apache-2.0 */
/* redis_deadline.c: a node's deadlines (see redis_node.h), and the
 * breaker's judgement whether the server is busy or silent when one
 * passes (redis_breaker.h). */
#include "redis_node_int.h"

#include "clock.h"
#include "redis_health.h"
#include "store_redis.h"

/* r's deadline passed while Redis kept answering (redis_breaker.h). */
static void answer_saturated(struct redis_node *rn, const struct redis_query *r, bool sent)
{
	STAT_INC(rn->stats->saturated);
	rn->answers++;
	rn->cb->failed(rn->owner, r, sent, true);
}

void redis_node_arm_deadline(struct redis_node *rn)
{
	int64_t next = INT64_MAX, now;
	struct rbatch *b;

	for (b = rn->oldest; b && b->answered; b = b->next)
		;
	if (b)
		next = b->rq[0].deadline;
	if (rn->qlen && rn->queue[rn->qhead].deadline < next)
		next = rn->queue[rn->qhead].deadline;
	now = clock_now_us();
	/* a suspicion of silence is confirmed (or not) by a look on time */
	if (rn->oldest) {
		int64_t at = redis_breaker_recheck(&rn->breaker, now);

		if (at && at < next)
			next = at;
	}
	ev_timer_stop(rn->loop, &rn->deadline_w);
	rn->due = next == INT64_MAX ? 0 : next;
	if (next == INT64_MAX)
		return;
	ev_timer_set(&rn->deadline_w, next > now ? (double)(next - now) / 1e6 : 0., 0.);
	ev_timer_start(rn->loop, &rn->deadline_w);
}

/* Whether Redis, with calls out, has answered recently enough to be busy
 * rather than silent (redis_breaker.h), looked at now by a loop turn that
 * came late: the connection is read first, so that replies waiting unread
 * (an agent busy for long, its CPU taken, has not polled them) count. */
static bool judge_busy(struct redis_node *rn, int64_t *now, int64_t late)
{
	int64_t sent = rn->oldest ? rn->oldest->sent : 0;

	if (rn->state != NODE_READY)
		return false;
	if (rn->conn && redis_breaker_quiet(&rn->breaker, rn->oldest != NULL, sent, *now)) {
		redis_conn_read_now(rn->conn);
		*now = clock_now_us();
		sent = rn->oldest ? rn->oldest->sent : 0;
	}
	return redis_breaker_judge(&rn->breaker, rn->oldest != NULL, sent, *now, late) !=
	       REDIS_SILENT;
}

/* Answers every query whose deadline has passed, queued ones and sent
 * ones: saturated while Redis keeps answering (or is only suspected of
 * silence), else degraded (the failure policy), and then Redis has
 * failed. A late reply for a sent one is then ignored. */
void redis_node_on_deadline(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_node *rn = t->data;
	int64_t now = clock_now_us();
	int64_t late = rn->due && now > rn->due ? now - rn->due : 0;
	bool busy = judge_busy(rn, &now, late);
	int64_t sent = rn->oldest ? rn->oldest->sent : 0;
	int expired = 0;

	while (rn->qlen && rn->queue[rn->qhead].deadline <= now) {
		struct redis_query *r = &rn->queue[rn->qhead];

		hist_observe(&rn->stats->queue_wait, now - r->queued);
		if (busy)
			answer_saturated(rn, r, false);
		else
			redis_node_answer_degraded(rn, r, false);
		rn->qhead = (rn->qhead + 1) % (size_t)rn->cfg->max_pending;
		rn->qlen--;
		STAT_INC(rn->stats->timeouts);
		expired = 1;
	}
	/* Queries still queued at their deadline waited behind a call that
	 * has not come back: with Redis silent, that counts against it. */
	if (expired && rn->state == NODE_READY && !busy)
		redis_breaker_went_silent(&rn->breaker, sent, now);
	for (struct rbatch *b = rn->oldest; b; b = b->next) {
		if (b->answered)
			continue;
		if (b->rq[0].deadline > now)
			break;
		STAT_ADD(rn->stats->timeouts, b->n);
		if (busy) {
			b->answered = 1;
			rn->inflight -= b->n;
			for (size_t i = 0; i < b->n; i++)
				answer_saturated(rn, &b->rq[i], true);
			continue;
		}
		redis_health_count(rn->stats, REDIS_ERROR_TIMEOUT);
		redis_node_fail_batch(rn, b);
		redis_breaker_went_silent(&rn->breaker, sent, now);
	}
	redis_node_arm_deadline(rn);
}

