/* SPDX-License-Identifier: Apache-2.0 */
/* worker.h: a worker thread and what it does with the messages its
 * connections carry.
 *
 * The connections (protocol/conn.h) hand every NOTIFY to the worker's
 * handler: it reads the message list, acts on release and response
 * messages, decides the first check-rate message (decide.h, then the store
 * behind store.h) and queues the ACK, now or when the store answers
 * (worker_answer, the store's callback, which finds the connection again
 * by id and generation). It counts the decisions by rule (rulestats.h).
 * server.c starts, runs and stops the workers.
 *
 * --fixed-answer (benchmarks) has a handler of its own, chosen at start:
 * the first decision made is the answer to every check-rate from then on,
 * and the normal handler never tests for it. */
#ifndef RL_WORKER_H
#define RL_WORKER_H

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "conn.h"
#include "rulestats.h"
#include "stats.h"

struct decide_decision;
struct overrides;
struct rules;
struct server;
struct store_ref;
struct store_worker;

/* A worker's counters of what its messages asked, written by its thread
 * only (stats.h). Decisions are counted by rule (rulestats.h), the
 * connections' frames by the connections (conn.h). */
struct worker_stats {
	counter_t degraded;
	counter_t store_down;
	counter_t releases;     /* release messages */
	counter_t releases_bad; /* without a place or request_id, or a malformed place */
	counter_t answers_trimmed; /* sent without optional variables, to fit
	                            * the negotiated max-frame-size */
	struct hist_long delays;   /* how long held requests waited (delay.h) */
};

/* The load figures (shed.h) of the last request that carried them, and
 * when it was read: the metrics show the most recent over the workers.
 * Three relaxed stores, not one snapshot: a scrape may pair figures of two
 * requests read moments apart, which says the same. */
struct worker_load {
	_Atomic int64_t in_use;
	_Atomic int64_t free_conns;
	_Atomic double at;        /* ev_now() of the read; 0: none yet */
};

/* --fixed-answer: a decision kept with copies of its strings, so that it
 * outlives the rules it was made with (worker.c). */
struct fixed_answer;

/* check-rate messages a worker reads before it says which arguments the
 * rules read were never among them (worker.c: args_note). */
#define WORKER_ARGS_JUDGED 1000

struct worker {
	struct server *srv;
	int idx;
	pthread_t thread;
	struct ev_loop *loop;
	ev_io accept_w;
	ev_timer accept_pause_w;  /* accepting resumes (after EMFILE) */
	ev_async stop_w;
	ev_timer grace_w;         /* stopping: the end of the grace time */
	int stopping;             /* answering what was read, then leaving */
	ev_prepare reap_w;
	struct store_worker *store;
	struct rules *rules;    /* this worker's reference to the rules */
	struct overrides *ovt;  /* and to the overrides (NULL: none) */
	atomic_uint_fast64_t seen_gen; /* generation of `rules` */
	ev_async wake_w;          /* new rules to pick up */
	uint32_t rnd;
	struct conn_set conns;    /* its connections, handled by this module */
	struct rule_counters *rule_stats; /* this worker's counters (rulestats.h) */
	struct hll_window *const *clients; /* and distinct clients (rulestats_sketches) */
	struct worker_stats stats;
	struct worker_load load;
	struct fixed_answer *fixed; /* with --fixed-answer: the server's, once seen */
	/* check-rate messages read under `rules` (up to WORKER_ARGS_JUDGED)
	 * and the checked arguments among them (rules_args_seen) */
	uint32_t args_msgs;
	uint64_t args_seen;
};

/* The handler of a worker's connections (its app: the worker): the normal
 * one, or the --fixed-answer one. */
const struct conn_handler *worker_handler(bool fixed);

/* The store's answer callback (store_answer_fn, with the worker as its
 * private pointer): counts a decision made later and queues its ACK, if
 * its connection is still the one it was (id and generation). */
void worker_answer(void *worker, const struct store_ref *ref, const struct decide_decision *d);

/* The store's store_awaited_fn: whether ref's connection is still open. */
bool worker_awaited(void *worker, const struct store_ref *ref);

#endif
