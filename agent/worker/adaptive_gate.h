/* SPDX-License-Identifier: Apache-2.0 */
/* adaptive_gate.h: what a worker does for adaptive shedding
 * (shedding.adaptive): sheds a check-rate by its backend's requests in
 * flight, makes sure an admitted request's answer carries a place (so
 * that HAProxy's release message comes back), gives back a refused one,
 * and ends a request's flight at its release. Apart from worker.c: a
 * rule set without adaptive shedding takes one test on each path. */
#ifndef RL_ADAPTIVE_GATE_H
#define RL_ADAPTIVE_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decide.h"
#include "rules.h"

struct worker;

/* The place of an admitted request that holds no other (its rule has no
 * concurrency limit): no '/', so no rule's place is ever this. */
#define GATE_PLACE "adaptive"

/* Under shedding.adaptive (ac, the rules' own), for query q of request
 * req: sheds it (returns 1 with the 503 in *d) when its backend's
 * requests in flight reach its priority's threshold, else takes it in
 * flight (q->flight) or, in shadow mode, marks it shed in shadow
 * (q->shed) and takes it in flight; returns 0. */
int gate_check(struct worker *w, const struct adaptive_config *ac, struct decide_query *q,
	       const struct rules_request *req, struct decide_decision *d);

/* The answer d to a request in flight (d->flight), to send (sent is d)
 * or not (sent is NULL: its connection is gone): refused or not sent, it
 * leaves the flight (no sample); admitted without a place, it is given
 * GATE_PLACE. Returns the answer to send: d, or *copy made from it. */
const struct decide_decision *gate_answered(struct worker *w, const struct decide_decision *sent,
					    const struct decide_decision *d,
					    struct decide_decision *copy);

/* A release (or response) of request id (its request_id argument) came
 * with place (place_len bytes). Ends the request's flight, if it is in
 * one: a sample of its backend's latency. Returns true when the place is
 * GATE_PLACE (no other place to give back). */
bool gate_release(struct worker *w, const struct spop_data *id, const char *place,
		  size_t place_len);

#endif
