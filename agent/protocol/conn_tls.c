/* SPDX-License-Identifier: Apache-2.0 */
/* conn_tls.c: TLS under SPOP connections, on OpenSSL (conn_tls.h). */
#include "conn_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/err.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"

/* OpenSSL's reason for the last error of this thread, and the queue
 * emptied. */
static const char *tls_reason(char *buf, size_t len)
{
	unsigned long e = ERR_get_error();
	const char *r;

	ERR_clear_error();
	if (!e)
		return "no reason given";
	r = ERR_reason_error_string(e);
	if (r)
		return r;
	ERR_error_string_n(e, buf, len);
	return buf;
}

/* The file can be opened: else err says why, with its option's name. */
static int readable(const char *path, const char *what, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		snprintf(err, errlen, "%s %s: %s", what, path, strerror(errno));
		return -1;
	}
	close(fd);
	return 0;
}

static SSL_CTX *ctx_fail(SSL_CTX *ctx, char *err, size_t errlen, const char *what,
			 const char *path)
{
	char buf[256];

	snprintf(err, errlen, "%s %s: %s", what, path, tls_reason(buf, sizeof(buf)));
	SSL_CTX_free(ctx);
	return NULL;
}

static SSL_CTX *ctx_new(const struct conn_tls_files *f, char *err, size_t errlen)
{
	static const unsigned char sid_ctx[] = "spoa-ratelimit";
	STACK_OF(X509_NAME) *names;
	SSL_CTX *ctx;

	if (readable(f->cert, "--listen-tls-cert", err, errlen) < 0 ||
	    readable(f->key, "--listen-tls-key", err, errlen) < 0 ||
	    (f->ca && readable(f->ca, "--listen-tls-ca", err, errlen) < 0))
		return NULL;
	ERR_clear_error();
	ctx = SSL_CTX_new(TLS_server_method());
	if (!ctx) {
		snprintf(err, errlen, "TLS: cannot make a context: out of memory");
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	/* No renegotiation: a write never has to wait for a read. A peer
	 * that closes without close_notify ends the connection as a FIN
	 * does, as HAProxy does when it drops an idle connection. */
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
	/* conn.c writes whatever part the socket takes, and its output buffer
	 * may move (grow, shrink) between two tries of the same bytes. */
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof(sid_ctx) - 1);
	if (SSL_CTX_use_certificate_chain_file(ctx, f->cert) != 1)
		return ctx_fail(ctx, err, errlen, "--listen-tls-cert", f->cert);
	if (SSL_CTX_use_PrivateKey_file(ctx, f->key, SSL_FILETYPE_PEM) != 1)
		return ctx_fail(ctx, err, errlen, "--listen-tls-key", f->key);
	if (SSL_CTX_check_private_key(ctx) != 1) {
		snprintf(err, errlen, "--listen-tls-key %s does not match the certificate of "
			 "--listen-tls-cert %s", f->key, f->cert);
		ERR_clear_error();
		SSL_CTX_free(ctx);
		return NULL;
	}
	if (!f->ca)
		return ctx;
	if (SSL_CTX_load_verify_locations(ctx, f->ca, NULL) != 1)
		return ctx_fail(ctx, err, errlen, "--listen-tls-ca", f->ca);
	names = SSL_load_client_CA_file(f->ca);
	if (!names)
		return ctx_fail(ctx, err, errlen, "--listen-tls-ca", f->ca);
	SSL_CTX_set_client_CA_list(ctx, names);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	return ctx;
}

int conn_tls_load(struct conn_tls *t, const struct conn_tls_files *f, char *err, size_t errlen)
{
	SSL_CTX *ctx = ctx_new(f, err, errlen), *old;

	if (!ctx)
		return -1;
	if (!t->ctx)
		pthread_mutex_init(&t->lock, NULL);
	pthread_mutex_lock(&t->lock);
	old = t->ctx;
	t->ctx = ctx;
	pthread_mutex_unlock(&t->lock);
	SSL_CTX_free(old); /* its sessions hold their own references */
	return 0;
}

int conn_tls_check(const struct conn_tls_files *f, char *err, size_t errlen)
{
	SSL_CTX *ctx = ctx_new(f, err, errlen);

	SSL_CTX_free(ctx);
	return ctx ? 0 : -1;
}

void conn_tls_free(struct conn_tls *t)
{
	if (!t->ctx)
		return;
	SSL_CTX_free(t->ctx);
	t->ctx = NULL;
	pthread_mutex_destroy(&t->lock);
}

SSL *conn_tls_session(struct conn_tls *t, int fd)
{
	SSL *ssl;

	pthread_mutex_lock(&t->lock);
	ssl = SSL_new(t->ctx);
	pthread_mutex_unlock(&t->lock);
	if (!ssl)
		return NULL;
	if (SSL_set_fd(ssl, fd) != 1) {
		SSL_free(ssl);
		return NULL;
	}
	SSL_set_accept_state(ssl);
	return ssl;
}

void conn_tls_goodbye(SSL *ssl)
{
	if (!SSL_is_init_finished(ssl))
		return;
	ERR_clear_error();
	SSL_shutdown(ssl); /* quiet after a failure: nothing sent then */
	ERR_clear_error();
}

/* A failed SSL_read or SSL_write, as the kernel would have said it.
 * The session's failures are logged with the peer's address: a peer
 * without a certificate, or speaking plaintext, is refused here. */
static ssize_t tls_failed(SSL *ssl, int rc, const char *op)
{
	char buf[256], peer[INET6_ADDRSTRLEN] = "?";
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int e = SSL_get_error(ssl, rc), saved = errno;

	switch (e) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		errno = EAGAIN;
		return -1;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	case SSL_ERROR_SYSCALL:
		ERR_clear_error();
		SSL_set_quiet_shutdown(ssl, 1);
		errno = saved ? saved : ECONNRESET;
		return -1;
	default:
		break;
	}
	SSL_set_quiet_shutdown(ssl, 1);
	if (getpeername(SSL_get_fd(ssl), (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET)
			inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, peer, sizeof(peer));
		else if (ss.ss_family == AF_INET6)
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, peer,
				  sizeof(peer));
		else
			snprintf(peer, sizeof(peer), "unix");
	}
	log_warn("TLS %s with %s failed%s: %s", op, peer,
		 SSL_is_init_finished(ssl) ? "" : " in the handshake", tls_reason(buf, sizeof(buf)));
	errno = EPROTO;
	return -1;
}

ssize_t conn_tls_recv(SSL *ssl, void *buf, size_t len)
{
	int n;

	ERR_clear_error();
	n = SSL_read(ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
	return n > 0 ? n : tls_failed(ssl, n, "read");
}

ssize_t conn_tls_send(SSL *ssl, const void *buf, size_t len)
{
	int n;

	/* Before the handshake is over there is nothing of ours to send: a
	 * connection that times out in it closes without a word. */
	if (!SSL_is_init_finished(ssl)) {
		errno = ENOTCONN;
		return -1;
	}
	ERR_clear_error();
	n = SSL_write(ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
	return n > 0 ? n : tls_failed(ssl, n, "write");
}
