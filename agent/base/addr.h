/* SPDX-License-Identifier: Apache-2.0 */
/* addr.h: network addresses as the command line and the rules file write
 * them, and the listening sockets the agent opens.
 *
 * One grammar everywhere: "HOST:PORT", "[V6]:PORT" and, where a caller
 * allows it, a Unix socket path ("/..."). The host is taken as written (a
 * name or a literal); nothing is resolved here. */
#ifndef RL_ADDR_H
#define RL_ADDR_H

#include <stdbool.h>
#include <stddef.h>

#define ADDR_HOST_MAX 255     /* bytes of a host, NUL excluded */
#define ADDR_PATH_MAX 107     /* bytes of a Unix socket path (sun_path) */

/* addr_parse() flags */
#define ADDR_UNIX 1u          /* accept a Unix socket path */
#define ADDR_PORT0 2u         /* accept port 0 (the kernel picks one) */
#define ADDR_UNIX_AT 4u       /* accept "unix@PATH", HAProxy's way to write a
                               * Unix socket (ADDR_UNIX accepts it too) */

struct addr {
	char host[ADDR_HOST_MAX + 1]; /* without brackets; "" for a Unix path */
	char port[6];                 /* decimal, no sign, no leading junk */
	char path[ADDR_PATH_MAX + 1]; /* the Unix socket path, or "" */
};

/* Parses s into *out. The host has 1 to ADDR_HOST_MAX bytes, none of them
 * a space, a control byte or '/'; the port is 1 to 5 digits within
 * 1..65535 (0..65535 with ADDR_PORT0). Returns 0, or -1 leaving *out
 * unspecified. */
int addr_parse(const char *s, unsigned flags, struct addr *out);

/* Same host (as written), port and path. */
bool addr_equal(const struct addr *a, const struct addr *b);

/* Writes "HOST:PORT" ("[V6]:PORT" for a host with a colon) or the path
 * into buf[0..cap), NUL-terminated, truncated to fit. Returns buf. */
const char *addr_format(const struct addr *a, char *buf, size_t cap);

/* Opens a non-blocking, close-on-exec listening socket on a: TCP on the
 * first of the host's addresses that binds, or a Unix socket at a->path
 * (a socket left there by an agent that is gone is replaced; any other
 * file is not). Returns the descriptor, or -1 with a reason in
 * err[0..errlen). */
int addr_listen(const struct addr *a, int backlog, char *err, size_t errlen);

/* The local port a socket is bound to (0 when unknown): with port 0 the
 * kernel chose it, and the log must say which. */
unsigned addr_local_port(int fd);

#endif
