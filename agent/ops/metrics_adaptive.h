/* SPDX-License-Identifier: Apache-2.0 */
/* metrics_adaptive.h: the series of adaptive shedding (shedding.adaptive),
 * part of the exposition text metrics.c renders. */
#ifndef RL_METRICS_ADAPTIVE_H
#define RL_METRICS_ADAPTIVE_H

#include "out.h"

struct server;
struct rules;

/* Drops the requests whose release is overdue (so that the in-flight
 * gauge is right without traffic), then renders, by backend, the limit,
 * the requests in flight, the samples, the drops and the requests shed
 * (no sample before a backend is seen); and the requests not tracked. */
void metrics_adaptive(struct out *o, struct server *srv, const struct rules *rules);

#endif
