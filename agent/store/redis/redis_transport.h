/* SPDX-License-Identifier: Apache-2.0 */
/* redis_transport.h: the byte stream under a Redis connection.
 *
 * A transport opens a non-blocking stream to a server (TCP host:port or a
 * Unix socket), moves bytes both ways and closes it; it knows nothing of
 * RESP, commands or replies (redis_conn.c does). The connection waits on
 * the transport's descriptor with libev and calls it when the descriptor
 * is ready, as the transport asked: a transport that must read before it
 * can write (or write before it can read, as a TLS session may) says so
 * with REDIS_T_WANT_READ / REDIS_T_WANT_WRITE.
 *
 * Today's transport is plain (redis_transport_plain.c). Another (TLS) is
 * one more set of redis_transport_ops and one more case in
 * redis_transport_new(); nothing above the connection changes. */
#ifndef RL_REDIS_TRANSPORT_H
#define RL_REDIS_TRANSPORT_H

#include <stddef.h>
#include <sys/types.h>

#include "addr.h"
#include "redis_errors.h"

struct redis_config;

/* Results besides a count of bytes (> 0) and 0 (the peer closed). */
#define REDIS_T_ERROR (-1)      /* failed: the reason is in t->errstr */
#define REDIS_T_WANT_READ (-2)  /* nothing now: call again once readable */
#define REDIS_T_WANT_WRITE (-3) /* nothing now: call again once writable */

struct redis_transport;

struct redis_transport_ops {
	/* Starts connecting to a: 0 when the stream is usable at once, else
	 * REDIS_T_WANT_* (then handshake() when the descriptor is ready) or
	 * REDIS_T_ERROR. t->fd is set from then on (or -1). */
	int (*connect)(struct redis_transport *t, const struct addr *a);
	/* Goes on connecting: 0 when done, REDIS_T_WANT_* or REDIS_T_ERROR. */
	int (*handshake)(struct redis_transport *t);
	/* At most len bytes: their count, 0 at the end of the stream,
	 * REDIS_T_WANT_* or REDIS_T_ERROR. */
	ssize_t (*read)(struct redis_transport *t, void *buf, size_t len);
	/* At most len bytes (a partial write is the caller's to finish):
	 * their count, REDIS_T_WANT_* or REDIS_T_ERROR. */
	ssize_t (*write)(struct redis_transport *t, const void *buf, size_t len);
	/* Closes the stream and frees t. */
	void (*close)(struct redis_transport *t);
};

struct redis_transport {
	const struct redis_transport_ops *ops;
	int fd;               /* what the connection waits on; -1: none */
	char errstr[128];     /* the last failure, for the log */
	enum redis_error_kind errkind; /* and its kind: REDIS_ERROR_CONNECT
				        * unless the transport says better */
};

/* A new, unconnected transport for cfg's servers (cfg may be NULL: plain).
 * NULL when out of memory. */
struct redis_transport *redis_transport_new(const struct redis_config *cfg);

#endif
