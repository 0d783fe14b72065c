/* SPDX-License-Identifier: Apache-2.0 */
/* redis_slots.c: CLUSTER SLOTS over a bare transport (see redis_slots.h). */
#include "redis_slots.h"

#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "redis_auth.h"
#include "redis_encode.h"
#include "redis_node.h"
#include "redis_transport.h"
#include "store_redis.h"

#define READ_CHUNK 65536

struct redis_slots {
	struct ev_loop *loop;
	struct addr node;
	redis_slots_done *done;
	void *owner;
	struct redis_transport *t; /* NULL once closed */
	bool connected;            /* the transport's handshake is done */
	ev_io io;
	ev_timer timer;
	char req[1024];
	size_t reqlen, sent;
	int auth;                 /* an AUTH reply comes first */
	char *buf;
	size_t len, cap;
	const char *why;          /* set when it failed before any I/O */
	struct redis_cluster_map map;
};

/* Appends a command's RESP; returns 0 or -1 when req is full. */
static int put_command(struct redis_slots *q, size_t argc, const char *const *argv,
		       const size_t *argvlen)
{
	if (redis_resp_len(argc, argvlen) > sizeof(q->req) - q->reqlen)
		return -1;
	q->reqlen += redis_resp_put(q->req + q->reqlen, argc, argv, argvlen);
	return 0;
}

static int build_request(struct redis_slots *q, const struct redis_config *cfg)
{
	static const char *const slots[2] = { "CLUSTER", "SLOTS" };
	static const size_t slotslen[2] = { 7, 5 };
	const char *auth[3];
	size_t authlen[3];
	int n = redis_node_auth_argv(cfg, auth, authlen);

	if (n) {
		if (put_command(q, (size_t)n, auth, authlen) < 0)
			return -1;
		q->auth = 1;
	}
	return put_command(q, 2, slots, slotslen);
}

static void close_transport(struct redis_slots *q)
{
	if (!q->t)
		return;
	ev_io_stop(q->loop, &q->io);
	q->t->ops->close(q->t);
	q->t = NULL;
}

/* Waits for the transport's descriptor to be readable or writable. */
static void wait_for(struct redis_slots *q, int events)
{
	if (ev_is_active(&q->io) && (q->io.events & (EV_READ | EV_WRITE)) == events)
		return;
	ev_io_stop(q->loop, &q->io);
	ev_io_set(&q->io, q->t->fd, events);
	ev_io_start(q->loop, &q->io);
}

/* Ends the question: no more I/O, done() with the map (which lives in q),
 * then q is freed. */
static void finish(struct redis_slots *q, const struct redis_cluster_map *map, const char *why)
{
	char text[sizeof(q->t->errstr)];

	/* why may be the transport's, which closing frees */
	if (why)
		snprintf(text, sizeof(text), "%s", why);
	ev_timer_stop(q->loop, &q->timer);
	close_transport(q);
	q->done(q->owner, &q->node, map, why ? text : NULL);
	redis_slots_cancel(q);
}

/* A read's or write's result that is no progress: waits as the transport
 * asks, or ends the query (0: the peer closed; an error); true then, and
 * the caller returns. */
static bool stalled(struct redis_slots *q, ssize_t n)
{
	if (n == REDIS_T_WANT_READ || n == REDIS_T_WANT_WRITE) {
		wait_for(q, n == REDIS_T_WANT_READ ? EV_READ : EV_WRITE);
		return true;
	}
	if (n <= 0) {
		finish(q, NULL, n == 0 ? "connection closed" : q->t->errstr);
		return true;
	}
	return false;
}

/* Reads the AUTH reply line, if one is due. Returns 1 when past it, 0 when
 * more bytes are needed, -1 after finish(). */
static int skip_auth(struct redis_slots *q)
{
	char *eol;
	size_t n;

	if (!q->auth)
		return 1;
	eol = memchr(q->buf, '\n', q->len);
	if (!eol)
		return q->len > 512 ? (finish(q, NULL, "malformed AUTH reply"), -1) : 0;
	n = (size_t)(eol - q->buf) + 1;
	if (n != 5 || memcmp(q->buf, "+OK\r\n", 5) != 0) {
		finish(q, NULL, q->buf[0] == '-' ? "AUTH refused" : "malformed AUTH reply");
		return -1;
	}
	memmove(q->buf, q->buf + n, q->len - n);
	q->len -= n;
	q->auth = 0;
	return 1;
}

static void on_readable(struct redis_slots *q)
{
	for (;;) {
		ssize_t n;
		size_t used;
		enum redis_cluster_rc rc;

		if (q->cap - q->len < READ_CHUNK) {
			size_t cap = q->cap ? q->cap * 2 : 2 * READ_CHUNK;
			char *nb;

			if (cap > REDIS_CLUSTER_REPLY_MAX + READ_CHUNK) {
				finish(q, NULL, "reply too large");
				return;
			}
			nb = xrealloc(q->buf, cap);
			if (!nb) {
				finish(q, NULL, "out of memory");
				return;
			}
			q->buf = nb;
			q->cap = cap;
		}
		n = q->t->ops->read(q->t, q->buf + q->len, q->cap - q->len);
		if (stalled(q, n))
			return;
		q->len += (size_t)n;
		if (skip_auth(q) <= 0)
			return;
		rc = redis_cluster_map_parse(&q->map, q->buf, q->len, &q->node, &used);
		if (rc == REDIS_CLUSTER_OK) {
			finish(q, &q->map, NULL);
			return;
		}
		if (rc == REDIS_CLUSTER_ERR) {
			finish(q, NULL, q->map.errstr[0] ? q->map.errstr : "malformed reply");
			return;
		}
	}
}

/* The transport's handshake, then the request, then the reply. */
static void on_io(struct ev_loop *loop, ev_io *io, int revents)
{
	struct redis_slots *q = io->data;
	ssize_t n;

	if (!q->connected) {
		n = q->t->ops->handshake(q->t);
		if (n == REDIS_T_WANT_READ || n == REDIS_T_WANT_WRITE) {
			wait_for(q, n == REDIS_T_WANT_READ ? EV_READ : EV_WRITE);
			return;
		}
		if (n < 0) {
			finish(q, NULL, q->t->errstr);
			return;
		}
		q->connected = true;
	}
	while (q->sent < q->reqlen) {
		n = q->t->ops->write(q->t, q->req + q->sent, q->reqlen - q->sent);
		if (stalled(q, n))
			return;
		q->sent += (size_t)n;
	}
	wait_for(q, EV_READ);
	if (revents & EV_READ)
		on_readable(q);
}

static void on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_slots *q = t->data;

	finish(q, NULL, q->why ? q->why : "no answer in time");
}

/* A non-blocking connect to the node; -1 with q->why. */
static int start_connect(struct redis_slots *q, const struct redis_config *cfg)
{
	q->t = redis_transport_new(cfg);
	if (!q->t) {
		q->why = "out of memory";
		return -1;
	}
	if (q->t->ops->connect(q->t, &q->node) == REDIS_T_ERROR || q->t->fd < 0) {
		q->why = "cannot connect";
		close_transport(q);
		return -1;
	}
	return 0;
}

struct redis_slots *redis_slots_ask(struct ev_loop *loop, const struct addr *node,
				    const struct redis_config *cfg, double timeout,
				    redis_slots_done *done, void *owner)
{
	struct redis_slots *q = xcalloc(1, sizeof(*q));

	if (!q)
		return NULL;
	q->loop = loop;
	q->node = *node;
	q->done = done;
	q->owner = owner;
	ev_io_init(&q->io, on_io, -1, EV_WRITE);
	q->io.data = q;
	ev_timer_init(&q->timer, on_timer, timeout, 0.);
	q->timer.data = q;
	if (build_request(q, cfg) < 0) {
		q->why = "credentials too long";
	} else if (start_connect(q, cfg) == 0) {
		/* connected or not, the first writable turn goes on */
		wait_for(q, EV_WRITE);
	} else {
		/* failed already: report from the loop, not from here */
		ev_timer_set(&q->timer, 0., 0.);
	}
	ev_timer_start(loop, &q->timer);
	return q;
}

void redis_slots_cancel(struct redis_slots *q)
{
	if (!q)
		return;
	ev_timer_stop(q->loop, &q->timer);
	close_transport(q);
	xfree(q->buf);
	xfree(q);
}
