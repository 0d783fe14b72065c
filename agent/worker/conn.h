/* conn.h: one SPOP connection from HAProxy, its state machine and buffers.
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
 * A connection is never freed inside its own callbacks: conn_close() marks
 * it and hands it to the worker's reap list. Deferred work refers to a
 * connection by (slot, generation), never by pointer.
 *
 * Output is bounded, for peers that do not read what they are sent. A
 * frame read is handled only when its answer has room: in the 16 KiB a
 * connection starts with, or in a buffer grown up to 64 KiB while the
 * buffers of the whole process have grown by less than
 * CONN_OUTPUT_BUDGET. Else the frame waits, and the connection reads
 * nothing more, until its output has drained (back-pressure: the peer's
 * NOTIFYs wait in its own socket). Answers already owed (decisions from
 * the store) are always queued: there are at most as many as decisions
 * may wait. A READY connection whose output waits and makes no progress
 * for CONN_WRITE_STALL seconds is closed, without a DISCONNECT that the
 * peer would not read either. */
#ifndef RL_CONN_H
#define RL_CONN_H

#include <stdint.h>

#define CONN_OUTPUT_BUDGET (32u * 1024 * 1024) /* bytes, the whole process */
#define CONN_WRITE_STALL 5.0                   /* seconds */

struct worker;
struct conn;

/* A worker's connections: live ones by slot (answers find theirs by slot
 * and generation), closed ones waiting to be freed, answered ones waiting
 * to be written, and spares kept with their buffers. Owned by conn.c:
 * zeroed memory is an empty table; conn_table_free() releases it. */
struct conn_table {
	struct conn **slots;
	uint32_t *gens;           /* generation of each slot */
	uint32_t nslots;
	uint32_t *free_slots;
	uint32_t nfree_slots;
	struct conn *reap_list;   /* closed, freed before the loop blocks */
	struct conn *flush_list;  /* answered asynchronously, to write */
	struct conn *spare;
	int nspare;
	int nconns;
};

/* Takes ownership of an accepted, non-blocking socket. */
void conn_accept(struct worker *w, int fd);

/* Closes the socket and stops the watchers now; memory goes at reap time. */
void conn_close(struct conn *c);

struct store_ref;
struct decide_decision;

/* The worker's store answer callback (store_answer_fn, with the worker as
 * its private pointer): queues the ACK of a decision made later, if its
 * connection is still the one it was (slot and generation); written by
 * conn_flush_pending(). */
void conn_answer(void *worker, const struct store_ref *ref, const struct decide_decision *d);

/* Writes the ACKs queued by conn_answer(). Called before the loop blocks. */
void conn_flush_pending(struct worker *w);

/* Frees or recycles connections on the worker's reap list. */
void conn_reap(struct worker *w);

/* The agent stops: every connection reads what its socket already holds
 * and reads no more; a READY one answers every NOTIFY it has read (the
 * decisions waiting for the store too), then sends AGENT-DISCONNECT
 * (normal) and closes; one still in HELLO is disconnected at once. The
 * worker's nconns falls to 0 as they close. */
void conn_stop_all(struct worker *w);

/* Closes every connection of a stopped worker, each after a last
 * AGENT-DISCONNECT if its socket takes it at once, and frees its table. */
void conn_table_free(struct worker *w);

#endif
