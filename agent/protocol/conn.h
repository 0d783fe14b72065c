/* SPDX-License-Identifier: Apache-2.0 */
/* conn.h: one SPOP connection from HAProxy: its state machine and its
 * buffers, frames in and frames out. What a NOTIFY's messages mean is not
 * its business: it hands each NOTIFY to the handler its set was given
 * (struct conn_handler), which answers it at once or later, through the
 * calls below; the connection writes the ACKs. It knows no worker, server,
 * rule or store.
 *
 * States: HELLO (waiting for HAPROXY-HELLO, within the hello timeout),
 * READY (NOTIFYs; closed after the idle timeout without a read or an answer
 * owed, and when a frame begun is not complete within the hello timeout),
 * DRAINING (a DISCONNECT or final HELLO is queued: nothing more is handled;
 * once the output is flushed, the socket is half-closed and input discarded
 * until the peer closes, or a short grace time ends). Any protocol error
 * sends AGENT-DISCONNECT with the matching status and drains: errors are
 * sticky.
 *
 * A connection is never freed inside its own callbacks: closing marks it
 * and hands it to its set's reap list. Deferred work refers to a
 * connection by (id, generation), never by pointer.
 *
 * Output is bounded, for peers that do not read what they are sent. A
 * frame read is handled only when its answer has room: in the 16 KiB a
 * connection starts with, or in a buffer grown up to 64 KiB while the
 * buffers of the whole process have grown by less than
 * CONN_OUTPUT_BUDGET. Else the frame waits, and the connection reads
 * nothing more, until its output has drained (back-pressure: the peer's
 * NOTIFYs wait in its own socket). Answers already owed (deferred ones)
 * are always queued: there are at most as many as decisions may wait. A
 * READY connection whose output waits and makes no progress for
 * CONN_WRITE_STALL seconds is closed, without a DISCONNECT that the peer
 * would not read either. */
#ifndef RL_CONN_H
#define RL_CONN_H

#include <ev.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spop.h"
#include "stats.h"

#define CONN_OUTPUT_BUDGET (32u * 1024 * 1024) /* bytes, the whole process */
#define CONN_WRITE_STALL 5.0                   /* seconds */
/* The most an ACK's actions may take (struct conn_set.actions_max): an
 * ACK, with its header, must fit the output buffer a connection starts
 * with. */
#define CONN_ACTIONS_LIMIT (16384 - 64)

struct conn;
struct conn_tls;

/* What a connection shows its handler; the head of struct conn. The
 * output is there so that an ACK costs no call (conn_ack_begin): a
 * handler writes nothing else into it. */
struct conn_view {
	uint32_t id;             /* its index in its set: with gen, finds it again */
	uint32_t gen;
	uint32_t max_frame;      /* the max-frame-size agreed at HELLO (our own
	                          * before) */
	unsigned handler_flags;  /* the handler's own, 0 at accept */
	ev_tstamp last_active;   /* the last read, or the last answer owed */
	uint8_t *wbuf;           /* output: [wpos, wlen) is queued */
	size_t wcap, wpos, wlen;
	uint32_t ack_room;       /* the room an ACK may need: 4 + max_frame,
	                          * at most the ACK's most */
};

static inline struct conn_view *conn_view(struct conn *c)
{
	return (struct conn_view *)(void *)c;
}

/* What the handler did with a NOTIFY. */
enum conn_answer {
	CONN_ANSWERED, /* its ACK is queued, or the connection disconnected */
	CONN_DEFERRED, /* its ACK comes later: conn_deferred() */
};

struct conn_handler {
	/* A NOTIFY read on c (READY): the handler acts on its messages, then
	 * queues its ACK (conn_ack_begin ... conn_ack_end) or disconnects,
	 * and returns CONN_ANSWERED; or returns CONN_DEFERRED and answers
	 * later. Until then c owes an answer: it is not idle, and a stopping
	 * connection waits for it. */
	enum conn_answer (*notify)(void *app, struct conn *c, const struct spop_frame *f);
};

struct conn_config {
	uint32_t max_frame_size;  /* own maximum, >= 16380 */
	int max_conns;            /* per set */
	double hello_timeout;     /* seconds to complete HELLO, and any frame
	                           * once its first bytes have arrived */
	double idle_timeout;      /* seconds a READY connection may stay idle */
	struct conn_tls *tls;     /* TLS on every connection (conn_tls.h);
	                           * NULL: plaintext */
};

/* Counters of one set, written by its thread only (stats.h). */
struct conn_stats {
	counter_t accepted;
	counter_t closed;
	counter_t hellos;
	counter_t healthchecks;
	counter_t notifies;
	counter_t disconnects_sent[14]; /* by status code; index 13 holds 99 too */
	counter_t write_stalls; /* closed: the peer read nothing for
	                         * CONN_WRITE_STALL seconds */
};

/* The connections of one thread, on its loop: live ones by id (answers
 * find theirs by id and generation), closed ones waiting to be freed,
 * answered ones waiting to be written, and spares kept with their
 * buffers. Its owner sets the first fields, the rest zeroed, before the
 * first conn_accept(); conn_set_free() releases what conn.c allocated. */
struct conn_set {
	struct ev_loop *loop;
	const struct conn_config *cfg;
	const struct conn_handler *handler;
	void *app;                /* the handler's first argument */
	size_t actions_max;       /* the most an ACK's actions take, at most
	                           * CONN_ACTIONS_LIMIT */
	atomic_size_t *out_grown; /* bytes by which output buffers have grown
	                           * past their first size, every set of the
	                           * process together */
	ev_prepare *prepare;      /* the owner's, started when work waits for
	                           * the loop's next turn (conn_set_busy) */
	int idx;                  /* the owner's number, for logs */
	/* conn.c's */
	struct conn **by_id;
	uint32_t *gens;           /* generation of each id */
	uint32_t nids;
	uint32_t *free_ids;
	uint32_t nfree_ids;
	struct conn *reap_list;   /* closed, freed before the loop blocks */
	struct conn *flush_list;  /* answered asynchronously, to write */
	struct conn *spare;
	int nspare;
	int nconns;
	bool stopping;
	struct conn_stats stats;
};

/* Takes ownership of an accepted, non-blocking socket. */
void conn_accept(struct conn_set *s, int fd);

/* An ACK being written: the handler puts its actions into wb. */
struct conn_ack {
	struct conn *c;
	struct spop_wbuf wb;
	size_t start;
};

/* conn_ack_begin() without room at the end of the output: makes it.
 * Returns 0, or -1 after disconnecting (out of memory). */
int conn_ack_room(struct conn *c);

/* Begins the ACK of NOTIFY (sid, fid) at the end of c's output. Returns
 * 0, or -1 after disconnecting (out of memory). */
static inline int conn_ack_begin(struct conn *c, uint64_t sid, uint64_t fid,
				 struct conn_ack *a)
{
	struct conn_view *v = conn_view(c);

	if (((v->wpos > 0 && v->wpos == v->wlen) || v->ack_room > v->wcap - v->wlen) &&
	    conn_ack_room(c) < 0)
		return -1;
	a->c = c;
	spop_wbuf_init(&a->wb, v->wbuf + v->wlen, v->wcap - v->wlen);
	a->start = spop_frame_begin(&a->wb, SPOP_FRAME_ACK, SPOP_FLAG_FIN, sid, fid);
	return 0;
}

/* Ends it: returns 0 once it is queued, or -1 when it is larger than the
 * max-frame-size agreed (or than the output's room): nothing is queued,
 * and the handler may write a smaller one, or disconnect. */
static inline int conn_ack_end(struct conn_ack *a)
{
	struct conn_view *v = conn_view(a->c);

	if (spop_frame_end(&a->wb, a->start, v->max_frame) < 0)
		return -1;
	v->wlen += a->wb.len;
	return 0;
}

/* Queues AGENT-DISCONNECT with status (a SPOP status code) and reads no
 * more; the connection closes once it is flushed. */
void conn_disconnect(struct conn *c, int status);

/* The answer to a NOTIFY deferred on connection (id, gen) is ready: its
 * debt is settled, and the connection returned to queue its ACK on, then
 * conn_answered(); or NULL when the connection has gone, or answers no
 * more. */
struct conn *conn_deferred(struct conn_set *s, uint32_t id, uint32_t gen);

/* Whether connection (id, gen) is still open (it may be draining), without
 * settling anything. */
static inline bool conn_open(const struct conn_set *s, uint32_t id, uint32_t gen)
{
	return id < s->nids && s->gens[id] == gen;
}

/* After the ACK of conn_deferred(): writes it before the loop blocks; a
 * stopping connection disconnects once it owes nothing. */
void conn_answered(struct conn *c);

/* Writes the ACKs queued since the loop's last turn and handles the
 * frames held for output room. Called before the loop blocks. */
void conn_flush_pending(struct conn_set *s);

/* Frees or recycles the connections closed. */
void conn_reap(struct conn_set *s);

/* Whether conn_flush_pending() or conn_reap() has work. */
static inline bool conn_set_busy(const struct conn_set *s)
{
	return s->reap_list || s->flush_list;
}

/* The agent stops: every connection reads what its socket already holds
 * and reads no more; a READY one answers every NOTIFY it has read (the
 * deferred ones too), then sends AGENT-DISCONNECT (normal) and closes;
 * one still in HELLO is disconnected at once. nconns falls to 0 as they
 * close. */
void conn_stop_all(struct conn_set *s);

/* Closes every connection of a stopped set, each after a last
 * AGENT-DISCONNECT if its socket takes it at once, and frees what the set
 * holds. */
void conn_set_free(struct conn_set *s);

#endif
