/* SPDX-License-Identifier: Apache-2.0 */
/* redis_split.c: a decision made in parts on several servers (see
 * redis_split.h). */
#include "redis_split.h"

#include <string.h>

#include "alloc.h"

enum { PART_WAIT, PART_TAKEN, PART_REFUSED, PART_FAILED, PART_SATURATED };

struct split {
	const struct redis_split_cb *cb;
	void *owner;
	struct decide_query q;
	struct store_ref ref;
	struct limit_result res[LIMIT_SET_MAX];
	struct redis_query sub[RULES_PARTS_MAX]; /* each part as sent */
	int64_t take[RULES_PARTS_MAX];           /* Redis's clock of each take */
	uint8_t first[RULES_PARTS_MAX];          /* the part's first limit in q */
	uint8_t state[RULES_PARTS_MAX];
	unsigned pending;
};

/* Part p of q as a query of its own: the rule's own limits (p = 0) or a
 * layer's, under that part's key. */
static void part_query(const struct decide_query *q, unsigned p, struct decide_query *out)
{
	*out = *q;
	if (p == 0) {
		out->nlimits = q->rule->nown;
		return;
	}
	out->rule = q->rule->stack[p - 1];
	out->limits = out->rule->limits;
	out->nlimits = out->rule->nlimits;
	memcpy(out->key, q->lkey[p - 1], IDENTITY_KEY_LEN);
}


static void split_finish(struct split *s)
{
	bool failed = false, refused = false, saturated = false;
	unsigned nparts = 1u + s->q.rule->nstack;

	for (unsigned p = 0; p < nparts; p++) {
		failed |= s->state[p] == PART_FAILED;
		refused |= s->state[p] == PART_REFUSED;
		saturated |= s->state[p] == PART_SATURATED;
	}
	if (failed || refused || saturated)
		for (unsigned p = 0; p < nparts; p++)
			if (s->state[p] == PART_TAKEN)
				s->cb->refund(s->owner, &s->sub[p], s->take[p]);
	/* a part failed: the failure policy; else a part too late while its
	 * server kept answering: the local bucket decides it all */
	if (failed)
		s->cb->done(s->owner, &s->q, &s->ref, NULL, -1);
	else if (saturated)
		s->cb->done(s->owner, &s->q, &s->ref, NULL, STORE_SATURATED);
	else
		s->cb->done(s->owner, &s->q, &s->ref, s->res, limit_decider(s->res, s->q.nlimits));
	xfree(s);
}

void redis_split_part(const struct redis_query *r, const struct limit_result *res, int decider,
		      int64_t redis_now)
{
	struct split *s = r->split;
	unsigned p = r->part;

	if (res) {
		memcpy(&s->res[s->first[p]], res, r->q.nlimits * sizeof(*res));
		s->state[p] = res[decider].allowed ? PART_TAKEN : PART_REFUSED;
		s->take[p] = redis_now;
		s->sub[p] = *r;
	} else {
		s->state[p] = decider == STORE_SATURATED ? PART_SATURATED : PART_FAILED;
	}
	if (--s->pending == 0)
		split_finish(s);
}

int redis_split_start(const struct redis_query *r, const struct redis_split_cb *cb,
		      void *owner)
{
	struct split *s = xcalloc(1, sizeof(*s));
	unsigned nparts = 1u + r->q.rule->nstack, sent = 0;

	if (!s)
		return -1;
	s->cb = cb;
	s->owner = owner;
	s->q = r->q;
	s->ref = r->ref;
	for (size_t j = 0; j < r->q.nlimits; j++) {
		unsigned p = r->q.rule->part_of[j];

		if (j == 0 || p != r->q.rule->part_of[j - 1])
			s->first[p] = (uint8_t)j;
	}
	/* every part is counted before any is sent: none can finish early */
	for (unsigned p = 0; p < nparts; p++) {
		s->state[p] = PART_WAIT;
		s->sub[p] = *r;
		part_query(&r->q, p, &s->sub[p].q);
		s->sub[p].split = s;
		s->sub[p].part = p;
		if (s->sub[p].q.nlimits)
			s->pending++;
		else
			s->state[p] = PART_TAKEN; /* no limit of its own: nothing to give back */
	}
	for (unsigned p = 0; p < nparts; p++) {
		if (s->state[p] != PART_WAIT)
			continue;
		if (cb->send(owner, &s->sub[p]) == 0) {
			sent++;
			continue;
		}
		s->state[p] = PART_FAILED;
		s->pending--;
	}
	if (!sent) {
		xfree(s);
		return -1;
	}
	if (s->pending == 0)
		split_finish(s); /* cannot happen: a sent part is pending */
	return 0;
}

