/* SPDX-License-Identifier: Apache-2.0 */
/* redis_transport_tls.c: TLS to a Redis server on OpenSSL (see
 * redis_transport_tls.h). */
#include "redis_transport_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"

/* The sessions kept to resume (a TLS ticket or session id per server):
 * a reconnect to the same server, under the same name, skips the key
 * exchange and the certificate checks its first handshake made. */
#define TLS_SESSIONS 64
#define TLS_SESSION_KEY (ADDR_HOST_MAX + ADDR_HOST_MAX + 16)

struct tls_session {
	char key[TLS_SESSION_KEY]; /* "name|host:port"; "" when free */
	SSL_SESSION *s;
};

struct redis_tls {
	pthread_mutex_t lock;   /* ctx and the sessions are used by every worker
	                         * and swapped by reloads */
	SSL_CTX *ctx;
	unsigned gen;           /* reloads: a session of an older context is not kept */
	unsigned next;          /* the slot the next new server's session takes */
	struct tls_session sessions[TLS_SESSIONS];
	char server_name[256];  /* "": the host of each address */
	bool verify;
};

/* Handshakes done, and those of them that resumed a session: the whole
 * process (redis_tls_counts). */
static atomic_ullong tls_handshakes, tls_resumed;

struct tls_transport {
	struct redis_transport base; /* first: the plain transport frees it whole */
	struct redis_tls *tls;       /* where the session's context comes from */
	SSL *ssl;                    /* NULL until connect(); none on a Unix socket */
	char name[ADDR_HOST_MAX + 1]; /* the name verified, for the messages */
	char key[TLS_SESSION_KEY];   /* the server's, in tls->sessions */
	unsigned gen;                /* tls->gen when the session was made */
	bool tcp_up;                 /* the TCP connect is done */
	bool up;                     /* the TLS handshake is done */
	bool broken;                 /* a fatal error: no close_notify */
};

/* ---- the context ------------------------------------------------------------- */

static int ctx_fail(char *err, size_t errlen, const char *what, const char *file)
{
	unsigned long e = ERR_peek_last_error();
	const char *why = e ? ERR_reason_error_string(e) : NULL;

	snprintf(err, errlen, "Redis TLS %s %s: %s", what, file, why ? why : "unusable");
	ERR_clear_error();
	return -1;
}

/* An unreadable file named as such, before OpenSSL says something vaguer. */
static int readable(const char *what, const char *file, char *err, size_t errlen)
{
	FILE *f = fopen(file, "r");

	if (!f) {
		snprintf(err, errlen, "Redis TLS %s %s: %s", what, file, strerror(errno));
		return -1;
	}
	fclose(f);
	return 0;
}

static int load_files(SSL_CTX *ctx, const struct redis_tls_settings *s, char *err, size_t errlen)
{
	if (!s->no_verify) {
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
		if (!s->ca[0]) {
			if (SSL_CTX_set_default_verify_paths(ctx) != 1)
				return ctx_fail(err, errlen, "CA store", "of the system");
		} else if (readable("CA file", s->ca, err, errlen) < 0) {
			return -1;
		} else if (SSL_CTX_load_verify_locations(ctx, s->ca, NULL) != 1) {
			return ctx_fail(err, errlen, "CA file", s->ca);
		}
	}
	if (!s->cert[0] && !s->key[0])
		return 0;
	if (!s->cert[0] || !s->key[0]) {
		snprintf(err, errlen, "Redis TLS: a client %s needs its %s too",
			 s->cert[0] ? "certificate" : "key", s->cert[0] ? "key" : "certificate");
		return -1;
	}
	if (readable("certificate file", s->cert, err, errlen) < 0 ||
	    readable("key file", s->key, err, errlen) < 0)
		return -1;
	/* the key first: a certificate that does not match it then drops it,
	 * and the check below names both files */
	if (SSL_CTX_use_PrivateKey_file(ctx, s->key, SSL_FILETYPE_PEM) != 1)
		return ctx_fail(err, errlen, "key file", s->key);
	if (SSL_CTX_use_certificate_chain_file(ctx, s->cert) != 1)
		return ctx_fail(err, errlen, "certificate file", s->cert);
	if (SSL_CTX_check_private_key(ctx) != 1) {
		ERR_clear_error();
		snprintf(err, errlen, "Redis TLS key file %s: does not match the certificate %s",
			 s->key, s->cert);
		return -1;
	}
	return 0;
}

/* The slot holding key's session, or NULL. Under tls->lock. */
static struct tls_session *session_find(struct redis_tls *tls, const char *key)
{
	for (size_t i = 0; i < TLS_SESSIONS; i++)
		if (tls->sessions[i].s && strcmp(tls->sessions[i].key, key) == 0)
			return &tls->sessions[i];
	return NULL;
}

static void session_drop(struct tls_session *ts)
{
	SSL_SESSION_free(ts->s);
	ts->s = NULL;
	ts->key[0] = '\0';
}

/* OpenSSL has a session to resume (a TLS 1.3 ticket comes after the
 * handshake, while reading): kept for the transport's server, in place of
 * the one it had, unless a reload came since the connection began.
 * Returns 1: the reference is ours. */
static int on_new_session(SSL *ssl, SSL_SESSION *s)
{
	struct tls_transport *tt = SSL_get_app_data(ssl);
	struct redis_tls *tls;
	struct tls_session *ts;

	if (!tt || !tt->key[0] || !SSL_SESSION_is_resumable(s))
		return 0;
	tls = tt->tls;
	pthread_mutex_lock(&tls->lock);
	if (tt->gen != tls->gen) {
		pthread_mutex_unlock(&tls->lock);
		return 0;
	}
	ts = session_find(tls, tt->key);
	if (!ts) {
		/* a new server: the oldest slot goes */
		ts = &tls->sessions[tls->next++ % TLS_SESSIONS];
		if (ts->s)
			session_drop(ts);
		snprintf(ts->key, sizeof(ts->key), "%s", tt->key);
	} else {
		SSL_SESSION_free(ts->s);
	}
	ts->s = s;
	pthread_mutex_unlock(&tls->lock);
	return 1;
}

/* Forgets every session kept. Under tls->lock. */
static void sessions_drop(struct redis_tls *tls)
{
	for (size_t i = 0; i < TLS_SESSIONS; i++)
		if (tls->sessions[i].s)
			session_drop(&tls->sessions[i]);
}

static SSL_CTX *make_ctx(const struct redis_tls_settings *s, char *err, size_t errlen)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());

	if (!ctx) {
		ctx_fail(err, errlen, "context", "(OpenSSL)");
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	/* a write left half done is finished from the connection's buffer,
	 * which may have moved (it grows as commands are appended) */
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
	/* a server that closes without close_notify has closed, as in plain */
	SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
	/* sessions kept by server (on_new_session), not in OpenSSL's cache */
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT |
					    SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(ctx, on_new_session);
	if (load_files(ctx, s, err, errlen) < 0) {
		SSL_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

struct redis_tls *redis_tls_new(const struct redis_tls_settings *s, char *err, size_t errlen)
{
	struct redis_tls *tls = xcalloc(1, sizeof(*tls));

	if (!tls) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (!(tls->ctx = make_ctx(s, err, errlen))) {
		xfree(tls);
		return NULL;
	}
	pthread_mutex_init(&tls->lock, NULL);
	snprintf(tls->server_name, sizeof(tls->server_name), "%s", s->server_name);
	tls->verify = !s->no_verify;
	return tls;
}

int redis_tls_reload(struct redis_tls *tls, const struct redis_tls_settings *s, char *err,
		     size_t errlen)
{
	SSL_CTX *ctx = make_ctx(s, err, errlen), *old;

	if (!ctx)
		return -1;
	pthread_mutex_lock(&tls->lock);
	old = tls->ctx;
	tls->ctx = ctx;
	/* a renewed client certificate or CA is for every connection to come:
	 * none resumes a session of the files before */
	tls->gen++;
	sessions_drop(tls);
	pthread_mutex_unlock(&tls->lock);
	SSL_CTX_free(old); /* the sessions made from it keep it until they end */
	return 0;
}

void redis_tls_free(struct redis_tls *tls)
{
	if (!tls)
		return;
	sessions_drop(tls);
	SSL_CTX_free(tls->ctx);
	pthread_mutex_destroy(&tls->lock);
	xfree(tls);
}

/* ---- failures --------------------------------------------------------------- */

/* OpenSSL's reason for the failure of call `r` into t->errstr: the
 * verification's when it failed, else the error queue's. */
static void describe(struct tls_transport *tt, int r, int sslerr)
{
	struct redis_transport *t = &tt->base;
	long v = tt->ssl ? SSL_get_verify_result(tt->ssl) : X509_V_OK;
	unsigned long e = ERR_peek_last_error();
	const char *why = e ? ERR_reason_error_string(e) : NULL;
	bool mismatch = v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH;

	if (v != X509_V_OK && !tt->up)
		snprintf(t->errstr, sizeof(t->errstr), "TLS: certificate verify failed: %s%s%.48s%s",
			 X509_verify_cert_error_string(v), mismatch ? " (" : "",
			 mismatch ? tt->name : "", mismatch ? ")" : "");
	else if (why)
		snprintf(t->errstr, sizeof(t->errstr), "TLS: %s", why);
	else if (sslerr == SSL_ERROR_SYSCALL && r < 0 && errno)
		snprintf(t->errstr, sizeof(t->errstr), "TLS: %s", strerror(errno));
	else
		snprintf(t->errstr, sizeof(t->errstr), "TLS: the server closed the connection%s",
			 tt->up ? "" : " during the handshake");
	ERR_clear_error();
}

/* What a failed SSL call `r` means: REDIS_T_WANT_*, 0 (closed cleanly,
 * for a read) or REDIS_T_ERROR with the reason. */
static int ssl_result(struct tls_transport *tt, int r)
{
	int e = SSL_get_error(tt->ssl, r);

	switch (e) {
	case SSL_ERROR_WANT_READ:
		return REDIS_T_WANT_READ;
	case SSL_ERROR_WANT_WRITE:
		return REDIS_T_WANT_WRITE;
	case SSL_ERROR_ZERO_RETURN:
		if (tt->up)
			return 0;
		break;
	case SSL_ERROR_SYSCALL:
		if (tt->up && !ERR_peek_error() && r == 0)
			return 0; /* EOF without close_notify */
		break;
	default:
		break;
	}
	tt->broken = true;
	tt->base.errkind = REDIS_ERROR_TLS;
	describe(tt, r, e);
	return REDIS_T_ERROR;
}

/* ---- the transport ------------------------------------------------------------ */

static bool is_ip(const char *s)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

/* The session over t->fd: SNI and the name to verify, and the session
 * last made with the same server under the same name, to resume. */
static int new_session(struct tls_transport *tt, struct redis_tls *tls, const struct addr *a)
{
	struct redis_transport *t = &tt->base;
	struct tls_session *ts;
	bool ip;

	snprintf(tt->name, sizeof(tt->name), "%s", tls->server_name[0] ? tls->server_name : a->host);
	snprintf(tt->key, sizeof(tt->key), "%s|%s:%s", tt->name, a->host, a->port);
	ip = is_ip(tt->name);
	pthread_mutex_lock(&tls->lock);
	tt->ssl = SSL_new(tls->ctx); /* holds the context as long as it lives */
	tt->gen = tls->gen;
	if (tt->ssl && (ts = session_find(tls, tt->key)) && SSL_set_session(tt->ssl, ts->s) != 1)
		ERR_clear_error(); /* a full handshake then */
	pthread_mutex_unlock(&tls->lock);
	if (!tt->ssl || SSL_set_app_data(tt->ssl, tt) != 1 || SSL_set_fd(tt->ssl, t->fd) != 1 ||
	    /* SNI carries names only (RFC 6066) */
	    (!ip && SSL_set_tlsext_host_name(tt->ssl, tt->name) != 1)) {
		snprintf(t->errstr, sizeof(t->errstr), "TLS: cannot make a session");
		ERR_clear_error();
		return REDIS_T_ERROR;
	}
	if (tls->verify) {
		X509_VERIFY_PARAM *p = SSL_get0_param(tt->ssl);
		int ok;

		if (ip) {
			ok = X509_VERIFY_PARAM_set1_ip_asc(p, tt->name);
		} else {
			X509_VERIFY_PARAM_set_hostflags(p, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
			ok = SSL_set1_host(tt->ssl, tt->name);
		}
		if (ok != 1) {
			snprintf(t->errstr, sizeof(t->errstr), "TLS: cannot verify the name %.64s",
				 tt->name);
			ERR_clear_error();
			return REDIS_T_ERROR;
		}
	}
	return 0;
}

static int tls_connect(struct redis_transport *t, const struct addr *a)
{
	struct tls_transport *tt = (struct tls_transport *)t;
	int rc = redis_transport_plain_ops.connect(t, a);

	if (rc == REDIS_T_ERROR || t->fd < 0)
		return rc;
	if (a->path[0]) {
		/* a Unix socket is local, and Redis serves it plain */
		tt->up = true;
		return rc;
	}
	if (new_session(tt, tt->tls, a) < 0)
		return REDIS_T_ERROR;
	/* the handshake starts on the first writable turn */
	return REDIS_T_WANT_WRITE;
}

/* The session kept for tt's server, dropped after a failed handshake (a
 * server restarted with other keys refuses it, or a failure unrelated to
 * it: a full handshake next time either way). */
static void forget(struct tls_transport *tt)
{
	struct redis_tls *tls = tt->tls;
	struct tls_session *ts;

	pthread_mutex_lock(&tls->lock);
	if ((ts = session_find(tls, tt->key)))
		session_drop(ts);
	pthread_mutex_unlock(&tls->lock);
}

static int tls_handshake(struct redis_transport *t)
{
	struct tls_transport *tt = (struct tls_transport *)t;
	int r;

	if (!tt->tcp_up) {
		r = redis_transport_plain_ops.handshake(t);
		if (r != 0)
			return r;
		tt->tcp_up = true;
	}
	if (!tt->ssl || tt->up)
		return 0;
	ERR_clear_error();
	r = SSL_connect(tt->ssl);
	if (r == 1) {
		tt->up = true;
		atomic_fetch_add_explicit(&tls_handshakes, 1, memory_order_relaxed);
		if (SSL_session_reused(tt->ssl))
			atomic_fetch_add_explicit(&tls_resumed, 1, memory_order_relaxed);
		return 0;
	}
	r = ssl_result(tt, r);
	if (r == REDIS_T_ERROR)
		forget(tt); /* the next attempt starts afresh */
	return r;
}

/* Reads until len bytes or nothing more: a record OpenSSL has taken from
 * the socket wakes no watcher, so none is left behind unless buf is full
 * (and then the caller reads again). */
static ssize_t tls_read(struct redis_transport *t, void *buf, size_t len)
{
	struct tls_transport *tt = (struct tls_transport *)t;
	size_t got = 0;

	if (!tt->ssl)
		return redis_transport_plain_ops.read(t, buf, len);
	while (got < len) {
		size_t want = len - got;
		int n;

		ERR_clear_error();
		n = SSL_read(tt->ssl, (char *)buf + got, want > INT_MAX ? INT_MAX : (int)want);
		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		if (got)
			break; /* what stopped it comes again at the next call */
		return ssl_result(tt, n);
	}
	return (ssize_t)got;
}

static ssize_t tls_write(struct redis_transport *t, const void *buf, size_t len)
{
	struct tls_transport *tt = (struct tls_transport *)t;
	int n;

	if (!tt->ssl)
		return redis_transport_plain_ops.write(t, buf, len);
	ERR_clear_error();
	n = SSL_write(tt->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
	if (n > 0)
		return n;
	n = ssl_result(tt, n);
	if (n == 0) {
		snprintf(t->errstr, sizeof(t->errstr), "TLS: the server closed the connection");
		return REDIS_T_ERROR;
	}
	return n;
}

static void tls_close(struct redis_transport *t)
{
	struct tls_transport *tt = (struct tls_transport *)t;

	if (tt->ssl) {
		if (tt->up && !tt->broken)
			SSL_shutdown(tt->ssl); /* close_notify, once, not waited for */
		SSL_free(tt->ssl);
		ERR_clear_error();
	}
	redis_transport_plain_ops.close(t);
}

static const struct redis_transport_ops tls_ops = {
	.connect = tls_connect,
	.handshake = tls_handshake,
	.read = tls_read,
	.write = tls_write,
	.close = tls_close,
};

struct redis_transport *redis_tls_transport_new(struct redis_tls *tls)
{
	struct tls_transport *tt = xcalloc(1, sizeof(*tt));

	if (!tt)
		return NULL;
	tt->base.ops = &tls_ops;
	tt->base.fd = -1;
	tt->tls = tls;
	return &tt->base;
}

void redis_tls_counts(unsigned long long *handshakes, unsigned long long *resumed)
{
	*handshakes = atomic_load_explicit(&tls_handshakes, memory_order_relaxed);
	*resumed = atomic_load_explicit(&tls_resumed, memory_order_relaxed);
}
