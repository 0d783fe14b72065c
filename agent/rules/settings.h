/* SPDX-License-Identifier: Apache-2.0 */
/* settings.h: the process settings a rules file may carry (listen
 * address, worker threads, the store, what an answer carries), apart from
 * the rules themselves.
 *
 * main() applies them once at start, the command line taking precedence; a
 * reload reads them again only to warn that they changed (settings_equal),
 * but for `answer`, which each answer reads from the rules in force.
 * They are the root keys settings_keys of the rules file, read with the
 * same strictness as the rest of it (see yaml_strict.h): a wrong type, a
 * value out of range or an address that does not parse rejects the file
 * with "FILE:LINE:COL: key: problem".
 *
 * `listen_tls` names the files of SPOP over TLS (--listen-tls-*).
 *
 * Addresses are parsed here, once, by addr_parse(): `listen` is HOST:PORT
 * or [V6]:PORT with a port from 1 to 65535; `store.address` may also be a
 * Unix socket path. A password written "${NAME}" is taken from the
 * environment variable NAME while the file is read, so that the secret
 * stays out of the file.
 */
#ifndef RL_SETTINGS_H
#define RL_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

#include "addr.h"

enum settings_store {
	SETTINGS_STORE_MEMORY = 0,
	SETTINGS_STORE_REDIS = 1,     /* one server: address */
	SETTINGS_STORE_SENTINEL = 2,  /* sentinels + master */
	SETTINGS_STORE_CLUSTER = 3,   /* nodes: seeds of a Redis Cluster */
	SETTINGS_STORE_SHARDS = 4,    /* nodes: independent servers */
};

#define SETTINGS_NODES_MAX 32 /* store.nodes or store.sentinels */

/* The variables of an answer (txn.<prefix>.<name>), one bit each, in the
 * order an answer writes them; settings_answer_names[i] is bit i's name. */
enum {
	SETTINGS_VAR_STATUS = 1u << 0,
	SETTINGS_VAR_RETRY_AFTER = 1u << 1,
	SETTINGS_VAR_LIMIT = 1u << 2,
	SETTINGS_VAR_REMAINING = 1u << 3,
	SETTINGS_VAR_RESET = 1u << 4,
	SETTINGS_VAR_PRIORITY = 1u << 5,
	SETTINGS_VAR_REASON = 1u << 6,
	SETTINGS_VAR_RULE = 1u << 7,
	SETTINGS_VAR_POLICY = 1u << 8,
	SETTINGS_VAR_RATELIMIT = 1u << 9,
	SETTINGS_VAR_PLACE = 1u << 10,
	SETTINGS_VAR_SHADOW = 1u << 11,
	SETTINGS_VAR_DEGRADED = 1u << 12,
	SETTINGS_VAR_ALL = (1u << 13) - 1,
	SETTINGS_NVARS = 13,
};
extern const char *const settings_answer_names[SETTINGS_NVARS];

/* The `answer` setting: what an ACK carries.
 *   SETTINGS_ANSWER_FULL (0)   every variable (`answer: full`, 0.2's answer)
 *   SETTINGS_ANSWER_READ | V   the default (`answer: default`): what
 *                              HAProxy's rules read for this answer (see
 *                              decide.c), with priority when V has it
 *   SETTINGS_ANSWER_LIST | V   exactly the variables of V (a list)
 * A variable with no value (remaining unknown, no policy) is never sent,
 * and a place held is always sent (the release needs it back). */
#define SETTINGS_ANSWER_FULL 0u
#define SETTINGS_ANSWER_READ (1u << 14)
#define SETTINGS_ANSWER_LIST (1u << 15)

/* The has_* flags say which settings the file set; the others keep the
 * defaults of settings_defaults(). Strings are NUL-terminated and
 * zero-padded (as are the fields of a struct addr), so two settings
 * compare with settings_equal. */
struct settings {
	bool has_listen;
	struct addr listen;      /* a host and port, or unix@PATH */
	bool has_threads;
	int threads;             /* 1..256; 0 when not set */
	bool has_store;
	enum settings_store store; /* memory unless the file says otherwise */
	bool has_address;
	struct addr address;     /* host and port, or path */
	bool has_nodes;
	struct addr nodes[SETTINGS_NODES_MAX]; /* sentinels, seeds or shards */
	size_t nnodes;
	bool has_master;
	char master[128];        /* Sentinel's name of the master */
	bool has_sentinel_password;
	char sentinel_password[256]; /* ${NAME} already replaced */
	bool has_hash_key_file;
	char hash_key_file[256]; /* the secret client keys are hashed under */
	bool has_user;
	char user[128];
	bool has_password;
	char password[256];      /* ${NAME} already replaced */
	/* files holding a password, "" when not set: read by main() at
	 * start, and again at each reload (settings_equal compares the names,
	 * main the contents) */
	char password_file[256];
	char sentinel_password_file[256];
	/* store.tls: true, false or {ca, cert, key, server_name, verify}
	 * (on, each key optional: file names, "" when not set, read by
	 * main() at start and at each reload); store.sentinel_tls */
	bool has_tls;
	bool tls;
	char tls_ca[256];
	char tls_cert[256];
	char tls_key[256];
	char tls_server_name[256];
	bool tls_verify;         /* true unless set false */
	bool has_sentinel_tls;
	bool sentinel_tls;       /* true unless set false: the sentinels as the servers */
	bool has_timeout;
	int timeout_ms;          /* 1..60000 */
	bool has_agents;
	int agents;              /* 1..10000, default 1 */
	/* `answer`: SETTINGS_ANSWER_READ unless set. Unlike the others, a
	 * reload applies it (settings_equal leaves it out). */
	bool has_answer;
	unsigned answer;
	/* `listen_tls: {cert, key, ca}`: SPOP over TLS, "" when not set (cert
	 * and key go together); the files are main()'s to read */
	char listen_tls_cert[256];
	char listen_tls_key[256];
	char listen_tls_ca[256];
};

/* Listen on 127.0.0.1:12345, in-memory store, Redis (when chosen) at
 * 127.0.0.1:6379 with a 20 ms timeout, one agent, the default answer;
 * nothing set. */
void settings_defaults(struct settings *s);

bool settings_equal(const struct settings *a, const struct settings *b);

/* The root keys that are settings, in the order messages list them. */
#define SETTINGS_NKEYS 5
extern const char *const settings_keys[SETTINGS_NKEYS];

struct ys;
struct yaml_node_s; /* libyaml's yaml_node_t */

/* Reads the settings into *s (which holds the defaults) from vals[i], the
 * value of root key settings_keys[i] or NULL when absent, as
 * ys_map_fields() returns them. Returns 0, or -1 with the message in y. */
int settings_parse(struct ys *y, struct yaml_node_s *const vals[SETTINGS_NKEYS],
		   struct settings *s);

#endif
