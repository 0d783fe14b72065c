/* SPDX-License-Identifier: Apache-2.0 */
#include "metrics.h"

#include <stddef.h>
#include <stdio.h>

#include "alloc.h"
#include "clock.h"
#include "out.h"
#include "procstat.h"
#include "rules.h"
#include "rulestats.h"
#include "server.h"
#include "worker.h"
#include "sha256.h"
#include "shed.h"
#include "memstore.h"
#include "metrics_adaptive.h"
#include "store.h"
#include "store_redis.h"
#include "redis_health.h"
#include "redis_transport_tls.h"

static const char *build_version = "unknown";

void metrics_set_version(const char *version)
{
	build_version = version;
}

static void counter(struct out *o, const char *name, const char *help, uint64_t v)
{
	outf(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
	     (unsigned long long)v);
}

static void gauge(struct out *o, const char *name, const char *help, uint64_t v)
{
	outf(o, "# HELP %s %s\n# TYPE %s gauge\n%s %llu\n", name, help, name, name,
	     (unsigned long long)v);
}

/* Offsets of counters in the structs below. An array element is the
 * offset of the array plus its index times sizeof(counter_t). */
#define RULE(field) offsetof(struct rule_counters, field)
#define STORE(field) offsetof(struct store_stats, field)
#define REDIS(field) offsetof(struct redis_stats, field)

static uint64_t counter_at(const void *stats, size_t offset)
{
	return STAT_GET(*(const counter_t *)((const char *)stats + offset));
}

/* The struct hist at `offset` in the Redis store's counters (summed over
 * its workers and servers, store_redis_stats); bounds in seconds. */
static void histogram(struct out *o, const struct redis_stats *sts, const char *name,
		      const char *help, size_t offset)
{
	static const int64_t bound[HIST_BUCKETS - 1] = HIST_BOUNDS_US;
	uint64_t cum = 0;

	outf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (int b = 0; b < HIST_BUCKETS; b++) {
		cum += counter_at(sts, offset + offsetof(struct hist, bucket) +
					       (size_t)b * sizeof(counter_t));
		if (b < HIST_BUCKETS - 1) {
			/* seconds in plain decimals: 0.00005, not 5e-05 */
			char le[32];
			int n = snprintf(le, sizeof(le), "%.6f", (double)bound[b] / 1e6);

			while (n > 1 && le[n - 1] == '0' && le[n - 2] != '.')
				le[--n] = '\0';
			outf(o, "%s_bucket{le=\"%s\"} %llu\n", name, le, (unsigned long long)cum);
		} else
			outf(o, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
	}
	outf(o, "%s_sum %.6f\n%s_count %llu\n", name,
	     (double)counter_at(sts, offset + offsetof(struct hist, sum_us)) / 1e6, name,
	     (unsigned long long)counter_at(sts, offset + offsetof(struct hist, count)));
}

/* Per server: one labelled series of each of these. */
static const struct {
	const char *name, *help;
	size_t offset;
} node_counters[] = {
	{ "spoa_rl_redis_node_calls_total", "Script calls sent, by Redis server.", REDIS(calls) },
	{ "spoa_rl_redis_node_errors_total", "Error replies, by Redis server.", REDIS(errors) },
	{ "spoa_rl_redis_node_timeouts_total", "Decisions past their deadline, by Redis server.",
	  REDIS(timeouts) },
	{ "spoa_rl_redis_node_connects_total", "Connection attempts, by Redis server.",
	  REDIS(connects) },
	{ "spoa_rl_redis_node_breaker_trips_total",
	  "Times the circuit breaker opened, by Redis server.", REDIS(breaker_trips) },
};

struct node_line {
	struct out *o;
	const char *name;
	size_t offset;
};

static void node_line(void *arg, const char *node, const struct redis_stats *stats)
{
	struct node_line *nl = arg;

	outf(nl->o, "%s{node=\"%s\"} %llu\n", nl->name, node,
	     (unsigned long long)counter_at(stats, nl->offset));
}

/* Per server that a worker talks to (not a seed or a former master):
 * whether it answers decisions, whether it can evict the limiter's keys. */
static void up_line(void *arg, const char *node, const struct redis_stats *stats)
{
	struct node_line *nl = arg;
	uint64_t nodes = STAT_GET(stats->nodes);

	if (!nodes)
		return;
	if (nl->offset == REDIS(nodes))
		outf(nl->o, "%s{node=\"%s\"} %d\n", nl->name, node,
		     STAT_GET(stats->ready) == nodes);
	else
		node_line(arg, node, stats);
}

static void kinds_line(void *arg, const char *node, const struct redis_stats *stats)
{
	struct out *o = arg;

	for (int k = 0; k < REDIS_ERROR_KINDS; k++)
		outf(o, "spoa_rl_redis_errors_total{node=\"%s\",kind=\"%s\"} %llu\n", node,
		     redis_error_kind_name((enum redis_error_kind)k),
		     (unsigned long long)STAT_GET(stats->error_kind[k]));
}

static void health_series(struct out *o, struct store *st)
{
	struct node_line up = { o, "spoa_rl_redis_up", REDIS(nodes) };
	struct node_line risk = { o, "spoa_rl_redis_eviction_risk", REDIS(eviction_risk) };

	outf(o, "# HELP spoa_rl_redis_up 1 while the server answers decisions: every worker "
	     "connected, authenticated, the decision library loaded; else 0.\n"
	     "# TYPE spoa_rl_redis_up gauge\n");
	store_redis_each_node(st, up_line, &up);
	outf(o, "# HELP spoa_rl_redis_errors_total Failures talking to Redis, by server and "
	     "kind (connect, timeout, tls, auth, noperm, loading, cluster_mismatch, protocol, "
	     "other).\n# TYPE spoa_rl_redis_errors_total counter\n");
	store_redis_each_node(st, kinds_line, o);
	outf(o, "# HELP spoa_rl_redis_eviction_risk 1 when the server's maxmemory and "
	     "maxmemory-policy can evict the limiter's keys (allkeys-*, or volatile-* while "
	     "they have an expiry): a limit whose key goes starts over; else 0.\n"
	     "# TYPE spoa_rl_redis_eviction_risk gauge\n");
	store_redis_each_node(st, up_line, &risk);
}

/* Per server worker 0 looks at (redis_info.h), once read. */
static void info_line(void *arg, const char *node, const struct redis_stats *stats)
{
	if (STAT_GET(stats->info_read))
		node_line(arg, node, stats);
}

/* The same, in seconds from microseconds. */
static void info_seconds_line(void *arg, const char *node, const struct redis_stats *stats)
{
	struct node_line *nl = arg;

	if (STAT_GET(stats->info_read))
		outf(nl->o, "%s{node=\"%s\"} %.6f\n", nl->name, node,
		     (double)counter_at(stats, nl->offset) / 1e6);
}

static const struct {
	const char *name, *help;
	size_t offset;
} info_gauges[] = {
	{ "spoa_rl_redis_used_memory_bytes",
	  "Memory the Redis server uses (INFO memory's used_memory), read every --redis-info-interval.",
	  REDIS(used_memory) },
	{ "spoa_rl_redis_maxmemory_bytes",
	  "The Redis server's maxmemory (INFO memory), 0 when unlimited.", REDIS(maxmemory) },
	{ "spoa_rl_redis_keys",
	  "Keys in the Redis server's database (DBSIZE): the limiter's and any other's.",
	  REDIS(keys) },
};

static void memory_info_series(struct out *o, struct store *st)
{
	struct node_line failures = { o, "spoa_rl_redis_info_failures_total",
				      REDIS(info_failures) };
	struct node_line stall = { o, "spoa_rl_redis_expiry_stall_seconds", REDIS(expiry_stall_us) };

	for (size_t k = 0; k < sizeof(info_gauges) / sizeof(info_gauges[0]); k++) {
		struct node_line nl = { o, info_gauges[k].name, info_gauges[k].offset };

		outf(o, "# HELP %s %s\n# TYPE %s gauge\n", nl.name, info_gauges[k].help, nl.name);
		store_redis_each_node(st, info_line, &nl);
	}
	outf(o, "# HELP %s Looks at a Redis server's memory and keys that failed (no "
	     "connection, INFO or DBSIZE refused, no answer in time); decisions never wait "
	     "on them.\n# TYPE %s counter\n", failures.name, failures.name);
	store_redis_each_node(st, node_line, &failures);
	outf(o, "# HELP %s The longest the server's key expiry may hold it at a time: 25%% of "
	     "1/hz (INFO server), 0 when unknown. Not less than --redis-timeout, decisions due "
	     "meanwhile are made by their rule's local bucket: set hz 100.\n# TYPE %s gauge\n",
	     stall.name, stall.name);
	store_redis_each_node(st, info_seconds_line, &stall);
}

/* TLS to the servers (--redis-tls): 0 without it. */
static void tls_series(struct out *o)
{
	unsigned long long handshakes, resumed;

	redis_tls_counts(&handshakes, &resumed);
	outf(o, "# HELP spoa_rl_redis_tls_handshakes_total TLS handshakes done with Redis "
	     "servers.\n# TYPE spoa_rl_redis_tls_handshakes_total counter\n"
	     "spoa_rl_redis_tls_handshakes_total %llu\n"
	     "# HELP spoa_rl_redis_tls_resumed_total TLS handshakes with Redis servers that "
	     "resumed the session of an earlier connection to the same server (no key exchange, "
	     "no certificate check).\n# TYPE spoa_rl_redis_tls_resumed_total counter\n"
	     "spoa_rl_redis_tls_resumed_total %llu\n", handshakes, resumed);
}

static void node_series(struct out *o, struct store *st)
{
	struct node_line gauge = { o, "spoa_rl_redis_node_not_evicting", REDIS(not_evicting) };

	for (size_t k = 0; k < sizeof(node_counters) / sizeof(node_counters[0]); k++) {
		struct node_line nl = { o, node_counters[k].name, node_counters[k].offset };

		outf(o, "# HELP %s %s\n# TYPE %s counter\n", nl.name, node_counters[k].help, nl.name);
		store_redis_each_node(st, node_line, &nl);
	}
	outf(o, "# HELP %s 1 while keys written without an expiry may be on the server "
	     "(--redis-expiry never, or auto once it was found evicting) and it may not evict "
	     "them: no maxmemory, a policy other than allkeys-lru or allkeys-lfu, or CONFIG "
	     "refused; else 0.\n# TYPE %s gauge\n", gauge.name, gauge.name);
	store_redis_each_node(st, node_line, &gauge);
	health_series(o, st);
	memory_info_series(o, st);
	tls_series(o);
}

/* The shared store's counters, in the order of the text. */
static const struct {
	const char *name, *help;
	size_t offset;
} store_counters[] = {
	{ "spoa_rl_redis_queries_total", "Decisions submitted to the Redis store.",
	  REDIS(queries) },
	{ "spoa_rl_redis_calls_total", "Script calls sent to Redis (batches).", REDIS(calls) },
	{ "spoa_rl_redis_replies_total", "Decisions answered by Redis.", REDIS(replies) },
	{ "spoa_rl_local_refusals_total",
	  "Refusals answered locally: the client was known refused until a later time.",
	  REDIS(local_refusals) },
	{ "spoa_rl_redis_timeouts_total", "Decisions past their deadline.", REDIS(timeouts) },
	{ "spoa_rl_redis_unavailable_total",
	  "Decisions made without Redis: no connection or queue full.", REDIS(unavailable) },
	{ "spoa_rl_redis_connects_total", "Connection attempts to Redis.", REDIS(connects) },
	{ "spoa_rl_redis_library_missing_total",
	  "Calls that found the decision library gone (Redis restarted or its functions flushed): loaded again and the call retried.",
	  REDIS(library_missing) },
	{ "spoa_rl_redis_breaker_trips_total",
	  "Times the circuit breaker stopped calls to Redis after failures.",
	  REDIS(breaker_trips) },
	{ "spoa_rl_redis_breaker_skips_total",
	  "Decisions made without Redis while the circuit breaker was open.",
	  REDIS(breaker_skips) },
	{ "spoa_rl_redis_moved_total",
	  "Cluster: decisions sent to a node that no longer served their key, sent again.",
	  REDIS(moved) },
	{ "spoa_rl_redis_asking_total",
	  "Cluster: decisions sent with ASKING to the node importing their slot.", REDIS(asked) },
	{ "spoa_rl_redis_topology_changes_total",
	  "A new master (Sentinel) or a new slot map (Cluster) put in use, per worker.",
	  REDIS(topology_changes) },
	{ "spoa_rl_redis_split_total",
	  "Decisions of a rule with layers whose keys live on several servers: each part taken on its own server.",
	  REDIS(split) },
	{ "spoa_rl_redis_refunds_total",
	  "Parts of a refused split decision given back to their server.", REDIS(refunds) },
	{ "spoa_rl_redis_penalty_events_lost_total",
	  "Penalty events Redis could not be told of (no connection): not counted.",
	  REDIS(penalty_lost) },
	{ "spoa_rl_redis_releases_lost_total",
	  "Concurrency places a release could not give back (no connection): they end at their max_duration.",
	  REDIS(releases_lost) },
	{ "spoa_rl_redis_refunds_lost_total",
	  "Refunds that could not be sent or failed: tokens held until they refill.",
	  REDIS(refunds_lost) },
	{ "spoa_rl_redis_charges_lost_total",
	  "Settlements of a charge that could not be sent or failed: the estimate stands.",
	  REDIS(charges_lost) },
	{ "spoa_rl_lease_grants_total",
	  "Leases received from Redis (--lease): tokens taken for a busy client, spent here.",
	  REDIS(lease.grants) },
	{ "spoa_rl_lease_tokens_total", "Tokens received in leases.", REDIS(lease.tokens) },
	{ "spoa_rl_lease_decisions_total",
	  "Requests allowed from a lease, without a Redis call.", REDIS(lease.decisions) },
	{ "spoa_rl_lease_waits_total",
	  "Requests refused here while a leased client waited for its tokens to come back after Redis refused it.",
	  REDIS(lease.waits) },
	{ "spoa_rl_lease_returned_tokens_total",
	  "Unspent leased tokens sent back to Redis (given back where nothing else touched the bucket since).",
	  REDIS(lease.returned) },
	{ "spoa_rl_lease_dropped_tokens_total",
	  "Unspent leased tokens that could not be sent back: held until they refill.",
	  REDIS(lease.dropped) },
};

/* A counter of struct rule_counters per rule in force, labelled by its
 * name (names are of [A-Za-z0-9_.-]: nothing to escape). Before the
 * workers start there are no counters, only the header. */
static void by_rule(struct out *o, const struct server *srv, const struct rules *rules,
		    const char *name, const char *help, size_t offset)
{
	outf(o, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
	if (!srv->rulestats || !rules)
		return;
	for (size_t i = 0; i < rules_count(rules); i++) {
		const struct rule *r = rules_rule_at(rules, i);

		outf(o, "%s{rule=\"%s\"} %llu\n", name, r->name,
		     (unsigned long long)rulestats_get(srv->rulestats, r->counters, offset));
	}
}

/* Distinct clients by rule (and layer), over the last 10 to 15 minutes,
 * the workers' sketches merged (rulestats_clients). */
static void clients_series(struct out *o, const struct server *srv, const struct rules *rules)
{
	int64_t now_us = clock_wall_ms() * 1000;

	outf(o, "# HELP spoa_rl_clients_estimate Distinct clients (identity keys) a rule or layer "
	     "decided for over the last 10 to 15 minutes (HyperLogLog, about 2%% error).\n"
	     "# TYPE spoa_rl_clients_estimate gauge\n");
	for (size_t i = 0; srv->rulestats && rules && i < rules_count(rules); i++) {
		const struct rule *r = rules_rule_at(rules, i);

		outf(o, "spoa_rl_clients_estimate{rule=\"%s\"} %.0f\n", r->name,
		     rulestats_clients(srv->rulestats, r->counters, now_us));
	}
}

/* Sheds by rule and priority, then what shedding compares: the load of
 * the most recent request that carried the figures, and the threshold
 * of each priority that has one. */
static void shed_series(struct out *o, const struct server *srv, const struct server_stats *ss,
			const struct rules *rules)
{
	const struct shed_config *sc = rules ? rules_shed(rules) : NULL;

	outf(o, "# HELP spoa_rl_shed_total Requests shed with 503, by rule and priority.\n"
		"# TYPE spoa_rl_shed_total counter\n");
	for (size_t i = 0; srv->rulestats && rules && i < rules_count(rules); i++) {
		const struct rule *r = rules_rule_at(rules, i);

		for (int p = 1; p < SHED_PRIORITIES; p++)
			outf(o, "spoa_rl_shed_total{rule=\"%s\",priority=\"%d\"} %llu\n", r->name, p,
			     (unsigned long long)rulestats_get(srv->rulestats, r->counters,
							       RULE(shed) + (size_t)p * sizeof(counter_t)));
	}
	outf(o, "# HELP spoa_rl_backend_load Backend load, busy / (busy + free) connections, of the last request that carried the figures (absent before one did).\n"
		"# TYPE spoa_rl_backend_load gauge\n");
	if (ss->load_at > 0. && shed_load(ss->in_use, ss->free_conns) >= 0.)
		outf(o, "spoa_rl_backend_load %.4f\n", shed_load(ss->in_use, ss->free_conns));
	outf(o, "# HELP spoa_rl_shed_threshold Load at which each priority is shed (P0 never; a priority without a threshold is absent).\n"
		"# TYPE spoa_rl_shed_threshold gauge\n");
	for (int p = 1; sc && p < SHED_PRIORITIES; p++)
		if (sc->threshold_bp[p] > SHED_NEVER && sc->threshold_bp[p] <= SHED_FULL)
			outf(o, "spoa_rl_shed_threshold{priority=\"%d\"} %.4f\n", p,
			     (double)sc->threshold_bp[p] / SHED_FULL);
}

/* Requests held by their rule's delay: by rule, how long they waited,
 * held now, and refused at once for want of room (max_delayed). */
static void delay_series(struct out *o, const struct server *srv, const struct server_stats *ss,
			 const struct store_stats *sts, const struct rules *rules)
{
	static const int64_t bound[HIST_LONG_BUCKETS - 1] = HIST_LONG_BOUNDS_US;
	const char *name = "spoa_rl_delay_seconds";
	uint64_t cum = 0;

	by_rule(o, srv, rules, "spoa_rl_delayed_total",
		"Requests held by their rule's delay instead of refused, then answered (admitted or refused), by rule.",
		RULE(delayed));
	outf(o, "# HELP %s How long requests held by their rule's delay waited for their answer.\n"
		"# TYPE %s histogram\n", name, name);
	for (int b = 0; b < HIST_LONG_BUCKETS; b++) {
		cum += ss->delay_bucket[b];
		if (b < HIST_LONG_BUCKETS - 1)
			outf(o, "%s_bucket{le=\"%g\"} %llu\n", name, (double)bound[b] / 1e6,
			     (unsigned long long)cum);
		else
			outf(o, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
	}
	outf(o, "%s_sum %.6f\n%s_count %llu\n", name, (double)ss->delay_sum_us / 1e6, name,
	     (unsigned long long)ss->delay_count);
	gauge(o, "spoa_rl_delay_held", "Requests held now by their rule's delay.",
	      counter_at(sts, STORE(delayed_held)));
	counter(o, "spoa_rl_delay_full_total",
		"Requests refused at once that a delay would have held: max_delayed were held already.",
		counter_at(sts, STORE(delay_full)));
	counter(o, "spoa_rl_delay_gone_total",
		"Held requests whose connection closed before they were due: decided no more, "
		"they took no token.",
		counter_at(sts, STORE(delay_gone)));
}

/* Charges settled by the response's cost (`charge: response`). */
static void charge_series(struct out *o, const struct store_stats *sts)
{
	counter(o, "spoa_rl_charge_settlements_total",
		"Responses whose cost settled the charge of their request.",
		counter_at(sts, STORE(charge_settlements)));
	counter(o, "spoa_rl_charge_taken_tokens_total",
		"Tokens taken beyond the estimates, by responses that cost more.",
		counter_at(sts, STORE(charge_taken)));
	counter(o, "spoa_rl_charge_given_tokens_total",
		"Tokens given back, by responses that cost less than their estimate (less may go back: a refund never lifts a limit).",
		counter_at(sts, STORE(charge_given)));
	counter(o, "spoa_rl_charge_invalid_total",
		"Responses of a charged request whose cost was missing, negative or not a number: nothing settled.",
		counter_at(sts, STORE(charge_invalid)));
	counter(o, "spoa_rl_charge_stale_total",
		"Responses of a charged request whose rule or limits changed since (a reload, an override): nothing settled.",
		counter_at(sts, STORE(charge_stale)));
}

/* The workers' counters, then the server's (server_get_stats). */
static void server_series(struct out *o, const struct server *srv, const struct server_stats *ss,
			  const struct rules *rules)
{
	counter(o, "spoa_rl_connections_total", "SPOP connections accepted.", ss->accepted);
	gauge(o, "spoa_rl_connections", "SPOP connections open.", ss->accepted - ss->closed);
	counter(o, "spoa_rl_hellos_total", "SPOP handshakes completed.", ss->hellos);
	counter(o, "spoa_rl_healthchecks_total", "HAProxy health checks answered.",
		ss->healthchecks);
	counter(o, "spoa_rl_notify_total", "NOTIFY frames received.", ss->notifies);
	by_rule(o, srv, rules, "spoa_rl_decisions_total", "check-rate decisions answered, by rule.",
		RULE(decisions));
	by_rule(o, srv, rules, "spoa_rl_limited_total", "Decisions with status 429, by rule.",
		RULE(limited));
	by_rule(o, srv, rules, "spoa_rl_saturated_total",
		"Decisions made by the rule's local bucket because Redis, still answering, did not answer them within their deadline, by rule (also counted in spoa_rl_degraded_total, whose other decisions are store failures).",
		RULE(saturated));
	by_rule(o, srv, rules, "spoa_rl_near_limit_total",
		"Decisions allowed that left the client under a tenth of the quota of the limit that decided, by rule.",
		RULE(near_limit));
	clients_series(o, srv, rules);
	counter(o, "spoa_rl_degraded_total", "Decisions made without the shared store.",
		ss->degraded);
	by_rule(o, srv, rules, "spoa_rl_shadow_total",
		"Requests that would have been refused, forwarded by shadow mode, by rule.",
		RULE(shadow));
	counter(o, "spoa_rl_store_down_total",
		"Requests refused with 503 because the store failed (fail-closed).", ss->store_down);
	counter(o, "spoa_rl_releases_total",
		"Release messages: responses giving back a concurrency place.", ss->releases);
	counter(o, "spoa_rl_releases_invalid_total",
		"Release messages without a place or request_id, or with a malformed place.",
		ss->releases_bad);
	counter(o, "spoa_rl_write_stalls_total",
		"SPOP connections closed because the peer read nothing of their answers for 5 s.",
		ss->write_stalls);
	gauge(o, "spoa_rl_output_grown_bytes",
	      "Bytes by which SPOP connections' output buffers have grown past their first 16 KiB (answers waiting for peers that read slowly).",
	      ss->out_grown);
	counter(o, "spoa_rl_answers_trimmed_total",
		"Answers sent without policy (and ratelimit if need be): too big for the max-frame-size HAProxy announced.",
		ss->answers_trimmed);
}

/* The shared store's counters, summed and by server. */
static void store_series(struct out *o, struct store *st, const struct redis_stats *sts)
{
	for (size_t k = 0; k < sizeof(store_counters) / sizeof(store_counters[0]); k++)
		counter(o, store_counters[k].name, store_counters[k].help,
			counter_at(sts, store_counters[k].offset));
	histogram(o, sts, "spoa_rl_redis_call_duration_seconds",
		  "Script calls, from sending to the reply.", REDIS(call_time));
	histogram(o, sts, "spoa_rl_redis_decision_duration_seconds",
		  "Decisions answered by Redis, from submission to the answer (waiting for a call, then the call).",
		  REDIS(wait_time));
	histogram(o, sts, "spoa_rl_redis_queue_wait_seconds",
		  "Decisions' wait in the agent before a call took them (or until their deadline, when none did).",
		  REDIS(queue_wait));
	node_series(o, st);
}

/* What GET /readyz says, for the dashboard. */
static void ready_series(struct out *o, struct store *st)
{
	char why[8];

	gauge(o, "spoa_rl_ready", "1 while the store decides (GET /readyz answers 200; the "
	      "in-memory store always), else 0.", store_redis_ready(st, why, sizeof(why)));
}

static void memory_series(struct out *o, const struct store *st)
{
	struct memstore_stats ms;

	store_mem_stats(st, &ms);
	gauge(o, "spoa_rl_memory_keys", "Client limits tracked in memory.", ms.keys);
	/* what keys are measured against (an alert on how full it is) */
	gauge(o, "spoa_rl_memory_max_keys",
	      "Client limits the in-memory store can track (--mem-max-keys).", ms.max_keys);
	counter(o, "spoa_rl_memory_full_total",
		"In-memory decisions left to the failure mode: no room without forgetting a refused client.",
		ms.full);
	counter(o, "spoa_rl_memory_evicted_total",
		"In-memory entries forgotten to make room for new clients.", ms.evicted);
	gauge(o, "spoa_rl_memory_log_chunks",
	      "Chunks of 128 bytes (12 requests) that log limits hold in memory.", ms.log_chunks);
}

/* What this agent runs and has loaded: its version, its rules file's
 * digest (agents that disagree show two values), and the arguments the
 * rules read that HAProxy never sent (server_args_missing, judged under
 * the rules in force). */
static void info_series(struct out *o, struct server *srv, const struct rules *rules)
{
	char hex[SHA256_HEX_LEN];
	uint64_t gen, missing = server_args_missing(srv, &gen);

	outf(o, "# HELP spoa_rl_build_info The agent's version (always 1).\n"
		"# TYPE spoa_rl_build_info gauge\nspoa_rl_build_info{version=\"%s\"} 1\n",
	     build_version);
	outf(o, "# HELP spoa_rl_rules_info SHA-256 of the rules file in force (always 1): agents "
		"of one fleet should show one value.\n# TYPE spoa_rl_rules_info gauge\n");
	if (rules) {
		sha256_hex(rules_sha256(rules), hex);
		outf(o, "spoa_rl_rules_info{sha256=\"%s\"} 1\n", hex);
	}
	outf(o, "# HELP spoa_rl_argument_missing 1 for each argument the rules read that none "
		"of a worker's first %d check-rate messages carried (misspelt in the rules or in "
		"the SPOE file).\n# TYPE spoa_rl_argument_missing gauge\n", WORKER_ARGS_JUDGED);
	for (size_t i = 0; rules && gen == rules_gen(rules) && i < rules_checked_count(rules); i++)
		if (missing & ((uint64_t)1 << i))
			outf(o, "spoa_rl_argument_missing{name=\"%s\"} 1\n",
			     rules_checked_name(rules, i));
}

static void render(struct server *srv, struct out *o)
{
	struct rules *rules = atomic_load(&srv->rules);
	struct server_stats ss;
	struct store_stats sts;
	struct redis_stats rs;

	server_get_stats(srv, &ss);
	store_get_stats(srv->store, &sts);
	server_series(o, srv, &ss, rules);
	counter(o, "spoa_rl_penalty_events_total",
		"Responses and refusals counted for a rule's penalty (the penalty box).",
		counter_at(&sts, STORE(penalty_events)));
	delay_series(o, srv, &ss, &sts, rules);
	charge_series(o, &sts);
	counter(o, "spoa_rl_override_unapplied_total",
		"Overrides not applied for want of room for another overridden limit (the rule's own limits applied, or the PUT was refused).",
		rules_override_refused());
	shed_series(o, srv, &ss, rules);
	metrics_adaptive(o, srv, rules);
	counter(o, "spoa_rl_reloads_total", "Rules reloaded by SIGHUP.", ss.reloads);
	counter(o, "spoa_rl_reload_failures_total",
		"SIGHUPs whose file was invalid (the rules in force stayed).", ss.reload_failures);
	gauge(o, "spoa_rl_rules_generation", "Generation of the rules in force (1 at start, +1 per reload).",
	      rules ? rules_gen(rules) : 0);
	outf(o, "# HELP spoa_rl_disconnects_total AGENT-DISCONNECT frames sent, by status.\n"
		"# TYPE spoa_rl_disconnects_total counter\n");
	for (int st = 0; st < 14; st++)
		if (ss.disconnects_sent[st])
			outf(o, "spoa_rl_disconnects_total{status=\"%d\"} %llu\n",
			     st == 13 ? 99 : st, (unsigned long long)ss.disconnects_sent[st]);
	if (store_redis_stats(srv->store, &rs))
		store_series(o, srv->store, &rs);
	ready_series(o, srv->store);
	memory_series(o, srv->store);
	info_series(o, srv, rules);
	procstat_series(o);
}

size_t metrics_render(struct server *srv, char **out)
{
	struct out o = { xmalloc(8192), 8192, 0, 0, 1 };

	if (!o.buf)
		return 0;
	render(srv, &o);
	if (o.err) {
		xfree(o.buf);
		return 0;
	}
	*out = o.buf;
	return o.len;
}
