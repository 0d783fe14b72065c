/* SPDX-License-Identifier: Apache-2.0 */
/* spop-bench: a SPOP load generator that talks to an agent the way HAProxy
 * 3.x does. Per connection: one HAPROXY-HELLO announcing only "pipelining",
 * then NOTIFY frames with a fresh odd stream-id and frame-id 1, at most
 * --inflight of them unanswered at a time (HAProxy 3.x keeps 20).
 *
 * Closed loop (the default) keeps every window full, so the figure is the
 * agent's throughput. Open loop (--rate) sends on a fixed timetable and
 * counts latency from the scheduled time, not from the actual send: a slow
 * answer then shows up in the requests queued behind it instead of quietly
 * delaying them (coordinated omission). The latency from the actual send
 * is reported beside it ("from send"): the difference is the time a
 * request waited for a place in its connection's window (or for the
 * generator's own thread), not in the agent.
 *
 * Keys: request number t names client t mod --keys ("key-000000", ...), so
 * every client is asked equally often. With --hot-keys N --hot-share PCT,
 * PCT percent of the requests, spread evenly through the run, go to N hot
 * clients ("hot-000000", ...) in turn and the rest to the --keys clients as
 * before: a few busy clients among many quiet ones, without randomness, so
 * that two runs send the same requests.
 *
 * With --then NAME, a request is two messages, as with HAProxy's release
 * or response message: once check-rate's answer names a place (the txn
 * variable "place"), a second NOTIFY named NAME carries it back, and the
 * request is done at that one's ACK. An answer without a place ends its
 * request, as HAProxy sends the second message only `if { var(txn.rl.place)
 * -m found }`.
 *
 * Only loopback addresses are accepted, so the tool cannot load someone
 * else's server by mistake.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "alloc.h"
#include "spop.h"

#define BENCH_FRAME_SIZE 16380u      /* what HAProxy announces */
#define BENCH_NOTIFY_MAX 1024u       /* room for one NOTIFY; names are capped */
#define BENCH_RBUF_SIZE 65536u       /* more than 4 + the largest frame */
#define BENCH_MAX_NAME 255u
#define BENCH_MAX_PLACE 255u         /* a place longer than this is an error */
#define BENCH_BACKEND "app"          /* the backend check-rate names (--then) */
#define BENCH_MAX_INFLIGHT 4096u
#define BENCH_MAX_CONNS 4096u
#define BENCH_MAX_THREADS 64u
#define BENCH_IO_TIMEOUT_MS 5000     /* connect and HELLO */
#define BENCH_DRAIN_NS 5000000000ull /* how long the last ACKs may take */
#define BENCH_CLOSE_MS 500           /* polite close, all connections */
#define BENCH_ERR_PRINT 5            /* error lines printed per thread */
#define NS_PER_S 1000000000ull

/* ---- latency histogram ----------------------------------------------------
 * Log-linear: values under 2 * HIST_SUB are exact, above that each power of
 * two is split into HIST_SUB linear buckets (1.6 % resolution). Fixed size,
 * so recording never allocates. */
#define HIST_SUB_BITS 6u
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS ((64u - HIST_SUB_BITS) * HIST_SUB + HIST_SUB)

struct hist {
	uint64_t count;
	uint64_t max;
	uint64_t b[HIST_BUCKETS];
};

static unsigned hist_index(uint64_t v)
{
	unsigned shift;

	if (v < 2 * HIST_SUB)
		return (unsigned)v;
	shift = 63u - (unsigned)__builtin_clzll(v) - HIST_SUB_BITS;
	return shift * HIST_SUB + (unsigned)(v >> shift);
}

/* Highest value that falls in bucket idx. */
static uint64_t hist_upper(unsigned idx)
{
	unsigned shift;

	if (idx < HIST_SUB)
		return idx;
	shift = idx / HIST_SUB - 1;
	return (((uint64_t)(HIST_SUB + idx % HIST_SUB) + 1) << shift) - 1;
}

static void hist_record(struct hist *h, uint64_t v)
{
	h->b[hist_index(v)]++;
	h->count++;
	if (v > h->max)
		h->max = v;
}

static void hist_merge(struct hist *dst, const struct hist *src)
{
	unsigned i;

	for (i = 0; i < HIST_BUCKETS; i++)
		dst->b[i] += src->b[i];
	dst->count += src->count;
	if (src->max > dst->max)
		dst->max = src->max;
}

/* Value at quantile q (0..1): the top of the bucket holding that rank,
 * never more than the exact maximum. */
static uint64_t hist_quantile(const struct hist *h, double q)
{
	uint64_t rank, seen = 0;
	unsigned i;

	if (h->count == 0)
		return 0;
	rank = (uint64_t)ceil(q * (double)h->count);
	if (rank < 1)
		rank = 1;
	for (i = 0; i < HIST_BUCKETS; i++) {
		seen += h->b[i];
		if (seen >= rank) {
			uint64_t v = hist_upper(i);
			return v < h->max ? v : h->max;
		}
	}
	return h->max;
}

/* Writes the non-empty buckets as a JSON array of [highest value that falls
 * in the bucket, count], lowest first: the whole distribution, from which a
 * reader gets any quantile exactly as hist_quantile() would. */
static void hist_print_json(FILE *f, const struct hist *h)
{
	const char *sep = "";
	unsigned i;

	fputc('[', f);
	for (i = 0; i < HIST_BUCKETS; i++) {
		if (!h->b[i])
			continue;
		fprintf(f, "%s[%" PRIu64 ",%" PRIu64 "]", sep, hist_upper(i), h->b[i]);
		sep = ",";
	}
	fputc(']', f);
}

/* ---- options and shared run state ---------------------------------------- */

struct bench_opts {
	const char *addr;
	const char *message;
	const char *then;    /* the second message's name, or NULL */
	int then_cost;       /* 1: it carries cost instead of request_id */
	uint64_t cost;
	unsigned conns;
	unsigned threads;
	unsigned inflight;
	unsigned keys;
	unsigned hot_keys;  /* 0: none */
	unsigned hot_share; /* percent of the requests for the hot keys */
	uint64_t requests;
	double duration;
	double rate;
	int json;
	int histogram;
};

static struct bench_opts opt = {
	.addr = "127.0.0.1:12345",
	.message = "check-rate",
	.conns = 8,
	.threads = 1,
	.inflight = 20,
	.keys = 10000,
	.hot_keys = 0,
	.hot_share = 0,
	.requests = 200000,
	.duration = 10.0,
	.rate = 0.0,
	.json = 0,
	.histogram = 0,
};

static struct sockaddr_storage g_sa;
static socklen_t g_salen;
static char g_engine_id[64];
static size_t g_msg_len;
static size_t g_then_len;
static _Atomic uint64_t g_ticket; /* requests handed out, all threads */
static uint64_t g_t0;             /* start of the measured run */
static uint64_t g_deadline;       /* no new request at or after this */
static double g_interval_ns;      /* per connection, open loop only */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* ---- connections ---------------------------------------------------------- */

struct pending {
	uint64_t sid;
	uint64_t ticket;
	uint64_t status;  /* of the check-rate's answer (--then) */
	int has;
	int then;         /* 1: the second message is in flight */
	uint64_t t_start; /* send time, or scheduled time in open loop */
	uint64_t t_sent;  /* send time */
	int done;
};

struct conn {
	int fd;
	unsigned idx;
	int dead;
	uint32_t max_frame; /* negotiated */
	unsigned depth;     /* requests allowed in flight */
	uint64_t next_sid;
	/* In-flight NOTIFYs, oldest first. Answered entries stay until they
	 * reach the head, so an out-of-order ACK costs a scan, never a move. */
	struct pending *q;
	unsigned qcap, qhead, qlen, qlive;
	uint8_t *rbuf;
	size_t rlen;
	uint8_t *wbuf;
	size_t wcap, woff, wlen;
	int want_out;
	uint64_t sched_base; /* open loop: request k is due at base + k * interval */
	uint64_t sched_k;
};

struct worker {
	unsigned id;
	pthread_t th;
	int epfd;
	int no_pwait2; /* kernel older than 5.11 */
	struct conn **conns;
	unsigned nconns;
	int exhausted; /* the request budget ran out */
	struct hist hist;
	struct hist hist_sent; /* from the actual send */
	uint64_t sent, acks, passed, limited, other_status, no_status;
	uint64_t errors, lost, printed;
	uint64_t thens; /* second messages answered */
	uint64_t t_last_ack;
};

static void worker_err(struct worker *w, struct conn *c, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void worker_err(struct worker *w, struct conn *c, const char *fmt, ...)
{
	va_list ap;

	w->errors++;
	if (w->printed++ >= BENCH_ERR_PRINT)
		return;
	fprintf(stderr, "spop-bench: connection %u: ", c ? c->idx : 0);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* Closes a broken connection; its unanswered requests are counted lost. */
static void conn_fail(struct worker *w, struct conn *c, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void conn_fail(struct worker *w, struct conn *c, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	if (c->dead)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	worker_err(w, c, "%s (%u requests unanswered)", msg, c->qlive);
	w->lost += c->qlive;
	c->qlive = 0;
	c->qlen = 0;
	if (w->epfd >= 0)
		epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	c->dead = 1;
}

static int str_eq(struct spop_str s, const char *lit)
{
	size_t n = strlen(lit);

	return s.len == n && memcmp(s.ptr, lit, n) == 0;
}

/* 1 when a comma-separated list holds the item exactly. */
static int list_has(struct spop_str s, const char *item)
{
	size_t n = strlen(item), i = 0;

	while (i < s.len) {
		size_t b, e;

		while (i < s.len && (s.ptr[i] == ' ' || s.ptr[i] == ','))
			i++;
		b = i;
		while (i < s.len && s.ptr[i] != ',')
			i++;
		e = i;
		while (e > b && s.ptr[e - 1] == ' ')
			e--;
		if (e - b == n && memcmp(s.ptr + b, item, n) == 0)
			return 1;
	}
	return 0;
}

static int data_as_u64(const struct spop_data *d, uint64_t *v)
{
	switch (d->type) {
	case SPOP_T_INT32:
		*v = (uint64_t)(int64_t)d->u.i32;
		return d->u.i32 >= 0 ? 0 : -1;
	case SPOP_T_UINT32:
		*v = d->u.u32;
		return 0;
	case SPOP_T_INT64:
		*v = (uint64_t)d->u.i64;
		return d->u.i64 >= 0 ? 0 : -1;
	case SPOP_T_UINT64:
		*v = d->u.u64;
		return 0;
	default:
		return -1;
	}
}

/* Writes a description of an AGENT-DISCONNECT payload into buf. */
static void describe_disconnect(const struct spop_frame *f, char *buf, size_t len)
{
	struct spop_cursor c = { f->payload, f->payload + f->payload_len };
	struct spop_str name, msg = { "", 0 };
	struct spop_data v;
	uint64_t status = SPOP_ST_UNKNOWN;

	while (spop_kv_next(&c, &name, &v) == 1) {
		if (str_eq(name, "status-code"))
			data_as_u64(&v, &status);
		else if (str_eq(name, "message") && v.type == SPOP_T_STR)
			msg = v.u.str;
	}
	snprintf(buf, len, "AGENT-DISCONNECT status %" PRIu64 " (%s): %.*s", status,
		 spop_status_str((int)(status > 99 ? 99 : status)),
		 (int)(msg.len > 200 ? 200 : msg.len), msg.ptr);
}

/* Waits for fd to be ready for `events` until deadline (ns). 0 or -1. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = events };
		uint64_t now = now_ns();
		int rc;

		if (now >= deadline)
			return -1;
		rc = poll(&p, 1, (int)((deadline - now + 999999) / 1000000));
		if (rc > 0)
			return 0;
		if (rc < 0 && errno != EINTR)
			return -1;
	}
}

/* Reads the AGENT-HELLO fields that matter to the HAProxy side. */
static int parse_agent_hello(struct conn *c, const struct spop_frame *f, char *err,
			     size_t errlen)
{
	struct spop_cursor cur = { f->payload, f->payload + f->payload_len };
	struct spop_str name, version = { NULL, 0 }, caps = { NULL, 0 };
	struct spop_data v;
	uint64_t mfs = 0;
	int rc, has_mfs = 0, has_caps = 0;

	while ((rc = spop_kv_next(&cur, &name, &v)) == 1) {
		if (str_eq(name, "version") && v.type == SPOP_T_STR) {
			version = v.u.str;
		} else if (str_eq(name, "max-frame-size")) {
			if (data_as_u64(&v, &mfs) < 0) {
				snprintf(err, errlen, "AGENT-HELLO max-frame-size is not an integer");
				return -1;
			}
			has_mfs = 1;
		} else if (str_eq(name, "capabilities") && v.type == SPOP_T_STR) {
			caps = v.u.str;
			has_caps = 1;
		}
	}
	if (rc < 0) {
		snprintf(err, errlen, "AGENT-HELLO payload is malformed");
		return -1;
	}
	if (!version.ptr || !str_eq(version, "2.0")) {
		snprintf(err, errlen, "AGENT-HELLO has no version \"2.0\"");
		return -1;
	}
	if (!has_mfs || mfs < SPOP_MIN_FRAME_SIZE || mfs > BENCH_FRAME_SIZE) {
		snprintf(err, errlen, "AGENT-HELLO max-frame-size %" PRIu64
			 " is missing or outside [%u, %u]", mfs, SPOP_MIN_FRAME_SIZE,
			 BENCH_FRAME_SIZE);
		return -1;
	}
	if (!has_caps) {
		snprintf(err, errlen, "AGENT-HELLO has no capabilities");
		return -1;
	}
	c->max_frame = (uint32_t)mfs;
	/* Without pipelining HAProxy sends one NOTIFY at a time; so do we. */
	c->depth = list_has(caps, "pipelining") ? opt.inflight : 1;
	return 0;
}

/* Connects and does the HELLO exchange with blocking-style waits. Returns 0
 * with the socket non-blocking and ready for NOTIFYs, or -1 with err set. */
static int conn_open(struct conn *c, char *err, size_t errlen)
{
	uint64_t deadline = now_ns() + (uint64_t)BENCH_IO_TIMEOUT_MS * 1000000u;
	uint8_t hello[512];
	struct spop_wbuf w;
	struct spop_frame f;
	int one = 1, soerr = 0, st = 0, rc;
	socklen_t sl = sizeof(soerr);
	size_t off = 0;

	c->fd = socket(g_sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return -1;
	}
	if (connect(c->fd, (struct sockaddr *)&g_sa, g_salen) < 0 && errno != EINPROGRESS) {
		snprintf(err, errlen, "connect to %s: %s", opt.addr, strerror(errno));
		return -1;
	}
	if (wait_fd(c->fd, POLLOUT, deadline) < 0 ||
	    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr) {
		snprintf(err, errlen, "connect to %s: %s", opt.addr,
			 soerr ? strerror(soerr) : "timeout");
		return -1;
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

	spop_wbuf_init(&w, hello, sizeof(hello));
	if (spop_encode_haproxy_hello(&w, BENCH_FRAME_SIZE, "pipelining", 0, g_engine_id) < 0) {
		snprintf(err, errlen, "HAPROXY-HELLO does not fit");
		return -1;
	}
	while (off < w.len) {
		ssize_t n = send(c->fd, hello + off, w.len - off, MSG_NOSIGNAL);

		if (n > 0) {
			off += (size_t)n;
		} else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			if (wait_fd(c->fd, POLLOUT, deadline) < 0) {
				snprintf(err, errlen, "HAPROXY-HELLO: send timeout");
				return -1;
			}
		} else {
			snprintf(err, errlen, "HAPROXY-HELLO: %s", strerror(errno));
			return -1;
		}
	}

	for (;;) {
		ssize_t n;

		rc = spop_frame_peek(c->rbuf, c->rlen, BENCH_FRAME_SIZE, &f, &st);
		if (rc == SPOP_OK)
			break;
		if (rc == SPOP_ERR) {
			snprintf(err, errlen, "bad frame instead of AGENT-HELLO: %s",
				 spop_status_str(st));
			return -1;
		}
		if (wait_fd(c->fd, POLLIN, deadline) < 0) {
			snprintf(err, errlen, "no AGENT-HELLO within %d ms", BENCH_IO_TIMEOUT_MS);
			return -1;
		}
		n = recv(c->fd, c->rbuf + c->rlen, BENCH_RBUF_SIZE - c->rlen, 0);
		if (n == 0) {
			snprintf(err, errlen, "connection closed before AGENT-HELLO");
			return -1;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR) {
			snprintf(err, errlen, "reading AGENT-HELLO: %s", strerror(errno));
			return -1;
		}
		if (n > 0)
			c->rlen += (size_t)n;
	}
	if (f.type == SPOP_FRAME_AGENT_DISCONNECT) {
		describe_disconnect(&f, err, errlen);
		return -1;
	}
	if (f.type != SPOP_FRAME_AGENT_HELLO) {
		snprintf(err, errlen, "frame type %u instead of AGENT-HELLO", f.type);
		return -1;
	}
	if (!(f.flags & SPOP_FLAG_FIN)) {
		snprintf(err, errlen, "AGENT-HELLO without the FIN flag");
		return -1;
	}
	if (parse_agent_hello(c, &f, err, errlen) < 0)
		return -1;
	c->rlen -= 4 + (size_t)f.len;
	memmove(c->rbuf, c->rbuf + 4 + f.len, c->rlen);
	return 0;
}

static struct conn *conn_new(unsigned idx)
{
	struct conn *c = xcalloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->fd = -1;
	c->idx = idx;
	c->next_sid = 1;
	c->qcap = 2 * opt.inflight;
	c->q = xcalloc(c->qcap, sizeof(*c->q));
	c->rbuf = xmalloc(BENCH_RBUF_SIZE);
	c->wcap = (size_t)c->qcap * BENCH_NOTIFY_MAX;
	c->wbuf = xmalloc(c->wcap);
	if (!c->q || !c->rbuf || !c->wbuf) {
		xfree(c->q);
		xfree(c->rbuf);
		xfree(c->wbuf);
		xfree(c);
		return NULL;
	}
	return c;
}

static void conn_free(struct conn *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	xfree(c->q);
	xfree(c->rbuf);
	xfree(c->wbuf);
	xfree(c);
}

static void conn_want_out(struct worker *w, struct conn *c, int on)
{
	struct epoll_event ev = { .events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c };

	if (c->want_out == on)
		return;
	c->want_out = on;
	epoll_ctl(w->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* One send() for everything queued; the rest waits for EPOLLOUT. */
static void conn_flush(struct worker *w, struct conn *c)
{
	ssize_t n;

	if (c->woff < c->wlen) {
		n = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);
		if (n > 0) {
			c->woff += (size_t)n;
		} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
			conn_fail(w, c, "send: %s", strerror(errno));
			return;
		}
	}
	if (c->woff == c->wlen) {
		c->woff = c->wlen = 0;
		conn_want_out(w, c, 0);
	} else {
		conn_want_out(w, c, 1);
	}
}

static void put_arg(struct spop_wbuf *wb, const char *name, struct spop_data d)
{
	spop_put_name(wb, name, strlen(name));
	spop_put_data(wb, &d);
}

/* The client of request number `ticket`: its index among the hot keys
 * (*hot set) or among --keys. Request t is hot when the hot requests'
 * running total, floor(t * PCT / 100), steps up at t + 1: PCT in every 100,
 * evenly spaced; the hot and the cold ones each go round their keys. */
static uint32_t ticket_key(uint64_t ticket, int *hot)
{
	uint64_t before, upto;

	*hot = 0;
	if (!opt.hot_keys)
		return (uint32_t)(ticket % opt.keys);
	/* floor(t * PCT / 100) without the product, which could overflow */
	before = ticket / 100 * opt.hot_share + ticket % 100 * opt.hot_share / 100;
	upto = (ticket + 1) / 100 * opt.hot_share + (ticket + 1) % 100 * opt.hot_share / 100;
	if (upto > before) {
		*hot = 1;
		return (uint32_t)(before % opt.hot_keys);
	}
	return (uint32_t)((ticket - before) % opt.keys);
}

/* Appends one NOTIFY carrying request number `ticket`. 0 or -1. */
static int conn_put_notify(struct conn *c, uint64_t ticket, uint64_t sid)
{
	int hot;
	uint32_t k = ticket_key(ticket, &hot);
	struct spop_wbuf wb;
	struct spop_data ip;
	char key[32];
	int klen;
	size_t start;

	klen = snprintf(key, sizeof(key), "%s-%06" PRIu32, hot ? "hot" : "key", k);
	memset(&ip, 0, sizeof(ip));
	ip.type = SPOP_T_IPV4;
	ip.u.ipv4[0] = hot ? 11 : 10;
	ip.u.ipv4[1] = (uint8_t)(k >> 16);
	ip.u.ipv4[2] = (uint8_t)(k >> 8);
	ip.u.ipv4[3] = (uint8_t)k;

	spop_wbuf_init(&wb, c->wbuf + c->wlen, c->wcap - c->wlen);
	start = spop_frame_begin(&wb, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, sid, 1);
	spop_put_name(&wb, opt.message, g_msg_len);
	spop_put_u8(&wb, opt.then && !opt.then_cost ? 11 : 9);
	put_arg(&wb, "ip", ip);
	put_arg(&wb, "method", spop_cstr("GET"));
	put_arg(&wb, "path", spop_cstr("/api/items"));
	put_arg(&wb, "host", spop_cstr("api.example.com"));
	put_arg(&wb, "api_key", spop_strn(key, (size_t)klen));
	put_arg(&wb, "user", spop_null());
	put_arg(&wb, "tier", spop_null());
	/* A lightly loaded backend, so no request is shed. */
	put_arg(&wb, "be_in_use", spop_int64(10));
	put_arg(&wb, "be_free", spop_int64(90));
	if (opt.then && !opt.then_cost) {
		/* as spoe-conf/ratelimit-adaptive.conf: the backend and the
		 * request, which the release names again */
		char id[32];
		int idlen = snprintf(id, sizeof(id), "req-%" PRIu64, ticket);

		put_arg(&wb, "backend", spop_cstr(BENCH_BACKEND));
		put_arg(&wb, "request_id", spop_strn(id, (size_t)idlen));
	}
	if (spop_frame_end(&wb, start, c->max_frame) < 0)
		return -1;
	c->wlen += wb.len;
	return 0;
}

/* Appends the second NOTIFY (--then) of request number `ticket`, giving
 * back `place`: with request_id as spoe-conf/ratelimit-adaptive.conf's
 * release, or with cost as spoe-conf/ratelimit-llm.conf's response. */
static int conn_put_then(struct conn *c, uint64_t ticket, struct spop_str place, uint64_t sid)
{
	struct spop_wbuf wb;
	size_t start;

	if (c->woff > 0 && c->wcap - c->wlen < BENCH_NOTIFY_MAX) {
		memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
		c->wlen -= c->woff;
		c->woff = 0;
	}
	spop_wbuf_init(&wb, c->wbuf + c->wlen, c->wcap - c->wlen);
	start = spop_frame_begin(&wb, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, sid, 1);
	spop_put_name(&wb, opt.then, g_then_len);
	spop_put_u8(&wb, 2);
	put_arg(&wb, "place", spop_strn(place.ptr, place.len));
	if (opt.then_cost) {
		put_arg(&wb, "cost", spop_int64((int64_t)opt.cost));
	} else {
		char id[32];
		int idlen = snprintf(id, sizeof(id), "req-%" PRIu64, ticket);

		put_arg(&wb, "request_id", spop_strn(id, (size_t)idlen));
	}
	if (spop_frame_end(&wb, start, c->max_frame) < 0)
		return -1;
	c->wlen += wb.len;
	return 0;
}

static int claim_ticket(uint64_t *t)
{
	uint64_t v = atomic_fetch_add_explicit(&g_ticket, 1, memory_order_relaxed);

	if (v >= opt.requests)
		return 0;
	*t = v;
	return 1;
}

static uint64_t conn_due(const struct conn *c)
{
	return c->sched_base + (uint64_t)((double)c->sched_k * g_interval_ns);
}

/* Fills the connection's window with new NOTIFYs and sends them in one
 * call. Open loop: only the requests whose time has come. Returns when the
 * connection next wants to send (open loop), or UINT64_MAX. */
static uint64_t conn_pump(struct worker *w, struct conn *c)
{
	uint64_t next = UINT64_MAX, now = now_ns(), ticket, t_start;
	unsigned added = 0;

	if (c->woff > 0) {
		memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
		c->wlen -= c->woff;
		c->woff = 0;
	}
	while (c->qlive < c->depth && c->qlen < c->qcap && !w->exhausted) {
		struct pending *p;

		if (opt.rate > 0) {
			t_start = conn_due(c);
			if (t_start >= g_deadline)
				break;
			if (t_start > now) {
				next = t_start;
				break;
			}
		} else {
			if (now >= g_deadline)
				break;
			t_start = now;
		}
		if (!claim_ticket(&ticket)) {
			w->exhausted = 1;
			break;
		}
		if (conn_put_notify(c, ticket, c->next_sid) < 0) {
			conn_fail(w, c, "NOTIFY does not fit in %" PRIu32 " bytes", c->max_frame);
			return UINT64_MAX;
		}
		p = &c->q[(c->qhead + c->qlen) % c->qcap];
		p->sid = c->next_sid;
		p->ticket = ticket;
		p->then = 0;
		p->t_start = t_start;
		p->t_sent = now;
		p->done = 0;
		c->qlen++;
		c->qlive++;
		c->next_sid += 2;
		c->sched_k++;
		w->sent++;
		added++;
	}
	if (added)
		conn_flush(w, c);
	return next;
}

/* Reads the status variable out of an ACK's LIST-OF-ACTIONS. Returns 0 with
 * *has set when the ACK sets a txn variable (an answer: its status, 0 when
 * the agent leaves it out), -1 on malformed actions. An ACK that sets none
 * answered no check-rate. *place is the txn variable "place" (a string),
 * or has a NULL ptr when the answer sets none. */
static int ack_status(const uint8_t *p, const uint8_t *end, int *has, uint64_t *status,
		      struct spop_str *place)
{
	*has = 0;
	*status = 0;
	place->ptr = NULL;
	place->len = 0;
	while (p < end) {
		struct spop_str name;
		struct spop_data d;
		uint8_t act, nargs, scope;

		if (3 > (size_t)(end - p))
			return -1;
		act = p[0];
		nargs = p[1];
		scope = p[2];
		p += 3;
		if (spop_name_decode(&p, end, &name) != SPOP_OK)
			return -1;
		if (act == SPOP_ACT_SET_VAR && nargs == 3) {
			if (spop_data_decode(&p, end, &d) != SPOP_OK)
				return -1;
			if (scope == SPOP_SCOPE_TXN)
				*has = 1;
			if (scope == SPOP_SCOPE_TXN && str_eq(name, "status")) {
				uint64_t v;

				if (data_as_u64(&d, &v) < 0)
					return -1;
				*status = v;
			}
			if (scope == SPOP_SCOPE_TXN && str_eq(name, "place")) {
				if (d.type != SPOP_T_STR)
					return -1;
				*place = d.u.str;
			}
		} else if (act != SPOP_ACT_UNSET_VAR || nargs != 2) {
			return -1;
		}
	}
	return 0;
}

static void conn_on_ack(struct worker *w, struct conn *c, const struct spop_frame *f,
			uint64_t now)
{
	struct pending *p = NULL;
	struct spop_str place;
	uint64_t status = 0;
	unsigned i;
	int has;

	if (!(f->flags & SPOP_FLAG_FIN)) {
		conn_fail(w, c, "ACK without the FIN flag");
		return;
	}
	if (f->frame_id != 1) {
		conn_fail(w, c, "ACK with frame-id %" PRIu64 ", sent 1", f->frame_id);
		return;
	}
	for (i = 0; i < c->qlen; i++) {
		struct pending *q = &c->q[(c->qhead + i) % c->qcap];

		if (!q->done && q->sid == f->stream_id) {
			p = q;
			break;
		}
	}
	if (!p) {
		conn_fail(w, c, "ACK for stream-id %" PRIu64 " that is not in flight",
			  f->stream_id);
		return;
	}
	if (ack_status(f->payload, f->payload + f->payload_len, &has, &status, &place) < 0) {
		conn_fail(w, c, "ACK with malformed actions");
		return;
	}
	if (opt.then && p->then) {
		/* the second message's answer: the request is done, with the
		 * first one's status */
		w->thens++;
		has = p->has;
		status = p->status;
	} else if (opt.then && place.ptr) {
		if (place.len > BENCH_MAX_PLACE) {
			conn_fail(w, c, "place of %zu bytes, more than %u", place.len,
				  BENCH_MAX_PLACE);
			return;
		}
		if (conn_put_then(c, p->ticket, place, c->next_sid) < 0) {
			conn_fail(w, c, "NOTIFY %s does not fit in %" PRIu32 " bytes", opt.then,
				  c->max_frame);
			return;
		}
		p->then = 1;
		p->has = has;
		p->status = status;
		p->sid = c->next_sid;
		c->next_sid += 2;
		conn_flush(w, c);
		return;
	}
	hist_record(&w->hist, now > p->t_start ? now - p->t_start : 0);
	hist_record(&w->hist_sent, now > p->t_sent ? now - p->t_sent : 0);
	p->done = 1;
	c->qlive--;
	while (c->qlen > 0 && c->q[c->qhead].done) {
		c->qhead = (c->qhead + 1) % c->qcap;
		c->qlen--;
	}
	w->acks++;
	w->t_last_ack = now;
	if (!has)
		w->no_status++;
	else if (status == 0)
		w->passed++;
	else if (status == 429)
		w->limited++;
	else
		w->other_status++;
}

static void conn_read(struct worker *w, struct conn *c, uint64_t now)
{
	struct spop_frame f;
	size_t off = 0;
	ssize_t n;
	int st = 0, rc;

	n = recv(c->fd, c->rbuf + c->rlen, BENCH_RBUF_SIZE - c->rlen, 0);
	if (n == 0) {
		conn_fail(w, c, "connection closed by the agent");
		return;
	}
	if (n < 0) {
		if (errno != EAGAIN && errno != EINTR)
			conn_fail(w, c, "recv: %s", strerror(errno));
		return;
	}
	c->rlen += (size_t)n;
	while (!c->dead) {
		rc = spop_frame_peek(c->rbuf + off, c->rlen - off, c->max_frame, &f, &st);
		if (rc == SPOP_NEED_MORE)
			break;
		if (rc == SPOP_ERR) {
			conn_fail(w, c, "bad frame: %s", spop_status_str(st));
			return;
		}
		off += 4 + (size_t)f.len;
		if (f.type == SPOP_FRAME_ACK) {
			conn_on_ack(w, c, &f, now);
		} else if (f.type == SPOP_FRAME_AGENT_DISCONNECT) {
			char msg[300];

			describe_disconnect(&f, msg, sizeof(msg));
			conn_fail(w, c, "%s", msg);
		} else {
			conn_fail(w, c, "unexpected frame type %u", f.type);
		}
	}
	if (c->dead)
		return;
	c->rlen -= off;
	if (off > 0 && c->rlen > 0)
		memmove(c->rbuf, c->rbuf + off, c->rlen);
}

static int worker_sending_over(struct worker *w, uint64_t now)
{
	unsigned i;

	if (w->exhausted)
		return 1;
	if (opt.rate <= 0)
		return now >= g_deadline;
	for (i = 0; i < w->nconns; i++) {
		struct conn *c = w->conns[i];

		if (!c->dead && conn_due(c) < g_deadline)
			return 0;
	}
	return 1;
}

/* epoll_wait with a nanosecond timeout: an open loop at 100k requests/s
 * schedules a send every few microseconds, which a millisecond timeout would
 * turn into bursts (and a timerfd costs two more system calls per wake). */
static int worker_wait(struct worker *w, struct epoll_event *ev, int max, uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / NS_PER_S), (long)(ns % NS_PER_S) };
	int n;

	if (!w->no_pwait2) {
		n = epoll_pwait2(w->epfd, ev, max, &ts, NULL);
		if (n >= 0 || errno != ENOSYS)
			return n < 0 ? 0 : n;
		w->no_pwait2 = 1;
	}
	n = epoll_wait(w->epfd, ev, max, (int)((ns + 999999) / 1000000));
	return n < 0 ? 0 : n;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct epoll_event ev[64];
	uint64_t now = now_ns(), stop_at = 0;
	int sending = 1;

	for (;;) {
		uint64_t next = UINT64_MAX, until, live = 0, alive = 0;
		int n, i;
		unsigned j;

		if (sending && worker_sending_over(w, now)) {
			sending = 0;
			stop_at = now;
		}
		for (j = 0; j < w->nconns; j++) {
			struct conn *c = w->conns[j];

			if (c->dead)
				continue;
			if (sending) {
				uint64_t t = conn_pump(w, c);

				if (t < next)
					next = t;
			}
			if (!c->dead) {
				live += c->qlive;
				alive++;
			}
		}
		if (alive == 0 || (!sending && live == 0))
			break;
		now = now_ns();
		/* The second test bounds an open loop whose windows never drain
		 * because the agent stopped answering. */
		if ((!sending && now - stop_at >= BENCH_DRAIN_NS) ||
		    now >= g_deadline + BENCH_DRAIN_NS) {
			for (j = 0; j < w->nconns; j++) {
				struct conn *c = w->conns[j];

				if (!c->dead && c->qlive > 0)
					conn_fail(w, c, "no ACK within %llu s",
						  BENCH_DRAIN_NS / NS_PER_S);
			}
			break;
		}
		until = sending ? (opt.rate > 0 ? now + 100000000u : g_deadline)
				: stop_at + BENCH_DRAIN_NS;
		if (next < until)
			until = next;
		if (until > now + 100000000u)
			until = now + 100000000u;
		n = worker_wait(w, ev, 64, until > now ? until - now : 0);
		now = now_ns();
		for (i = 0; i < n; i++) {
			struct conn *c = ev[i].data.ptr;

			if (c->dead)
				continue;
			if (ev[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
				conn_read(w, c, now);
			if (!c->dead && (ev[i].events & EPOLLOUT))
				conn_flush(w, c);
		}
	}
	return NULL;
}

/* ---- polite close ------------------------------------------------------- */

/* Sends HAPROXY-DISCONNECT on every live connection and waits briefly for
 * the agent's AGENT-DISCONNECT, as HAProxy does when it closes. */
static void close_all(struct conn **conns, unsigned n)
{
	uint64_t deadline = now_ns() + (uint64_t)BENCH_CLOSE_MS * 1000000u;
	uint8_t buf[256];
	unsigned i;

	for (i = 0; i < n; i++) {
		struct conn *c = conns[i];
		struct spop_wbuf w;

		if (!c || c->dead || c->fd < 0)
			continue;
		spop_wbuf_init(&w, buf, sizeof(buf));
		if (c->wlen > c->woff ||
		    spop_encode_haproxy_disconnect(&w, SPOP_ST_NORMAL, "bench done") < 0 ||
		    send(c->fd, buf, w.len, MSG_NOSIGNAL) != (ssize_t)w.len) {
			close(c->fd);
			c->fd = -1;
		}
	}
	for (i = 0; i < n; i++) {
		struct conn *c = conns[i];

		if (!c || c->fd < 0)
			continue;
		while (wait_fd(c->fd, POLLIN, deadline) == 0) {
			ssize_t r = recv(c->fd, buf, sizeof(buf), 0);

			if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
				break;
		}
		close(c->fd);
		c->fd = -1;
	}
}

/* ---- command line --------------------------------------------------------- */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: spop-bench [options]\n"
		"  --addr HOST:PORT   agent address, loopback only (default 127.0.0.1:12345;\n"
		"                     IPv6 as [::1]:PORT)\n"
		"  --conns C          connections (default 8)\n"
		"  --threads T        client threads (default 1)\n"
		"  --inflight D       NOTIFYs in flight per connection (default 20)\n"
		"  --requests N       stop after N requests (default 200000)\n"
		"  --duration S       stop after S seconds (default 10)\n"
		"  --rate R           open loop at R requests/s (default 0: closed loop)\n"
		"  --keys K           distinct api_key values, round-robin (default 10000)\n"
		"  --hot-keys N       N more clients (\"hot-000000\", ...) that take\n"
		"                     --hot-share of the requests, round-robin; the rest go\n"
		"                     to the --keys clients (default 0: none)\n"
		"  --hot-share PCT    percent of the requests for the hot clients, evenly\n"
		"                     spread through the run (1..100; needs --hot-keys)\n"
		"  --message NAME     SPOE message name (default check-rate)\n"
		"  --then NAME        a request is two messages: after an answer that sets\n"
		"                     txn place, send NOTIFY NAME with place= and\n"
		"                     request_id=, as spoe-conf/ratelimit-adaptive.conf's\n"
		"                     release (check-rate then also carries backend=app and\n"
		"                     request_id=); the request is done at its ACK\n"
		"  --then-cost N      with --then: NAME carries place= and cost=N instead, as\n"
		"                     spoe-conf/ratelimit-llm.conf's response (check-rate as\n"
		"                     without --then)\n"
		"  --json             print one JSON line on stdout (summary on stderr)\n"
		"  --histogram        with --json, add \"hist_ns\": the latency histogram as\n"
		"                     [[highest ns in the bucket, count], ...], non-empty\n"
		"                     buckets, lowest first\n"
		"  -h, --help\n"
		"Exit status: 0 ok, 1 protocol or connection errors, 2 bad usage.\n");
}

static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

static int parse_uint(const char *s, unsigned min, unsigned max, unsigned *out)
{
	uint64_t v;

	if (parse_u64(s, min, max, &v) < 0)
		return -1;
	*out = (unsigned)v;
	return 0;
}

static int parse_double(const char *s, double min, double max, double *out)
{
	char *end;
	double v;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !(v >= min && v <= max))
		return -1;
	*out = v;
	return 0;
}

/* Parses HOST:PORT or [V6]:PORT. Returns 0, -1 when malformed, -2 when the
 * address is not loopback. */
static int parse_addr(const char *s, struct sockaddr_storage *sa, socklen_t *len)
{
	char host[64];
	const char *colon, *hb, *he;
	unsigned port;

	if (s[0] == '[') {
		hb = s + 1;
		he = strchr(hb, ']');
		if (!he || he[1] != ':')
			return -1;
		colon = he + 1;
	} else {
		hb = s;
		colon = strrchr(s, ':');
		if (!colon)
			return -1;
		he = colon;
	}
	if ((size_t)(he - hb) >= sizeof(host) || he == hb)
		return -1;
	memcpy(host, hb, (size_t)(he - hb));
	host[he - hb] = '\0';
	if (parse_uint(colon + 1, 1, 65535, &port) < 0)
		return -1;
	if (strcmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");
	memset(sa, 0, sizeof(*sa));
	if (s[0] != '[') {
		struct sockaddr_in *in = (struct sockaddr_in *)sa;

		if (inet_pton(AF_INET, host, &in->sin_addr) != 1)
			return -1;
		if ((ntohl(in->sin_addr.s_addr) >> 24) != 127)
			return -2;
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		*len = sizeof(*in);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)sa;

		if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1)
			return -1;
		if (!IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
			return -2;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*in6);
	}
	return 0;
}

static int parse_opts(int argc, char **argv)
{
	enum { O_ADDR = 256, O_CONNS, O_THREADS, O_INFLIGHT, O_REQUESTS, O_DURATION,
	       O_RATE, O_KEYS, O_HOT_KEYS, O_HOT_SHARE, O_MESSAGE, O_JSON, O_HISTOGRAM,
	       O_THEN, O_THEN_COST };
	static const struct option longopts[] = {
		{ "addr", required_argument, NULL, O_ADDR },
		{ "conns", required_argument, NULL, O_CONNS },
		{ "threads", required_argument, NULL, O_THREADS },
		{ "inflight", required_argument, NULL, O_INFLIGHT },
		{ "requests", required_argument, NULL, O_REQUESTS },
		{ "duration", required_argument, NULL, O_DURATION },
		{ "rate", required_argument, NULL, O_RATE },
		{ "keys", required_argument, NULL, O_KEYS },
		{ "hot-keys", required_argument, NULL, O_HOT_KEYS },
		{ "hot-share", required_argument, NULL, O_HOT_SHARE },
		{ "message", required_argument, NULL, O_MESSAGE },
		{ "json", no_argument, NULL, O_JSON },
		{ "histogram", no_argument, NULL, O_HISTOGRAM },
		{ "then", required_argument, NULL, O_THEN },
		{ "then-cost", required_argument, NULL, O_THEN_COST },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch, bad = 0;

	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		const char *what = NULL;

		switch (ch) {
		case O_ADDR:
			opt.addr = optarg;
			break;
		case O_CONNS:
			if (parse_uint(optarg, 1, BENCH_MAX_CONNS, &opt.conns) < 0)
				what = "--conns wants 1..4096";
			break;
		case O_THREADS:
			if (parse_uint(optarg, 1, BENCH_MAX_THREADS, &opt.threads) < 0)
				what = "--threads wants 1..64";
			break;
		case O_INFLIGHT:
			if (parse_uint(optarg, 1, BENCH_MAX_INFLIGHT, &opt.inflight) < 0)
				what = "--inflight wants 1..4096";
			break;
		case O_REQUESTS:
			if (parse_u64(optarg, 1, UINT64_MAX / 2, &opt.requests) < 0)
				what = "--requests wants a positive integer";
			break;
		case O_DURATION:
			if (parse_double(optarg, 0.001, 86400.0, &opt.duration) < 0)
				what = "--duration wants seconds in (0, 86400]";
			break;
		case O_RATE:
			if (parse_double(optarg, 0.0, 1e9, &opt.rate) < 0)
				what = "--rate wants requests/s in [0, 1e9]";
			break;
		case O_KEYS:
			if (parse_uint(optarg, 1, 1000000, &opt.keys) < 0)
				what = "--keys wants 1..1000000";
			break;
		case O_HOT_KEYS:
			if (parse_uint(optarg, 1, 1000000, &opt.hot_keys) < 0)
				what = "--hot-keys wants 1..1000000";
			break;
		case O_HOT_SHARE:
			if (parse_uint(optarg, 1, 100, &opt.hot_share) < 0)
				what = "--hot-share wants a percent in 1..100";
			break;
		case O_MESSAGE:
			opt.message = optarg;
			if (!*optarg || strlen(optarg) > BENCH_MAX_NAME)
				what = "--message wants a name of 1..255 bytes";
			break;
		case O_THEN:
			opt.then = optarg;
			if (!*optarg || strlen(optarg) > BENCH_MAX_NAME)
				what = "--then wants a name of 1..255 bytes";
			break;
		case O_THEN_COST:
			opt.then_cost = 1;
			if (parse_u64(optarg, 0, INT64_MAX, &opt.cost) < 0)
				what = "--then-cost wants a non-negative integer";
			break;
		case O_JSON:
			opt.json = 1;
			break;
		case O_HISTOGRAM:
			opt.histogram = 1;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			bad = 1;
			break;
		}
		if (what) {
			fprintf(stderr, "spop-bench: %s\n", what);
			bad = 1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "spop-bench: unexpected argument '%s'\n", argv[optind]);
		bad = 1;
	}
	if (opt.histogram && !opt.json) {
		fprintf(stderr, "spop-bench: --histogram goes into the --json line; add --json\n");
		bad = 1;
	}
	if (!bad && opt.then_cost && !opt.then) {
		fprintf(stderr, "spop-bench: --then-cost goes with --then\n");
		bad = 1;
	}
	if (!bad && !opt.hot_keys != !opt.hot_share) {
		fprintf(stderr, "spop-bench: --hot-keys and --hot-share go together\n");
		bad = 1;
	}
	if (bad) {
		usage(stderr);
		return -1;
	}
	if (opt.threads > opt.conns)
		opt.threads = opt.conns;
	g_msg_len = strlen(opt.message);
	g_then_len = opt.then ? strlen(opt.then) : 0;
	return 0;
}

/* ---- main ------------------------------------------------------------------- */

int main(int argc, char **argv)
{
	struct conn **conns = NULL;
	struct worker *workers = NULL;
	struct hist *total = NULL, *total_sent = NULL;
	uint64_t acks = 0, sent = 0, passed = 0, limited = 0, other = 0, none = 0;
	uint64_t errors = 0, lost = 0, thens = 0, t_end = 0;
	double secs, rps;
	unsigned i, started = 0;
	int rc, status = 1;
	FILE *out;

	if (parse_opts(argc, argv) < 0)
		return 2;
	rc = parse_addr(opt.addr, &g_sa, &g_salen);
	if (rc == -2) {
		fprintf(stderr, "spop-bench: refusing %s: only 127.0.0.0/8 and ::1 are allowed\n",
			opt.addr);
		return 2;
	}
	if (rc < 0) {
		fprintf(stderr, "spop-bench: bad address '%s' (HOST:PORT or [::1]:PORT)\n",
			opt.addr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	snprintf(g_engine_id, sizeof(g_engine_id), "spop-bench-%ld", (long)getpid());
	out = opt.json ? stderr : stdout;

	conns = xcalloc(opt.conns, sizeof(*conns));
	workers = xcalloc(opt.threads, sizeof(*workers));
	total = xcalloc(1, sizeof(*total));
	total_sent = xcalloc(1, sizeof(*total_sent));
	if (!conns || !workers || !total || !total_sent) {
		fprintf(stderr, "spop-bench: out of memory\n");
		goto done;
	}
	for (i = 0; i < opt.threads; i++)
		workers[i].epfd = -1;
	for (i = 0; i < opt.conns; i++) {
		char err[320];

		conns[i] = conn_new(i);
		if (!conns[i]) {
			fprintf(stderr, "spop-bench: out of memory\n");
			goto done;
		}
		if (conn_open(conns[i], err, sizeof(err)) < 0) {
			fprintf(stderr, "spop-bench: connection %u: %s\n", i, err);
			goto done;
		}
		if (conns[i]->depth < opt.inflight && i == 0)
			fprintf(stderr, "spop-bench: the agent does not announce pipelining; "
				"one NOTIFY in flight per connection\n");
	}
	for (i = 0; i < opt.threads; i++) {
		struct worker *w = &workers[i];

		w->id = i;
		w->epfd = epoll_create1(EPOLL_CLOEXEC);
		w->conns = xcalloc(opt.conns / opt.threads + 1, sizeof(*w->conns));
		if (w->epfd < 0 || !w->conns) {
			fprintf(stderr, "spop-bench: worker setup failed\n");
			goto done;
		}
	}
	for (i = 0; i < opt.conns; i++) {
		struct worker *w = &workers[i % opt.threads];
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = conns[i] };

		if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, conns[i]->fd, &ev) < 0) {
			fprintf(stderr, "spop-bench: epoll_ctl: %s\n", strerror(errno));
			goto done;
		}
		w->conns[w->nconns++] = conns[i];
	}

	g_t0 = now_ns();
	g_deadline = g_t0 + (uint64_t)(opt.duration * 1e9);
	if (opt.rate > 0) {
		g_interval_ns = (double)opt.conns * 1e9 / opt.rate;
		/* Stagger the connections across one interval. */
		for (i = 0; i < opt.conns; i++)
			conns[i]->sched_base = g_t0 + (uint64_t)(g_interval_ns * i / opt.conns);
	}
	for (i = 0; i < opt.threads; i++) {
		if (pthread_create(&workers[i].th, NULL, worker_main, &workers[i]) != 0) {
			fprintf(stderr, "spop-bench: pthread_create failed\n");
			break;
		}
		started++;
	}
	for (i = 0; i < started; i++)
		pthread_join(workers[i].th, NULL);
	if (started < opt.threads)
		goto done;

	for (i = 0; i < opt.threads; i++) {
		struct worker *w = &workers[i];

		hist_merge(total, &w->hist);
		hist_merge(total_sent, &w->hist_sent);
		acks += w->acks;
		sent += w->sent;
		passed += w->passed;
		limited += w->limited;
		other += w->other_status;
		none += w->no_status;
		errors += w->errors;
		lost += w->lost;
		thens += w->thens;
		if (w->t_last_ack > t_end)
			t_end = w->t_last_ack;
	}
	if (t_end <= g_t0)
		t_end = now_ns();
	secs = (double)(t_end - g_t0) / 1e9;
	rps = secs > 0 ? (double)acks / secs : 0.0;

	fprintf(out, "spop-bench %s: %u connections x %u in flight, %u thread%s, "
		"message \"%s\", %u keys, ",
		opt.addr, opt.conns, opt.inflight, opt.threads, opt.threads > 1 ? "s" : "",
		opt.message, opt.keys);
	if (opt.hot_keys)
		fprintf(out, "%u hot keys taking %u%% of the requests, ", opt.hot_keys,
			opt.hot_share);
	if (opt.rate > 0)
		fprintf(out, "open loop at %.0f/s\n", opt.rate);
	else
		fprintf(out, "closed loop\n");
	fprintf(out, "requests  %" PRIu64 " answered of %" PRIu64 " sent in %.3f s: %.0f/s\n",
		acks, sent, secs, rps);
	fprintf(out, "latency   p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f us\n",
		hist_quantile(total, 0.50) / 1e3, hist_quantile(total, 0.90) / 1e3,
		hist_quantile(total, 0.99) / 1e3, hist_quantile(total, 0.999) / 1e3,
		total->max / 1e3);
	if (opt.rate > 0)
		fprintf(out, "from send p50 %.1f  p99 %.1f us\n", hist_quantile(total_sent, 0.50) / 1e3,
			hist_quantile(total_sent, 0.99) / 1e3);
	fprintf(out, "status    0: %" PRIu64 "  429: %" PRIu64 "  other: %" PRIu64
		"  none: %" PRIu64 "\n", passed, limited, other, none);
	if (opt.then)
		fprintf(out, "then      %" PRIu64 " \"%s\" answered\n", thens, opt.then);
	fprintf(out, "errors    %" PRIu64 " (%" PRIu64 " requests unanswered)\n", errors, lost);
	if (opt.json) {
		printf("{\"requests\":%" PRIu64 ",\"seconds\":%.3f,\"rps\":%.1f,"
		       "\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,"
		       "\"max_us\":%.1f,\"limited\":%" PRIu64 ",\"passed\":%" PRIu64
		       ",\"errors\":%" PRIu64 ",\"lost\":%" PRIu64,
		       acks, secs, rps, hist_quantile(total, 0.50) / 1e3,
		       hist_quantile(total, 0.90) / 1e3, hist_quantile(total, 0.99) / 1e3,
		       hist_quantile(total, 0.999) / 1e3, total->max / 1e3, limited, passed,
		       errors, lost);
		printf(",\"sent_p50_us\":%.1f,\"sent_p99_us\":%.1f",
		       hist_quantile(total_sent, 0.50) / 1e3, hist_quantile(total_sent, 0.99) / 1e3);
		if (opt.then)
			printf(",\"then\":%" PRIu64, thens);
		if (opt.histogram) {
			printf(",\"hist_ns\":");
			hist_print_json(stdout, total);
		}
		printf("}\n");
	}
	fflush(stdout);
	status = (errors > 0 || acks == 0) ? 1 : 0;

done:
	if (conns)
		close_all(conns, opt.conns);
	for (i = 0; workers && i < opt.threads; i++) {
		if (workers[i].epfd >= 0)
			close(workers[i].epfd);
		xfree(workers[i].conns);
	}
	for (i = 0; conns && i < opt.conns; i++)
		conn_free(conns[i]);
	xfree(conns);
	xfree(workers);
	xfree(total);
	xfree(total_sent);
	return status;
}
