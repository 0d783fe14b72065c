/* SPDX-License-Identifier: Apache-2.0 */
/* redis_transport_tls.h: TLS to Redis servers, on OpenSSL.
 *
 * One context (struct redis_tls) per configuration holds what every
 * connection shares: the CA to verify against (or the system's store), the
 * client certificate and key, the server name, whether to verify at all.
 * It is made at start, where an unreadable or mismatched file stops the
 * agent, and made again from the same files at each reload: connections
 * opened after it use the new files, those open keep theirs. Any thread
 * may open a connection while the main thread reloads.
 *
 * A TLS transport is the plain one (redis_transport_plain.c) with a TLS
 * session over its descriptor: a non-blocking handshake after the TCP
 * connect, then records both ways. A failure says REDIS_ERROR_TLS and
 * OpenSSL's reason in the transport's errstr. */
#ifndef RL_REDIS_TRANSPORT_TLS_H
#define RL_REDIS_TRANSPORT_TLS_H

#include <stddef.h>

#include "redis_transport.h"
#include "store_redis.h"

/* The plain transport's operations, which TLS runs under its session. */
extern const struct redis_transport_ops redis_transport_plain_ops;

/* A context from s (s->on), its files read now. NULL with err naming the
 * file at fault. */
struct redis_tls *redis_tls_new(const struct redis_tls_settings *s, char *err, size_t errlen);

/* Reads s's files again into a new context for the connections to come.
 * Returns 0, or -1 with err set (the context in force stays). */
int redis_tls_reload(struct redis_tls *tls, const struct redis_tls_settings *s, char *err,
		     size_t errlen);

void redis_tls_free(struct redis_tls *tls);

/* TLS handshakes done to Redis servers by the whole process, and those of
 * them that resumed a session kept from an earlier connection to the same
 * server (a reload forgets the sessions: its files are for every
 * connection to come). */
void redis_tls_counts(unsigned long long *handshakes, unsigned long long *resumed);

/* A new, unconnected TLS transport; NULL when out of memory. */
struct redis_transport *redis_tls_transport_new(struct redis_tls *tls);

#endif
