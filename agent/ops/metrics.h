/* SPDX-License-Identifier: Apache-2.0 */
/* metrics.h: the Prometheus exposition text of the agent's counters.
 * Each module's are read through the function it exports for them
 * (server_get_stats, store_get_stats, store_mem_stats, rulestats_get),
 * with relaxed atomics (stats.h), so rendering never stops a worker;
 * main.c serves the text at GET /metrics. */
#ifndef RL_METRICS_H
#define RL_METRICS_H

#include <stddef.h>

struct server;

/* Renders the exposition text into a new buffer (*out, xfree it); returns
 * its length, 0 on allocation failure (*out untouched). */
size_t metrics_render(struct server *srv, char **out);

/* The version spoa_rl_build_info shows (main.c's), before any render. */
void metrics_set_version(const char *version);

#endif
