/* SPDX-License-Identifier: Apache-2.0 */
/* conn.c: one SPOP connection's state machine and buffers (conn.h). The
 * NOTIFYs go to the set's handler; everything else happens here: HELLO,
 * DISCONNECT, the deadlines, back-pressure and write stalls. */
#include "conn_int.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "alloc.h"
#include "log.h"
#include "spop.h"

static void process_held(struct conn *c);
static void frame_begun(struct conn *c);
static void arm_timer(struct conn *c, ev_tstamp after);
static ev_tstamp ready_due(const struct conn *c);
static void disconnect(struct conn *c, int status);
static int flush(struct conn *c);

/* ---- output -------------------------------------------------------------- */

static int wbuf_grow(struct conn *c, size_t need);

/* Makes room for `need` more bytes of output. Returns 0 or -1. Inline:
 * every answer asks, and there is room as a rule. */
static inline int wbuf_reserve(struct conn *c, size_t need)
{
	if (c->v.wpos > 0 && c->v.wpos == c->v.wlen)
		c->v.wpos = c->v.wlen = 0;
	if (need <= c->v.wcap - c->v.wlen)
		return 0;
	return wbuf_grow(c, need);
}

/* The capacity a buffer holding `queued` bytes needs for `need` more:
 * its own, or the next power of two times it. */
static size_t wbuf_cap_for(const struct conn *c, size_t queued, size_t need)
{
	size_t cap = c->v.wcap;

	while (need > cap - queued)
		cap *= 2;
	return cap;
}

/* Reallocates the output to `cap` bytes; the caller counts what it grew
 * by in the process's budget. Returns 0, or -1 when out of memory. */
static int wbuf_resize(struct conn *c, size_t cap)
{
	uint8_t *nb = xrealloc(c->v.wbuf, cap);

	if (!nb)
		return -1;
	c->v.wbuf = nb;
	c->v.wcap = cap;
	set_room(c, c->v.ack_room);
	/* drained() gives the memory back once the output is written: it
	 * runs when the write watcher stops */
	if (c->fd >= 0 && !ev_is_active(&c->wio))
		ev_io_start(c->set->loop, &c->wio);
	return 0;
}

/* wbuf_reserve() without room at the end of the buffer: moves what is
 * queued to the front, or grows the buffer, whatever the bounds (answers
 * owed: a frame read found its room in room_to_answer()). Returns 0, or
 * -1 when out of memory. */
static int wbuf_grow(struct conn *c, size_t need)
{
	size_t cap, was = c->v.wcap;

	if (c->v.wpos > 0) {
		memmove(c->v.wbuf, c->v.wbuf + c->v.wpos, c->v.wlen - c->v.wpos);
		c->v.wlen -= c->v.wpos;
		c->v.wpos = 0;
		if (need <= c->v.wcap - c->v.wlen)
			return 0;
	}
	cap = wbuf_cap_for(c, c->v.wlen, need);
	if (wbuf_resize(c, cap) < 0)
		return -1;
	atomic_fetch_add_explicit(c->set->out_grown, cap - was, memory_order_relaxed);
	return 0;
}

/* Takes `n` bytes from the process's budget for grown buffers, or says
 * none are left. One compare-and-swap: workers that look at once cannot
 * together take more than the budget. */
static bool budget_take(atomic_size_t *grown, size_t n)
{
	size_t cur = atomic_load_explicit(grown, memory_order_relaxed);

	do {
		if (cur + n > CONN_OUTPUT_BUDGET)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(grown, &cur, cur + n, memory_order_relaxed,
							memory_order_relaxed));
	return true;
}

/* Whether the answer to one more frame read has room in the output: at
 * the end of the buffer, once what is queued is moved to its front, or in
 * a buffer grown here, within WBUF_MAX and the process's budget. When it
 * has not, the frame waits (held) until the output drains: a peer that
 * does not read cannot make the agent queue more for it, and memory stays
 * bounded whatever the number of such peers. */
static __attribute__((noinline)) bool room_to_answer(struct conn *c)
{
	size_t queued = c->v.wlen - c->v.wpos, cap, more;

	if (c->v.ack_room <= c->v.wcap - queued)
		return true;
	cap = wbuf_cap_for(c, queued, c->v.ack_room);
	more = cap - c->v.wcap;
	if (cap > WBUF_MAX || !budget_take(c->set->out_grown, more))
		return false;
	if (wbuf_resize(c, cap) < 0) {
		/* waits for the output to drain, as for no room */
		atomic_fetch_sub_explicit(c->set->out_grown, more, memory_order_relaxed);
		return false;
	}
	return true;
}

static void update_reading(struct conn *c)
{
	struct conn_set *s = c->set;
	/* held frames come first, and they wait for room */
	int want = (c->state == CONN_HELLO || c->state == CONN_READY) && !c->stopping &&
		   !c->held && !c->resume;

	if (want && !c->reading) {
		c->reading = 1;
		/* Bytes of a frame waited in the socket while we did not read:
		 * its deadline starts now. */
		if (c->frame_started > 0.)
			frame_begun(c);
	}
	if (!want)
		c->reading = 0;
	/* This runs after every write: call libev only for a change. */
	if (c->reading && !ev_is_active(&c->rio))
		ev_io_start(s->loop, &c->rio);
	else if (!c->reading && ev_is_active(&c->rio))
		ev_io_stop(s->loop, &c->rio);
}

/* flush() found the socket full: from now on, the output must make
 * progress within CONN_WRITE_STALL seconds (ready_timer), counted again
 * from each time it is found full after a write that took some of it
 * (wpos moved since the last time; moving the output to the front of the
 * buffer counts once as progress, and happens only after some). */
static __attribute__((noinline)) void write_blocked(struct conn *c)
{
	ev_tstamp now = ev_now(c->set->loop);
	bool progressed = c->v.wpos != c->blocked_at;

	c->blocked_at = c->v.wpos;
	if (c->state != CONN_READY) /* HELLO and DRAINING have their deadlines */
		return;
	if (c->stalled_since == 0.) {
		c->stalled_since = now;
		arm_timer(c, ready_due(c) - now);
	} else if (progressed) {
		c->stalled_since = now; /* the timer looks again when it fires */
	}
}

/* Everything queued is written, after the write watcher was started
 * (the socket was full, the buffer grew, or frames were held): no stall
 * any more, the buffer back to its first size (what it grew by back to
 * the process's budget), and held frames handed to conn_flush_pending(),
 * before the loop blocks. */
static __attribute__((noinline)) void drained(struct conn *c)
{
	struct conn_set *s = c->set;

	c->stalled_since = 0.;
	c->blocked_at = 0;
	if (c->v.wcap > WBUF_INIT) {
		uint8_t *nb = xrealloc(c->v.wbuf, WBUF_INIT);

		if (nb) {
			atomic_fetch_sub_explicit(s->out_grown, c->v.wcap - WBUF_INIT,
						  memory_order_relaxed);
			c->v.wbuf = nb;
			c->v.wcap = WBUF_INIT;
			set_room(c, c->v.ack_room);
		}
	}
	if (c->held) {
		/* not reading until they are handled: they come first */
		c->held = 0;
		c->resume = 1;
		if (!c->in_flush) {
			c->in_flush = 1;
			c->flush_next = s->flush_list;
			s->flush_list = c;
			want_prepare(s);
		}
	}
}

/* Writes what is queued, in as few calls as the kernel allows: frames are
 * complete in the buffer, so a frame is never split by us across calls.
 * Returns 0, or -1 when the connection was closed. */
static int flush(struct conn *c)
{
	while (c->v.wpos < c->v.wlen) {
		ssize_t n = conn_io_send(c->fd, c->ssl, c->v.wbuf + c->v.wpos,
					 c->v.wlen - c->v.wpos, MSG_NOSIGNAL);

		if (n > 0) {
			c->v.wpos += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			ev_io_start(c->set->loop, &c->wio);
			write_blocked(c);
			update_reading(c);
			return 0;
		}
		log_debug("connection %u: write failed: %s", c->v.id, strerror(errno));
		conn_close(c);
		return -1;
	}
	c->v.wpos = c->v.wlen = 0;
	if (ev_is_active(&c->wio)) {
		ev_io_stop(c->set->loop, &c->wio);
		drained(c);
	}
	if (c->state == CONN_DRAINING) {
		/* Closing with input unread would send an RST, and an RST can
		 * destroy the frames just sent before the peer reads them
		 * (HAProxy goes on sending NOTIFYs until it reads our
		 * DISCONNECT). Half-close instead, and discard what comes until
		 * the peer closes too, or the grace time ends. */
		if (!c->lingering) {
			c->lingering = 1;
			if (c->ssl)
				conn_tls_goodbye(c->ssl);
			shutdown(c->fd, SHUT_WR);
			ev_io_start(c->set->loop, &c->rio);
		}
		return 0;
	}
	/* Everything sent: a connection that reads goes on reading (what
	 * update_reading() would find), as a rule. */
	if (c->reading && c->state == CONN_READY && !c->stopping && ev_is_active(&c->rio))
		return 0;
	update_reading(c);
	return 0;
}

void conn_io_write(struct ev_loop *loop, ev_io *io, int revents)
{
	struct conn *c = io->data;

	/* TLS: a read waited for the socket to take the handshake's bytes */
	if (c->ssl && c->v.wpos == c->v.wlen && SSL_want_write(c->ssl))
		conn_io_read(loop, &c->rio, EV_READ);
	else
		flush(c);
}

/* Queues AGENT-DISCONNECT and stops reading; the connection closes once it
 * is flushed (or after the grace time). Errors are sticky: nothing else is
 * read or answered on this connection. */
static void disconnect(struct conn *c, int status)
{
	struct conn_set *s = c->set;
	struct spop_wbuf wb;
	uint32_t limit = c->v.max_frame;

	if (c->state == CONN_DRAINING || c->state == CONN_CLOSED)
		return;
	if (status != SPOP_ST_NORMAL)
		log_info("connection %u: disconnect, status %d (%s)", c->v.id, status,
			 spop_status_str(status));
	STAT_INC(s->stats.disconnects_sent[status < 13 ? status : 13]);
	c->state = CONN_DRAINING;
	if (wbuf_reserve(c, c->v.ack_room) == 0) {
		spop_wbuf_init(&wb, c->v.wbuf + c->v.wlen, c->v.wcap - c->v.wlen);
		if (spop_encode_agent_disconnect(&wb, (uint32_t)status,
						 spop_status_str(status), limit) == 0)
			c->v.wlen += wb.len;
	}
	ev_timer_stop(s->loop, &c->timer);
	ev_timer_set(&c->timer, DRAIN_GRACE, 0.);
	ev_timer_start(s->loop, &c->timer);
	update_reading(c);
}

/* (Re)starts the connection's one timer, `after` seconds from now. */
static void arm_timer(struct conn *c, ev_tstamp after)
{
	struct ev_loop *loop = c->set->loop;

	ev_timer_stop(loop, &c->timer);
	ev_timer_set(&c->timer, after > 0. ? after : 0., 0.);
	ev_timer_start(loop, &c->timer);
}

/* A READY connection's next deadline: idle, or its incomplete frame's. */
static ev_tstamp ready_due(const struct conn *c)
{
	const struct conn_config *cfg = c->set->cfg;
	ev_tstamp due = c->v.last_active + cfg->idle_timeout;

	if (c->frame_started > 0. && c->reading && c->frame_started + cfg->hello_timeout < due)
		due = c->frame_started + cfg->hello_timeout;
	if (c->stalled_since > 0. && c->stalled_since + CONN_WRITE_STALL < due)
		due = c->stalled_since + CONN_WRITE_STALL;
	return due;
}

/* The first bytes of a frame have arrived (or waited unread until now). The
 * timer moves only when the frame's deadline comes before the one it is
 * set for: on the hot path a frame split across reads costs no timer
 * operation, since its deadline comes long before the idle one. */
static void frame_begun(struct conn *c)
{
	struct ev_loop *loop = c->set->loop;

	c->frame_started = ev_now(loop);
	if (c->state == CONN_READY && c->reading &&
	    ev_timer_remaining(loop, &c->timer) > c->set->cfg->hello_timeout)
		arm_timer(c, c->set->cfg->hello_timeout);
}

/* READY: the timer fires at the earliest deadline it was set for; what
 * happened since (reads, answers) is looked at only now, so that reading
 * costs no timer operation. */
static void ready_timer(struct conn *c)
{
	const struct conn_config *cfg = c->set->cfg;
	ev_tstamp now = ev_now(c->set->loop);

	if (c->stalled_since > 0. && now - c->stalled_since >= CONN_WRITE_STALL) {
		/* No AGENT-DISCONNECT: the peer reads nothing. */
		log_info("connection %u: the peer has read nothing for %.0f s (%zu bytes waiting): "
			 "closed", c->v.id, now - c->stalled_since, c->v.wlen - c->v.wpos);
		STAT_INC(c->set->stats.write_stalls);
		conn_close(c);
		return;
	}
	if (c->frame_started > 0. && c->reading && now - c->frame_started >= cfg->hello_timeout) {
		log_info("connection %u: a frame begun %.1f s ago is still incomplete", c->v.id,
			 now - c->frame_started);
		disconnect(c, SPOP_ST_TIMEOUT);
		flush(c);
		return;
	}
	/* Decisions still owed: not idle, whatever the peer does. */
	if (c->pending > 0)
		c->v.last_active = now;
	if (now - c->v.last_active >= cfg->idle_timeout) {
		log_info("connection %u: idle for %.0f s", c->v.id, now - c->v.last_active);
		disconnect(c, SPOP_ST_TIMEOUT);
		flush(c);
		return;
	}
	arm_timer(c, ready_due(c) - now);
}

void conn_io_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct conn *c = t->data;

	switch (c->state) {
	case CONN_HELLO:
		log_info("connection %u: no HELLO in time", c->v.id);
		disconnect(c, SPOP_ST_TIMEOUT);
		flush(c);
		return;
	case CONN_READY:
		ready_timer(c);
		return;
	case CONN_DRAINING:
	case CONN_CLOSED:
		break;
	}
	/* DRAINING past its grace time: the peer does not read, or does not
	 * close. */
	conn_close(c);
}

/* ---- frames -------------------------------------------------------------- */

static void handle_hello(struct conn *c, const struct spop_frame *f)
{
	struct conn_set *s = c->set;
	struct spop_hello h;
	struct spop_wbuf wb;
	int status;
	uint32_t own = s->cfg->max_frame_size;

	if (spop_hello_parse(f->payload, f->payload_len, &h, &status) < 0) {
		disconnect(c, status);
		return;
	}
	c->v.max_frame = h.max_frame_size < own ? h.max_frame_size : own;
	set_room(c, ack_room(s, c->v.max_frame));
	if (wbuf_reserve(c, c->v.ack_room) < 0) {
		disconnect(c, SPOP_ST_RESOURCE);
		return;
	}
	spop_wbuf_init(&wb, c->v.wbuf + c->v.wlen, c->v.wcap - c->v.wlen);
	if (spop_encode_agent_hello(&wb, c->v.max_frame, "pipelining", c->v.max_frame) < 0) {
		disconnect(c, SPOP_ST_RESOURCE);
		return;
	}
	c->v.wlen += wb.len;
	ev_timer_stop(s->loop, &c->timer);
	if (h.healthcheck) {
		/* A health check ends with our HELLO. */
		STAT_INC(s->stats.healthchecks);
		c->state = CONN_DRAINING;
		ev_timer_set(&c->timer, DRAIN_GRACE, 0.);
		ev_timer_start(s->loop, &c->timer);
		return;
	}
	STAT_INC(s->stats.hellos);
	c->state = CONN_READY;
	c->v.last_active = ev_now(s->loop);
	arm_timer(c, s->cfg->idle_timeout);
	log_debug("connection %u: HELLO, max-frame-size %u", c->v.id, c->v.max_frame);
}

/* A NOTIFY goes to the handler, its answer counted owed meanwhile: a
 * handler that answers a deferred one from inside this call (a store
 * deciding at once after all) finds the count it takes from. */
static inline void handle_notify(struct conn *c, const struct spop_frame *f)
{
	struct conn_set *s = c->set;

	STAT_INC(s->stats.notifies);
	c->pending++;
	if (s->handler->notify(s->app, c, f) == CONN_ANSWERED)
		c->pending--;
}

/* ---- answers ------------------------------------------------------------- */

int conn_ack_room(struct conn *c)
{
	if (wbuf_reserve(c, c->v.ack_room) < 0) {
		disconnect(c, SPOP_ST_RESOURCE);
		return -1;
	}
	return 0;
}

void conn_disconnect(struct conn *c, int status)
{
	disconnect(c, status);
}

struct conn *conn_deferred(struct conn_set *s, uint32_t id, uint32_t gen)
{
	struct conn *c;

	if (id >= s->nids || s->gens[id] != gen)
		return NULL; /* the connection has gone: nobody to answer */
	c = s->by_id[id];
	if (!c)
		return NULL;
	c->pending--;
	return c->state == CONN_READY ? c : NULL;
}

void conn_answered(struct conn *c)
{
	struct conn_set *s = c->set;

	if (c->state == CONN_CLOSED)
		return;
	if (c->pending == 0) {
		/* idle from the last answer on, not from the last read */
		c->v.last_active = ev_now(s->loop);
		if (c->stopping)
			disconnect(c, SPOP_ST_NORMAL);
	}
	if (!c->in_flush) {
		c->in_flush = 1;
		c->flush_next = s->flush_list;
		s->flush_list = c;
		want_prepare(s);
	}
}

void conn_flush_pending(struct conn_set *s)
{
	while (s->flush_list) {
		struct conn *c = s->flush_list;

		s->flush_list = c->flush_next;
		c->in_flush = 0;
		c->flush_next = NULL;
		if (c->resume)
			process_held(c);
		if (c->state != CONN_CLOSED)
			flush(c);
	}
}

static void handle_frame(struct conn *c, const struct spop_frame *f)
{
	if (!(f->flags & SPOP_FLAG_FIN)) {
		disconnect(c, SPOP_ST_NO_FRAGMENTATION);
		return;
	}
	switch (f->type) {
	case SPOP_FRAME_HAPROXY_HELLO:
		if (c->state != CONN_HELLO)
			disconnect(c, SPOP_ST_INVALID);
		else
			handle_hello(c, f);
		return;
	case SPOP_FRAME_HAPROXY_DISCONNECT:
		/* Whatever it says, we answer "normal" and close. */
		disconnect(c, SPOP_ST_NORMAL);
		return;
	case SPOP_FRAME_NOTIFY:
		if (c->state != CONN_READY)
			disconnect(c, SPOP_ST_INVALID);
		else
			handle_notify(c, f);
		return;
	default:
		disconnect(c, SPOP_ST_INVALID);
		return;
	}
}

/* process_input() found no room for an answer: the frames left wait in
 * the read buffer, and the connection reads no more, until its output has
 * drained (drained() hands them to conn_flush_pending). There is output
 * queued (else there would be room): the write watcher, started here if
 * the socket has not been found full yet, makes flush() call drained()
 * once it is all written. */
static __attribute__((noinline)) void hold_input(struct conn *c)
{
	c->held = 1;
	update_reading(c);
	/* drained() runs when the write watcher stops */
	if (!ev_is_active(&c->wio))
		ev_io_start(c->set->loop, &c->wio);
}

/* Decodes and handles every complete frame in the read buffer, or those
 * before one whose answer has no room (hold_input). Inline: the read
 * path's and conn_flush_pending()'s. */
static inline __attribute__((always_inline)) void process_input(struct conn *c)
{
	int taken = 0;

	while (c->state == CONN_HELLO || c->state == CONN_READY) {
		struct spop_frame f;
		int status = SPOP_ST_INVALID;
		int rc;

		/* Not even a length (the buffer is drained, as a rule): what
		 * spop_frame_peek() would say, without the call. */
		if (c->rlen - c->rpos < 4)
			break;
		rc = spop_frame_peek(c->rbuf + c->rpos, c->rlen - c->rpos, c->v.max_frame, &f,
				     &status);

		if (rc == SPOP_NEED_MORE)
			break;
		if (rc == SPOP_ERR) {
			disconnect(c, status);
			break;
		}
		/* No room for its answer at the end of the output: it waits
		 * unless the buffer may make room (room_to_answer). */
		if (c->v.wlen > c->room_end && !room_to_answer(c)) {
			hold_input(c);
			return;
		}
		c->rpos += 4 + (size_t)f.len;
		taken = 1;
		handle_frame(c, &f);
	}
	if (c->rpos == c->rlen) {
		c->rpos = c->rlen = 0;
		c->frame_started = 0.;
		return;
	}
	/* What is left is the beginning of a frame: a new one if a frame
	 * was taken, else the one already waiting, whose deadline stands.
	 * (Before HELLO, the hello deadline covers it.) */
	if (c->state == CONN_READY && (taken || c->frame_started == 0.))
		frame_begun(c);
	if (c->rpos >= COMPACT_MIN || c->rcap - c->rlen < 4 + (size_t)c->v.max_frame) {
		/* Move a partial frame to the front only when it pays: a
		 * complete frame always fits once the buffer is compacted. */
		memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
		c->rlen -= c->rpos;
		c->rpos = 0;
	}
}

/* DRAINING, everything sent: reads and drops what the peer still sends,
 * until it closes. Returns -1 once the connection is closed, else 0. */
static int discard_input(struct conn *c)
{
	for (int round = 0; round < 16; round++) {
		ssize_t n = conn_io_recv(c->fd, NULL, c->rbuf, c->rcap); /* TLS or not */

		if (n > 0)
			continue;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		conn_close(c);
		return -1;
	}
	return 0;
}

/* Frames held for want of output room, now that it has drained
 * (conn_flush_pending, or the agent stops); then reading resumes, unless
 * they are held again. */
static __attribute__((noinline)) void process_held(struct conn *c)
{
	c->resume = 0;
	if (c->state == CONN_HELLO || c->state == CONN_READY)
		process_input(c);
	update_reading(c);
	if (c->ssl && c->state != CONN_CLOSED)
		conn_tls_rearm(c->set->loop, c->ssl, &c->rio, &c->wio);
}

/* Reads one buffer's worth of what the socket holds and handles it.
 * Returns -1 once the connection is closed, 0 when it is done (the
 * socket drained, most likely, or the connection reads no more), 1 when
 * there may be more to read. Output may be queued: the caller flushes. */
static inline __attribute__((always_inline)) int read_once(struct conn *c)
{
	ssize_t n;

	if (c->rlen == c->rcap) {
		/* A full buffer always holds a complete frame (its size is
		 * 4 + our max), so process_input made room; be safe. */
		disconnect(c, SPOP_ST_TOO_BIG);
		return 0;
	}
	do
		n = conn_io_recv(c->fd, c->ssl, c->rbuf + c->rlen, c->rcap - c->rlen);
	while (n < 0 && errno == EINTR);
	if (n == 0) {
		/* FIN: HAProxy drops idle connections without a word. */
		log_debug("connection %u: closed by peer", c->v.id);
		conn_close(c);
		return -1;
	}
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		log_debug("connection %u: read failed: %s", c->v.id, strerror(errno));
		conn_close(c);
		return -1;
	}
	c->rlen += (size_t)n;
	c->v.last_active = ev_now(c->set->loop);
	process_input(c);
	if (c->held || (c->state != CONN_HELLO && c->state != CONN_READY))
		return 0;
	/* else the socket is drained, most likely; OpenSSL may hold more
	 * (decrypted: conn_tls_rearm) */
	return (size_t)n >= c->rcap / 2 || (c->ssl && SSL_pending(c->ssl) > 0);
}

void conn_io_read(struct ev_loop *loop, ev_io *io, int revents)
{
	struct conn *c = io->data;

	if (c->state == CONN_DRAINING) {
		if (c->lingering)
			discard_input(c);
		return;
	}
	/* One buffer per wake-up (16 KiB of frames at most): a connection
	 * that floods its worker delays the others by one buffer's decisions
	 * per turn of the loop, and level-triggered polling brings it back
	 * for the rest. */
	if (read_once(c) >= 0)
		flush(c);
	if (c->ssl && c->state != CONN_CLOSED)
		conn_tls_rearm(loop, c->ssl, &c->rio, &c->wio);
}

/* Stops one connection: see conn_stop_all(). */
static void conn_stop(struct conn *c)
{
	switch (c->state) {
	case CONN_HELLO:
		disconnect(c, SPOP_ST_NORMAL);
		break;
	case CONN_READY:
		c->stopping = 1;
		/* NOTIFYs sent before the signal may still be in the socket:
		 * they are read and answered like the others (held ones
		 * first). */
		process_held(c);
		for (int round = 0; round < 16 && !c->held; round++) {
			int rc = read_once(c);

			if (rc < 0)
				return;
			if (rc == 0)
				break;
		}
		if (c->state == CONN_READY && c->pending == 0)
			disconnect(c, SPOP_ST_NORMAL);
		break;
	case CONN_DRAINING:
	case CONN_CLOSED:
		return;
	}
	flush(c);
}

void conn_stop_all(struct conn_set *s)
{
	s->stopping = true;
	for (uint32_t i = 0; i < s->nids; i++)
		if (s->by_id[i])
			conn_stop(s->by_id[i]);
}

void conn_last_word(struct conn *c)
{
	disconnect(c, SPOP_ST_NORMAL);
	if (flush(c) == 0)
		conn_close(c);
}
