#include "metrics.h"

#include <errno.h>
#include <stddef.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admin.h"
#include "alloc.h"
#include "log.h"
#include "out.h"
#include "server.h"
#include "spop.h"
#include "memstore.h"
#include "store.h"

#define REQ_MAX 4096
#define CLIENT_TIMEOUT 5.0

struct mclient {
	struct metrics *m;
	int fd;
	ev_io io;
	ev_timer timer;
	size_t len;
	char req[REQ_MAX];
};

struct metrics {
	struct ev_loop *loop;
	struct server *srv;
	int fd;
	ev_io accept_w;
};

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

/* Sums a worker counter over every worker. */
#define SUM(field)                                                            \
	({                                                                    \
		uint64_t s_ = 0;                                              \
		for (int i_ = 0; i_ < srv->nworkers; i_++)                    \
			s_ += STAT_GET(srv->workers[i_].stats.field);         \
		s_;                                                           \
	})
#define RSUM(field)                                                           \
	({                                                                    \
		uint64_t s_ = 0;                                              \
		for (int i_ = 0; i_ < srv->nworkers; i_++)                    \
			s_ += STAT_GET(srv->workers[i_].store->stats.field);  \
		s_;                                                           \
	})

/* A histogram summed over the workers' stores; bounds in seconds. */
static void histogram(struct out *o, struct server *srv, const char *name, const char *help,
		      size_t offset)
{
	static const int64_t bound[HIST_BUCKETS - 1] = HIST_BOUNDS_US;
	uint64_t cum = 0, sum = 0, count = 0;

	outf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (int b = 0; b < HIST_BUCKETS; b++) {
		for (int i = 0; i < srv->nworkers; i++) {
			const struct hist *h;

			h = (const struct hist *)((const char *)&srv->workers[i].store->stats + offset);
			cum += STAT_GET(h->bucket[b]);
			if (b == 0) {
				sum += STAT_GET(h->sum_us);
				count += STAT_GET(h->count);
			}
		}
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
	outf(o, "%s_sum %.6f\n%s_count %llu\n", name, (double)sum / 1e6, name,
	     (unsigned long long)count);
}

static void render(struct server *srv, struct out *o)
{
	uint64_t acc = SUM(accepted), closed = SUM(closed);

	counter(o, "spoa_rl_connections_total", "SPOP connections accepted.", acc);
	gauge(o, "spoa_rl_connections", "SPOP connections open.", acc - closed);
	counter(o, "spoa_rl_hellos_total", "SPOP handshakes completed.", SUM(hellos));
	counter(o, "spoa_rl_healthchecks_total", "HAProxy health checks answered.",
		SUM(healthchecks));
	counter(o, "spoa_rl_notify_total", "NOTIFY frames received.", SUM(notifies));
	counter(o, "spoa_rl_decisions_total", "check-rate decisions answered.",
		SUM(decisions));
	counter(o, "spoa_rl_limited_total", "Decisions with status 429.", SUM(limited));
	counter(o, "spoa_rl_degraded_total", "Decisions made without the shared store.",
		SUM(degraded));
	counter(o, "spoa_rl_shadow_total",
		"Requests that would have been refused, forwarded by shadow mode.", SUM(shadow));
	counter(o, "spoa_rl_store_down_total",
		"Requests refused with 503 because the store failed (fail-closed).",
		SUM(store_down));
	outf(o, "# HELP spoa_rl_shed_total Requests shed with 503, by priority.\n"
		"# TYPE spoa_rl_shed_total counter\n");
	for (int p = 1; p < 4; p++)
		outf(o, "spoa_rl_shed_total{priority=\"%d\"} %llu\n", p,
		     (unsigned long long)SUM(shed[p]));
	{
		struct ruleset *rs = atomic_load(&srv->rules);

		counter(o, "spoa_rl_reloads_total", "Rules reloaded by SIGHUP.",
			STAT_GET(srv->reloads));
		counter(o, "spoa_rl_reload_failures_total",
			"SIGHUPs whose file was invalid (the rules in force stayed).",
			STAT_GET(srv->reload_failures));
		gauge(o, "spoa_rl_rules_generation", "Generation of the rules in force (1 at start, +1 per reload).",
		      rs ? rs->gen : 0);
	}
	outf(o, "# HELP spoa_rl_disconnects_total AGENT-DISCONNECT frames sent, by status.\n"
		"# TYPE spoa_rl_disconnects_total counter\n");
	for (int st = 0; st < 14; st++) {
		uint64_t v = SUM(disconnects_sent[st]);

		if (v)
			outf(o, "spoa_rl_disconnects_total{status=\"%d\"} %llu\n",
			     st == 13 ? 99 : st, (unsigned long long)v);
	}
	if (srv->store->ops->shared) {
		counter(o, "spoa_rl_redis_queries_total", "Decisions submitted to the Redis store.",
			RSUM(queries));
		counter(o, "spoa_rl_redis_calls_total", "Script calls sent to Redis (batches).",
			RSUM(calls));
		counter(o, "spoa_rl_redis_replies_total", "Decisions answered by Redis.",
			RSUM(replies));
		counter(o, "spoa_rl_local_refusals_total",
			"Refusals answered locally: the client was known refused until a later time.",
			RSUM(local_refusals));
		counter(o, "spoa_rl_redis_timeouts_total", "Decisions past their deadline.",
			RSUM(timeouts));
		counter(o, "spoa_rl_redis_unavailable_total",
			"Decisions made without Redis: no connection or queue full.",
			RSUM(unavailable));
		counter(o, "spoa_rl_redis_errors_total", "Error replies from Redis.", RSUM(errors));
		counter(o, "spoa_rl_redis_connects_total", "Connection attempts to Redis.",
			RSUM(connects));
		counter(o, "spoa_rl_redis_noscript_total", "Scripts reloaded after NOSCRIPT.",
			RSUM(noscript));
		counter(o, "spoa_rl_redis_breaker_trips_total",
			"Times the circuit breaker stopped calls to Redis after failures.",
			RSUM(breaker_trips));
		counter(o, "spoa_rl_redis_breaker_skips_total",
			"Decisions made without Redis while the circuit breaker was open.",
			RSUM(breaker_skips));
		histogram(o, srv, "spoa_rl_redis_call_duration_seconds",
			  "Script calls, from sending to the reply.",
			  offsetof(struct store_stats, call_time));
		histogram(o, srv, "spoa_rl_redis_decision_duration_seconds",
			  "Decisions answered by Redis, from submission to the answer (waiting for a call, then the call).",
			  offsetof(struct store_stats, wait_time));
	}
	{
		struct memstore_stats ms;

		memstore_get_stats(srv->store->mem, &ms);
		gauge(o, "spoa_rl_memory_keys", "Client limits tracked in memory.", ms.keys);
		counter(o, "spoa_rl_memory_full_total",
			"In-memory decisions made without room to keep state.", ms.full);
	}
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

static void client_close(struct mclient *c)
{
	ev_io_stop(c->m->loop, &c->io);
	ev_timer_stop(c->m->loop, &c->timer);
	close(c->fd);
	xfree(c);
}

/* Writes the whole answer; the socket is blocking for this short write. */
static void respond(struct mclient *c, const char *status, const char *type,
		    const char *body, size_t len)
{
	char head[256];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n", status, type, len);
	struct iovec iov[2] = { { head, (size_t)n }, { (void *)body, len } };
	struct msghdr msg = { .msg_iov = iov, .msg_iovlen = 2 };

	if (sendmsg(c->fd, &msg, MSG_NOSIGNAL) < 0)
		log_debug("metrics: write failed: %s", strerror(errno));
}

static void on_client(struct ev_loop *loop, ev_io *io, int revents)
{
	struct mclient *c = io->data;
	ssize_t n = recv(c->fd, c->req + c->len, sizeof(c->req) - 1 - c->len, 0);
	char *body = NULL;
	size_t len;

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		client_close(c);
		return;
	}
	c->len += (size_t)n;
	c->req[c->len] = '\0';
	if (!strstr(c->req, "\r\n\r\n") && !strstr(c->req, "\n\n")) {
		if (c->len == sizeof(c->req) - 1)
			client_close(c);
		return;
	}
	if (strncmp(c->req, "GET /metrics ", 13) == 0 || strncmp(c->req, "GET /metrics?", 13) == 0) {
		len = metrics_render(c->m->srv, &body);
		if (body)
			respond(c, "200 OK", "text/plain; version=0.0.4", body, len);
		else
			respond(c, "500 Internal Server Error", "text/plain", "", 0);
		xfree(body);
	} else if (c->m->srv->admin && (strncmp(c->req, "GET /admin/", 11) == 0 ||
					 strncmp(c->req, "POST /admin/", 12) == 0)) {
		char method[8], target[1024], *out = xmalloc(65536);
		const char *status = "500 Internal Server Error";
		int alen = -1;

		if (out && sscanf(c->req, "%7s %1023s", method, target) == 2)
			alen = admin_handle(c->m->srv, method, target, out, 65536, &status);
		if (alen >= 0)
			respond(c, status, "application/json", out, (size_t)alen);
		else
			respond(c, "500 Internal Server Error", "text/plain", "", 0);
		xfree(out);
	} else if (strncmp(c->req, "GET /healthz ", 13) == 0) {
		respond(c, "200 OK", "text/plain", "ok\n", 3);
	} else {
		respond(c, "404 Not Found", "text/plain", "not found\n", 10);
	}
	client_close(c);
}

static void on_client_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
	client_close(t->data);
}

static void on_accept(struct ev_loop *loop, ev_io *io, int revents)
{
	struct metrics *m = io->data;
	int fd = accept4(m->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	struct mclient *c;

	if (fd < 0)
		return;
	c = xcalloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->m = m;
	c->fd = fd;
	ev_io_init(&c->io, on_client, fd, EV_READ);
	c->io.data = c;
	ev_timer_init(&c->timer, on_client_timeout, CLIENT_TIMEOUT, 0.);
	c->timer.data = c;
	ev_io_start(loop, &c->io);
	ev_timer_start(loop, &c->timer);
}

struct metrics *metrics_start(struct ev_loop *loop, struct server *srv, const char *host,
			      const char *port)
{
	struct addrinfo hints = { 0 }, *res, *ai;
	struct metrics *m;
	int fd = -1, one = 1;

	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	if (getaddrinfo(host, port, &hints, &res) != 0) {
		log_err("metrics: cannot resolve %s:%s", host, port);
		return NULL;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		log_err("metrics: cannot listen on %s:%s: %s", host, port, strerror(errno));
		return NULL;
	}
	m = xcalloc(1, sizeof(*m));
	if (!m) {
		close(fd);
		return NULL;
	}
	m->loop = loop;
	m->srv = srv;
	m->fd = fd;
	ev_io_init(&m->accept_w, on_accept, fd, EV_READ);
	m->accept_w.data = m;
	ev_io_start(loop, &m->accept_w);
	log_info("metrics on http://%s:%s/metrics", host, port);
	return m;
}

void metrics_stop(struct metrics *m)
{
	if (!m)
		return;
	ev_io_stop(m->loop, &m->accept_w);
	close(m->fd);
	xfree(m);
}
