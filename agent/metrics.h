/* metrics.h: Prometheus metrics over HTTP (GET /metrics, GET /healthz),
 * served by the main thread's loop. Worker counters are read with relaxed
 * atomics (stats.h), so serving never stops a worker. */
#ifndef RL_METRICS_H
#define RL_METRICS_H

#include <ev.h>
#include <stddef.h>

struct server;
struct metrics;

/* Listens on host:port. NULL after logging why. */
struct metrics *metrics_start(struct ev_loop *loop, struct server *srv, const char *host,
			      const char *port);
void metrics_stop(struct metrics *m);

/* Renders the exposition text into a new buffer (*out, xfree it); returns
 * its length, 0 on allocation failure. */
size_t metrics_render(struct server *srv, char **out);

#endif
