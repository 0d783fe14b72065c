/* metrics.h: the Prometheus exposition text of the agent's counters.
 * Worker counters are read with relaxed atomics (stats.h), so rendering
 * never stops a worker; main.c serves the text at GET /metrics. */
#ifndef RL_METRICS_H
#define RL_METRICS_H

#include <stddef.h>

struct server;

/* Renders the exposition text into a new buffer (*out, xfree it); returns
 * its length, 0 on allocation failure (*out untouched). */
size_t metrics_render(struct server *srv, char **out);

#endif
