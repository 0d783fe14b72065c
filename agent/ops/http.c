/* SPDX-License-Identifier: Apache-2.0 */
#include "http.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "addr.h"
#include "alloc.h"
#include "http_head.h"
#include "log.h"

#define HTTP_BACKLOG 64
#define ACCEPTS_PER_WAKE 16
#define ACCEPT_PAUSE 0.1   /* seconds without accepting after EMFILE and the like */

enum req_state {
	REQ_READ,    /* reading the head */
	REQ_HANDLE,  /* with the handler; nothing watches the socket */
	REQ_WRITE,   /* writing the answer */
	REQ_DRAIN,   /* answer and FIN sent; reading until the client's FIN, so
	              * that close() sends no RST that could destroy the
	              * answer before the client has read it */
};

struct route {
	const char *method, *path;
	size_t plen;
	http_handler fn;
	void *arg;
};

struct http_server {
	struct ev_loop *loop;
	int fd;
	ev_io accept_w;
	ev_timer pause_w;       /* accepting resumes */
	double timeout;         /* HTTP_TIMEOUT; tests shorten it */
	int nconns;             /* connections open */
	int max_conns;          /* http_max_conns() */
	int full;               /* accepting stopped at max_conns */
	struct route routes[HTTP_ROUTES_MAX];
	size_t nroutes;
	struct http_req *reqs;  /* every request not yet freed */
};

/* A request and its connection. It is freed once the connection is closed
 * and its handler, if it was given one, has answered: whichever comes
 * last frees it, so a late answer never finds it gone. */
struct http_req {
	struct http_server *srv;
	struct http_req *prev, *next;
	int fd;                 /* -1 once closed */
	enum req_state state;
	ev_io io;
	ev_timer timer;
	const char *query;
	int head_only;          /* HEAD: a GET answered without its body */
	char *out;              /* the answer, head and body */
	size_t out_len, out_off;
	struct http_head head;
	size_t len;             /* bytes in buf */
	char buf[HTTP_HEAD_MAX];
};

/* What is sent when there is no memory for the answer. */
static const char oom_answer[] = "HTTP/1.1 500 Internal Server Error\r\n"
				 "Content-Length: 0\r\nConnection: close\r\n\r\n";

static const char *reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	default: return "Unknown";
	}
}

static void req_close(struct http_req *req)
{
	struct http_server *s = req->srv;

	if (req->fd < 0)
		return;
	ev_io_stop(s->loop, &req->io);
	ev_timer_stop(s->loop, &req->timer);
	close(req->fd);
	req->fd = -1;
	s->nconns--;
	/* a place is free: accept again, unless a pause after EMFILE runs */
	if (s->full && s->fd >= 0) {
		s->full = 0;
		if (!ev_is_active(&s->pause_w))
			ev_io_start(s->loop, &s->accept_w);
	}
}

static void req_free(struct http_req *req)
{
	if (req->prev)
		req->prev->next = req->next;
	else
		req->srv->reqs = req->next;
	if (req->next)
		req->next->prev = req->prev;
	if (req->out != oom_answer)
		xfree(req->out);
	xfree(req);
}

/* Watches the socket for `events` only. */
static void watch(struct http_req *req, int events)
{
	ev_io_stop(req->srv->loop, &req->io);
	ev_io_set(&req->io, req->fd, events);
	ev_io_start(req->srv->loop, &req->io);
}

/* (Re)starts the connection's timeout. */
static void arm(struct http_req *req)
{
	ev_timer_stop(req->srv->loop, &req->timer);
	ev_timer_set(&req->timer, req->srv->timeout, 0.);
	ev_timer_start(req->srv->loop, &req->timer);
}

/* Puts the answer in req->out and starts writing it from the loop: never
 * from here, so that no caller sees req freed under it. `extra` holds
 * header lines ("Allow: GET\r\n") or is "". */
static void answer(struct http_req *req, int status, const char *type, const char *extra,
		   const void *body, size_t len)
{
	static const char fmt[] = "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
				  "%sConnection: close\r\n\r\n";
	int hn;

	if (status < 100 || status > 599)
		status = 500;
	hn = snprintf(NULL, 0, fmt, status, reason(status), type, len, extra);
	req->out = hn < 0 || len > (size_t)-1 - (size_t)hn - 1 ? NULL
							       : xmalloc((size_t)hn + len + 1);
	if (req->out) {
		snprintf(req->out, (size_t)hn + 1, fmt, status, reason(status), type, len, extra);
		if (len && !req->head_only)
			memcpy(req->out + hn, body, len);
		/* HEAD: the Content-Length of the GET, no body */
		req->out_len = (size_t)hn + (req->head_only ? 0 : len);
	} else {
		req->out = (char *)oom_answer;
		req->out_len = sizeof(oom_answer) - 1;
	}
	req->out_off = 0;
	req->state = REQ_WRITE;
	watch(req, EV_WRITE);
	arm(req);
}

static void answer_text(struct http_req *req, int status, const char *extra, const char *text)
{
	answer(req, status, "text/plain", extra, text, strlen(text));
}

static int route_matches(const struct route *r, const char *path, size_t plen)
{
	if (r->path[r->plen - 1] == '/')
		return plen >= r->plen && memcmp(path, r->path, r->plen) == 0;
	return plen == r->plen && memcmp(path, r->path, plen) == 0;
}

/* Hands a complete head to its route's handler, or answers 404 or 405. */
static void dispatch(struct http_req *req)
{
	struct http_server *s = req->srv;
	struct http_head *h = &req->head;
	const struct route *best = NULL;
	const char *method = req->buf + h->method.off, *path = req->buf + h->path.off;
	char allow[16 + HTTP_ROUTES_MAX * (HTTP_HEAD_METHOD_MAX + 2) + 8]; /* + ", HEAD" */
	size_t n = 0;

	/* http_head_parse() leaves a byte after each of these that is free */
	req->buf[h->method.off + h->method.len] = '\0';
	req->buf[h->path.off + h->path.len] = '\0';
	req->buf[h->target.off + h->target.len] = '\0';
	for (size_t i = 0; i < h->nheaders; i++)
		req->buf[h->header[i].value.off + h->header[i].value.len] = '\0';
	req->query = h->path.len < h->target.len ? req->buf + h->query.off : "";
	/* HEAD is a GET whose body is not sent: the handlers see a GET */
	if (strcmp(method, "HEAD") == 0) {
		memcpy(req->buf + h->method.off, "GET", 4);
		h->method.len = 3;
		req->head_only = 1;
	}

	for (size_t i = 0; i < s->nroutes; i++)
		if (route_matches(&s->routes[i], path, h->path.len) &&
		    (!best || s->routes[i].plen > best->plen))
			best = &s->routes[i];
	if (!best) {
		answer_text(req, 404, "", "not found\n");
		return;
	}
	for (size_t i = 0; i < s->nroutes; i++) {
		const struct route *r = &s->routes[i];

		if (r->plen != best->plen || memcmp(r->path, best->path, r->plen) != 0)
			continue;
		if (strcmp(r->method, method) == 0) {
			req->state = REQ_HANDLE;
			ev_io_stop(s->loop, &req->io);
			arm(req);
			r->fn(req, r->arg);
			return;  /* req may be answered already */
		}
		n += (size_t)snprintf(allow + n, sizeof(allow) - n, "%s%s%s", n ? ", " : "Allow: ",
				      r->method, strcmp(r->method, "GET") == 0 ? ", HEAD" : "");
	}
	snprintf(allow + n, sizeof(allow) - n, "\r\n");
	answer_text(req, 405, allow, "method not allowed\n");
}

static void on_read(struct http_req *req)
{
	ssize_t n = recv(req->fd, req->buf + req->len, sizeof(req->buf) - req->len, 0);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n <= 0) {
		req_close(req);
		req_free(req);
		return;
	}
	req->len += (size_t)n;
	switch (http_head_parse(req->buf, req->len, &req->head)) {
	case HTTP_HEAD_DONE:
		dispatch(req);
		break;
	case HTTP_HEAD_ERROR:
		answer_text(req, 400, "", "bad request\n");
		break;
	case HTTP_HEAD_MORE:
		if (req->len == sizeof(req->buf))
			answer_text(req, 431, "", "request head too large\n");
		break;
	}
}

static void on_write(struct http_req *req)
{
	ssize_t n = send(req->fd, req->out + req->out_off, req->out_len - req->out_off,
			 MSG_NOSIGNAL);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	if (n < 0) {
		log_debug("http: write failed: %s", strerror(errno));
		req_close(req);
		req_free(req);
		return;
	}
	req->out_off += (size_t)n;
	arm(req);
	if (req->out_off < req->out_len)
		return;
	shutdown(req->fd, SHUT_WR);
	req->state = REQ_DRAIN;
	watch(req, EV_READ);
}

static void on_drain(struct http_req *req)
{
	char sink[512];
	ssize_t n = recv(req->fd, sink, sizeof(sink), 0);

	if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
		return;
	req_close(req);
	req_free(req);
}

static void on_io(struct ev_loop *loop, ev_io *io, int revents)
{
	struct http_req *req = io->data;

	switch (req->state) {
	case REQ_READ:
		on_read(req);
		break;
	case REQ_WRITE:
		on_write(req);
		break;
	case REQ_DRAIN:
		on_drain(req);
		break;
	case REQ_HANDLE:
		break;
	}
}

static void on_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct http_req *req = t->data;

	log_debug("http: connection timed out");
	req_close(req);
	/* with the handler: freed when it answers */
	if (req->state != REQ_HANDLE)
		req_free(req);
}

/* Out of descriptors or memory, the pending connection stays pending and
 * the listener readable: accepting again at once would spin. */
static void pause_accepting(struct http_server *s, const char *why)
{
	log_warn("http: accept: %s; pausing accepts for 100 ms", why);
	ev_io_stop(s->loop, &s->accept_w);
	ev_timer_set(&s->pause_w, ACCEPT_PAUSE, 0.);
	ev_timer_start(s->loop, &s->pause_w);
}

static void on_accept(struct ev_loop *loop, ev_io *io, int revents)
{
	struct http_server *s = io->data;

	for (int i = 0; i < ACCEPTS_PER_WAKE; i++) {
		int fd;
		struct http_req *req;

		if (s->nconns >= s->max_conns) {
			/* Others wait in the backlog (then in the kernel's SYN
			 * queue) until a connection closes, within HTTP_TIMEOUT:
			 * the descriptors left are the SPOP listener's. */
			log_warn("http: %d connections open, the most there may be; accepting "
				 "again when one closes", s->nconns);
			s->full = 1;
			ev_io_stop(loop, &s->accept_w);
			return;
		}
		fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				pause_accepting(s, strerror(errno));
			return;
		}
		req = xmalloc(sizeof(*req));
		if (!req) {
			close(fd);
			pause_accepting(s, "out of memory");
			return;
		}
		memset(req, 0, offsetof(struct http_req, buf));
		s->nconns++;
		req->srv = s;
		req->fd = fd;
		req->state = REQ_READ;
		req->next = s->reqs;
		if (s->reqs)
			s->reqs->prev = req;
		s->reqs = req;
		ev_io_init(&req->io, on_io, fd, EV_READ);
		req->io.data = req;
		ev_timer_init(&req->timer, on_timeout, s->timeout, 0.);
		req->timer.data = req;
		ev_io_start(loop, &req->io);
		ev_timer_start(loop, &req->timer);
	}
}

static void on_pause_end(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct http_server *s = t->data;

	if (!s->full)
		ev_io_start(loop, &s->accept_w);
}

/* The process's limit on descriptors now (unlimited: a large number). */
static unsigned long fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 1UL << 20;
	return (unsigned long)rl.rlim_cur;
}

int http_conns_for(unsigned long nofile)
{
	unsigned long n = nofile / HTTP_CONNS_SHARE;

	return n < HTTP_CONNS_MIN ? HTTP_CONNS_MIN : n > HTTP_CONNS_MAX ? HTTP_CONNS_MAX : (int)n;
}

void http_max_conns(struct http_server *s, int n)
{
	s->max_conns = n > 0 ? n : 1;
}

struct http_server *http_new(struct ev_loop *loop)
{
	struct http_server *s = xcalloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->loop = loop;
	s->fd = -1;
	s->timeout = HTTP_TIMEOUT;
	http_max_conns(s, http_conns_for(fd_limit()));
	ev_timer_init(&s->pause_w, on_pause_end, ACCEPT_PAUSE, 0.);
	s->pause_w.data = s;
	return s;
}

int http_route(struct http_server *s, const char *method, const char *path, http_handler fn,
	       void *arg)
{
	struct route *r;

	if (s->nroutes == HTTP_ROUTES_MAX || path[0] != '/' || strlen(method) == 0 ||
	    strlen(method) > HTTP_HEAD_METHOD_MAX)
		return -1;
	r = &s->routes[s->nroutes++];
	r->method = method;
	r->path = path;
	r->plen = strlen(path);
	r->fn = fn;
	r->arg = arg;
	return 0;
}

int http_listen(struct http_server *s, const struct addr *a, char *err, size_t errlen)
{
	int fd = addr_listen(a, HTTP_BACKLOG, err, errlen);

	if (fd < 0)
		return -1;
	s->fd = fd;
	ev_io_init(&s->accept_w, on_accept, fd, EV_READ);
	s->accept_w.data = s;
	ev_io_start(s->loop, &s->accept_w);
	return 0;
}

unsigned http_port(const struct http_server *s)
{
	return s->fd < 0 ? 0 : addr_local_port(s->fd);
}

void http_free(struct http_server *s)
{
	if (!s)
		return;
	while (s->reqs) {
		req_close(s->reqs);
		req_free(s->reqs);
	}
	ev_timer_stop(s->loop, &s->pause_w);
	if (s->fd >= 0) {
		ev_io_stop(s->loop, &s->accept_w);
		close(s->fd);
	}
	xfree(s);
}

const char *http_req_method(const struct http_req *req)
{
	return req->buf + req->head.method.off;
}

const char *http_req_path(const struct http_req *req)
{
	return req->buf + req->head.path.off;
}

const char *http_req_query(const struct http_req *req)
{
	return req->query;
}

const char *http_req_header(const struct http_req *req, const char *name)
{
	int k = http_head_find(req->buf, &req->head, name);

	return k < 0 ? NULL : req->buf + req->head.header[k].value.off;
}

void http_respond(struct http_req *req, int status, const char *content_type,
		  const void *body, size_t len)
{
	http_respond_headers(req, status, "", content_type, body, len);
}

void http_respond_headers(struct http_req *req, int status, const char *headers,
			  const char *content_type, const void *body, size_t len)
{
	if (req->state != REQ_HANDLE) {
		log_err("http: a request answered twice");
		return;
	}
	if (req->fd < 0) {
		/* the connection is gone: nothing to write to */
		req_free(req);
		return;
	}
	answer(req, status, content_type, headers, body, len);
}
