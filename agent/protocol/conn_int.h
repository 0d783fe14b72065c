/* SPDX-License-Identifier: Apache-2.0 */
/* conn_int.h: what conn.c (a connection's state machine and buffers) and
 * conn_set.c (a worker's set of them: ids, accept, close and reap) share.
 * Other files see conn.h alone. */
#ifndef RL_CONN_INT_H
#define RL_CONN_INT_H

#include "conn.h"
#include "conn_tls.h"

/* Output is bounded (conn.h): a frame read is answered only while its
 * answer has room in WBUF_MAX bytes of output, and the process's buffers
 * have grown by less than CONN_OUTPUT_BUDGET together; else it waits, and
 * the connection reads nothing more, until its output has drained. */
#define WBUF_INIT 16384
#define WBUF_MAX (64 * 1024)
/* An ACK's most: length, type, flags, two varints, then the actions
 * (conn_set.actions_max). */
#define ACK_HEAD_MAX (4 + 1 + 4 + 2 * SPOP_VARINT_MAX)
_Static_assert(ACK_HEAD_MAX + CONN_ACTIONS_LIMIT < 16384, "an ACK fits a new buffer");
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
	struct conn_view v;       /* first: conn_view() */
	struct conn_set *set;
	struct conn *next;        /* reap list or spare list */
	struct conn *flush_next;  /* the set's list of connections to flush */
	int in_flush;
	int fd;
	SSL *ssl;                 /* NULL: plaintext (conn_tls.h) */
	enum conn_state state;
	int reading;              /* read watcher wanted */
	int stopping;             /* the agent stops: no more reading; disconnect
	                           * once every decision is answered */
	int lingering;            /* DRAINING, output sent: discarding input */
	int held;                 /* frames wait in rbuf for output room: not
	                           * reading until the output drains */
	int resume;               /* held frames to handle (conn_flush_pending) */
	int pending;              /* NOTIFYs whose answer is owed (deferred) */
	size_t room_end;          /* wcap - ack_room: past it in wlen, the
	                           * next answer needs room made (wbuf_reserve) */
	ev_tstamp frame_started;  /* first bytes of an incomplete frame; 0: none */
	ev_tstamp stalled_since;  /* output waiting, none written since; 0: none */
	size_t blocked_at;        /* wpos when the socket was last found full */
	ev_io rio;
	ev_io wio;
	ev_timer timer;           /* HELLO deadline; READY: idle and frame
	                           * deadlines; DRAINING: grace */
	uint8_t *rbuf;
	size_t rcap, rpos, rlen;
};

/* The owner's prepare watcher reaps closed connections and flushes
 * answers that came later, before the loop blocks; it runs only while
 * there is such work (conn_set_busy), and this starts it (idempotent). */
static inline void want_prepare(struct conn_set *s)
{
	ev_prepare_start(s->loop, s->prepare);
}

/* The room an ACK may need on a connection that agreed max_frame. */
static inline uint32_t ack_room(const struct conn_set *s, uint32_t max_frame)
{
	size_t most = ACK_HEAD_MAX + s->actions_max;

	return 4 + (size_t)max_frame < most ? 4 + max_frame : (uint32_t)most;
}

/* After a change of ack_room or of the buffer's capacity (which always
 * holds ack_room: WBUF_INIT is larger than the ACK's most). */
static inline void set_room(struct conn *c, uint32_t room)
{
	c->v.ack_room = room;
	c->room_end = c->v.wcap - room;
}

/* conn.c: the watchers' callbacks, and the last word on a connection
 * still open when its set is freed. */
void conn_io_read(struct ev_loop *loop, ev_io *io, int revents);
void conn_io_write(struct ev_loop *loop, ev_io *io, int revents);
void conn_io_timer(struct ev_loop *loop, ev_timer *t, int revents);
void conn_last_word(struct conn *c);

/* conn_set.c: closes the socket and stops the watchers now; memory goes
 * at reap time. */
void conn_close(struct conn *c);

#endif
