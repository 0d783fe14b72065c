/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of protocol/conn.c through its handler interface alone: a
 * peer on a socketpair, the connections on a loop of the test's own, and
 * a handler that answers a NOTIFY at once, later, or disconnects. What
 * the messages mean is the handler's: the connection links with no
 * worker, rule or store. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "alloc.h"
#include "conn.h"
#include "spop.h"

/* ---- the handler ------------------------------------------------------------ */

enum how { NOW, LATER, BREAK };

struct app {
	enum how how;
	int notified;
	uint32_t last_id; /* the connection of the last NOTIFY */
	/* the last NOTIFY deferred */
	uint32_t id, gen;
	uint64_t sid, fid;
};

/* Writes the one action the test's ACKs carry. */
static int answer(struct conn *c, uint64_t sid, uint64_t fid)
{
	struct conn_ack a;

	if (conn_ack_begin(c, sid, fid, &a) < 0)
		return -1;
	spop_put_unset_var(&a.wb, SPOP_SCOPE_TXN, "status", 6);
	return conn_ack_end(&a);
}

static enum conn_answer on_notify(void *priv, struct conn *c, const struct spop_frame *f)
{
	struct app *app = priv;

	app->notified++;
	app->last_id = conn_view(c)->id;
	switch (app->how) {
	case NOW:
		answer(c, f->stream_id, f->frame_id);
		return CONN_ANSWERED;
	case LATER:
		app->id = conn_view(c)->id;
		app->gen = conn_view(c)->gen;
		app->sid = f->stream_id;
		app->fid = f->frame_id;
		return CONN_DEFERRED;
	case BREAK:
		conn_disconnect(c, SPOP_ST_INVALID);
		return CONN_ANSWERED;
	}
	return CONN_ANSWERED;
}

static const struct conn_handler handler = { .notify = on_notify };

/* ---- fixture ------------------------------------------------------------------ */

static struct ev_loop *loop;
static struct conn_config cfg;
static struct conn_set set;
static ev_prepare prepare;
static atomic_size_t grown;
static struct app app;

static void on_prepare(struct ev_loop *l, ev_prepare *p, int revents)
{
	conn_flush_pending(&set);
	conn_reap(&set);
	if (!conn_set_busy(&set))
		ev_prepare_stop(l, p);
}

static int setup(void **state)
{
	loop = ev_loop_new(EVFLAG_AUTO);
	assert_non_null(loop);
	memset(&set, 0, sizeof(set));
	memset(&app, 0, sizeof(app));
	cfg.max_frame_size = SPOP_OWN_FRAME_SIZE;
	cfg.max_conns = 10;
	cfg.hello_timeout = 5.;
	cfg.idle_timeout = 60.;
	ev_prepare_init(&prepare, on_prepare);
	set.loop = loop;
	set.cfg = &cfg;
	set.handler = &handler;
	set.app = &app;
	set.actions_max = 64;
	set.out_grown = &grown;
	set.prepare = &prepare;
	return 0;
}

static int teardown(void **state)
{
	conn_flush_pending(&set);
	conn_set_free(&set);
	ev_prepare_stop(loop, &prepare);
	ev_loop_destroy(loop);
	assert_int_equal(xalloc_live(), 0);
	return 0;
}

/* A connection accepted from a new peer; returns the peer's end. */
static int peer(void)
{
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
	conn_accept(&set, sv[0]);
	return sv[1];
}

static void pump(void)
{
	for (int i = 0; i < 4; i++)
		ev_run(loop, EVRUN_NOWAIT);
}

static void send_all(int fd, const uint8_t *b, size_t n)
{
	assert_int_equal(write(fd, b, n), (ssize_t)n);
	pump();
}

static void send_hello(int fd)
{
	uint8_t b[256];
	struct spop_wbuf w;

	spop_wbuf_init(&w, b, sizeof(b));
	assert_int_equal(spop_encode_haproxy_hello(&w, 16380, "pipelining", 0, NULL), 0);
	send_all(fd, b, w.len);
}

static void send_notify(int fd, uint64_t sid, uint64_t fid)
{
	uint8_t b[128];
	struct spop_wbuf w;
	size_t start;

	spop_wbuf_init(&w, b, sizeof(b));
	start = spop_frame_begin(&w, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, sid, fid);
	spop_put_name(&w, "any", 3);
	spop_put_u8(&w, 0);
	assert_int_equal(spop_frame_end(&w, start, 16380), 0);
	send_all(fd, b, w.len);
}

/* The next frame the agent sent, whole (0 when there is none yet). */
static uint8_t next_frame(int fd, struct spop_frame *f, uint8_t *buf, size_t cap)
{
	int st;
	ssize_t n = recv(fd, buf, 4, MSG_PEEK);
	uint32_t len;

	if (n < 4)
		return 0;
	len = (uint32_t)buf[0] << 24 | (uint32_t)buf[1] << 16 | (uint32_t)buf[2] << 8 | buf[3];
	assert_true(4 + (size_t)len <= cap);
	assert_int_equal(recv(fd, buf, 4 + len, 0), (ssize_t)(4 + len));
	assert_int_equal(spop_frame_peek(buf, 4 + len, 16384, f, &st), SPOP_OK);
	return f->type;
}

static uint8_t buf[20000];

static void expect_ack(int fd, uint64_t sid, uint64_t fid)
{
	struct spop_frame f;

	assert_int_equal(next_frame(fd, &f, buf, sizeof(buf)), SPOP_FRAME_ACK);
	assert_true(f.stream_id == sid && f.frame_id == fid);
}

static void expect_nothing(int fd)
{
	struct spop_frame f;

	assert_int_equal(next_frame(fd, &f, buf, sizeof(buf)), 0);
}

static int ready_peer(void)
{
	struct spop_frame f;
	uint64_t hellos = STAT_GET(set.stats.hellos);
	int fd = peer();

	send_hello(fd);
	assert_int_equal(next_frame(fd, &f, buf, sizeof(buf)), SPOP_FRAME_AGENT_HELLO);
	assert_int_equal(STAT_GET(set.stats.hellos), hellos + 1);
	return fd;
}

/* ---- tests ---------------------------------------------------------------------- */

/* Answered at once, answered later (found again by id and generation,
 * written before the loop blocks), in the order the answers come. */
static void test_answers_now_and_later(void **state)
{
	int fd = ready_peer();

	app.how = NOW;
	send_notify(fd, 1, 1);
	expect_ack(fd, 1, 1);
	app.how = LATER;
	send_notify(fd, 3, 1);
	expect_nothing(fd);
	app.how = NOW;
	send_notify(fd, 5, 2);
	expect_ack(fd, 5, 2);
	{
		struct conn *c = conn_deferred(&set, app.id, app.gen);

		assert_non_null(c);
		assert_int_equal(answer(c, app.sid, app.fid), 0);
		conn_answered(c);
	}
	pump();
	expect_ack(fd, 3, 1);
	assert_int_equal(app.notified, 3);
	assert_int_equal(STAT_GET(set.stats.notifies), 3);
	close(fd);
	pump();
	assert_int_equal(set.nconns, 0);
}

/* An answer whose connection has gone finds nobody, even when a new
 * connection took the same id. */
static void test_late_answer_finds_nobody(void **state)
{
	int fd = ready_peer(), again;
	uint32_t id, gen;

	app.how = LATER;
	send_notify(fd, 1, 1);
	id = app.id;
	gen = app.gen;
	close(fd);
	pump();
	assert_int_equal(set.nconns, 0);
	assert_null(conn_deferred(&set, id, gen));
	again = ready_peer();
	app.how = LATER;
	send_notify(again, 2, 1);
	assert_int_equal(app.id, id);
	assert_true(app.gen != gen);
	assert_null(conn_deferred(&set, id, gen));
	assert_non_null(conn_deferred(&set, app.id, app.gen));
	close(again);
	pump();
}

/* Stopping: a connection answers what it owes, then disconnects. */
static void test_stop_waits_for_answers(void **state)
{
	struct spop_frame f;
	int fd = ready_peer();
	struct conn *c;

	app.how = LATER;
	send_notify(fd, 7, 1);
	conn_stop_all(&set);
	pump();
	expect_nothing(fd);
	c = conn_deferred(&set, app.id, app.gen);
	assert_non_null(c);
	assert_int_equal(answer(c, app.sid, app.fid), 0);
	conn_answered(c);
	pump();
	expect_ack(fd, 7, 1);
	assert_int_equal(next_frame(fd, &f, buf, sizeof(buf)), SPOP_FRAME_AGENT_DISCONNECT);
	close(fd);
	pump();
}

/* A peer whose socket keeps each send() of the agent a record of its own
 * (SOCK_SEQPACKET), after the handshake: one recv() returns what one
 * send() wrote, and no more. */
static int record_peer(void)
{
	int sv[2];
	ssize_t n;
	struct spop_frame f;
	int st;

	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
	conn_accept(&set, sv[0]);
	send_hello(sv[1]);
	n = recv(sv[1], buf, sizeof(buf), 0);
	assert_true(n > 4);
	assert_int_equal(spop_frame_peek(buf, (size_t)n, 16384, &f, &st), SPOP_OK);
	assert_int_equal(f.type, SPOP_FRAME_AGENT_HELLO);
	return sv[1];
}

/* n NOTIFYs of stream-ids first, first + 2, ... in one write. */
static void send_notifies(int fd, uint64_t first, int n)
{
	uint8_t b[4096];
	struct spop_wbuf w;

	spop_wbuf_init(&w, b, sizeof(b));
	for (int i = 0; i < n; i++) {
		size_t start = spop_frame_begin(&w, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN,
						first + 2 * (uint64_t)i, 1);

		spop_put_name(&w, "any", 3);
		spop_put_u8(&w, 0);
		assert_int_equal(spop_frame_end(&w, start, 16380), 0);
	}
	send_all(fd, b, w.len);
}

/* One recv() (one send() of the agent's) holds the ACKs of stream-ids
 * first, first + 2, ... (n of them), and nothing else is waiting. */
static void expect_acks_in_one_write(int fd, uint64_t first, int n)
{
	ssize_t got = recv(fd, buf, sizeof(buf), 0);
	size_t off = 0;

	assert_true(got > 0);
	for (int i = 0; i < n; i++) {
		struct spop_frame f;
		int st;

		assert_true(off < (size_t)got);
		assert_int_equal(spop_frame_peek(buf + off, (size_t)got - off, 16384, &f, &st),
				 SPOP_OK);
		assert_int_equal(f.type, SPOP_FRAME_ACK);
		assert_true(f.stream_id == first + 2 * (uint64_t)i && f.frame_id == 1);
		off += 4 + ((size_t)buf[off] << 24 | (size_t)buf[off + 1] << 16 |
			    (size_t)buf[off + 2] << 8 | buf[off + 3]);
	}
	assert_int_equal(off, (size_t)got);
	assert_int_equal(recv(fd, buf, sizeof(buf), MSG_DONTWAIT), -1);
	assert_int_equal(errno, EAGAIN);
}

/* The ACKs of the NOTIFYs of one read are written with one send() when
 * they are answered at once (the memory store), and so are those answered
 * later in one turn of the loop (a store's batch returning): HAProxy reads
 * them in one wake-up. */
static void test_answers_of_one_read_in_one_write(void **state)
{
	enum { N = 16 };
	int fd = record_peer();
	struct { uint32_t id, gen; uint64_t sid; } later[N];

	app.how = NOW;
	send_notifies(fd, 1, N);
	expect_acks_in_one_write(fd, 1, N);
	app.how = LATER;
	app.notified = 0;
	/* one NOTIFY per write: the deferred ones are kept as they come */
	for (int i = 0; i < N; i++) {
		send_notifies(fd, 101 + 2 * (uint64_t)i, 1);
		later[i].id = app.id;
		later[i].gen = app.gen;
		later[i].sid = app.sid;
	}
	assert_int_equal(app.notified, N);
	expect_nothing(fd);
	for (int i = 0; i < N; i++) {
		struct conn *c = conn_deferred(&set, later[i].id, later[i].gen);

		assert_non_null(c);
		assert_int_equal(answer(c, later[i].sid, 1), 0);
		conn_answered(c);
	}
	pump();
	expect_acks_in_one_write(fd, 101, N);
	close(fd);
	pump();
}

/* A handler's disconnect ends the connection with the status it gave. */
static void test_handler_disconnects(void **state)
{
	struct spop_frame f;
	int fd = ready_peer();

	app.how = BREAK;
	send_notify(fd, 1, 1);
	assert_int_equal(next_frame(fd, &f, buf, sizeof(buf)), SPOP_FRAME_AGENT_DISCONNECT);
	assert_int_equal(STAT_GET(set.stats.disconnects_sent[SPOP_ST_INVALID]), 1);
	close(fd);
	pump();
}

/* A connection whose peer reads nothing: the agent's end of the socket
 * takes little (SO_SNDBUF at its least), so that answers soon wait in the
 * agent's output. Returns the peer's end. */
static int quiet_peer(void)
{
	struct spop_frame f;
	int sv[2], small = 1;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	assert_int_equal(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
	conn_accept(&set, sv[0]);
	send_hello(sv[1]);
	assert_int_equal(next_frame(sv[1], &f, buf, sizeof(buf)), SPOP_FRAME_AGENT_HELLO);
	return sv[1];
}

/* NOTIFYs answered at once on fd, until the agent's output for it has
 * no room left for one more answer without growing; returns that output
 * (the connection's view), not grown. */
static struct conn_view *fill(int fd, uint64_t *sid)
{
	struct conn_view *v;

	app.how = NOW;
	do {
		send_notify(fd, *sid += 2, 1);
		v = conn_view(set.by_id[app.last_id]);
	} while (v->ack_room <= v->wcap - (v->wlen - v->wpos));
	assert_int_equal(v->wcap, 16384);
	return v;
}

/* Reads everything the agent wrote to fd; returns the ACKs' count (the
 * output arrives in pieces that may end inside a frame). */
static int drain(int fd)
{
	static uint8_t all[1 << 20];
	size_t len = 0, off = 0;
	int acks = 0;

	for (int i = 0; i < 64; i++) {
		ssize_t n;

		pump();
		while ((n = recv(fd, all + len, sizeof(all) - len, MSG_DONTWAIT)) > 0)
			len += (size_t)n;
	}
	while (off < len) {
		struct spop_frame f;
		int st;

		assert_int_equal(spop_frame_peek(all + off, len - off, 16384, &f, &st), SPOP_OK);
		assert_int_equal(f.type, SPOP_FRAME_ACK);
		acks++;
		off += 4 + (size_t)f.len;
	}
	return acks;
}

/* The process's budget for grown output is taken when a frame is read,
 * for its answer, and not when the answer is written: an answer given
 * later (a store's) cannot take room that another connection, a worker's
 * or this one's, was since given. The budget is exact: workers that look
 * at once take it with one compare-and-swap. */
static void test_budget_taken_when_a_frame_is_read(void **state)
{
	uint64_t sa = 1, sb = 1;
	int a = quiet_peer(), b = quiet_peer();
	struct conn_view *va = fill(a, &sa), *vb = fill(b, &sb);
	uint32_t aid = app.id, agen = app.gen;
	int notified, acks_b;
	struct conn *c;

	assert_int_equal(grown, 0);
	/* other workers' buffers have grown: room for one more 16 KiB */
	grown = CONN_OUTPUT_BUDGET - 16384;
	/* a's next answer comes later: its room is taken now */
	app.how = LATER;
	send_notify(a, sa += 2, 1);
	aid = app.id;
	agen = app.gen;
	assert_int_equal(va->wcap, 32768);
	assert_int_equal(grown, CONN_OUTPUT_BUDGET);
	/* b has no room: its NOTIFY waits, unread */
	app.how = NOW;
	notified = app.notified;
	send_notify(b, sb += 2, 1);
	assert_int_equal(app.notified, notified);
	assert_int_equal(vb->wcap, 16384);
	/* a's answer, in the room taken for it */
	c = conn_deferred(&set, aid, agen);
	assert_non_null(c);
	assert_int_equal(answer(c, app.sid, app.fid), 0);
	conn_answered(c);
	pump();
	assert_int_equal(grown, CONN_OUTPUT_BUDGET);
	/* once their peers read, the buffers shrink back, and b's NOTIFY is
	 * answered */
	assert_true(drain(a) == (int)(sa / 2));
	acks_b = drain(b);
	assert_int_equal(app.notified, notified + 1);
	assert_int_equal(acks_b, (int)(sb / 2));
	assert_int_equal(grown, CONN_OUTPUT_BUDGET - 16384);
	grown = 0;
	close(a);
	close(b);
	pump();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_answers_now_and_later, setup, teardown),
		cmocka_unit_test_setup_teardown(test_late_answer_finds_nobody, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stop_waits_for_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_handler_disconnects, setup, teardown),
		cmocka_unit_test_setup_teardown(test_answers_of_one_read_in_one_write, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_budget_taken_when_a_frame_is_read, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
