/* SPDX-License-Identifier: Apache-2.0 */
/* redis_conn.h: one connection to a Redis server on a worker's loop.
 *
 * Commands go out in RESP through an output buffer that the connection
 * owns and writes to its transport (redis_transport.h) as the socket takes
 * it; replies come back through hiredis's reader (redisReader, under the
 * guards of redis_guard.h) and go, in order, to the callback each command
 * named: a FIFO, as Redis answers. A callback gets NULL instead of a reply
 * when the connection goes first. No reply comes that no command waits
 * for: such a reply ends the connection.
 *
 * The callbacks run on the loop's thread; from inside one, a caller may
 * send more commands, ask for a disconnection or free the connection (the
 * freeing then happens when the callback returns). */
#ifndef RL_REDIS_CONN_H
#define RL_REDIS_CONN_H

#include <ev.h>
#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>

#include "addr.h"
#include "redis_transport.h"

struct redis_conn;

/* A command's reply, or NULL when the connection went before it came.
 * The reply is freed when the callback returns. */
typedef void redis_reply_fn(struct redis_conn *c, redisReply *reply, void *priv);

/* Either callback may be NULL, and so may the whole set. */
struct redis_conn_cb {
	/* The connection is made (ok), or it could not be (!ok, errstr says
	 * why): every command waiting then gets NULL, and the connection is
	 * freed once this returns. */
	void (*connected)(void *owner, struct redis_conn *c, bool ok);
	/* A connection that was made has ended: `lost` when nobody asked for
	 * it (an error, the server closed it: errstr says why), else at
	 * redis_conn_disconnect() or redis_conn_free(). The commands waiting
	 * got NULL before. The connection is freed once this returns. */
	void (*disconnected)(void *owner, struct redis_conn *c, bool lost);
};

/* Starts connecting t (taken: closed with the connection) to a. Commands
 * may be sent at once: they leave once it is made. NULL when out of
 * memory or when the connection failed at once (then *why, a static or
 * t's text, says why; t is closed either way). */
struct redis_conn *redis_conn_new(struct ev_loop *loop, struct redis_transport *t,
				  const struct addr *a, const struct redis_conn_cb *cb, void *owner,
				  char *why, size_t whylen);

/* Sends a command (argv) or an encoded one (RESP, cmd[0..len)): fn gets
 * its reply with priv (fn may be NULL: the reply is dropped). Returns 0,
 * or -1 when the connection is going (disconnecting or failed). */
int redis_conn_command(struct redis_conn *c, redis_reply_fn *fn, void *priv, int argc,
		       const char **argv, const size_t *argvlen);
int redis_conn_formatted(struct redis_conn *c, redis_reply_fn *fn, void *priv, const char *cmd,
			 size_t len);

/* Sends a SUBSCRIBE (argv): fn gets its answers and every message after
 * it, with priv, and NULL once when the connection goes. A subscribed
 * connection takes no other command that waits for a reply; a message
 * that is not an array of at least 3 whose first two are strings ends
 * it. Returns 0, or -1 (going, or subscribed already). */
int redis_conn_subscribe(struct redis_conn *c, redis_reply_fn *fn, void *priv, int argc,
			 const char **argv, const size_t *argvlen);

/* Writes what is buffered now, as far as the transport takes it without
 * waiting; the rest goes when the socket is writable again. */
void redis_conn_flush(struct redis_conn *c);

/* Reads what the server sent and hands out its replies now, rather than
 * when the loop next polls: for a caller about to judge the server by
 * its silence (a busy loop polls late). c may be gone after it (the
 * disconnected callback says so); not from inside one of c's callbacks. */
void redis_conn_read_now(struct redis_conn *c);

/* Takes no more commands, and ends the connection once every command
 * sent is answered (disconnected(), not lost). */
void redis_conn_disconnect(struct redis_conn *c);

/* Ends the connection now: the commands waiting get NULL, then
 * disconnected() (not lost) if it was made. */
void redis_conn_free(struct redis_conn *c);

/* The owner the callbacks get; set to NULL, they are no longer called
 * (the reply callbacks still are, with their own priv). */
void *redis_conn_owner(const struct redis_conn *c);
void redis_conn_set_owner(struct redis_conn *c, void *owner);

/* An owner's connection *cp (if any) ended now without a word to its
 * owner: its owner set to NULL, then freed (its replies still due get
 * NULL); *cp is NULL after. From one of its callbacks too. */
void redis_conn_drop(struct redis_conn **cp);

/* Whether it failed or was lost (rather than closed when asked). */
bool redis_conn_lost(const struct redis_conn *c);

/* Whether the transport's connection (TCP, and a TLS handshake) is done. */
bool redis_conn_made(const struct redis_conn *c);

/* Why the connection failed or was lost, and that failure's kind. */
const char *redis_conn_errstr(const struct redis_conn *c);
enum redis_error_kind redis_conn_errkind(const struct redis_conn *c);

/* Commands sent whose replies have not come back. */
size_t redis_conn_waiting(const struct redis_conn *c);

#endif
