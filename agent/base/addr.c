/* SPDX-License-Identifier: Apache-2.0 */
#include "addr.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int addr_parse(const char *s, unsigned flags, struct addr *out)
{
	const char *host = s, *colon, *port;
	size_t hlen, plen = 0;
	unsigned long v = 0;

	memset(out, 0, sizeof(*out));
	if (strncmp(s, "unix@", 5) == 0) {
		if (!(flags & (ADDR_UNIX | ADDR_UNIX_AT)) || !s[5] || strlen(s + 5) > ADDR_PATH_MAX)
			return -1;
		memcpy(out->path, s + 5, strlen(s + 5) + 1);
		return 0;
	}
	if (s[0] == '/') {
		if (!(flags & ADDR_UNIX) || strlen(s) > ADDR_PATH_MAX)
			return -1;
		memcpy(out->path, s, strlen(s) + 1);
		return 0;
	}
	if (s[0] == '[') {
		const char *rb = strchr(s, ']');

		if (!rb || rb[1] != ':')
			return -1;
		host = s + 1;
		hlen = (size_t)(rb - host);
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -1;
		hlen = (size_t)(colon - s);
	}
	if (hlen == 0 || hlen > ADDR_HOST_MAX)
		return -1;
	for (size_t i = 0; i < hlen; i++)
		if ((unsigned char)host[i] <= ' ' || host[i] == '/' || host[i] == 0x7f)
			return -1;
	port = colon + 1;
	while (port[plen] >= '0' && port[plen] <= '9' && plen < 6)
		v = v * 10 + (unsigned long)(port[plen++] - '0');
	if (plen == 0 || plen > 5 || port[plen] != '\0' || v > 65535 ||
	    (v == 0 && !(flags & ADDR_PORT0)))
		return -1;
	memcpy(out->host, host, hlen);
	out->host[hlen] = '\0';
	memcpy(out->port, port, plen + 1);
	return 0;
}

bool addr_equal(const struct addr *a, const struct addr *b)
{
	return strcmp(a->host, b->host) == 0 && strcmp(a->port, b->port) == 0 &&
	       strcmp(a->path, b->path) == 0;
}

const char *addr_format(const struct addr *a, char *buf, size_t cap)
{
	if (a->path[0])
		snprintf(buf, cap, "%s", a->path);
	else if (strchr(a->host, ':'))
		snprintf(buf, cap, "[%s]:%s", a->host, a->port);
	else
		snprintf(buf, cap, "%s:%s", a->host, a->port);
	return buf;
}

/* A socket file left by an earlier agent refuses connections: it goes.
 * Any other file, or a socket something answers on, stays (bind fails). */
static void unlink_stale(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd;

	if (stat(path, &st) != 0 || !S_ISSOCK(st.st_mode))
		return;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno == ECONNREFUSED)
		unlink(path);
	close(fd);
}

static int listen_unix(const struct addr *a, int backlog, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		snprintf(err, errlen, "cannot listen on unix@%s: %s", a->path, strerror(errno));
		return -1;
	}
	memcpy(sa.sun_path, a->path, strlen(a->path) + 1);
	unlink_stale(a->path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, backlog) < 0) {
		snprintf(err, errlen, "cannot listen on unix@%s: %s", a->path, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

int addr_listen(const struct addr *a, int backlog, char *err, size_t errlen)
{
	struct addrinfo hints, *res, *ai;
	int fd = -1, one = 1, rc, saved = 0;

	if (a->path[0])
		return listen_unix(a, backlog, err, errlen);

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(a->host, a->port, &hints, &res);
	if (rc != 0) {
		snprintf(err, errlen, "cannot resolve %s: %s", a->host, gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			    ai->ai_protocol);
		if (fd < 0) {
			saved = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, backlog) == 0)
			break;
		saved = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		char where[ADDR_HOST_MAX + 16];

		snprintf(err, errlen, "cannot listen on %s: %s", addr_format(a, where, sizeof(where)),
			 strerror(saved));
	}
	return fd;
}

unsigned addr_local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
		return 0;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return 0;
}
