/* SPDX-License-Identifier: Apache-2.0 */
/* server.h: the listener and the worker threads.
 *
 * One listening socket, watched by every worker's loop: a worker that is
 * busy does not accept, so new connections go to the idle ones. Each worker
 * owns one ev_loop, touched only by its thread, and the connections it
 * accepted. The main thread handles signals and tells workers to stop
 * through ev_async. */
#ifndef RL_SERVER_H
#define RL_SERVER_H

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "addr.h"
#include "conn.h"
#include "rulestats.h"
#include "stats.h"
#include "worker.h"

struct flights;
struct store;

struct server_config {
	struct addr listen;
	int threads;
	struct conn_config conn;  /* each worker's connections (conn.h) */
	size_t mem_max_keys;
	bool fixed_answer;        /* benchmarks: answer check-rate with the
	                           * first decision's answer, deciding no more */
};

/* Rules replaced by a reload, released once every worker has moved on. */
struct retired {
	struct retired *next;
	struct rules *rules;
	uint64_t until_gen;
};

struct server {
	struct server_config cfg;
	_Atomic(struct rules *) rules;  /* current; the server holds a reference */
	struct retired *retired;
	counter_t reloads;                /* rules reloaded (SIGHUP) */
	int admin;                        /* /admin/ endpoints served */
	counter_t reload_failures;        /* SIGHUP with an invalid file */
	struct store *store;              /* the caller's; workers attach to it */
	/* Clients' own limits (overrides.h): the current set, swapped under
	 * ov_lock; each worker holds a reference to the one it uses. */
	pthread_mutex_t ov_lock;
	struct overrides *ovt;
	struct rulestats *rulestats;      /* made by server_start */
	struct flights *flights;          /* adaptive shedding (flights.h), too */
	/* Arguments the rules read that HAProxy never sent, as the workers
	 * judged them (worker.c): a bit per rules_checked_name() of the
	 * rules of generation args_gen; under args_lock. */
	pthread_mutex_t args_lock;
	uint64_t args_gen;
	uint64_t args_missing;
	/* --fixed-answer: the first decision's answer, set once by the worker
	 * that made it (worker.c), freed by server_stop */
	_Atomic(struct fixed_answer *) fixed;
	/* Bytes by which the connections' output buffers have grown past
	 * their first size, all workers together (conn.h: conn_set.out_grown,
	 * bounded by CONN_OUTPUT_BUDGET for frames read) */
	atomic_size_t out_grown;
	int lfd;
	struct worker *workers;
	int nworkers;                     /* workers running (threads started) */
	atomic_int stopping;
};

void server_config_defaults(struct server_config *cfg);

/* What the workers have counted, summed, and the server's own counters:
 * a snapshot for the metrics (read with relaxed atomics, stats.h). */
struct server_stats {
	uint64_t accepted;
	uint64_t closed;
	uint64_t hellos;
	uint64_t healthchecks;
	uint64_t notifies;
	uint64_t degraded;
	uint64_t store_down;
	uint64_t releases;
	uint64_t releases_bad;
	uint64_t disconnects_sent[14]; /* by status code; index 13 holds 99 too */
	uint64_t answers_trimmed;
	/* how long held requests waited (struct hist_long, summed) */
	uint64_t delay_bucket[HIST_LONG_BUCKETS];
	uint64_t delay_sum_us;
	uint64_t delay_count;
	uint64_t write_stalls;
	uint64_t out_grown;       /* bytes, server.out_grown */
	uint64_t reloads;
	uint64_t reload_failures;
	/* The load figures of the most recent request that carried them, over
	 * the workers (load_at 0: none yet). */
	double load_at;
	int64_t in_use;
	int64_t free_conns;
};

/* Fills *out. Main thread (the workers cannot come or go meanwhile). */
void server_get_stats(const struct server *srv, struct server_stats *out);

/* Raises the soft limit on descriptors to the hard one (server_listen
 * does too): before anything sizes itself by it. */
void server_raise_fd_limit(void);

/* Binds and listens. Returns 0, or -1 after logging why. */
int server_listen(struct server *srv);

/* Starts the workers; returns 0, or -1 after logging why (then the
 * workers that did start run until server_stop, which is always safe to
 * call). */
int server_start(struct server *srv);

/* Seconds that stopping workers give their connections to be answered and
 * disconnected (server_stop). Decisions still waiting for the store then
 * get the rule's failure mode. */
#define SERVER_STOP_GRACE 3.0

/* Stops the agent: workers accept no more, answer what their connections
 * have read, send AGENT-DISCONNECT on each and close them, within
 * SERVER_STOP_GRACE seconds (more than that, only for the last
 * DISCONNECTs, which wait for nothing); joins them and frees them. */
void server_stop(struct server *srv);

/* Installs new rules (taking the caller's reference), their rules given
 * the counters of their names (rulestats_assign): workers switch at their
 * next loop iteration; the old rules go when every worker has. Main
 * thread only, after server_start. */
void server_swap_rules(struct server *srv, struct rules *rules);

/* Installs a new set of overrides (taking the caller's reference; NULL:
 * none): workers switch at their next loop iteration. Any thread. */
void server_set_overrides(struct server *srv, struct overrides *o);

/* A reference to the overrides in force (NULL: none). Any thread. */
struct overrides *server_overrides(struct server *srv);

/* The arguments found missing (bits of rules_checked_name()), and the
 * generation of the rules they are of in *gen (0: none judged yet).
 * Any thread. */
uint64_t server_args_missing(struct server *srv, uint64_t *gen);

/* Releases retired rules that no worker uses any more. Main thread only. */
void server_collect_rules(struct server *srv);

#endif
