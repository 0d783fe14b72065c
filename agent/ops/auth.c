/* SPDX-License-Identifier: Apache-2.0 */
#include "auth.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "secret.h"

static bool blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

int auth_token_load(const char *path, struct auth_token *t, bool *shared, char *err,
		    size_t errlen)
{
	/* room for the longest token, a line end and blanks around it */
	char buf[AUTH_TOKEN_MAX + 64];
	size_t len, b = 0, e;
	unsigned mode = 0;
	long n = secret_file(path, buf, sizeof(buf), &mode, err, errlen);

	*shared = (mode & (S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH)) != 0;
	if (n == -2)
		snprintf(err, errlen, "%s: longer than a token of %d bytes", path, AUTH_TOKEN_MAX);
	if (n < 0)
		return -1;
	len = (size_t)n;
	while (b < len && blank(buf[b]))
		b++;
	for (e = len; e > b && blank(buf[e - 1]); e--)
		;
	for (size_t i = b; i < e; i++) {
		if (buf[i] < 0x21 || buf[i] > 0x7e) {
			snprintf(err, errlen,
				 "%s: the token must be one word of printable ASCII (byte %zu is 0x%02x)",
				 path, i + 1, (unsigned char)buf[i]);
			return -1;
		}
	}
	if (e - b < AUTH_TOKEN_MIN || e - b > AUTH_TOKEN_MAX) {
		snprintf(err, errlen,
			 "%s: the token has %zu bytes; it needs %d to %d (openssl rand -hex 32 "
			 "makes one)",
			 path, e - b, AUTH_TOKEN_MIN, AUTH_TOKEN_MAX);
		return -1;
	}
	memcpy(t->tok, buf + b, e - b);
	t->tok[e - b] = '\0';
	t->len = e - b;
	return 0;
}

bool auth_bearer_ok(const struct auth_token *t, const char *authorization)
{
	const char *given;
	size_t glen;
	/* volatile: the loop must not stop at the first difference */
	volatile unsigned char diff;

	if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
		return false;
	for (given = authorization + 7; *given == ' ' || *given == '\t'; given++)
		;
	glen = strlen(given);
	diff = glen != t->len;
	for (size_t i = 0; i < t->len; i++)
		diff |= (unsigned char)t->tok[i] ^ (unsigned char)(i < glen ? given[i] : 0);
	return diff == 0;
}

bool auth_host_is_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (strcasecmp(host, "localhost") == 0)
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) != 1)
		return false;
	if (IN6_IS_ADDR_LOOPBACK(&a6))
		return true;
	return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}
