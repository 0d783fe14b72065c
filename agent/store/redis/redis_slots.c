/* redis_slots.c: CLUSTER SLOTS over a plain socket (see redis_slots.h). */
#include "redis_slots.h"

#include <errno.h>
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "alloc.h"
#include "redis_encode.h"
#include "redis_node.h"
#include "store_redis.h"

#define READ_CHUNK 65536

struct redis_slots {
	struct ev_loop *loop;
	struct addr node;
	redis_slots_done *done;
	void *owner;
	int fd;
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

/* Ends the question: no more I/O, done() with the map (which lives in q),
 * then q is freed. */
static void finish(struct redis_slots *q, const struct redis_cluster_map *map, const char *why)
{
	ev_timer_stop(q->loop, &q->timer);
	if (q->fd >= 0) {
		ev_io_stop(q->loop, &q->io);
		close(q->fd);
		q->fd = -1;
	}
	q->done(q->owner, &q->node, map, why);
	redis_slots_cancel(q);
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
		n = recv(q->fd, q->buf + q->len, q->cap - q->len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			finish(q, NULL, n == 0 ? "connection closed" : strerror(errno));
			return;
		}
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

static void on_io(struct ev_loop *loop, ev_io *io, int revents)
{
	struct redis_slots *q = io->data;

	if (revents & EV_WRITE) {
		while (q->sent < q->reqlen) {
			ssize_t n = send(q->fd, q->req + q->sent, q->reqlen - q->sent, MSG_NOSIGNAL);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
				return;
			if (n <= 0) {
				finish(q, NULL, errno == ECONNREFUSED ? "connection refused"
								      : strerror(errno));
				return;
			}
			q->sent += (size_t)n;
		}
		ev_io_stop(loop, &q->io);
		ev_io_set(&q->io, q->fd, EV_READ);
		ev_io_start(loop, &q->io);
		return;
	}
	on_readable(q);
}

static void on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_slots *q = t->data;

	finish(q, NULL, q->why ? q->why : "no answer in time");
}

/* A non-blocking connect to the node; -1 with q->why. */
static int start_connect(struct redis_slots *q)
{
	struct addrinfo hints, *res, *ai;
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	rc = getaddrinfo(q->node.host, q->node.port, &hints, &res);
	if (rc != 0) {
		q->why = "cannot resolve the node's host";
		return -1;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		q->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (q->fd < 0)
			continue;
		if (connect(q->fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS)
			break;
		close(q->fd);
		q->fd = -1;
	}
	freeaddrinfo(res);
	if (q->fd < 0) {
		q->why = "cannot connect";
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
	q->fd = -1;
	ev_timer_init(&q->timer, on_timer, timeout, 0.);
	q->timer.data = q;
	if (build_request(q, cfg) < 0) {
		q->why = "credentials too long";
	} else if (start_connect(q) == 0) {
		ev_io_init(&q->io, on_io, q->fd, EV_WRITE);
		q->io.data = q;
		ev_io_start(loop, &q->io);
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
	if (q->fd >= 0) {
		ev_io_stop(q->loop, &q->io);
		close(q->fd);
	}
	xfree(q->buf);
	xfree(q);
}
