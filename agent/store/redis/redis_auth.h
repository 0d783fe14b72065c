/* SPDX-License-Identifier: Apache-2.0 */
/* redis_auth.h: the passwords a Redis store authenticates with, which a
 * reload may change while the workers connect.
 *
 * A store holds them behind a lock (struct redis_secrets, in its
 * configuration); every new connection (a worker's node, the sentinels,
 * CLUSTER SLOTS, the overrides' reader, the admin's) takes a copy when
 * it sends AUTH, so that a password file read again at SIGHUP is used by
 * the next connections, and the connections made stay as they are. */
#ifndef RL_REDIS_AUTH_H
#define RL_REDIS_AUTH_H

#include <stddef.h>

struct redis_config;
struct redis_secrets;

/* The passwords of cfg, held for a store. NULL when out of memory. */
struct redis_secrets *redis_secrets_new(const struct redis_config *cfg);
void redis_secrets_free(struct redis_secrets *s);

/* New passwords for the next connections (either may be NULL: kept). */
void redis_secrets_set(struct redis_secrets *s, const char *password,
		       const char *sentinel_password);

/* The password in force for cfg's servers, and for its sentinels, into
 * out[0..cap): from its secrets when it has some, else its own fields. */
void redis_auth_password(const struct redis_config *cfg, char *out, size_t cap);
void redis_auth_sentinel_password(const struct redis_config *cfg, char *out, size_t cap);

/* The AUTH command for cfg's servers into argv (at most 3 words), with
 * the password in force. Returns its argc, 0 without a password. */
int redis_node_auth_argv(const struct redis_config *cfg, const char *argv[3], size_t argvlen[3]);

#endif
