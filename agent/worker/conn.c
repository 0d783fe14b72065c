#include "conn.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "alloc.h"
#include "clock.h"
#include "decide.h"
#include "log.h"
#include "server.h"
#include "spop.h"
#include "store.h"

/* Output is bounded (conn.h): a frame read is answered only while its
 * answer has room in WBUF_MAX bytes of output, and the process's buffers
 * have grown by less than CONN_OUTPUT_BUDGET together; else it waits, and
 * the connection reads nothing more, until its output has drained. */
#define WBUF_INIT 16384
#define WBUF_MAX (64 * 1024)
/* An ACK's most: length, type, flags, two varints, the actions. */
#define ACK_MAX (4 + 1 + 4 + 2 * SPOP_VARINT_MAX + DECIDE_ACTIONS_MAX)
#define DRAIN_GRACE 1.0
#define SPARES_MAX 64
#define COMPACT_MIN 1024

enum conn_state {
	CONN_HELLO,
	CONN_READY,
	CONN_DRAINING,
	CONN_CLOSED,
};

struct conn {
	struct worker *w;
	struct conn *next;        /* reap list or spare list */
	struct conn *flush_next;  /* worker's list of connections to flush */
	int in_flush;
	uint32_t slot;
	int fd;
	enum conn_state state;
	int reading;              /* read watcher wanted */
	int stopping;             /* the agent stops: no more reading; disconnect
	                           * once every decision is answered */
	int lingering;            /* DRAINING, output sent: discarding input */
	int held;                 /* frames wait in rbuf for output room: not
	                           * reading until the output drains */
	int resume;               /* held frames to handle (conn_flush_pending) */
	int warned_trim;          /* logged that answers lose variables to fit */
	int pending;              /* decisions waiting for the store */
	uint32_t max_frame;       /* negotiated; our own before HELLO */
	uint32_t ack_room;        /* room a frame we send may need: 4 +
	                           * max_frame, at most ACK_MAX */
	size_t room_end;          /* wcap - ack_room: past it in wlen, the
	                           * next answer needs room made (wbuf_reserve) */
	ev_tstamp last_active;    /* READY: last read, or last answer owed */
	ev_tstamp frame_started;  /* first bytes of an incomplete frame; 0: none */
	ev_tstamp stalled_since;  /* output waiting, none written since; 0: none */
	size_t blocked_at;        /* wpos when the socket was last found full */
	ev_io rio;
	ev_io wio;
	ev_timer timer;           /* HELLO deadline; READY: idle and frame
	                           * deadlines; DRAINING: grace */
	uint8_t *rbuf;
	size_t rcap, rpos, rlen;
	uint8_t *wbuf;
	size_t wcap, wpos, wlen;
};

static void on_read(struct ev_loop *loop, ev_io *io, int revents);
static void process_held(struct conn *c);
static void frame_begun(struct conn *c);
static void arm_timer(struct conn *c, ev_tstamp after);
static ev_tstamp ready_due(const struct conn *c);
static void disconnect(struct conn *c, int status);
static int flush(struct conn *c);
static void on_write(struct ev_loop *loop, ev_io *io, int revents);
static void on_timer(struct ev_loop *loop, ev_timer *t, int revents);

/* The worker's prepare watcher (server.c) reaps closed connections and
 * flushes answers that came later, before the loop blocks; it runs only
 * while there is such work, and this starts it (idempotent). */
static void want_prepare(struct worker *w)
{
	ev_prepare_start(w->loop, &w->reap_w);
}

/* recv() and send() straight to the kernel. glibc's wrappers make them
 * thread cancellation points, which costs two calls around every system
 * call (more than the rest of the wrapper); no thread of the agent is ever
 * cancelled. Same arguments, results and errno. */
static ssize_t sock_recv(int fd, void *buf, size_t len)
{
	return syscall(SYS_recvfrom, fd, buf, len, 0, NULL, NULL);
}

static ssize_t sock_send(int fd, const void *buf, size_t len, int flags)
{
	return syscall(SYS_sendto, fd, buf, len, flags, NULL, 0);
}

/* ---- slots ------------------------------------------------------------- */

static int slot_take(struct worker *w, struct conn *c)
{
	if (w->conns.nfree_slots == 0) {
		uint32_t n = w->conns.nslots ? w->conns.nslots * 2 : 64;
		struct conn **slots = xrealloc(w->conns.slots, n * sizeof(*slots));
		uint32_t *gens, *fs;

		if (!slots)
			return -1;
		w->conns.slots = slots;
		gens = xrealloc(w->conns.gens, n * sizeof(*gens));
		if (!gens)
			return -1;
		w->conns.gens = gens;
		fs = xrealloc(w->conns.free_slots, n * sizeof(*fs));
		if (!fs)
			return -1;
		w->conns.free_slots = fs;
		for (uint32_t i = w->conns.nslots; i < n; i++) {
			w->conns.slots[i] = NULL;
			w->conns.gens[i] = 0;
		}
		/* push in reverse so that low slots are used first */
		for (uint32_t i = n; i > w->conns.nslots; i--)
			w->conns.free_slots[w->conns.nfree_slots++] = i - 1;
		w->conns.nslots = n;
	}
	c->slot = w->conns.free_slots[--w->conns.nfree_slots];
	w->conns.slots[c->slot] = c;
	w->conns.gens[c->slot]++;
	return 0;
}

static void slot_release(struct worker *w, struct conn *c)
{
	w->conns.slots[c->slot] = NULL;
	w->conns.gens[c->slot]++;
	w->conns.free_slots[w->conns.nfree_slots++] = c->slot;
}

/* ---- life cycle ---------------------------------------------------------- */

static uint32_t ack_room(uint32_t max_frame)
{
	return 4 + max_frame < ACK_MAX ? 4 + max_frame : ACK_MAX;
}

/* After a change of ack_room or of the buffer's capacity (which always
 * holds ack_room: WBUF_INIT is larger than ACK_MAX). */
static void set_room(struct conn *c, uint32_t room)
{
	c->ack_room = room;
	c->room_end = c->wcap - room;
}

static struct conn *conn_get(struct worker *w)
{
	struct conn *c = w->conns.spare;
	uint32_t own = w->srv->cfg.max_frame_size;

	if (c) {
		w->conns.spare = c->next;
		w->conns.nspare--;
	} else {
		c = xcalloc(1, sizeof(*c));
		if (!c)
			return NULL;
		c->rcap = 4 + (size_t)own;
		c->rbuf = xmalloc(c->rcap);
		c->wcap = WBUF_INIT;
		c->wbuf = xmalloc(c->wcap);
		if (!c->rbuf || !c->wbuf) {
			xfree(c->rbuf);
			xfree(c->wbuf);
			xfree(c);
			return NULL;
		}
	}
	c->next = NULL;
	c->w = w;
	c->rpos = c->rlen = 0;
	c->wpos = c->wlen = 0;
	c->state = CONN_HELLO;
	c->max_frame = own;
	set_room(c, ack_room(own));
	c->in_flush = 0;
	c->flush_next = NULL;
	c->stopping = c->lingering = c->warned_trim = 0;
	c->held = c->resume = 0;
	c->pending = 0;
	c->frame_started = c->stalled_since = 0.;
	c->blocked_at = 0;
	return c;
}

void conn_accept(struct worker *w, int fd)
{
	struct conn *c;

	if (w->conns.nconns >= w->srv->cfg.max_conns) {
		log_warn("worker %d: %d connections, refusing another", w->idx, w->conns.nconns);
		close(fd);
		return;
	}
	c = conn_get(w);
	if (!c || slot_take(w, c) < 0) {
		log_err("worker %d: out of memory for a new connection", w->idx);
		if (c) {
			c->next = w->conns.spare;
			w->conns.spare = c;
			w->conns.nspare++;
		}
		close(fd);
		return;
	}
	c->fd = fd;
	w->conns.nconns++;
	STAT_INC(w->stats.accepted);
	ev_io_init(&c->rio, on_read, fd, EV_READ);
	c->rio.data = c;
	ev_io_init(&c->wio, on_write, fd, EV_WRITE);
	c->wio.data = c;
	ev_timer_init(&c->timer, on_timer, w->srv->cfg.hello_timeout, 0.);
	c->timer.data = c;
	c->reading = 1;
	ev_io_start(w->loop, &c->rio);
	ev_timer_start(w->loop, &c->timer);
}

void conn_close(struct conn *c)
{
	struct worker *w = c->w;

	if (c->state == CONN_CLOSED)
		return;
	ev_io_stop(w->loop, &c->rio);
	ev_io_stop(w->loop, &c->wio);
	ev_timer_stop(w->loop, &c->timer);
	close(c->fd);
	c->fd = -1;
	c->state = CONN_CLOSED;
	slot_release(w, c);
	w->conns.nconns--;
	STAT_INC(w->stats.closed);
	c->next = w->conns.reap_list;
	w->conns.reap_list = c;
	want_prepare(w);
}

static void conn_destroy(struct conn *c)
{
	if (c->wcap > WBUF_INIT)
		atomic_fetch_sub_explicit(&c->w->srv->out_grown, c->wcap - WBUF_INIT,
					  memory_order_relaxed);
	xfree(c->rbuf);
	xfree(c->wbuf);
	xfree(c);
}

void conn_reap(struct worker *w)
{
	while (w->conns.reap_list) {
		struct conn *c = w->conns.reap_list;

		w->conns.reap_list = c->next;
		/* Keep a few for the next connections, with buffers that did
		 * not grow past their initial size. */
		if (w->conns.nspare < SPARES_MAX && c->wcap == WBUF_INIT &&
		    !atomic_load(&w->srv->stopping)) {
			c->next = w->conns.spare;
			w->conns.spare = c;
			w->conns.nspare++;
		} else {
			conn_destroy(c);
		}
	}
}

void conn_table_free(struct worker *w)
{
	struct conn_table *t = &w->conns;

	w->fixed = NULL; /* the server's (server_stop) */
	/* The last word on connections still open (the grace time is over):
	 * a DISCONNECT if the socket takes it now, then the close. */
	for (uint32_t i = 0; i < t->nslots; i++) {
		struct conn *c = t->slots[i];

		if (!c)
			continue;
		disconnect(c, SPOP_ST_NORMAL);
		if (flush(c) == 0)
			conn_close(c);
	}
	t->flush_list = NULL;
	conn_reap(w);
	while (t->spare) {
		struct conn *c = t->spare;

		t->spare = c->next;
		conn_destroy(c);
	}
	t->nspare = 0;
	xfree(t->slots);
	xfree(t->gens);
	xfree(t->free_slots);
	memset(t, 0, sizeof(*t));
}

/* ---- output -------------------------------------------------------------- */

static int wbuf_grow(struct conn *c, size_t need);

/* Makes room for `need` more bytes of output. Returns 0 or -1. Inline:
 * every answer asks, and there is room as a rule. */
static inline int wbuf_reserve(struct conn *c, size_t need)
{
	if (c->wpos > 0 && c->wpos == c->wlen)
		c->wpos = c->wlen = 0;
	if (need <= c->wcap - c->wlen)
		return 0;
	return wbuf_grow(c, need);
}

/* The capacity a buffer holding `queued` bytes needs for `need` more:
 * its own, or the next power of two times it. */
static size_t wbuf_cap_for(const struct conn *c, size_t queued, size_t need)
{
	size_t cap = c->wcap;

	while (need > cap - queued)
		cap *= 2;
	return cap;
}

/* wbuf_reserve() without room at the end of the buffer: moves what is
 * queued to the front, or grows the buffer, whatever the bounds (answers
 * owed: the caller checked room_to_answer() for a frame read). Returns 0,
 * or -1 when out of memory. */
static int wbuf_grow(struct conn *c, size_t need)
{
	size_t cap;
	uint8_t *nb;

	if (c->wpos > 0) {
		memmove(c->wbuf, c->wbuf + c->wpos, c->wlen - c->wpos);
		c->wlen -= c->wpos;
		c->wpos = 0;
		if (need <= c->wcap - c->wlen)
			return 0;
	}
	cap = wbuf_cap_for(c, c->wlen, need);
	nb = xrealloc(c->wbuf, cap);
	if (!nb)
		return -1;
	atomic_fetch_add_explicit(&c->w->srv->out_grown, cap - c->wcap, memory_order_relaxed);
	c->wbuf = nb;
	c->wcap = cap;
	set_room(c, c->ack_room);
	/* drained() gives the memory back once the output is written: it
	 * runs when the write watcher stops */
	if (c->fd >= 0 && !ev_is_active(&c->wio))
		ev_io_start(c->w->loop, &c->wio);
	return 0;
}

/* Whether the answer to one more frame read has room in the output: at
 * the end of the buffer, once what is queued is moved to its front, or in
 * a buffer grown within WBUF_MAX and the process's budget. When it has
 * not, the frame waits (held) until the output drains: a peer that does
 * not read cannot make the agent queue more for it, and memory stays
 * bounded whatever the number of such peers. */
static __attribute__((noinline)) bool room_to_answer(struct conn *c)
{
	size_t queued = c->wlen - c->wpos, cap;

	if (c->ack_room <= c->wcap - queued)
		return true;
	cap = wbuf_cap_for(c, queued, c->ack_room);
	return cap <= WBUF_MAX &&
	       atomic_load_explicit(&c->w->srv->out_grown, memory_order_relaxed) + (cap - c->wcap) <=
		       CONN_OUTPUT_BUDGET;
}

static void update_reading(struct conn *c)
{
	struct worker *w = c->w;
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
		ev_io_start(w->loop, &c->rio);
	else if (!c->reading && ev_is_active(&c->rio))
		ev_io_stop(w->loop, &c->rio);
}

/* flush() found the socket full: from now on, the output must make
 * progress within CONN_WRITE_STALL seconds (ready_timer), counted again
 * from each time it is found full after a write that took some of it
 * (wpos moved since the last time; moving the output to the front of the
 * buffer counts once as progress, and happens only after some). */
static __attribute__((noinline)) void write_blocked(struct conn *c)
{
	ev_tstamp now = ev_now(c->w->loop);
	bool progressed = c->wpos != c->blocked_at;

	c->blocked_at = c->wpos;
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
	struct worker *w = c->w;

	c->stalled_since = 0.;
	c->blocked_at = 0;
	if (c->wcap > WBUF_INIT) {
		uint8_t *nb = xrealloc(c->wbuf, WBUF_INIT);

		if (nb) {
			atomic_fetch_sub_explicit(&w->srv->out_grown, c->wcap - WBUF_INIT,
						  memory_order_relaxed);
			c->wbuf = nb;
			c->wcap = WBUF_INIT;
			set_room(c, c->ack_room);
		}
	}
	if (c->held) {
		/* not reading until they are handled: they come first */
		c->held = 0;
		c->resume = 1;
		if (!c->in_flush) {
			c->in_flush = 1;
			c->flush_next = w->conns.flush_list;
			w->conns.flush_list = c;
			want_prepare(w);
		}
	}
}

/* Writes what is queued, in as few calls as the kernel allows: frames are
 * complete in the buffer, so a frame is never split by us across calls.
 * Returns 0, or -1 when the connection was closed. */
static int flush(struct conn *c)
{
	while (c->wpos < c->wlen) {
		ssize_t n = sock_send(c->fd, c->wbuf + c->wpos, c->wlen - c->wpos, MSG_NOSIGNAL);

		if (n > 0) {
			c->wpos += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			ev_io_start(c->w->loop, &c->wio);
			write_blocked(c);
			update_reading(c);
			return 0;
		}
		log_debug("connection %u: write failed: %s", c->slot, strerror(errno));
		conn_close(c);
		return -1;
	}
	c->wpos = c->wlen = 0;
	if (ev_is_active(&c->wio)) {
		ev_io_stop(c->w->loop, &c->wio);
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
			shutdown(c->fd, SHUT_WR);
			ev_io_start(c->w->loop, &c->rio);
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

static void on_write(struct ev_loop *loop, ev_io *io, int revents)
{
	flush(io->data);
}

/* Queues AGENT-DISCONNECT and stops reading; the connection closes once it
 * is flushed (or after the grace time). Errors are sticky: nothing else is
 * read or answered on this connection. */
static void disconnect(struct conn *c, int status)
{
	struct worker *w = c->w;
	struct spop_wbuf wb;
	uint32_t limit = c->max_frame;

	if (c->state == CONN_DRAINING || c->state == CONN_CLOSED)
		return;
	if (status != SPOP_ST_NORMAL)
		log_info("connection %u: disconnect, status %d (%s)", c->slot, status,
			 spop_status_str(status));
	STAT_INC(w->stats.disconnects_sent[status < 13 ? status : 13]);
	c->state = CONN_DRAINING;
	if (wbuf_reserve(c, c->ack_room) == 0) {
		spop_wbuf_init(&wb, c->wbuf + c->wlen, c->wcap - c->wlen);
		if (spop_encode_agent_disconnect(&wb, (uint32_t)status,
						 spop_status_str(status), limit) == 0)
			c->wlen += wb.len;
	}
	ev_timer_stop(w->loop, &c->timer);
	ev_timer_set(&c->timer, DRAIN_GRACE, 0.);
	ev_timer_start(w->loop, &c->timer);
	update_reading(c);
}

/* (Re)starts the connection's one timer, `after` seconds from now. */
static void arm_timer(struct conn *c, ev_tstamp after)
{
	struct ev_loop *loop = c->w->loop;

	ev_timer_stop(loop, &c->timer);
	ev_timer_set(&c->timer, after > 0. ? after : 0., 0.);
	ev_timer_start(loop, &c->timer);
}

/* A READY connection's next deadline: idle, or its incomplete frame's. */
static ev_tstamp ready_due(const struct conn *c)
{
	const struct server_config *cfg = &c->w->srv->cfg;
	ev_tstamp due = c->last_active + cfg->idle_timeout;

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
	struct ev_loop *loop = c->w->loop;

	c->frame_started = ev_now(loop);
	if (c->state == CONN_READY && c->reading &&
	    ev_timer_remaining(loop, &c->timer) > c->w->srv->cfg.hello_timeout)
		arm_timer(c, c->w->srv->cfg.hello_timeout);
}

/* READY: the timer fires at the earliest deadline it was set for; what
 * happened since (reads, answers) is looked at only now, so that reading
 * costs no timer operation. */
static void ready_timer(struct conn *c)
{
	const struct server_config *cfg = &c->w->srv->cfg;
	ev_tstamp now = ev_now(c->w->loop);

	if (c->stalled_since > 0. && now - c->stalled_since >= CONN_WRITE_STALL) {
		/* No AGENT-DISCONNECT: the peer reads nothing. */
		log_info("connection %u: the peer has read nothing for %.0f s (%zu bytes waiting): "
			 "closed", c->slot, now - c->stalled_since, c->wlen - c->wpos);
		STAT_INC(c->w->stats.write_stalls);
		conn_close(c);
		return;
	}
	if (c->frame_started > 0. && c->reading && now - c->frame_started >= cfg->hello_timeout) {
		log_info("connection %u: a frame begun %.1f s ago is still incomplete", c->slot,
			 now - c->frame_started);
		disconnect(c, SPOP_ST_TIMEOUT);
		flush(c);
		return;
	}
	/* Decisions still owed: not idle, whatever the peer does. */
	if (c->pending > 0)
		c->last_active = now;
	if (now - c->last_active >= cfg->idle_timeout) {
		log_info("connection %u: idle for %.0f s", c->slot, now - c->last_active);
		disconnect(c, SPOP_ST_TIMEOUT);
		flush(c);
		return;
	}
	arm_timer(c, ready_due(c) - now);
}

static void on_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct conn *c = t->data;

	switch (c->state) {
	case CONN_HELLO:
		log_info("connection %u: no HELLO in time", c->slot);
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
	struct worker *w = c->w;
	struct spop_hello h;
	struct spop_wbuf wb;
	int status;
	uint32_t own = w->srv->cfg.max_frame_size;

	if (spop_hello_parse(f->payload, f->payload_len, &h, &status) < 0) {
		disconnect(c, status);
		return;
	}
	c->max_frame = h.max_frame_size < own ? h.max_frame_size : own;
	set_room(c, ack_room(c->max_frame));
	if (wbuf_reserve(c, c->ack_room) < 0) {
		disconnect(c, SPOP_ST_RESOURCE);
		return;
	}
	spop_wbuf_init(&wb, c->wbuf + c->wlen, c->wcap - c->wlen);
	if (spop_encode_agent_hello(&wb, c->max_frame, "pipelining", c->max_frame) < 0) {
		disconnect(c, SPOP_ST_RESOURCE);
		return;
	}
	c->wlen += wb.len;
	ev_timer_stop(w->loop, &c->timer);
	if (h.healthcheck) {
		/* A health check ends with our HELLO. */
		STAT_INC(w->stats.healthchecks);
		c->state = CONN_DRAINING;
		ev_timer_set(&c->timer, DRAIN_GRACE, 0.);
		ev_timer_start(w->loop, &c->timer);
		return;
	}
	STAT_INC(w->stats.hellos);
	c->state = CONN_READY;
	c->last_active = ev_now(w->loop);
	arm_timer(c, w->srv->cfg.idle_timeout);
	log_debug("connection %u: HELLO, max-frame-size %u", c->slot, c->max_frame);
}

static int queue_trimmed(struct conn *c, uint64_t sid, uint64_t fid,
			 const struct decide_decision *d);

/* Queues an ACK frame that carries a decision's actions, or when d is
 * NULL, the one no-op action that every ACK needs (an empty ACK can hang
 * HAProxy). Returns 0, or -1 after disconnecting. */
static int queue_ack(struct conn *c, uint64_t sid, uint64_t fid,
		     const struct decide_decision *d)
{
	struct spop_wbuf wb;
	size_t start;

	if (wbuf_reserve(c, c->ack_room) < 0) {
		disconnect(c, SPOP_ST_RESOURCE);
		return -1;
	}
	spop_wbuf_init(&wb, c->wbuf + c->wlen, c->wcap - c->wlen);
	start = spop_frame_begin(&wb, SPOP_FRAME_ACK, SPOP_FLAG_FIN, sid, fid);
	if (d)
		decide_put_actions(&wb, d);
	else
		spop_put_unset_var(&wb, SPOP_SCOPE_TXN, "status", 6);
	if (spop_frame_end(&wb, start, c->max_frame) < 0)
		return queue_trimmed(c, sid, fid, d);
	c->wlen += wb.len;
	return 0;
}

/* queue_ack() for an answer over the max-frame-size HAProxy announced
 * (it may announce as little as 256 bytes, and a rule's RateLimit-Policy
 * alone can take 2 KiB): the same answer without the variables HAProxy
 * only copies into headers, policy first, then ratelimit, and counted.
 * What HAProxy's rules act on (status, retry_after, reason, slot) is
 * never dropped: an answer too big without those two disconnects, as
 * our own failure (logged), not the peer's. Returns 0, or -1 after
 * disconnecting. */
static __attribute__((noinline)) int queue_trimmed(struct conn *c, uint64_t sid,
						   uint64_t fid,
						   const struct decide_decision *d)
{
	struct decide_decision t;
	struct spop_wbuf wb;
	size_t start;

	if (d) {
		t = *d;
		for (int drop = 0; drop < 2; drop++) {
			if (drop == 0)
				t.policy_len = 0;
			else
				t.ratelimit_len = 0;
			spop_wbuf_init(&wb, c->wbuf + c->wlen, c->wcap - c->wlen);
			start = spop_frame_begin(&wb, SPOP_FRAME_ACK, SPOP_FLAG_FIN, sid, fid);
			decide_put_actions(&wb, &t);
			if (spop_frame_end(&wb, start, c->max_frame) == 0) {
				STAT_INC(c->w->stats.answers_trimmed);
				if (!c->warned_trim) {
					c->warned_trim = 1;
					log_warn("connection %u: answers over the max-frame-size of %u "
						 "bytes HAProxy announced are sent without %s",
						 c->slot, c->max_frame,
						 drop ? "policy and ratelimit" : "policy");
				}
				c->wlen += wb.len;
				return 0;
			}
		}
	}
	log_warn("connection %u: an answer does not fit the max-frame-size of %u bytes "
		 "HAProxy announced, even without policy and ratelimit", c->slot, c->max_frame);
	disconnect(c, SPOP_ST_TOO_BIG);
	return -1;
}

/* Counts a decision under its rule's name (rulestats.h). A refusal has a
 * reason other than ok, so the common answer (ok, forwarded) takes one
 * test before the flags. Priorities are 0 to 3 (rules_classify), and only
 * P1 to P3 are ever shed. Inline: every answer counts, and a call costs
 * as much as the counting. */
static inline __attribute__((always_inline)) void count_decision(struct worker *w, const struct decide_decision *d)
{
	struct rule_counters *rc = &w->rule_stats[d->counters];

	STAT_INC(rc->decisions);
	if (d->reason != DECIDE_OK) {
		if (d->status == 429)
			STAT_INC(rc->limited);
		else if (d->reason == DECIDE_SHED && !d->shadow)
			STAT_INC(rc->shed[d->priority & 3]);
		else if (d->status == 503 && d->reason == DECIDE_STORE_DOWN)
			STAT_INC(w->stats.store_down);
	}
	if (d->shadow)
		STAT_INC(rc->shadow);
	if (d->degraded)
		STAT_INC(w->stats.degraded);
	if (d->near_limit)
		STAT_INC(rc->near_limit);
}

/* xorshift32: shedding needs uniform numbers, not secrets. */
static uint32_t worker_rand(struct worker *w)
{
	uint32_t x = w->rnd;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	w->rnd = x;
	return x;
}

/* Decides a check-rate message. Returns 1 when *d holds the decision now,
 * 0 when it comes later (conn_answer). */
static int check_rate(struct conn *c, const struct spop_frame *f,
		      const struct rules_request *req, struct decide_decision *d)
{
	struct worker *w = c->w;
	struct decide_query q;
	struct store_ref ref;

	decide_prepare_request(w->rules, req, worker_rand(w), &q);
	if (w->ovt)
		decide_override(w->rules, w->ovt, clock_wall_ms(), &q);
	if (q.load_known) {
		/* for the load gauge; c->last_active is when this was read */
		STAT_SET(w->load.in_use, q.in_use);
		STAT_SET(w->load.free_conns, q.free_conns);
		STAT_SET(w->load.at, c->last_active);
	}
	/* Shed in earnest: no token taken. Shed in shadow mode: the limits
	 * still decide, and the answer says it would have been shed. */
	if (q.shed && !q.shed_shadow) {
		decide_shed(&q, d);
		return 1;
	}
	ref.slot = c->slot;
	ref.gen = w->conns.gens[c->slot];
	ref.stream_id = f->stream_id;
	ref.frame_id = f->frame_id;
	/* Counted before the call, in case a store ever answers from inside
	 * it: conn_answer() then finds the count it takes from. */
	c->pending++;
	if (store_submit(w->store, &q, &ref, d)) {
		c->pending--;
		return 1;
	}
	return 0;
}

/* A release or response message (checked already): for the request its
 * slot argument names, gives back the concurrency place of its
 * request_id, and counts its status for the rule's penalty. */
static __attribute__((noinline)) void release(struct worker *w, struct spop_cursor kv,
					      unsigned nargs)
{
	struct rules_args args;
	const struct spop_data *slot, *id, *status;
	int64_t st = 0;

	rules_args_from_kv(&args, kv, nargs);
	slot = rules_args_get(&args, "slot");
	id = rules_args_get(&args, RULES_REQUEST_ID);
	status = rules_args_get(&args, "status");
	STAT_INC(w->stats.releases);
	if (status && !spop_data_int(status, &st))
		st = 0;
	if (!slot || (!id && !st) || (slot->type != SPOP_T_STR && slot->type != SPOP_T_BIN) ||
	    store_response(w->store, w->rules, slot->u.str.ptr, slot->u.str.len,
			   id ? decide_request_id(id) : 0, st > 0 && st < 1000 ? (int)st : 0) < 0)
		STAT_INC(w->stats.releases_bad);
}

static inline bool is_release(struct spop_str name)
{
	return (name.len == sizeof(DECIDE_RELEASE) - 1 &&
		memcmp(name.ptr, DECIDE_RELEASE, name.len) == 0) ||
	       (name.len == sizeof(DECIDE_RESPONSE) - 1 &&
		memcmp(name.ptr, DECIDE_RESPONSE, name.len) == 0);
}

/* Acts on the release or response message whose nargs arguments start at
 * args, then on every later one of the NOTIFY (its list checked whole
 * already): one HAProxy event can carry both, from two SPOE files. The
 * walk is bounded by the frame. Apart from handle_notify(): most NOTIFYs
 * carry no release. */
static __attribute__((noinline)) void release_all(struct worker *w, struct spop_cursor args,
						  unsigned nargs)
{
	struct spop_cursor cur = args;
	struct spop_str name;

	release(w, args, nargs);
	if (spop_kv_skip(&cur, nargs) < 0)
		return;
	while (spop_msg_head(&cur, &name, &nargs) == 1) {
		args = cur;
		if (spop_kv_skip(&cur, nargs) < 0)
			return;
		if (is_release(name))
			release(w, args, nargs);
	}
}

/* --fixed-answer (benchmarks): a decision kept with copies of its
 * strings, so that it outlives the rules it was made with. The first one
 * made in the process is the server's, and every worker answers with it
 * from then on. */
struct fixed_answer {
	struct decide_decision d;
	char rule[RULES_NAME_MAX];
	char policy[RULES_POLICY_MAX];
};

/* The server's answer, once made: the worker takes it. */
static __attribute__((noinline)) bool fixed_answer(struct worker *w)
{
	w->fixed = atomic_load_explicit(&w->srv->fixed, memory_order_acquire);
	return w->fixed != NULL;
}

static __attribute__((noinline)) void keep_answer(struct worker *w,
						  const struct decide_decision *d)
{
	struct fixed_answer *fa = xmalloc(sizeof(*fa)), *none = NULL;

	if (!fa)
		return;
	fa->d = *d;
	fa->d.rule_len = d->rule_len < sizeof(fa->rule) ? d->rule_len : 0;
	fa->d.policy_len = d->policy_len < sizeof(fa->policy) ? d->policy_len : 0;
	if (fa->d.rule_len)
		memcpy(fa->rule, d->rule, fa->d.rule_len);
	if (fa->d.policy_len)
		memcpy(fa->policy, d->policy, fa->d.policy_len);
	fa->d.rule = fa->rule;
	fa->d.policy = fa->policy;
	/* another worker's, made at the same time, may be the first */
	if (!atomic_compare_exchange_strong_explicit(&w->srv->fixed, &none, fa,
						     memory_order_acq_rel, memory_order_acquire))
		xfree(fa);
	fixed_answer(w);
}

static void handle_notify(struct conn *c, const struct spop_frame *f)
{
	struct spop_cursor cur = { f->payload, f->payload + f->payload_len };
	struct spop_str name;
	struct rules_request req;
	struct decide_decision d;
	struct spop_cursor rel = { NULL, NULL };
	unsigned nargs, nrel = 0;
	int rc, found = 0;

	STAT_INC(c->w->stats.notifies);
	/* Validate the whole message list before acting on any of it. The
	 * first check-rate message's arguments are decoded as they are
	 * checked, so that each byte is walked once; a second check-rate
	 * would answer with the same variables, and is ignored. Every
	 * release and response message is acted on (release_all), from the
	 * first one's place. */
	while ((rc = spop_msg_head(&cur, &name, &nargs)) == 1) {
		if (!found && name.len == sizeof(DECIDE_MESSAGE) - 1 &&
		    memcmp(name.ptr, DECIDE_MESSAGE, name.len) == 0) {
			found = 1;
			rc = rules_request_decode(c->w->rules, &req, &cur, nargs);
		} else {
			if (!rel.p && is_release(name)) {
				rel = cur;
				nrel = nargs;
			}
			rc = spop_kv_skip(&cur, nargs);
		}
		if (rc < 0)
			break;
	}
	if (rc < 0) {
		disconnect(c, SPOP_ST_INVALID);
		return;
	}
	if (rel.p)
		release_all(c->w, rel, nrel);
	/* Unknown messages, or none, are acknowledged, not refused. */
	if (!found) {
		queue_ack(c, f->stream_id, f->frame_id, NULL);
		return;
	}
	if (c->w->fixed || (c->w->srv->cfg.fixed_answer && fixed_answer(c->w))) {
		queue_ack(c, f->stream_id, f->frame_id, &c->w->fixed->d);
		return;
	}
	if (check_rate(c, f, &req, &d)) {
		count_decision(c->w, &d);
		if (c->w->srv->cfg.fixed_answer)
			keep_answer(c->w, &d);
		queue_ack(c, f->stream_id, f->frame_id, &d);
	}
}

void conn_answer(void *worker, const struct store_ref *ref, const struct decide_decision *d)
{
	struct worker *w = worker;
	struct conn *c;

	count_decision(w, d);
	if (ref->slot >= w->conns.nslots || w->conns.gens[ref->slot] != ref->gen)
		return; /* the connection has gone: nobody to answer */
	c = w->conns.slots[ref->slot];
	if (!c)
		return;
	c->pending--;
	if (c->state != CONN_READY)
		return;
	if (queue_ack(c, ref->stream_id, ref->frame_id, d) < 0 && c->state == CONN_CLOSED)
		return;
	if (c->pending == 0) {
		/* idle from the last answer on, not from the last read */
		c->last_active = ev_now(w->loop);
		if (c->stopping)
			disconnect(c, SPOP_ST_NORMAL);
	}
	if (!c->in_flush) {
		c->in_flush = 1;
		c->flush_next = w->conns.flush_list;
		w->conns.flush_list = c;
		want_prepare(w);
	}
}

void conn_flush_pending(struct worker *w)
{
	while (w->conns.flush_list) {
		struct conn *c = w->conns.flush_list;

		w->conns.flush_list = c->flush_next;
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
		ev_io_start(c->w->loop, &c->wio);
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
		rc = spop_frame_peek(c->rbuf + c->rpos, c->rlen - c->rpos, c->max_frame, &f,
				     &status);

		if (rc == SPOP_NEED_MORE)
			break;
		if (rc == SPOP_ERR) {
			disconnect(c, status);
			break;
		}
		/* No room for its answer at the end of the output: it waits
		 * unless the buffer may make room (room_to_answer). */
		if (c->wlen > c->room_end && !room_to_answer(c)) {
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
	if (c->rpos >= COMPACT_MIN || c->rcap - c->rlen < 4 + (size_t)c->max_frame) {
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
		ssize_t n = sock_recv(c->fd, c->rbuf, c->rcap);

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
		n = sock_recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen);
	while (n < 0 && errno == EINTR);
	if (n == 0) {
		/* FIN: HAProxy drops idle connections without a word. */
		log_debug("connection %u: closed by peer", c->slot);
		conn_close(c);
		return -1;
	}
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		log_debug("connection %u: read failed: %s", c->slot, strerror(errno));
		conn_close(c);
		return -1;
	}
	c->rlen += (size_t)n;
	c->last_active = ev_now(c->w->loop);
	process_input(c);
	if (c->held || (c->state != CONN_HELLO && c->state != CONN_READY))
		return 0;
	return (size_t)n >= c->rcap / 2; /* else the socket is drained, most likely */
}

static void on_read(struct ev_loop *loop, ev_io *io, int revents)
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

void conn_stop_all(struct worker *w)
{
	for (uint32_t i = 0; i < w->conns.nslots; i++)
		if (w->conns.slots[i])
			conn_stop(w->conns.slots[i]);
}
