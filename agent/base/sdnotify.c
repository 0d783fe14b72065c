/* SPDX-License-Identifier: Apache-2.0 */
#include "sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"

int sdnotify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa;
	size_t plen;
	socklen_t salen;
	ssize_t n;
	int fd;

	if (!path || !*path)
		return 0;
	plen = strlen(path);
	/* a path, or a name in the abstract namespace: nothing else */
	if ((path[0] != '/' && path[0] != '@') || plen >= sizeof(sa.sun_path))
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, plen);
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen +
			    (path[0] == '/' ? 1 : 0));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	do
		n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
	while (n < 0 && errno == EINTR);
	close(fd);
	return n == (ssize_t)strlen(state) ? 0 : -1;
}

int sdnotify_ready(void)
{
	return sdnotify("READY=1\nSTATUS=serving");
}

int sdnotify_reloading(void)
{
	char state[96];

	snprintf(state, sizeof(state), "RELOADING=1\nSTATUS=reloading the rules\nMONOTONIC_USEC=%lld",
		 (long long)clock_now_us());
	return sdnotify(state);
}

int sdnotify_stopping(void)
{
	return sdnotify("STOPPING=1\nSTATUS=draining connections");
}
