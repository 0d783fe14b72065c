/* SPDX-License-Identifier: Apache-2.0 */
/* redis_transport_plain.c: a plain TCP or Unix stream to a Redis server
 * (see redis_transport.h). */
#include "redis_transport.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "alloc.h"
#include "redis_transport_tls.h"
#include "store_redis.h"

static int failed(struct redis_transport *t, const char *what, int err)
{
	snprintf(t->errstr, sizeof(t->errstr), "%s%s%s", what ? what : "", what ? ": " : "",
		 strerror(err));
	return REDIS_T_ERROR;
}

static int open_socket(struct redis_transport *t, int family)
{
	t->fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	return t->fd < 0 ? failed(t, "socket", errno) : 0;
}

static int start(struct redis_transport *t, const struct sockaddr *sa, socklen_t len)
{
	if (connect(t->fd, sa, len) == 0)
		return 0;
	if (errno == EINPROGRESS)
		return REDIS_T_WANT_WRITE;
	return failed(t, "connect", errno);
}

static int connect_unix(struct redis_transport *t, const char *path)
{
	struct sockaddr_un sun;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	if (open_socket(t, AF_UNIX) < 0)
		return REDIS_T_ERROR;
	return start(t, (const struct sockaddr *)&sun, sizeof(sun));
}

/* The first of the host's addresses that a connection starts to, IPv4
 * first, then IPv6 (a name such as localhost reaches a server listening on
 * 127.0.0.1 alone). The names are resolved here, blocking, as a connection
 * to Redis always was: a name in the configuration is looked up at each
 * connection. */
static int connect_family(struct redis_transport *t, const char *host, const char *port,
			  int family)
{
	struct addrinfo hints, *res, *ai;
	int rc = REDIS_T_ERROR, one = 1, gai;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = family;
	hints.ai_socktype = SOCK_STREAM;
	gai = getaddrinfo(host, port, &hints, &res);
	if (gai) {
		snprintf(t->errstr, sizeof(t->errstr), "%s", gai_strerror(gai));
		return REDIS_T_ERROR;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		if (open_socket(t, ai->ai_family) < 0)
			continue;
		setsockopt(t->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		rc = start(t, ai->ai_addr, ai->ai_addrlen);
		if (rc != REDIS_T_ERROR)
			break;
		close(t->fd);
		t->fd = -1;
	}
	freeaddrinfo(res);
	return rc;
}

static int connect_tcp(struct redis_transport *t, const char *host, const char *port)
{
	int rc = connect_family(t, host, port, AF_INET);

	return rc == REDIS_T_ERROR ? connect_family(t, host, port, AF_INET6) : rc;
}

static int plain_connect(struct redis_transport *t, const struct addr *a)
{
	return a->path[0] ? connect_unix(t, a->path) : connect_tcp(t, a->host, a->port);
}

static int plain_handshake(struct redis_transport *t)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(t->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err == EINPROGRESS)
		return REDIS_T_WANT_WRITE;
	return err ? failed(t, NULL, err) : 0;
}

static ssize_t plain_read(struct redis_transport *t, void *buf, size_t len)
{
	ssize_t n = read(t->fd, buf, len);

	if (n >= 0)
		return n;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return REDIS_T_WANT_READ;
	return failed(t, NULL, errno);
}

static ssize_t plain_write(struct redis_transport *t, const void *buf, size_t len)
{
	ssize_t n = send(t->fd, buf, len, MSG_NOSIGNAL);

	if (n >= 0)
		return n;
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return REDIS_T_WANT_WRITE;
	return failed(t, NULL, errno);
}

static void plain_close(struct redis_transport *t)
{
	if (t->fd >= 0)
		close(t->fd);
	xfree(t);
}

const struct redis_transport_ops redis_transport_plain_ops = {
	.connect = plain_connect,
	.handshake = plain_handshake,
	.read = plain_read,
	.write = plain_write,
	.close = plain_close,
};

struct redis_transport *redis_transport_new(const struct redis_config *cfg)
{
	struct redis_transport *t;

	if (cfg && cfg->tls_ctx)
		return redis_tls_transport_new(cfg->tls_ctx);
	if (!(t = xcalloc(1, sizeof(*t))))
		return NULL;
	t->ops = &redis_transport_plain_ops;
	t->fd = -1;
	return t;
}
