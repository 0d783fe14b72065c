/* SPDX-License-Identifier: Apache-2.0 */
/* adaptive_gate.c: a worker's part in adaptive shedding (adaptive_gate.h). */
#include "adaptive_gate.h"

#include <string.h>

#include "clock.h"
#include "flights.h"
#include "server.h"
#include "worker.h"

int gate_check(struct worker *w, const struct adaptive_config *ac, struct decide_query *q,
	       const struct rules_request *req, struct decide_decision *d)
{
	const struct spop_data *backend, *rid;
	uint64_t id;

	if (!rules_adaptive_args(w->rules, req, &backend, &rid))
		return 0;
	id = rid ? decide_request_id(rid) : 0;
	switch (flights_enter(w->srv->flights, backend->u.str.ptr, backend->u.str.len, id,
			      q->priority, q->shed_shadow, ac, clock_now_us())) {
	case FLIGHTS_SHED:
		q->shed = true;
		decide_shed(q, d);
		return 1;
	case FLIGHTS_SHADOW_SHED:
		q->shed = true;
		q->flight = id;
		return 0;
	case FLIGHTS_ADMITTED:
		q->flight = id;
		return 0;
	case FLIGHTS_UNTRACKED:
		return 0;
	}
	return 0;
}

const struct decide_decision *gate_answered(struct worker *w, const struct decide_decision *sent,
					    const struct decide_decision *d,
					    struct decide_decision *copy)
{
	if (!sent || d->status != 0) {
		flights_cancel(w->srv->flights, d->flight);
		return d;
	}
	if (d->place_len)
		return d;
	if (copy != d)
		*copy = *d;
	memcpy(copy->place, GATE_PLACE, sizeof(GATE_PLACE) - 1);
	copy->place_len = sizeof(GATE_PLACE) - 1;
	return copy;
}

bool gate_release(struct worker *w, const struct spop_data *id, const char *place,
		  size_t place_len)
{
	const struct adaptive_config *ac;
	struct adaptive_config none;

	if (flights_active(w->srv->flights)) {
		ac = rules_adaptive(w->rules);
		if (!ac) {
			/* rules reloaded without it: the flight still ends */
			adaptive_config_defaults(&none);
			ac = &none;
		}
		flights_leave(w->srv->flights, decide_request_id(id), ac, clock_now_us());
	}
	/* (after a restart too: nothing else to give back) */
	return place_len == sizeof(GATE_PLACE) - 1 && memcmp(place, GATE_PLACE, place_len) == 0;
}
