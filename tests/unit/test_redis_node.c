/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of a Redis node (redis_node.c, redis_conn.c, redis_batch.c)
 * and of the slot map's question (redis_slots.c)
 * over a fake transport and a fake loop: no socket, no sleep.
 *
 * The test links its own redis_transport_new(), whose transport reads what
 * the test's fake server wrote and keeps what the node writes, a few bytes
 * at a time if asked. libev's watchers and the monotonic clock are taken
 * at the link (-Wl,--wrap): the test's loop runs the prepare watchers, the
 * I/O watchers whose side is ready and the events fed, and its clock moves
 * only when a test moves it, firing the timers then due. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <ev.h>
#include <math.h>

#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "redis_breaker.h"
#include "redis_health.h"
#include "redis_node.h"
#include "redis_slots.h"
#include "redis_transport.h"
#include "store_redis.h"

/* ---- the clock ------------------------------------------------------------ */

static int64_t now_us = 1000000000;

int __real_clock_gettime(clockid_t id, struct timespec *ts);
int __wrap_clock_gettime(clockid_t id, struct timespec *ts)
{
	if (id != CLOCK_MONOTONIC)
		return __real_clock_gettime(id, ts);
	ts->tv_sec = now_us / 1000000;
	ts->tv_nsec = (now_us % 1000000) * 1000;
	return 0;
}

/* ---- the loop --------------------------------------------------------------- */

#define WATCHERS 16

static struct ev_loop *const loop = (struct ev_loop *)&now_us; /* never dereferenced */
static ev_io *ios[WATCHERS];
static ev_prepare *prepares[WATCHERS];
static struct { ev_timer *w; int64_t due; } timers[WATCHERS];
static struct { ev_watcher *w; int revents; } fed[WATCHERS];
static size_t nfed;

static void put(void **set, void *w)
{
	for (size_t i = 0; i < WATCHERS; i++)
		if (!set[i]) {
			set[i] = w;
			return;
		}
	fail_msg("too many watchers");
}

static void take(void **set, void *w)
{
	for (size_t i = 0; i < WATCHERS; i++)
		if (set[i] == w)
			set[i] = NULL;
}

static void unfeed(void *w)
{
	for (size_t i = 0; i < nfed; i++)
		if (fed[i].w == w) {
			memmove(&fed[i], &fed[i + 1], (nfed - i - 1) * sizeof(fed[0]));
			nfed--;
			i--;
		}
}

void __wrap_ev_io_start(struct ev_loop *l, ev_io *w)
{
	if (w->active)
		return;
	w->active = 1;
	put((void **)ios, w);
}

void __wrap_ev_io_stop(struct ev_loop *l, ev_io *w)
{
	unfeed(w);
	w->active = 0;
	take((void **)ios, w);
}

void __wrap_ev_prepare_start(struct ev_loop *l, ev_prepare *w)
{
	w->active = 1;
	put((void **)prepares, w);
}

void __wrap_ev_prepare_stop(struct ev_loop *l, ev_prepare *w)
{
	w->active = 0;
	take((void **)prepares, w);
}

/* Idle watchers: started (counted in kicks) and run once by a turn. */
static ev_idle *idles[WATCHERS];
static int kicks;

void __wrap_ev_idle_start(struct ev_loop *l, ev_idle *w)
{
	if (w->active)
		return;
	w->active = 1;
	kicks++;
	put((void **)idles, w);
}

void __wrap_ev_idle_stop(struct ev_loop *l, ev_idle *w)
{
	w->active = 0;
	take((void **)idles, w);
}

void __wrap_ev_timer_stop(struct ev_loop *l, ev_timer *w);

static void timer_at(ev_timer *w, int64_t due)
{
	__wrap_ev_timer_stop(loop, w);
	for (size_t i = 0; i < WATCHERS; i++)
		if (!timers[i].w) {
			timers[i].w = w;
			timers[i].due = due;
			w->active = 1;
			return;
		}
	fail_msg("too many timers");
}

void __wrap_ev_timer_start(struct ev_loop *l, ev_timer *w)
{
	timer_at(w, now_us + llround(w->at * 1e6));
}

void __wrap_ev_timer_stop(struct ev_loop *l, ev_timer *w)
{
	for (size_t i = 0; i < WATCHERS; i++)
		if (timers[i].w == w)
			timers[i].w = NULL;
	w->active = 0;
}

void __wrap_ev_timer_again(struct ev_loop *l, ev_timer *w)
{
	if (w->repeat > 0)
		timer_at(w, now_us + llround(w->repeat * 1e6));
	else
		__wrap_ev_timer_stop(l, w);
}

void __wrap_ev_feed_event(struct ev_loop *l, void *w, int revents)
{
	assert_true(nfed < WATCHERS);
	fed[nfed].w = w;
	fed[nfed++].revents = revents;
}

/* ---- the transport and the server behind it ------------------------------------- */

static size_t nheld; /* commands waiting for the test's answer (see serve()) */

static struct {
	int created, closed;
	int connect_rc, handshake_rc;  /* for the next transport */
	struct redis_transport *live;
	char in[1 << 16];              /* the server's bytes, in[in_pos..in_len) unread */
	size_t in_len, in_pos;
	size_t read_max;               /* bytes per read; 0: all */
	int end;                       /* once in is read: 1 the peer closes, -1 an error */
	char out[1 << 20];             /* what the node wrote */
	size_t out_len, out_pos;       /* out_pos: parsed by the server */
	size_t write_max;              /* bytes per write; 0: all */
	int write_blocked;
} fk;

static int fake_connect(struct redis_transport *t, const struct addr *a)
{
	if (fk.connect_rc == REDIS_T_ERROR)
		snprintf(t->errstr, sizeof(t->errstr), "refused at once");
	t->fd = fk.connect_rc == REDIS_T_ERROR ? -1 : 7;
	return fk.connect_rc;
}

static int fake_handshake(struct redis_transport *t)
{
	if (fk.handshake_rc == REDIS_T_ERROR)
		snprintf(t->errstr, sizeof(t->errstr), "Connection refused");
	return fk.handshake_rc;
}

static ssize_t fake_read(struct redis_transport *t, void *buf, size_t len)
{
	size_t n = fk.in_len - fk.in_pos;

	assert_ptr_equal(t, fk.live);
	if (!n && fk.end) {
		snprintf(t->errstr, sizeof(t->errstr), "Connection reset by peer");
		return fk.end > 0 ? 0 : REDIS_T_ERROR;
	}
	if (!n)
		return REDIS_T_WANT_READ;
	if (fk.read_max && n > fk.read_max)
		n = fk.read_max;
	if (n > len)
		n = len;
	memcpy(buf, fk.in + fk.in_pos, n);
	fk.in_pos += n;
	return (ssize_t)n;
}

static ssize_t fake_write(struct redis_transport *t, const void *buf, size_t len)
{
	assert_ptr_equal(t, fk.live);
	if (fk.write_blocked)
		return REDIS_T_WANT_WRITE;
	if (fk.write_max && len > fk.write_max)
		len = fk.write_max;
	assert_true(len <= sizeof(fk.out) - fk.out_len);
	memcpy(fk.out + fk.out_len, buf, len);
	fk.out_len += len;
	return (ssize_t)len;
}

static void fake_close(struct redis_transport *t)
{
	if (t == fk.live)
		fk.live = NULL;
	fk.closed++;
	free(t);
}

static const struct redis_transport_ops fake_ops = {
	fake_connect, fake_handshake, fake_read, fake_write, fake_close,
};

struct redis_transport *redis_transport_new(const struct redis_config *cfg)
{
	struct redis_transport *t = calloc(1, sizeof(*t));

	t->ops = &fake_ops;
	t->fd = -1;
	fk.live = t;
	fk.created++;
	fk.in_len = fk.in_pos = fk.out_len = fk.out_pos = 0;
	fk.end = 0;
	nheld = 0; /* what the last connection left unanswered */
	return t;
}

/* The server's side: commands parsed from what the node wrote. The
 * handshake's (FUNCTION, CONFIG, AUTH, INFO) and ASKING are answered at once
 * when nothing waits before them; the others wait in `held` for the test
 * to answer, in order. */
#define HELD_MAX 64
static char held[HELD_MAX][32];     /* each command's name and first argument */

static void serve(const char *bytes, size_t len)
{
	assert_true(len <= sizeof(fk.in) - fk.in_len);
	memcpy(fk.in + fk.in_len, bytes, len);
	fk.in_len += len;
}

static void serve_str(const char *s)
{
	serve(s, strlen(s));
}

static int auth_refused; /* AUTH refused, and what follows it */
static int cluster_node; /* INFO says cluster_enabled:1 */

static int auto_answer(const char *name)
{
	if (auth_refused && (!strncmp(name, "FUNCTION", 8) || !strncmp(name, "CONFIG", 6) ||
			     !strncmp(name, "INFO", 4)))
		serve_str("-NOAUTH Authentication required.\r\n");
	else if (auth_refused && !strncmp(name, "AUTH", 4))
		serve_str("-WRONGPASS invalid username-password pair\r\n");
	else if (!strncmp(name, "FUNCTION", 8))
		serve_str("$9\r\nratelimit\r\n");
	else if (!strncmp(name, "CONFIG", 6))
		serve_str("*0\r\n");
	else if (!strncmp(name, "INFO", 4))
		serve_str(cluster_node ? "$30\r\n# Cluster\r\ncluster_enabled:1\r\n\r\n"
				       : "$30\r\n# Cluster\r\ncluster_enabled:0\r\n\r\n");
	else if (!strncmp(name, "AUTH", 4) || !strncmp(name, "ASKING", 6))
		serve_str("+OK\r\n");
	else
		return 0;
	return 1;
}

/* Parses one RESP command at out[out_pos..): its first two words into
 * name ("FCALL rl8_decide"). Returns 0 when incomplete. */
static int parse_command(char name[32])
{
	const char *p = fk.out + fk.out_pos, *end = fk.out + fk.out_len;
	long argc, i;
	size_t at = 0;

	if (p == end || !memchr(p, '\n', (size_t)(end - p)))
		return 0;
	assert_int_equal(*p, '*');
	argc = strtol(p + 1, NULL, 10);
	p = (const char *)memchr(p, '\n', (size_t)(end - p)) + 1;
	name[0] = 0;
	for (i = 0; i < argc; i++) {
		long len;

		if (p >= end || !memchr(p, '\n', (size_t)(end - p)))
			return 0;
		assert_int_equal(*p, '$');
		len = strtol(p + 1, NULL, 10);
		p = (const char *)memchr(p, '\n', (size_t)(end - p)) + 1;
		if (end - p < len + 2)
			return 0;
		if (i < 2 && at + (size_t)len + 1 < 32) {
			if (at)
				name[at++] = ' ';
			memcpy(name + at, p, (size_t)len);
			at += (size_t)len;
			name[at] = 0;
		}
		p += len + 2;
	}
	fk.out_pos = (size_t)(p - fk.out);
	return 1;
}

static void server_reads(void)
{
	char name[32];

	while (parse_command(name)) {
		if (!nheld && auto_answer(name))
			continue;
		assert_true(nheld < HELD_MAX);
		snprintf(held[nheld++], sizeof(held[0]), "%s", name);
	}
}

/* Answers the oldest command waiting with `bytes` (its name must begin
 * with `expect`), then the handshake's behind it. */
static void answer(const char *expect, const char *bytes, size_t len)
{
	assert_true(nheld > 0);
	assert_memory_equal(held[0], expect, strlen(expect));
	serve(bytes, len);
	memmove(held[0], held[1], (nheld - 1) * sizeof(held[0]));
	nheld--;
	while (nheld && auto_answer(held[0])) {
		memmove(held[0], held[1], (nheld - 1) * sizeof(held[0]));
		nheld--;
	}
}

/* ---- running ------------------------------------------------------------------- */

/* One turn: prepare watchers, then each I/O watcher whose side is ready,
 * then the events fed. Returns whether anything was called. */
static int turn(void)
{
	int did = 0;

	for (size_t i = 0; i < WATCHERS; i++)
		if (prepares[i]) {
			prepares[i]->cb(loop, prepares[i], EV_PREPARE);
			did = 1;
		}
	for (size_t i = 0; i < WATCHERS; i++) {
		ev_io *w = ios[i];
		int ready;

		if (!w)
			continue;
		ready = (w->events & EV_WRITE) ? !fk.write_blocked
					       : fk.in_pos < fk.in_len || fk.end;
		if (ready) {
			w->cb(loop, w, w->events);
			did = 1;
		}
	}
	for (size_t i = 0; i < WATCHERS; i++)
		if (idles[i]) {
			idles[i]->cb(loop, idles[i], EV_IDLE);
			did = 1;
		}
	while (nfed) {
		ev_watcher *w = fed[0].w;
		int revents = fed[0].revents;

		memmove(&fed[0], &fed[1], (nfed - 1) * sizeof(fed[0]));
		nfed--;
		w->cb(loop, w, revents);
		did = 1;
	}
	server_reads();
	return did;
}

/* Turns until nothing moves in three turns in a row (a connection made
 * writes in the turn after), at most a bound. */
static void run(void)
{
	for (int i = 0, still = 0; i < 10000; i++) {
		size_t in = fk.in_pos, out = fk.out_len, n = nfed;
		int made = fk.created, closed = fk.closed;

		turn();
		if (in == fk.in_pos && out == fk.out_len && !n && !nfed && made == fk.created &&
		    closed == fk.closed) {
			if (++still == 3)
				return;
		} else {
			still = 0;
		}
	}
	fail_msg("the loop never settles");
}

/* Moves the clock by us, firing the timers due on the way, in order. */
static void advance(int64_t us)
{
	int64_t until = now_us + us;

	for (;;) {
		size_t first = WATCHERS;

		for (size_t i = 0; i < WATCHERS; i++)
			if (timers[i].w && timers[i].due <= until &&
			    (first == WATCHERS || timers[i].due < timers[first].due))
				first = i;
		if (first == WATCHERS)
			break;
		ev_timer *w = timers[first].w;

		if (timers[first].due > now_us)
			now_us = timers[first].due;
		if (w->repeat > 0)
			timers[first].due = now_us + llround(w->repeat * 1e6);
		else
			__wrap_ev_timer_stop(loop, w);
		w->cb(loop, w, EV_TIMER);
		run();
	}
	now_us = until;
}

/* ---- the owner ------------------------------------------------------------------- */

static struct {
	int decided, failed, failed_sent, saturated, moved, trouble, where, here;
	struct limit_result res[LIMIT_SET_MAX];
	uint32_t last_id;
	struct redis_cluster_error where_e;
} seen;

static void on_decided(void *owner, const struct redis_query *r, const struct limit_result *res,
		       int decider, int64_t sent, int64_t redis_now, const struct lease_grant *grant)
{
	seen.decided++;
	seen.last_id = r->ref.id;
	memcpy(seen.res, res, r->q.nlimits * sizeof(*res));
}

static void on_failed(void *owner, const struct redis_query *r, bool sent, bool saturated)
{
	seen.failed++;
	seen.failed_sent += sent;
	seen.saturated += saturated;
	seen.last_id = r->ref.id;
}

static void on_moved(void *owner, struct redis_node *rn, const struct redis_query *r)
{
	seen.moved++;
	seen.last_id = r->ref.id;
}

static void on_trouble(void *owner, struct redis_node *rn)
{
	seen.trouble++;
}

static void on_where(void *owner, const struct redis_query *r, int here,
		     const struct redis_cluster_error *e)
{
	seen.where++;
	seen.here = here;
	if (e)
		seen.where_e = *e;
}

static const struct redis_node_cb node_cb = {
	.decided = on_decided,
	.failed = on_failed,
	.moved = on_moved,
	.trouble = on_trouble,
	.where = on_where,
};

static struct redis_config cfg;
static struct redis_stats stats;
static struct rule rule1;

static struct redis_node *node_new(enum redis_topology topology)
{
	struct addr a;
	struct redis_node *rn;

	memset(&cfg, 0, sizeof(cfg));
	cfg.topology = topology;
	cluster_node = topology == REDIS_CLUSTER;
	cfg.max_pending = 8;
	cfg.batch_max = 4;
	cfg.pipeline = 2;
	assert_int_equal(addr_parse("127.0.0.1:6379", 0, &a), 0);
	rn = redis_node_new(loop, 0, &a, &cfg, &node_cb, &seen, &stats);
	assert_non_null(rn);
	return rn;
}

static struct redis_node *ready_node(enum redis_topology topology)
{
	struct redis_node *rn = node_new(topology);

	run();
	assert_true(redis_node_ready(rn));
	return rn;
}

static struct redis_query query(uint32_t id, int64_t timeout_us)
{
	struct redis_query r;

	memset(&r, 0, sizeof(r));
	r.ref.id = id;
	memset(r.q.key, (int)id, sizeof(r.q.key));
	r.q.rule = &rule1;
	r.q.limits = rule1.limits;
	r.q.nlimits = 1;
	r.q.cost = 1;
	r.queued = now_us;
	r.deadline = now_us + timeout_us;
	return r;
}

/* The library's reply to a call of n queries, each allowed with 9 left
 * (allowed 2: moved), as a bulk string. */
static size_t decision_reply(char *out, size_t n, int allowed)
{
	uint8_t mp[256];
	size_t len = 0, at;

	mp[len++] = 0x92;
	mp[len++] = 0x05;                      /* now */
	mp[len++] = (uint8_t)(0x90 | n);
	for (size_t i = 0; i < n; i++) {
		static const uint8_t one[] = { 0x93, 0x01, 0x01, 0x91, 0x93, 0x09, 0x00, 0x0a };

		memcpy(mp + len, one, sizeof(one));
		mp[len + 1] = (uint8_t)allowed;
		len += sizeof(one);
	}
	at = (size_t)sprintf(out, "$%zu\r\n", len);
	memcpy(out + at, mp, len);
	memcpy(out + at + len, "\r\n", 2);
	return at + len + 2;
}

static void answer_decisions(size_t n, int allowed)
{
	char buf[512];
	size_t len = decision_reply(buf, n, allowed);

	answer("FCALL rl8_decide", buf, len);
}

static int setup(void **state)
{
	memset(&fk, 0, sizeof(fk));
	fk.connect_rc = REDIS_T_WANT_WRITE;
	memset(&seen, 0, sizeof(seen));
	memset(&stats, 0, sizeof(stats));
	memset(ios, 0, sizeof(ios));
	memset(prepares, 0, sizeof(prepares));
	memset(idles, 0, sizeof(idles));
	memset(timers, 0, sizeof(timers));
	nfed = nheld = 0;
	auth_refused = cluster_node = 0;
	memset(&rule1, 0, sizeof(rule1));
	rule1.nlimits = rule1.nown = 1;
	rule1.limits[0] = (struct limit_spec){ .quota = 10, .period_us = 1000000,
					       .algo = LIMIT_FIXED_WINDOW };
	rule1.lidh[0] = 0x1234;
	return 0;
}

/* ---- tests ------------------------------------------------------------------------- */

/* Connects, loads the library, decides one query; freed, it closes. */
static void test_connect_and_decide(void **unused)
{
	struct redis_node *rn = node_new(REDIS_STANDALONE);
	struct redis_query r = query(1, 100000);

	assert_false(redis_node_ready(rn));
	run();
	assert_true(redis_node_ready(rn));
	assert_int_equal(redis_node_submit(rn, &r), 0);
	run();
	assert_int_equal(nheld, 1);
	assert_string_equal(held[0], "FCALL rl8_decide");
	answer_decisions(1, 1);
	run();
	assert_int_equal(seen.decided, 1);
	assert_int_equal(seen.last_id, 1);
	assert_int_equal(seen.res[0].remaining, 9);
	assert_true(seen.res[0].allowed);
	assert_int_equal(seen.failed, 0);
	redis_node_free(rn);
	assert_int_equal(fk.closed, 1);
	assert_null(fk.live);
}

/* The node's writes come out whole through a transport that takes three
 * bytes at a time, and waits in between. */
static void test_partial_writes(void **unused)
{
	struct redis_node *rn;
	struct redis_query r[3];

	fk.write_max = 3;
	rn = ready_node(REDIS_STANDALONE);
	for (uint32_t i = 0; i < 3; i++) {
		r[i] = query(10 + i, 100000);
		assert_int_equal(redis_node_submit(rn, &r[i]), 0);
	}
	fk.write_blocked = 1;
	turn(); /* the batch goes to the buffer; the socket takes nothing */
	assert_int_equal(nheld, 0);
	fk.write_blocked = 0;
	run();
	assert_int_equal(nheld, 1);
	answer_decisions(3, 1);
	run();
	assert_int_equal(seen.decided, 3);
	redis_node_free(rn);
}

/* A reply split at every byte (the transport gives one byte, then the
 * rest, or one byte per read) is answered once, when whole. */
static void test_reply_split_everywhere(void **unused)
{
	char buf[512];
	size_t len = decision_reply(buf, 1, 1);

	for (size_t cut = 0; cut <= len; cut++) {
		struct redis_node *rn;
		struct redis_query r;

		setup(NULL);
		rn = ready_node(REDIS_STANDALONE);
		r = query(2, 100000);
		assert_int_equal(redis_node_submit(rn, &r), 0);
		run();
		assert_int_equal(nheld, 1);
		nheld = 0;
		fk.read_max = cut ? cut : 1;
		serve(buf, cut ? cut : len);
		run();
		assert_int_equal(seen.decided, cut == len || !cut);
		if (cut && cut < len) {
			fk.read_max = 0;
			serve(buf + cut, len - cut);
			run();
		}
		assert_int_equal(seen.decided, 1);
		assert_int_equal(seen.failed, 0);
		redis_node_free(rn);
	}
}

/* An error reply fails the call's queries (sent), and the connection
 * stays; a topology error says so to the owner. */
static void test_error_reply(void **unused)
{
	struct redis_node *rn = ready_node(REDIS_STANDALONE);
	struct redis_query r = query(3, 100000);
	static const char err[] = "-READONLY You can't write against a read only replica.\r\n";

	assert_int_equal(redis_node_submit(rn, &r), 0);
	run();
	answer("FCALL", err, sizeof(err) - 1);
	run();
	assert_int_equal(seen.failed, 1);
	assert_int_equal(seen.failed_sent, 1);
	assert_int_equal(seen.trouble, 1);
	assert_true(redis_node_ready(rn));
	assert_int_equal(fk.created, 1);
	redis_node_free(rn);
}

/* The connection fails: no connection is made, the node is down and tries
 * again after its backoff, which grows. */
static void test_connect_fails_then_backs_off(void **unused)
{
	struct redis_node *rn;
	struct redis_query r = query(4, 100000);

	fk.handshake_rc = REDIS_T_ERROR;
	rn = node_new(REDIS_STANDALONE);
	run();
	assert_false(redis_node_ready(rn));
	assert_int_equal(seen.trouble, 1);
	assert_int_not_equal(redis_node_down_since(rn), 0);
	assert_int_equal(redis_node_submit(rn, &r), -1);
	assert_int_equal(fk.created, 1);
	advance(40000);
	assert_int_equal(fk.created, 1);
	advance(10000); /* 50 ms: the first backoff */
	assert_int_equal(fk.created, 2);
	advance(99000);
	assert_int_equal(fk.created, 2);
	fk.handshake_rc = 0;
	advance(1000);  /* 100 ms: the second */
	assert_int_equal(fk.created, 3);
	assert_true(redis_node_ready(rn));
	assert_int_equal(redis_node_down_since(rn), 0);
	redis_node_free(rn);
}

/* A connection refused at once (a Unix socket without a server) is tried
 * again too. */
static void test_connect_refused_at_once(void **unused)
{
	struct redis_node *rn;

	fk.connect_rc = REDIS_T_ERROR;
	rn = node_new(REDIS_STANDALONE);
	assert_false(redis_node_ready(rn));
	assert_int_equal(fk.closed, 1);
	fk.connect_rc = REDIS_T_WANT_WRITE;
	advance(50000);
	assert_int_equal(fk.created, 2);
	assert_true(redis_node_ready(rn));
	redis_node_free(rn);
}

/* A query whose reply does not come within its deadline is failed (sent)
 * at the deadline, once: the late reply is ignored. The server was silent
 * for less than the breaker's window: saturated, not a failure. */
static void test_deadline(void **unused)
{
	struct redis_node *rn = ready_node(REDIS_STANDALONE);
	struct redis_query r = query(5, 20000);

	assert_int_equal(redis_node_submit(rn, &r), 0);
	run();
	advance(19999);
	assert_int_equal(seen.failed, 0);
	advance(1);
	assert_int_equal(seen.failed, 1);
	assert_int_equal(seen.failed_sent, 1);
	assert_int_equal(seen.saturated, 1);
	assert_int_equal(stats.saturated, 1);
	answer_decisions(1, 1);
	run();
	assert_int_equal(seen.decided, 0);
	assert_int_equal(seen.failed, 1);
	assert_true(redis_node_ready(rn));
	redis_node_free(rn);
}

/* A query still queued when its deadline passed (the loop came late) is
 * answered at once, saturated, and never sent; the loop is kept from
 * blocking (an idle watcher), so that the answer, given after the owner's
 * prepare watcher may have written what it had, goes out at once. */
static void test_expired_query_is_not_sent(void **unused)
{
	struct redis_node *rn = ready_node(REDIS_STANDALONE);
	struct redis_query r = query(7, 20000);
	uint64_t calls = stats.calls;
	int before = kicks;

	assert_int_equal(redis_node_submit(rn, &r), 0);
	now_us += 30000; /* no watcher ran meanwhile */
	run();
	assert_int_equal(seen.saturated, 1);
	assert_int_equal(stats.calls, calls);
	assert_int_equal(kicks, before + 1);
	/* it ran once and stopped: no loop kept spinning */
	for (size_t i = 0; i < WATCHERS; i++)
		assert_null(idles[i]);
	redis_node_free(rn);
}

/* The next query (id) goes to the server and Redis decides it: the
 * breaker stayed closed. */
static void next_query_decided(struct redis_node *rn, int id)
{
	struct redis_query r = query(id, 20000);

	assert_int_equal(redis_node_submit(rn, &r), 0);
	run();
	answer_decisions(1, 1);
	run();
	assert_int_equal(seen.decided, 1);
	assert_int_equal(stats.breaker_skips, 0);
}

/* Deadlines missed one after another while the server keeps answering,
 * late: every one is saturated, the breaker never opens, and the next
 * query still goes to the server. */
static void test_busy_server_keeps_the_breaker_closed(void **unused)
{
	struct redis_node *rn = ready_node(REDIS_STANDALONE);
	struct redis_query r;

	for (uint32_t i = 0; i < 10; i++) {
		r = query(40 + i, 20000);
		assert_int_equal(redis_node_submit(rn, &r), 0);
		run();
		advance(20000);
		answer_decisions(1, 1);
		run();
	}
	assert_int_equal(seen.failed, 10);
	assert_int_equal(seen.saturated, 10);
	assert_int_equal(seen.decided, 0);
	assert_int_equal(stats.breaker_trips, 0);
	next_query_decided(rn, 60);
	redis_node_free(rn);
}

/* A server that stops answering: deadlines within its first
 * REDIS_BREAKER_SILENT_US of silence are saturated, and so are those
 * until a look REDIS_BREAKER_CONFIRM_US later confirms it; the first after
 * that is a failure, the breaker opens at once, and queries skip the
 * server. */
static void test_silent_server_opens_the_breaker(void **unused)
{
	struct redis_node *rn = ready_node(REDIS_STANDALONE);
	struct redis_query r;
	uint32_t i = 0;

	while (seen.failed == seen.saturated) {
		assert_true(i < 20);
		r = query(70 + i++, 20000);
		assert_int_equal(redis_node_submit(rn, &r), 0);
		run();
		advance(20000);
	}
	/* silent since the first call left: 20 ms per query */
	assert_int_equal(seen.saturated,
			 (REDIS_BREAKER_SILENT_US + REDIS_BREAKER_CONFIRM_US) / 20000 - 1);
	assert_int_equal(stats.breaker_trips, 1);
	r = query(90, 20000);
	assert_int_equal(redis_node_submit(rn, &r), -1);
	assert_int_equal(stats.breaker_skips, 1);
	redis_node_free(rn);
}

/* The breaker's judgement alone, on a clock of the test's: a window
 * passed is a suspicion, confirmed by a look on time
 * REDIS_BREAKER_CONFIRM_US later with no reply since; a reply clears it;
 * a look that came late starts it again. */
static void test_breaker_judge(void **unused)
{
	struct redis_breaker b = { 0 };
	int64_t t = 1000000, w = REDIS_BREAKER_SILENT_US, c = REDIS_BREAKER_CONFIRM_US;

	/* nothing out: nothing to be silent about */
	assert_int_equal(redis_breaker_judge(&b, false, 0, t + 10 * w, 0), REDIS_ANSWERING);
	/* a call out since t, no reply */
	assert_int_equal(redis_breaker_judge(&b, true, t, t + w - 1, 0), REDIS_ANSWERING);
	assert_int_equal(redis_breaker_judge(&b, true, t, t + w, 0), REDIS_SUSPECT);
	assert_int_equal(redis_breaker_recheck(&b, t + w), t + w + c);
	assert_int_equal(redis_breaker_judge(&b, true, t, t + w + c - 1, 0), REDIS_SUSPECT);
	assert_int_equal(redis_breaker_judge(&b, true, t, t + w + c, 0), REDIS_SILENT);
	assert_int_equal(redis_breaker_recheck(&b, t + w + c), 0);
	/* a reply: answering, and the suspicion is gone */
	redis_breaker_heard(&b, t + w + c + 1);
	assert_int_equal(redis_breaker_judge(&b, true, t, t + w + c + 2, 0), REDIS_ANSWERING);
	assert_int_equal(b.suspect, 0);
	/* the window from that reply, looks late: each starts the suspicion
	 * again, however long the silence by the agent's clock */
	t += w + c + 1;
	assert_int_equal(redis_breaker_judge(&b, true, 0, t + w, REDIS_BREAKER_LATE_US),
			 REDIS_SUSPECT);
	assert_int_equal(redis_breaker_judge(&b, true, 0, t + w + c, REDIS_BREAKER_LATE_US),
			 REDIS_SUSPECT);
	assert_int_equal(redis_breaker_judge(&b, true, 0, t + w + 2 * c - 1, 0), REDIS_SUSPECT);
	assert_int_equal(redis_breaker_judge(&b, true, 0, t + w + 2 * c, REDIS_BREAKER_LATE_US - 1),
			 REDIS_SILENT);
}

/* The agent's loop starved (its thread and the server's descheduled
 * together): it wakes long past a query's deadline, the window passed by
 * its clock, with nothing to read yet. The query is saturated, the server
 * only suspected; its reply then comes, and the breaker never opened. */
static void test_starved_loop_keeps_the_breaker_closed(void **unused)
{
	struct redis_node *rn = ready_node(REDIS_STANDALONE);
	struct redis_query r = query(95, 20000);

	assert_int_equal(redis_node_submit(rn, &r), 0);
	run();
	now_us += 2 * REDIS_BREAKER_SILENT_US; /* no timer ran meanwhile */
	advance(0);
	assert_int_equal(seen.failed, 1);
	assert_int_equal(seen.saturated, 1);
	answer_decisions(1, 1);
	run();
	advance(REDIS_BREAKER_CONFIRM_US);
	assert_int_equal(stats.breaker_trips, 0);
	next_query_decided(rn, 96);
	redis_node_free(rn);
}

/* Three calls in a row failed open the breaker: queries are refused at
 * once until the probe interval; one probe goes, and its answer closes
 * the breaker. */
static void test_breaker(void **unused)
{
	struct redis_node *rn = ready_node(REDIS_STANDALONE);
	static const char err[] = "-ERR boom\r\n";
	struct redis_query r;

	for (uint32_t i = 0; i < 3; i++) {
		r = query(20 + i, 100000);
		assert_int_equal(redis_node_submit(rn, &r), 0);
		run();
		answer("FCALL", err, sizeof(err) - 1);
		run();
	}
	assert_int_equal(seen.failed, 3);
	r = query(30, 100000);
	assert_int_equal(redis_node_submit(rn, &r), -1);
	advance(250000);
	r = query(31, 100000);
	assert_int_equal(redis_node_submit(rn, &r), 0); /* the probe */
	r = query(32, 100000);
	assert_int_equal(redis_node_submit(rn, &r), -1);
	run();
	answer_decisions(1, 1);
	run();
	assert_int_equal(seen.decided, 1);
	r = query(33, 100000);
	assert_int_equal(redis_node_submit(rn, &r), 0);
	redis_node_free(rn);
}

/* The connection lost (the server closes it, or an error): the calls in
 * flight and the queries queued are failed, the owner hears of trouble,
 * and the node connects again. */
static void test_connection_lost(void **unused)
{
	for (int how = 1; how >= -1; how -= 2) {
		struct redis_node *rn;
		struct redis_query r = query(6, 100000);

		setup(NULL);
		rn = ready_node(REDIS_STANDALONE);
		assert_int_equal(redis_node_submit(rn, &r), 0);
		run();
		fk.end = how;
		run();
		assert_int_equal(seen.failed, 1);
		assert_int_equal(seen.failed_sent, 1);
		assert_int_equal(seen.trouble, 1);
		assert_false(redis_node_ready(rn));
		assert_int_equal(fk.closed, 1);
		advance(50000);
		assert_int_equal(fk.created, 2);
		assert_true(redis_node_ready(rn));
		redis_node_free(rn);
	}
}

/* A reply no command waits for ends the connection (hiredis 0.14 would
 * have aborted); so does a malformed one. */
static void test_unsolicited_and_malformed(void **unused)
{
	static const char *const bad[] = {
		":1\r\n", "?what\r\n", "*100000\r\n",
		"*3\r\n$7\r\nmessage\r\n$1\r\nx\r\n$1\r\ny\r\n", /* not subscribed */
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct redis_node *rn;

		setup(NULL);
		rn = ready_node(REDIS_STANDALONE);
		serve_str(bad[i]);
		run();
		assert_false(redis_node_ready(rn));
		assert_int_equal(fk.closed, 1);
		assert_int_equal(seen.trouble, 1);
		redis_node_free(rn);
	}
}

/* Cluster: a query whose key moved comes back to the owner as moved; one
 * sent after ASKING goes alone, behind ASKING; the node's question of
 * where a key lives reads MOVED and ASK. */
static void test_moved_and_ask(void **unused)
{
	struct redis_node *rn = ready_node(REDIS_CLUSTER);
	struct redis_query r = query(7, 100000), a = query(8, 100000);
	char buf[512];
	size_t len;
	static const char moved[] = "-MOVED 3999 127.0.0.1:7002\r\n";
	static const char ask[] = "-ASK 3999 127.0.0.1:7003\r\n";

	assert_int_equal(redis_node_submit(rn, &r), 0);
	run();
	len = decision_reply(buf, 1, 2);
	answer("FCALL rl8_decide_cluster", buf, len);
	run();
	assert_int_equal(seen.moved, 1);
	assert_int_equal(seen.last_id, 7);

	a.asking = true;
	assert_int_equal(redis_node_submit(rn, &r), 0);
	assert_int_equal(redis_node_submit(rn, &a), 0);
	run();
	/* two calls: r, then ASKING and a alone */
	assert_int_equal(nheld, 3);
	assert_string_equal(held[0], "FCALL rl8_decide_cluster");
	assert_string_equal(held[1], "ASKING");
	assert_string_equal(held[2], "FCALL rl8_decide_cluster");
	len = decision_reply(buf, 1, 1);
	answer("FCALL", buf, len);
	answer("FCALL", buf, len);
	run();
	assert_int_equal(seen.decided, 2);

	assert_int_equal(redis_node_where(rn, &r), 0);
	run();
	answer("EXISTS", moved, sizeof(moved) - 1);
	run();
	assert_int_equal(seen.where, 1);
	assert_int_equal(seen.here, 0);
	assert_int_equal(seen.where_e.kind, REDIS_CLUSTER_E_MOVED);
	assert_string_equal(seen.where_e.addr.port, "7002");
	assert_int_equal(redis_node_where(rn, &r), 0);
	run();
	answer("EXISTS", ask, sizeof(ask) - 1);
	run();
	assert_int_equal(seen.where_e.kind, REDIS_CLUSTER_E_ASK);
	assert_int_equal(seen.where_e.slot, 3999);
	assert_int_equal(redis_node_where(rn, &r), 0);
	run();
	answer("EXISTS", ":0\r\n", 4);
	run();
	assert_int_equal(seen.where, 3);
	assert_int_equal(seen.here, 1);
	redis_node_free(rn);
}

/* The library gone (Redis restarted): loaded again and the call retried
 * once, keeping its query. */
static void test_library_missing(void **unused)
{
	struct redis_node *rn = ready_node(REDIS_STANDALONE);
	struct redis_query r = query(9, 100000);
	static const char err[] = "-ERR Function not found\r\n";

	assert_int_equal(redis_node_submit(rn, &r), 0);
	run();
	answer("FCALL", err, sizeof(err) - 1);
	run();
	/* FUNCTION LOAD answered by the server, the call sent again */
	assert_int_equal(nheld, 1);
	answer_decisions(1, 1);
	run();
	assert_int_equal(seen.decided, 1);
	assert_int_equal(seen.failed, 0);
	redis_node_free(rn);
}

/* A server that accepts and never answers: the handshake's deadline
 * fails the node (decisions go to the failure policy at once). */
static void test_handshake_deadline(void **unused)
{
	struct redis_node *rn;
	struct redis_query r = query(10, 100000);

	fk.handshake_rc = REDIS_T_WANT_WRITE;
	rn = node_new(REDIS_STANDALONE);
	run();
	assert_false(redis_node_ready(rn));
	assert_int_equal(redis_node_down_since(rn), 0);
	advance(1000000);
	assert_int_not_equal(redis_node_down_since(rn), 0);
	assert_int_equal(redis_node_submit(rn, &r), -1);
	redis_node_free(rn);
}

/* Freed with queries queued and sent: each is failed once. */
static void test_free_fails_everything(void **unused)
{
	struct redis_node *rn = ready_node(REDIS_STANDALONE);
	struct redis_query r = query(11, 100000);

	assert_int_equal(redis_node_submit(rn, &r), 0);
	run();
	assert_int_equal(redis_node_submit(rn, &r), 0);
	redis_node_free(rn);
	assert_int_equal(seen.failed, 2);
	assert_int_equal(seen.failed_sent, 1);
}

/* AUTH refused: the node is down, the connection closes once the
 * commands behind AUTH are answered (refused too), and the next one, with
 * AUTH accepted, makes the node ready. */
static void test_auth_refused(void **unused)
{
	struct addr a;
	struct redis_node *rn;
	struct redis_query r = query(12, 100000);

	auth_refused = 1;
	memset(&cfg, 0, sizeof(cfg));
	cfg.max_pending = 8;
	cfg.batch_max = 4;
	cfg.pipeline = 2;
	snprintf(cfg.password, sizeof(cfg.password), "wrong");
	assert_int_equal(addr_parse("127.0.0.1:6379", 0, &a), 0);
	rn = redis_node_new(loop, 0, &a, &cfg, &node_cb, &seen, &stats);
	assert_non_null(rn);
	run();
	assert_false(redis_node_ready(rn));
	assert_int_not_equal(redis_node_down_since(rn), 0);
	assert_int_equal(redis_node_submit(rn, &r), -1);
	assert_int_equal(fk.closed, 1);
	assert_int_equal(seen.trouble, 1);
	/* counted once, as auth; the gauges: one node, not ready */
	assert_int_equal(STAT_GET(stats.error_kind[REDIS_ERROR_AUTH]), 1);
	assert_int_equal(STAT_GET(stats.error_kind[REDIS_ERROR_CONNECT]), 0);
	assert_int_equal(STAT_GET(stats.nodes), 1);
	assert_int_equal(STAT_GET(stats.ready), 0);
	assert_int_equal(STAT_GET(stats.last_kind), REDIS_ERROR_AUTH + 1);
	auth_refused = 0;
	advance(50000);
	assert_int_equal(fk.created, 2);
	assert_true(redis_node_ready(rn));
	assert_int_equal(STAT_GET(stats.ready), 1);
	assert_int_equal(STAT_GET(stats.last_kind), 0);
	assert_int_equal(redis_node_submit(rn, &r), 0);
	redis_node_free(rn);
	assert_int_equal(STAT_GET(stats.nodes), 0);
	assert_int_equal(STAT_GET(stats.ready), 0);
}

/* Error replies by kind, as the metrics label them. */
static void test_error_classes(void **unused)
{
	static const struct {
		const char *reply;
		enum redis_error_kind kind;
	} cases[] = {
		{ "NOAUTH Authentication required.", REDIS_ERROR_AUTH },
		{ "WRONGPASS invalid username-password pair or user is disabled.", REDIS_ERROR_AUTH },
		{ "ERR Protocol error: unauthenticated bulk length", REDIS_ERROR_AUTH },
		{ "NOPERM this user has no permissions to run the 'function' command",
		  REDIS_ERROR_NOPERM },
		{ "LOADING Redis is loading the dataset in memory", REDIS_ERROR_LOADING },
		{ "MOVED 3999 127.0.0.1:6381", REDIS_ERROR_CLUSTER_MISMATCH },
		{ "CLUSTERDOWN The cluster is down", REDIS_ERROR_CLUSTER_MISMATCH },
		{ "ERR This instance has cluster support disabled", REDIS_ERROR_CLUSTER_MISMATCH },
		{ "ERR unknown command 'FUNCTION'", REDIS_ERROR_OTHER },
		{ "NOAUT", REDIS_ERROR_OTHER },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(redis_error_classify(cases[i].reply, strlen(cases[i].reply)),
				 cases[i].kind);
	assert_string_equal(redis_error_kind_name(REDIS_ERROR_CLUSTER_MISMATCH), "cluster_mismatch");
	assert_true(redis_error_permanent(REDIS_ERROR_AUTH));
	assert_false(redis_error_permanent(REDIS_ERROR_CONNECT));
}

/* A Cluster node where a standalone server is configured (and the other
 * way round): refused before the library is loaded, counted as
 * cluster_mismatch; no decision goes through it, and it stays refused
 * at each new connection. */
static void test_topology_mismatch(void **unused)
{
	for (int topology = REDIS_STANDALONE; topology <= REDIS_CLUSTER;
	     topology += REDIS_CLUSTER) {
		struct redis_query r = query(13, 100000);
		struct redis_node *rn = node_new((enum redis_topology)topology);

		cluster_node = !cluster_node;
		memset(&stats.error_kind, 0, sizeof(stats.error_kind));
		run();
		assert_false(redis_node_ready(rn));
		assert_int_equal(redis_node_submit(rn, &r), -1);
		assert_int_equal(STAT_GET(stats.error_kind[REDIS_ERROR_CLUSTER_MISMATCH]), 1);
		advance(50000);
		assert_false(redis_node_ready(rn));
		assert_int_equal(STAT_GET(stats.error_kind[REDIS_ERROR_CLUSTER_MISMATCH]), 2);
		assert_int_equal(STAT_GET(stats.ready), 0);
		redis_node_free(rn);
	}
}

/* ---- the connection alone ------------------------------------------------------------ */

static struct {
	int replies, nulls, messages;
	char last[32];
} got;

static void on_reply(struct redis_conn *c, redisReply *reply, void *priv)
{
	if (!reply) {
		got.nulls++;
		return;
	}
	got.replies++;
	if (reply->type == REDIS_REPLY_ARRAY && reply->elements >= 3 &&
	    !strcmp(reply->element[0]->str, "message")) {
		got.messages++;
		snprintf(got.last, sizeof(got.last), "%s", reply->element[2]->str);
	}
}

static struct redis_conn *conn_new(void)
{
	struct addr a;
	char why[64];
	struct redis_conn *c;

	memset(&got, 0, sizeof(got));
	assert_int_equal(addr_parse("/tmp/redis.sock", ADDR_UNIX, &a), 0);
	c = redis_conn_new(loop, redis_transport_new(NULL), &a, NULL, &got, why, sizeof(why));
	assert_non_null(c);
	return c;
}

/* A subscription: its answer and each message go to its callback, NULL
 * once when the connection goes; a malformed message ends it. */
static void test_subscription(void **unused)
{
	struct redis_conn *c = conn_new();
	static const char confirm[] = "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n";

	assert_int_equal(redis_conn_command(c, on_reply, NULL, 2, (const char *[]){ "AUTH", "pw" },
					    (const size_t[]){ 4, 2 }), 0);
	assert_int_equal(redis_conn_subscribe(c, on_reply, NULL, 2,
					      (const char *[]){ "SUBSCRIBE", "ch" },
					      (const size_t[]){ 9, 2 }), 0);
	run();
	assert_int_equal(nheld, 1);
	answer("SUBSCRIBE", confirm, sizeof(confirm) - 1);
	serve_str("*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n");
	run();
	assert_int_equal(got.replies, 3);
	assert_int_equal(got.messages, 1);
	assert_string_equal(got.last, "hello");
	assert_int_equal(got.nulls, 0);
	serve_str("*1\r\n$7\r\nmessage\r\n");
	run();
	assert_int_equal(got.replies, 3);
	assert_int_equal(got.nulls, 1);
	assert_int_equal(fk.closed, 1);
}

/* A disconnection asked for waits for the replies due, takes no more
 * commands, then closes. */
static void test_disconnect_after_replies(void **unused)
{
	struct redis_conn *c = conn_new();

	for (int i = 0; i < 2; i++)
		assert_int_equal(redis_conn_command(c, on_reply, NULL, 1, (const char *[]){ "PING" },
						    (const size_t[]){ 4 }), 0);
	run();
	assert_int_equal(nheld, 2);
	redis_conn_disconnect(c);
	assert_int_equal(redis_conn_command(c, on_reply, NULL, 1, (const char *[]){ "PING" },
					    (const size_t[]){ 4 }), -1);
	answer("PING", "+PONG\r\n", 7);
	run();
	assert_int_equal(got.replies, 1);
	assert_int_equal(fk.closed, 0);
	answer("PING", "+PONG\r\n", 7);
	run();
	assert_int_equal(got.replies, 2);
	assert_int_equal(got.nulls, 0);
	assert_int_equal(fk.closed, 1);
}

/* ---- the slot map's question ------------------------------------------------------------ */

static struct {
	int done;
	size_t nmasters, covered;
	char port[8], why[64];
} slots;

static void on_slots(void *owner, const struct addr *node, const struct redis_cluster_map *map,
		     const char *why)
{
	slots.done++;
	if (map) {
		slots.nmasters = map->nmasters;
		slots.covered = map->covered;
		snprintf(slots.port, sizeof(slots.port), "%s", map->master[0].port);
	}
	if (why)
		snprintf(slots.why, sizeof(slots.why), "%s", why);
}

static struct redis_slots *slots_ask(const char *password)
{
	struct addr a;
	struct redis_slots *q;

	memset(&slots, 0, sizeof(slots));
	memset(&cfg, 0, sizeof(cfg));
	snprintf(cfg.password, sizeof(cfg.password), "%s", password);
	assert_int_equal(addr_parse("127.0.0.1:7000", 0, &a), 0);
	q = redis_slots_ask(loop, &a, &cfg, 1.0, on_slots, NULL);
	assert_non_null(q);
	return q;
}

/* CLUSTER SLOTS (after AUTH) through a transport that gives a byte at a
 * time: the map, once, and the transport closed. */
static void test_slots_through_the_transport(void **unused)
{
	static const char map[] = "*1\r\n*3\r\n:0\r\n:16383\r\n"
				  "*3\r\n$9\r\n127.0.0.1\r\n:7001\r\n$2\r\nid\r\n";

	fk.write_max = 5;
	fk.read_max = 1;
	slots_ask("pw");
	run();
	assert_int_equal(nheld, 1); /* AUTH was answered at once */
	answer("CLUSTER SLOTS", map, sizeof(map) - 1);
	run();
	assert_int_equal(slots.done, 1);
	assert_int_equal(slots.nmasters, 1);
	assert_int_equal(slots.covered, 16384);
	assert_string_equal(slots.port, "7001");
	assert_int_equal(fk.closed, 1);
}

/* No answer: the question ends at its deadline; a connection refused
 * ends it with the transport's reason. */
static void test_slots_deadline_and_refusal(void **unused)
{
	slots_ask("");
	run();
	assert_int_equal(nheld, 1);
	advance(999999);
	assert_int_equal(slots.done, 0);
	advance(1);
	assert_int_equal(slots.done, 1);
	assert_string_equal(slots.why, "no answer in time");
	assert_int_equal(fk.closed, 1);

	fk.handshake_rc = REDIS_T_ERROR;
	slots_ask("");
	run();
	assert_int_equal(slots.done, 1);
	assert_string_equal(slots.why, "Connection refused");
	assert_int_equal(fk.closed, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_connect_and_decide, setup),
		cmocka_unit_test_setup(test_partial_writes, setup),
		cmocka_unit_test_setup(test_reply_split_everywhere, setup),
		cmocka_unit_test_setup(test_error_reply, setup),
		cmocka_unit_test_setup(test_connect_fails_then_backs_off, setup),
		cmocka_unit_test_setup(test_connect_refused_at_once, setup),
		cmocka_unit_test_setup(test_deadline, setup),
		cmocka_unit_test_setup(test_busy_server_keeps_the_breaker_closed, setup),
		cmocka_unit_test_setup(test_silent_server_opens_the_breaker, setup),
		cmocka_unit_test(test_breaker_judge),
		cmocka_unit_test_setup(test_starved_loop_keeps_the_breaker_closed, setup),
		cmocka_unit_test_setup(test_expired_query_is_not_sent, setup),
		cmocka_unit_test_setup(test_breaker, setup),
		cmocka_unit_test_setup(test_connection_lost, setup),
		cmocka_unit_test_setup(test_unsolicited_and_malformed, setup),
		cmocka_unit_test_setup(test_moved_and_ask, setup),
		cmocka_unit_test_setup(test_library_missing, setup),
		cmocka_unit_test_setup(test_handshake_deadline, setup),
		cmocka_unit_test_setup(test_topology_mismatch, setup),
		cmocka_unit_test(test_error_classes),
		cmocka_unit_test_setup(test_free_fails_everything, setup),
		cmocka_unit_test_setup(test_auth_refused, setup),
		cmocka_unit_test_setup(test_subscription, setup),
		cmocka_unit_test_setup(test_disconnect_after_replies, setup),
		cmocka_unit_test_setup(test_slots_through_the_transport, setup),
		cmocka_unit_test_setup(test_slots_deadline_and_refusal, setup),
	};

	log_set_level(LOG_ERR - 1); /* quiet: failures are what is tested */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
