/* SPDX-License-Identifier: Apache-2.0 */
/* auth.h: who may use the admin endpoints (--admin-token-file).
 *
 * The token is a secret shared with the operators' tools: a request must
 * carry "Authorization: Bearer TOKEN". A browser cannot add that header to
 * a form it submits, nor to a cross-site request without a CORS preflight
 * that this server never grants, so a page a browser visits cannot reset a
 * client on the operator's behalf.
 *
 * Guarantees: auth_bearer_ok() takes a time that depends on the token's
 * length only, never on how much of a guess is right. */
#ifndef RL_AUTH_H
#define RL_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#define AUTH_TOKEN_MIN 16     /* bytes: shorter ones could be guessed */
#define AUTH_TOKEN_MAX 1024   /* bytes: it must fit in a request head */

struct auth_token {
	char tok[AUTH_TOKEN_MAX + 1];
	size_t len;
};

/* Reads the token from the file at path: its one line, without the line
 * end and surrounding blanks, of AUTH_TOKEN_MIN to AUTH_TOKEN_MAX printable
 * ASCII bytes with no blank inside. *shared is set when group or others
 * may read or write the file. Returns 0, or -1 with a message naming the
 * file in err[0..errlen). */
int auth_token_load(const char *path, struct auth_token *t, bool *shared, char *err,
		    size_t errlen);

/* Whether an Authorization header's value (NULL when the request has
 * none) is "Bearer " and t's token; the scheme in any case, as RFC 9110
 * wants. */
bool auth_bearer_ok(const struct auth_token *t, const char *authorization);

/* Whether a listen host, as written, can be reached from this machine
 * only: "localhost", an IPv4 address in 127.0.0.0/8, "::1" (also as
 * ::ffff:127.x.y.z). Names other than localhost are not resolved: they
 * count as reachable from outside. */
bool auth_host_is_loopback(const char *host);

#endif
