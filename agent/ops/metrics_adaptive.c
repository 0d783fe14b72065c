/* SPDX-License-Identifier: Apache-2.0 */
/* metrics_adaptive.c: the series of adaptive shedding (metrics_adaptive.h). */
#include "metrics_adaptive.h"

#include "clock.h"
#include "flights.h"
#include "rules.h"
#include "server.h"

/* A label value: a backend's name is HAProxy's, sent as an argument, and
 * may hold any byte; \, " and newline are escaped, other control bytes
 * become '?'. */
static void label(struct out *o, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			outf(o, "\\%c", *s);
		else if (*s == '\n')
			outf(o, "\\n");
		else
			outf(o, "%c", (unsigned char)*s < 0x20 ? '?' : *s);
	}
}

static const struct {
	const char *name, *type, *help;
} series[] = {
	{ "spoa_rl_adaptive_limit", "gauge",
	  "Requests in flight a backend is allowed now (adaptive shedding: P3 is shed at it, P2 at 5/4, P1 at 3/2 of it)." },
	{ "spoa_rl_adaptive_inflight", "gauge",
	  "Requests admitted to a backend whose release has not come (adaptive shedding)." },
	{ "spoa_rl_adaptive_samples_total", "counter",
	  "Releases whose latency a backend's limit was computed from (adaptive shedding)." },
	{ "spoa_rl_adaptive_drops_total", "counter",
	  "Requests whose release did not come within shedding.adaptive.timeout, counted as that long." },
	{ "spoa_rl_adaptive_shed_total", "counter",
	  "Requests shed by a backend's adaptive limit (not in shadow mode)." },
};

void metrics_adaptive(struct out *o, struct server *srv, const struct rules *rules)
{
	struct flights_backend_stats be[FLIGHTS_BACKENDS_MAX];
	const struct adaptive_config *ac = rules ? rules_adaptive(rules) : NULL;
	struct adaptive_config none;
	size_t n;

	if (!srv->flights)
		return;
	if (!ac) {
		adaptive_config_defaults(&none);
		ac = &none;
	}
	flights_expire(srv->flights, ac, clock_now_us());
	n = flights_backends(srv->flights, be, FLIGHTS_BACKENDS_MAX);
	for (size_t s = 0; s < sizeof(series) / sizeof(series[0]); s++) {
		outf(o, "# HELP %s %s\n# TYPE %s %s\n", series[s].name, series[s].help,
		     series[s].name, series[s].type);
		for (size_t i = 0; i < n; i++) {
			uint64_t v = s == 0 ? be[i].limit : s == 1 ? be[i].inflight :
				     s == 2 ? be[i].samples : s == 3 ? be[i].drops : be[i].shed;

			outf(o, "%s{backend=\"", series[s].name);
			label(o, be[i].name);
			outf(o, "\"} %llu\n", (unsigned long long)v);
		}
	}
	outf(o, "# HELP spoa_rl_adaptive_untracked_total Requests adaptive shedding could not "
		"track (no request_id, the table of requests in flight full, or more than %d "
		"backends): admitted, never shed.\n# TYPE spoa_rl_adaptive_untracked_total counter\n"
		"spoa_rl_adaptive_untracked_total %llu\n", FLIGHTS_BACKENDS_MAX,
	     (unsigned long long)flights_untracked(srv->flights));
}
