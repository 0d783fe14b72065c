/* SPDX-License-Identifier: Apache-2.0 */
/* conn_tls.h: the transport under an SPOP connection, plain or TLS
 * (OpenSSL), and the listener's TLS context.
 *
 * conn.c reads and writes through conn_io_recv() and conn_io_send(): the
 * kernel's calls straight when a connection has no TLS session, else
 * OpenSSL's, which answer as the kernel would (bytes, 0 at the peer's end,
 * or -1 with errno: EAGAIN when the socket must be waited for, another
 * errno when the session failed). The plain path costs one test of a
 * pointer. A session accepts its handshake as it reads (server side,
 * non-blocking): there is no state of its own to wait in.
 *
 * What libev cannot see, the connection must ask (conn_tls_rearm in
 * conn.c): decrypted bytes OpenSSL holds already (SSL_pending: the socket
 * is empty of them and will not wake the loop), and a read that needs the
 * socket to take the handshake's bytes (SSL_want_write). Not
 * SSL_has_pending, which also counts the first part of a record whose
 * rest is still to come: only the socket can announce that rest, and a
 * read asked for before it would find nothing, again and again.
 *
 * The context is shared by every worker and replaced whole by
 * conn_tls_load() at reload: sessions opened before keep the context they
 * began with (OpenSSL counts its references), new ones take the new one.
 */
#ifndef RL_CONN_TLS_H
#define RL_CONN_TLS_H

#include <ev.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

/* The listener's files: a certificate chain and its key, both PEM, and
 * optionally the CA that clients' certificates must be signed by (then a
 * client without one is refused). */
struct conn_tls_files {
	const char *cert;
	const char *key;
	const char *ca;   /* NULL: no client certificate asked for */
};

struct conn_tls {
	pthread_mutex_t lock;
	SSL_CTX *ctx;     /* under lock */
};

/* A context read from files: 0, or -1 with err naming the file and
 * OpenSSL's reason (unreadable, not PEM, a key that does not match the
 * certificate). On a reload, the context in force stays on failure. */
int conn_tls_load(struct conn_tls *t, const struct conn_tls_files *f, char *err,
		  size_t errlen);

/* Only checks the files (--check): 0, or -1 with err. */
int conn_tls_check(const struct conn_tls_files *f, char *err, size_t errlen);

void conn_tls_free(struct conn_tls *t);

/* A new server session on an accepted socket, or NULL (out of memory). */
SSL *conn_tls_session(struct conn_tls *t, int fd);

/* Sends close_notify if the socket takes it now (before a half-close). */
void conn_tls_goodbye(SSL *ssl);

ssize_t conn_tls_recv(SSL *ssl, void *buf, size_t len);
ssize_t conn_tls_send(SSL *ssl, const void *buf, size_t len);

/* recv() and send() straight to the kernel without TLS. glibc's wrappers
 * make them thread cancellation points, which costs two calls around every
 * system call (more than the rest of the wrapper); no thread of the agent
 * is ever cancelled. Same results and errno. */
static inline ssize_t conn_io_recv(int fd, SSL *ssl, void *buf, size_t len)
{
	if (ssl)
		return conn_tls_recv(ssl, buf, len);
	return syscall(SYS_recvfrom, fd, buf, len, 0, NULL, NULL);
}

static inline ssize_t conn_io_send(int fd, SSL *ssl, const void *buf, size_t len, int flags)
{
	if (ssl)
		return conn_tls_send(ssl, buf, len);
	return syscall(SYS_sendto, fd, buf, len, flags, NULL, 0);
}

/* After a read of a TLS connection (conn.h's watchers): decrypted bytes
 * waiting in OpenSSL are read on the loop's next turn; a handshake that
 * waits for the socket to take its bytes goes on once it does (the write
 * watcher, whose callback then reads). A record begun waits for the
 * socket's event: fed a read, the loop would run it at once, find the
 * record still incomplete, and be fed again, serving nothing else until
 * the peer sends the rest (without read-ahead, OpenSSL holds no whole
 * record it has not decrypted). */
static inline void conn_tls_rearm(struct ev_loop *loop, SSL *ssl, ev_io *rio, ev_io *wio)
{
	if (SSL_want_write(ssl))
		ev_io_start(loop, wio);
	else if (ev_is_active(rio) && SSL_pending(ssl) > 0)
		ev_feed_event(loop, rio, EV_READ);
}

#endif
