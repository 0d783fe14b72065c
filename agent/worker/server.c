/* SPDX-License-Identifier: Apache-2.0 */
#include "server.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "alloc.h"
#include "clock.h"
#include "conn.h"
#include "decide.h"
#include "flights.h"
#include "log.h"
#include "overrides.h"
#include "store.h"
#include "worker.h"

static int server_bind(struct server *srv);

/* The kernel's send buffer of an SPOP connection (it doubles it). Answers
 * are small and HAProxy reads them at once, so this is plenty; left to
 * autotuning it grows to megabytes, which a peer that never reads makes
 * the agent fill with decisions (CPU that other connections wait for)
 * before back-pressure can start (conn.h). */
#define SERVER_SNDBUF (64 * 1024)

void server_config_defaults(struct server_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	addr_parse("127.0.0.1:12345", 0, &cfg->listen);
	cfg->threads = 1;
	cfg->conn.max_frame_size = SPOP_OWN_FRAME_SIZE;
	cfg->conn.max_conns = 10000;
	cfg->conn.hello_timeout = 5.0;
	/* Longer than HAProxy's own idle timeouts (2 or 3 minutes in the
	 * shipped configurations), so that in normal operation HAProxy
	 * closes its idle connections first: an agent that closes one as
	 * HAProxy sends on it fails that request. */
	cfg->conn.idle_timeout = 300.0;
	cfg->mem_max_keys = 1000000;
}

void server_get_stats(const struct server *srv, struct server_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < srv->nworkers; i++) {
		const struct conn_stats *cs = &srv->workers[i].conns.stats;
		const struct worker_stats *ws = &srv->workers[i].stats;
		const struct worker_load *wl = &srv->workers[i].load;
		double at = atomic_load_explicit(&wl->at, memory_order_relaxed);

		out->accepted += STAT_GET(cs->accepted);
		out->closed += STAT_GET(cs->closed);
		out->hellos += STAT_GET(cs->hellos);
		out->healthchecks += STAT_GET(cs->healthchecks);
		out->notifies += STAT_GET(cs->notifies);
		out->degraded += STAT_GET(ws->degraded);
		out->store_down += STAT_GET(ws->store_down);
		out->releases += STAT_GET(ws->releases);
		out->releases_bad += STAT_GET(ws->releases_bad);
		for (int st = 0; st < 14; st++)
			out->disconnects_sent[st] += STAT_GET(cs->disconnects_sent[st]);
		out->answers_trimmed += STAT_GET(ws->answers_trimmed);
		for (int b = 0; b < HIST_LONG_BUCKETS; b++)
			out->delay_bucket[b] += STAT_GET(ws->delays.bucket[b]);
		out->delay_sum_us += STAT_GET(ws->delays.sum_us);
		out->delay_count += STAT_GET(ws->delays.count);
		out->write_stalls += STAT_GET(cs->write_stalls);
		if (at > out->load_at) {
			out->load_at = at;
			out->in_use = atomic_load_explicit(&wl->in_use, memory_order_relaxed);
			out->free_conns = atomic_load_explicit(&wl->free_conns, memory_order_relaxed);
		}
	}
	out->out_grown = atomic_load_explicit(&srv->out_grown, memory_order_relaxed);
	out->reloads = STAT_GET(srv->reloads);
	out->reload_failures = STAT_GET(srv->reload_failures);
}

void server_swap_rules(struct server *srv, struct rules *rules)
{
	struct rules *old;
	struct retired *r;

	/* before the rules are published: workers read the indexes it sets */
	rulestats_assign(srv->rulestats, rules);
	old = atomic_exchange_explicit(&srv->rules, rules, memory_order_acq_rel);
	r = xcalloc(1, sizeof(*r));

	if (!r) {
		/* Cannot track it: leaking the old rules beats freeing them
		 * under a worker's feet. */
		log_err("out of memory: the previous rules stay allocated");
	} else {
		r->rules = old;
		r->until_gen = rules_gen(rules);
		r->next = srv->retired;
		srv->retired = r;
	}
	for (int i = 0; i < srv->nworkers; i++)
		ev_async_send(srv->workers[i].loop, &srv->workers[i].wake_w);
}

void server_collect_rules(struct server *srv)
{
	struct retired **pp = &srv->retired;

	while (*pp) {
		struct retired *r = *pp;
		int done = 1;

		for (int i = 0; i < srv->nworkers; i++)
			if (atomic_load_explicit(&srv->workers[i].seen_gen, memory_order_acquire) <
			    r->until_gen)
				done = 0;
		if (done) {
			*pp = r->next;
			rules_release(r->rules);
			xfree(r);
		} else {
			pp = &r->next;
		}
	}
}

void server_raise_fd_limit(void)
{
	struct rlimit rl;

	/* Every SPOP connection is a descriptor: take what the hard limit
	 * allows. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int server_listen(struct server *srv)
{
	server_raise_fd_limit();
	return server_bind(srv);
}

static int server_bind(struct server *srv)
{
	char err[512], where[ADDR_HOST_MAX + 16];
	struct addr bound = srv->cfg.listen;

	srv->lfd = addr_listen(&srv->cfg.listen, 1024, err, sizeof(err));
	if (srv->lfd < 0) {
		log_err("%s", err);
		return -1;
	}
	/* With port 0 the kernel picks one: say which, so a supervisor (or a
	 * test) can read it from the log. */
	if (bound.path[0]) {
		log_info("listening on unix@%s", bound.path);
		return 0;
	}
	snprintf(bound.port, sizeof(bound.port), "%u", addr_local_port(srv->lfd));
	log_info("listening on %s", addr_format(&bound, where, sizeof(where)));
	return 0;
}

/* Several loops watch the one listening socket; the losers of a race get
 * EAGAIN. A few accepts per wake-up keep bursts of connections (a HAProxy
 * reload) spread over the workers. */
static void on_accept(struct ev_loop *loop, ev_io *io, int revents)
{
	struct worker *w = io->data;

	for (int i = 0; i < 8; i++) {
		int fd = accept4(w->srv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		int one = 1, sndbuf = SERVER_SNDBUF;

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				/* The pending connection stays pending and the
				 * listener stays readable: pause accepting rather
				 * than spin. */
				log_warn("accept: %s; pausing accepts for 100 ms", strerror(errno));
				ev_io_stop(loop, &w->accept_w);
				/* a one-shot timer must be set again before a restart */
				ev_timer_set(&w->accept_pause_w, 0.1, 0.);
				ev_timer_start(loop, &w->accept_pause_w);
			}
			return;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
		conn_accept(&w->conns, fd);
	}
}

static void on_accept_pause(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = t->data;

	ev_io_start(loop, &w->accept_w);
}

/* The agent stops: accept no more, let the connections finish (the loop
 * ends in on_prepare once they are all closed), or end at the grace time. */
static void on_stop(struct ev_loop *loop, ev_async *a, int revents)
{
	struct worker *w = a->data;

	if (w->stopping)
		return;
	w->stopping = 1;
	/* on_prepare ends the loop once the connections are closed */
	ev_prepare_start(loop, &w->reap_w);
	ev_io_stop(loop, &w->accept_w);
	ev_timer_stop(loop, &w->accept_pause_w);
	conn_stop_all(&w->conns);
	ev_timer_start(loop, &w->grace_w);
}

static void on_grace_end(struct ev_loop *loop, ev_timer *t, int revents)
{
	ev_break(loop, EVBREAK_ALL);
}

/* Moves the worker to the current rules when a reload replaced them. The
 * server keeps its reference on the old rules until every worker's
 * seen_gen has passed them (server_collect_rules), so the rules loaded here
 * cannot be freed between the load and the acquire. */
static void worker_refresh_rules(struct worker *w)
{
	struct rules *cur = atomic_load_explicit(&w->srv->rules, memory_order_acquire);
	struct rules *old = w->rules;

	if (cur == old)
		return;
	/* the rule made for an override that this thread holds is old's */
	decide_forget();
	rules_acquire(cur);
	w->rules = cur;
	atomic_store_explicit(&w->seen_gen, rules_gen(cur), memory_order_release);
	store_rules_changed(w->store);
	rules_release(old);
	/* the arguments are judged again, against the new rules' names */
	w->args_msgs = 0;
	w->args_seen = 0;
}

static void worker_refresh_overrides(struct worker *w)
{
	struct overrides *old = w->ovt, *cur;

	pthread_mutex_lock(&w->srv->ov_lock);
	cur = w->srv->ovt;
	if (cur != old && cur)
		overrides_acquire(cur);
	pthread_mutex_unlock(&w->srv->ov_lock);
	if (cur == old)
		return;
	w->ovt = cur;
	overrides_release(old);
}

static void on_wake(struct ev_loop *loop, ev_async *a, int revents)
{
	worker_refresh_rules(a->data);
	worker_refresh_overrides(a->data);
}

void server_set_overrides(struct server *srv, struct overrides *o)
{
	struct overrides *old;

	pthread_mutex_lock(&srv->ov_lock);
	old = srv->ovt;
	srv->ovt = o;
	pthread_mutex_unlock(&srv->ov_lock);
	overrides_release(old);
	for (int i = 0; i < srv->nworkers; i++)
		ev_async_send(srv->workers[i].loop, &srv->workers[i].wake_w);
}

uint64_t server_args_missing(struct server *srv, uint64_t *gen)
{
	uint64_t m;

	pthread_mutex_lock(&srv->args_lock);
	m = srv->args_missing;
	*gen = srv->args_gen;
	pthread_mutex_unlock(&srv->args_lock);
	return m;
}

struct overrides *server_overrides(struct server *srv)
{
	struct overrides *o;

	pthread_mutex_lock(&srv->ov_lock);
	o = srv->ovt;
	if (o)
		overrides_acquire(o);
	pthread_mutex_unlock(&srv->ov_lock);
	return o;
}

/* The store learned a new set of overrides (store.h: on_overrides). */
static void on_store_overrides(void *priv, struct overrides *o)
{
	server_set_overrides(priv, o);
}

/* Runs before the loop blocks, but only while there is work for it: the
 * connections start it when they queue a closed connection or an answer
 * (conn.c: conn_set.prepare), on_stop when the worker stops. A loop iteration that reads a
 * NOTIFY and answers it at once has none. */
static void on_prepare(struct ev_loop *loop, ev_prepare *p, int revents)
{
	struct worker *w = p->data;

	worker_refresh_rules(w);
	conn_flush_pending(&w->conns);
	conn_reap(&w->conns);
	if (w->stopping && w->conns.nconns == 0)
		ev_break(loop, EVBREAK_ALL);
	if (!w->stopping && !conn_set_busy(&w->conns))
		ev_prepare_stop(loop, p);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	ev_run(w->loop, 0);
	return NULL;
}

/* Frees what worker_init() set up, in reverse; safe on a partly set-up
 * worker (every field is NULL or valid). */
static void worker_fini(struct worker *w)
{
	/* Pending store answers are written to connections still open. */
	store_worker_free(w->store);
	w->store = NULL;
	if (w->loop) {
		conn_flush_pending(&w->conns);
		conn_set_free(&w->conns);
		w->fixed = NULL; /* the server's (server_stop) */
		ev_loop_destroy(w->loop);
		w->loop = NULL;
	}
	rules_release(w->rules);
	w->rules = NULL;
	overrides_release(w->ovt);
	w->ovt = NULL;
}

/* Sets up worker i, its thread not started. Returns 0, or -1 after logging
 * why, with what was set up undone. */
static int worker_init(struct server *srv, struct worker *w, int i)
{
	w->srv = srv;
	w->idx = i;
	w->rule_stats = rulestats_worker(srv->rulestats, i);
	w->clients = rulestats_sketches(srv->rulestats, i);
	w->rules = atomic_load(&srv->rules);
	rules_acquire(w->rules);
	atomic_store(&w->seen_gen, rules_gen(w->rules));
	w->rnd = 0x9e3779b9u ^ (uint32_t)(i * 0x85ebca6bu) ^ (uint32_t)clock_now_us();
	if (w->rnd == 0)
		w->rnd = 1;
	w->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
	if (!w->loop) {
		log_err("worker %d: cannot create an event loop", i);
		worker_fini(w);
		return -1;
	}
	ev_io_init(&w->accept_w, on_accept, srv->lfd, EV_READ);
	w->accept_w.data = w;
	ev_io_start(w->loop, &w->accept_w);
	ev_timer_init(&w->accept_pause_w, on_accept_pause, 0.1, 0.);
	w->accept_pause_w.data = w;
	ev_async_init(&w->stop_w, on_stop);
	w->stop_w.data = w;
	ev_async_start(w->loop, &w->stop_w);
	ev_timer_init(&w->grace_w, on_grace_end, SERVER_STOP_GRACE, 0.);
	w->grace_w.data = w;
	ev_prepare_init(&w->reap_w, on_prepare);
	w->reap_w.data = w;
	ev_prepare_start(w->loop, &w->reap_w);
	w->conns.loop = w->loop;
	w->conns.cfg = &srv->cfg.conn;
	w->conns.handler = worker_handler(srv->cfg.fixed_answer);
	w->conns.app = w;
	w->conns.actions_max = DECIDE_ACTIONS_MAX;
	w->conns.out_grown = &srv->out_grown;
	w->conns.prepare = &w->reap_w;
	w->conns.idx = i;
	ev_async_init(&w->wake_w, on_wake);
	w->wake_w.data = w;
	ev_async_start(w->loop, &w->wake_w);
	w->store = store_worker_new(srv->store, w->loop, i, worker_answer, w);
	if (!w->store) {
		worker_fini(w);
		return -1;
	}
	store_worker_awaited(w->store, worker_awaited);
	return 0;
}

int server_start(struct server *srv)
{
	sigset_t all, old;
	int rc = 0;

	srv->nworkers = 0;
	pthread_mutex_init(&srv->ov_lock, NULL);
	pthread_mutex_init(&srv->args_lock, NULL);
	srv->args_gen = srv->args_missing = 0;
	srv->ovt = NULL;
	srv->workers = xcalloc((size_t)srv->cfg.threads, sizeof(*srv->workers));
	srv->rulestats = rulestats_new(srv->cfg.threads);
	srv->flights = flights_new();
	if (!srv->workers || !srv->rulestats || !srv->flights) {
		log_err("out of memory for %d workers", srv->cfg.threads);
		return -1;
	}
	rulestats_assign(srv->rulestats, atomic_load(&srv->rules));
	srv->store->on_overrides = on_store_overrides;
	srv->store->on_overrides_priv = srv;
	/* Workers never take signals: the main thread handles them. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (int i = 0; i < srv->cfg.threads; i++) {
		struct worker *w = &srv->workers[i];

		if (worker_init(srv, w, i) < 0) {
			rc = -1;
			break;
		}
		if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
			log_err("cannot start worker %d", i);
			worker_fini(w);
			rc = -1;
			break;
		}
		srv->nworkers = i + 1;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

void server_stop(struct server *srv)
{
	atomic_store(&srv->stopping, 1);
	for (int i = 0; i < srv->nworkers; i++)
		ev_async_send(srv->workers[i].loop, &srv->workers[i].stop_w);
	for (int i = 0; i < srv->nworkers; i++) {
		pthread_join(srv->workers[i].thread, NULL);
		worker_fini(&srv->workers[i]);
	}
	xfree(srv->workers);
	srv->workers = NULL;
	srv->nworkers = 0;
	xfree(atomic_exchange(&srv->fixed, NULL));
	rulestats_free(srv->rulestats);
	srv->rulestats = NULL;
	flights_free(srv->flights);
	srv->flights = NULL;
	overrides_release(srv->ovt);
	srv->ovt = NULL;
	pthread_mutex_destroy(&srv->ov_lock);
	pthread_mutex_destroy(&srv->args_lock);
	while (srv->retired) {
		struct retired *r = srv->retired;

		srv->retired = r->next;
		rules_release(r->rules);
		xfree(r);
	}
	if (srv->lfd >= 0)
		close(srv->lfd);
	srv->lfd = -1;
}
