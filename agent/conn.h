/* conn.h: one SPOP connection from HAProxy, its state machine and buffers.
 *
 * States: HELLO (waiting for HAPROXY-HELLO), READY (NOTIFYs), DRAINING
 * (a DISCONNECT or final HELLO is queued: no more reading; closed once the
 * output is flushed or after a short grace time). Any protocol error sends
 * AGENT-DISCONNECT with the matching status and drains: errors are sticky.
 *
 * A connection is never freed inside its own callbacks: conn_close() marks
 * it and hands it to the worker's reap list. Deferred work refers to a
 * connection by (slot, generation), never by pointer. */
#ifndef RL_CONN_H
#define RL_CONN_H

#include <stdint.h>

struct worker;
struct conn;

/* Takes ownership of an accepted, non-blocking socket. */
void conn_accept(struct worker *w, int fd);

/* Closes the socket and stops the watchers now; memory goes at reap time. */
void conn_close(struct conn *c);

struct store_ref;
struct decide_decision;

/* Queues the ACK of an asynchronous decision, if its connection is still
 * the one it was (slot and generation); written by conn_flush_pending(). */
void conn_answer(struct worker *w, const struct store_ref *ref,
		 const struct decide_decision *d);

/* Writes the ACKs queued by conn_answer(). Called before the loop blocks. */
void conn_flush_pending(struct worker *w);

/* Frees or recycles connections on the worker's reap list. */
void conn_reap(struct worker *w);

/* Frees every spare connection of a worker (at shutdown). */
void conn_free_spares(struct worker *w);

#endif
