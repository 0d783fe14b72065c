/* SPDX-License-Identifier: Apache-2.0 */
/* settings.c: the process settings of a rules file (see settings.h). */
#include "settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limit.h"
#include "yaml_strict.h"

const char *const settings_keys[SETTINGS_NKEYS] = {"listen", "threads", "store", "answer",
							      "listen_tls"};

const char *const settings_answer_names[SETTINGS_NVARS] = {
	"status", "retry_after", "limit", "remaining", "reset", "priority", "reason",
	"rule", "policy", "ratelimit", "place", "shadow", "degraded",
};

void settings_defaults(struct settings *s)
{
	memset(s, 0, sizeof(*s));
	addr_parse("127.0.0.1:12345", 0, &s->listen);
	s->threads = 0;
	s->store = SETTINGS_STORE_MEMORY;
	addr_parse("127.0.0.1:6379", 0, &s->address);
	s->timeout_ms = 20;
	s->agents = 1;
	s->answer = SETTINGS_ANSWER_READ;
	s->tls_verify = true;
	s->sentinel_tls = true;
}

static bool nodes_equal(const struct settings *a, const struct settings *b)
{
	if (a->has_nodes != b->has_nodes || a->nnodes != b->nnodes)
		return false;
	for (size_t i = 0; i < a->nnodes; i++)
		if (!addr_equal(&a->nodes[i], &b->nodes[i]))
			return false;
	return true;
}

/* The names of the TLS files, not their contents (read at each reload). */
static bool tls_equal(const struct settings *a, const struct settings *b)
{
	return a->has_tls == b->has_tls && a->tls == b->tls &&
	       strcmp(a->tls_ca, b->tls_ca) == 0 && strcmp(a->tls_cert, b->tls_cert) == 0 &&
	       strcmp(a->tls_key, b->tls_key) == 0 &&
	       strcmp(a->tls_server_name, b->tls_server_name) == 0 &&
	       a->tls_verify == b->tls_verify && a->has_sentinel_tls == b->has_sentinel_tls &&
	       a->sentinel_tls == b->sentinel_tls;
}

bool settings_equal(const struct settings *a, const struct settings *b)
{
	return a->has_listen == b->has_listen && addr_equal(&a->listen, &b->listen) &&
	       a->has_threads == b->has_threads && a->threads == b->threads &&
	       a->has_store == b->has_store && a->store == b->store &&
	       a->has_address == b->has_address && addr_equal(&a->address, &b->address) &&
	       a->has_user == b->has_user && strcmp(a->user, b->user) == 0 &&
	       a->has_password == b->has_password && strcmp(a->password, b->password) == 0 &&
	       a->has_timeout == b->has_timeout && a->timeout_ms == b->timeout_ms &&
	       a->has_agents == b->has_agents && a->agents == b->agents &&
	       nodes_equal(a, b) && a->has_master == b->has_master &&
	       strcmp(a->master, b->master) == 0 &&
	       a->has_hash_key_file == b->has_hash_key_file &&
	       strcmp(a->hash_key_file, b->hash_key_file) == 0 &&
	       a->has_sentinel_password == b->has_sentinel_password &&
	       strcmp(a->sentinel_password, b->sentinel_password) == 0 &&
	       strcmp(a->password_file, b->password_file) == 0 &&
	       strcmp(a->sentinel_password_file, b->sentinel_password_file) == 0 &&
	       strcmp(a->listen_tls_cert, b->listen_tls_cert) == 0 &&
	       strcmp(a->listen_tls_key, b->listen_tls_key) == 0 &&
	       strcmp(a->listen_tls_ca, b->listen_tls_ca) == 0 &&
	       tls_equal(a, b);
}

/* An address as addr_parse() reads it with `flags`; `expected` says what
 * the message asks for. */
static int get_addr(struct ys *y, yaml_node_t *n, const char *where, unsigned flags,
		    const char *expected, struct addr *out)
{
	const char *s;
	size_t len;
	char q[YS_PATH_MAX];

	if (ys_text(y, n, where, &s, &len) < 0)
		return -1;
	if (addr_parse(s, flags, out) < 0)
		return ys_fail(y, n->start_mark, where, "expected %s, got %s", expected,
			       ys_quote(q, sizeof(q), s, len));
	return 0;
}

/* A byte of an environment variable's name. */
static bool env_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '_';
}

/* A password into out[0..cap), "${NAME}" standing for the value of
 * environment variable NAME (only a whole "${NAME}": "x${NAME}" is taken as
 * written). */
static int get_password(struct ys *y, yaml_node_t *n, const char *where, char *out, size_t cap)
{
	const char *p;
	size_t len;

	if (ys_text(y, n, where, &p, &len) < 0)
		return -1;
	if (len > 3 && p[0] == '$' && p[1] == '{' && p[len - 1] == '}') {
		char var[128];
		const char *val;
		size_t vlen = len - 3;

		if (vlen >= sizeof(var))
			return ys_fail(y, n->start_mark, where,
				       "environment variable name longer than %zu bytes",
				       sizeof(var) - 1);
		memcpy(var, p + 2, vlen);
		var[vlen] = '\0';
		for (size_t i = 0; i < vlen; i++)
			if (!env_char(var[i]))
				return ys_fail(y, n->start_mark, where,
					       "\"${...}\" must name an environment variable (A-Z a-z 0-9 _)");
		val = getenv(var);
		if (!val)
			return ys_fail(y, n->start_mark, where, "environment variable %s is not set",
				       var);
		if (!*val)
			return ys_fail(y, n->start_mark, where, "environment variable %s is empty",
				       var);
		p = val;
		len = strlen(val);
	}
	if (len >= cap)
		return ys_fail(y, n->start_mark, where, "longer than %zu bytes", cap - 1);
	memcpy(out, p, len);
	out[len] = '\0';
	return 0;
}

/* One address of store.nodes or store.sentinels, distinct from the others. */
static int node_item(struct ys *y, yaml_node_t *n, const char *where, size_t i, void *arg)
{
	struct settings *s = arg;

	if (get_addr(y, n, where, 0, "HOST:PORT", &s->nodes[i]) < 0)
		return -1;
	for (size_t k = 0; k < i; k++)
		if (addr_equal(&s->nodes[k], &s->nodes[i]))
			return ys_fail(y, n->start_mark, where, "listed twice");
	s->nnodes = i + 1;
	return 0;
}

/* Keys that would have no effect are errors: an operator who wrote an
 * address expects Redis to be used. k[1..n): the keys given (NULL: not),
 * `allowed` a bit per key of those the store type takes. */
static int keys_apply(struct ys *y, yaml_node_t **k, const char *const *keys, int n,
		      unsigned allowed, int type, const char *type_name)
{
	for (int i = 1; i < n; i++) {
		char where[YS_PATH_MAX];

		if (!k[i] || (allowed & 1u << i))
			continue;
		ys_path_key(where, "store", keys[i]);
		if (type == 0)
			return ys_fail(y, k[i]->start_mark, where,
				       "applies to a Redis store only (add type: redis, sentinel, cluster or shards)");
		return ys_fail(y, k[i]->start_mark, where, "does not apply to type %s", type_name);
	}
	return 0;
}

/* store.NAME_file: the file that holds the password NAME (read by main
 * at start and at every reload), into out[256]; NAME or NAME_file, not
 * both. Nothing when key is NULL. */
static int password_file(struct ys *y, const char *name, yaml_node_t *plain, yaml_node_t *key,
			 yaml_node_t *val, char *out)
{
	char where[YS_PATH_MAX], file_key[64];

	if (!key)
		return 0;
	snprintf(file_key, sizeof(file_key), "%s_file", name);
	ys_path_key(where, "store", file_key);
	if (plain)
		return ys_fail(y, key->start_mark, where, "give %s or %s, not both", name, file_key);
	if (ys_cstr(y, val, where, out, 256) < 0)
		return -1;
	if (!out[0])
		return ys_fail(y, val->start_mark, where, "must not be empty");
	return 0;
}

/* store.tls (n): true, false, or a mapping {ca, cert, key, server_name,
 * verify} that turns TLS on, each key optional; store.sentinel_tls (sn).
 * Nothing for what is NULL. */
static int parse_tls(struct ys *y, yaml_node_t *n, yaml_node_t *sn, struct settings *s)
{
	enum { T_CA, T_CERT, T_KEY, T_SERVER_NAME, T_VERIFY, T_N };
	static const char *const keys[T_N] = {"ca", "cert", "key", "server_name", "verify"};
	char *const strs[T_VERIFY] = {s->tls_ca, s->tls_cert, s->tls_key, s->tls_server_name};
	yaml_node_t *k[T_N], *v[T_N];

	if (sn) {
		if (ys_bool(y, sn, "store.sentinel_tls", &s->sentinel_tls) < 0)
			return -1;
		s->has_sentinel_tls = true;
	}
	if (!n)
		return 0;
	s->has_tls = true;
	if (n->type != YAML_MAPPING_NODE)
		return ys_bool(y, n, "store.tls", &s->tls);
	s->tls = true;
	if (ys_map_fields(y, n, "store.tls", keys, T_N, k, v) < 0)
		return -1;
	for (int i = 0; i < T_VERIFY; i++) {
		char where[YS_PATH_MAX];

		if (!v[i])
			continue;
		ys_path_key(where, "store.tls", keys[i]);
		if (ys_cstr(y, v[i], where, strs[i], 256) < 0)
			return -1;
		if (!strs[i][0])
			return ys_fail(y, v[i]->start_mark, where, "must not be empty");
	}
	if (!v[T_CERT] != !v[T_KEY])
		return ys_fail_missing(y, n, "store.tls", v[T_CERT] ? "key" : "cert",
				       " (a client certificate goes with its key)");
	return v[T_VERIFY] ? ys_bool(y, v[T_VERIFY], "store.tls.verify", &s->tls_verify) : 0;
}

static int parse_store(struct ys *y, yaml_node_t *map, struct settings *s)
{
	enum { K_TYPE, K_ADDRESS, K_NODES, K_SENTINELS, K_MASTER, K_SENTINEL_PASSWORD, K_USER,
	       K_PASSWORD, K_TIMEOUT, K_AGENTS, K_HASH_KEY_FILE, K_PASSWORD_FILE,
	       K_SENTINEL_PASSWORD_FILE, K_TLS, K_SENTINEL_TLS, K_N };
	static const char *const keys[K_N] = {"type", "address", "nodes", "sentinels",
					      "master", "sentinel_password", "user",
					      "password", "timeout", "agents", "hash_key_file",
					      "password_file", "sentinel_password_file", "tls",
					      "sentinel_tls"};
	static const char *const types[] = {"memory", "redis", "sentinel", "cluster", "shards"};
	/* which keys each type takes (bit per key), the others are errors */
	static const unsigned common = 1u << K_TYPE | 1u << K_USER | 1u << K_PASSWORD |
				       1u << K_TIMEOUT | 1u << K_AGENTS | 1u << K_HASH_KEY_FILE |
				       1u << K_PASSWORD_FILE | 1u << K_TLS;
	static const unsigned allowed[] = {
		1u << K_TYPE | 1u << K_HASH_KEY_FILE,
		common | 1u << K_ADDRESS,
		common | 1u << K_SENTINELS | 1u << K_MASTER | 1u << K_SENTINEL_PASSWORD |
			1u << K_SENTINEL_PASSWORD_FILE | 1u << K_SENTINEL_TLS,
		common | 1u << K_NODES,
		common | 1u << K_NODES,
	};
	yaml_node_t *k[K_N], *v[K_N];
	int type = 0;
	long long num;
	int64_t us;

	if (ys_map_fields(y, map, "store", keys, K_N, k, v) < 0)
		return -1;
	if (v[K_TYPE]) {
		if (ys_word(y, v[K_TYPE], "store.type", types, 5,
			    "memory, redis, sentinel, cluster or shards", &type) < 0)
			return -1;
		s->has_store = true;
		s->store = (enum settings_store)type;
	}
	if (keys_apply(y, k, keys, K_N, allowed[type], type, types[type]) < 0)
		return -1;
	if (v[K_HASH_KEY_FILE]) {
		if (ys_cstr(y, v[K_HASH_KEY_FILE], "store.hash_key_file", s->hash_key_file,
			    sizeof(s->hash_key_file)) < 0)
			return -1;
		if (!s->hash_key_file[0])
			return ys_fail(y, v[K_HASH_KEY_FILE]->start_mark, "store.hash_key_file",
				       "must not be empty");
		s->has_hash_key_file = true;
	}
	if (type == 0)
		return 0;
	if (type == SETTINGS_STORE_SENTINEL && (!v[K_SENTINELS] || !v[K_MASTER]))
		return ys_fail_missing(y, map, "store", !v[K_SENTINELS] ? "sentinels" : "master",
				       " (type sentinel needs sentinels and master)");
	if ((type == SETTINGS_STORE_CLUSTER || type == SETTINGS_STORE_SHARDS) && !v[K_NODES])
		return ys_fail_missing(y, map, "store", "nodes",
				       type == SETTINGS_STORE_CLUSTER ? " (the cluster's seed nodes)"
								      : " (the shards)");
	if (v[K_NODES] || v[K_SENTINELS]) {
		int kk = v[K_NODES] ? K_NODES : K_SENTINELS;
		char where[YS_PATH_MAX];

		ys_path_key(where, "store", keys[kk]);
		if (ys_string_or_list(y, v[kk], where, SETTINGS_NODES_MAX, "addresses", node_item,
				      s) < 0)
			return -1;
		s->has_nodes = true;
	}
	if (v[K_MASTER]) {
		if (ys_cstr(y, v[K_MASTER], "store.master", s->master, sizeof(s->master)) < 0)
			return -1;
		if (!s->master[0])
			return ys_fail(y, v[K_MASTER]->start_mark, "store.master", "must not be empty");
		s->has_master = true;
	}
	if (v[K_SENTINEL_PASSWORD]) {
		if (get_password(y, v[K_SENTINEL_PASSWORD], "store.sentinel_password",
				 s->sentinel_password, sizeof(s->sentinel_password)) < 0)
			return -1;
		s->has_sentinel_password = true;
	}
	if (v[K_ADDRESS]) {
		if (get_addr(y, v[K_ADDRESS], "store.address", ADDR_UNIX,
			     "HOST:PORT or a socket path", &s->address) < 0)
			return -1;
		s->has_address = true;
	}
	if (v[K_USER]) {
		if (ys_cstr(y, v[K_USER], "store.user", s->user, sizeof(s->user)) < 0)
			return -1;
		s->has_user = true;
	}
	if (v[K_PASSWORD]) {
		if (get_password(y, v[K_PASSWORD], "store.password", s->password,
				 sizeof(s->password)) < 0)
			return -1;
		s->has_password = true;
	}
	if (password_file(y, "password", v[K_PASSWORD], k[K_PASSWORD_FILE],
			  v[K_PASSWORD_FILE], s->password_file) < 0 ||
	    password_file(y, "sentinel_password", v[K_SENTINEL_PASSWORD],
			  k[K_SENTINEL_PASSWORD_FILE], v[K_SENTINEL_PASSWORD_FILE],
			  s->sentinel_password_file) < 0)
		return -1;
	if (parse_tls(y, v[K_TLS], v[K_SENTINEL_TLS], s) < 0)
		return -1;
	if (v[K_TIMEOUT]) {
		if (ys_duration(y, v[K_TIMEOUT], "store.timeout", 1000, 60 * LIMIT_US_PER_S,
				"1ms to 60s such as 20ms", &us) < 0)
			return -1;
		s->timeout_ms = (int)((us + 999) / 1000);
		s->has_timeout = true;
	}
	if (v[K_AGENTS]) {
		if (ys_int(y, v[K_AGENTS], "store.agents", 1, 10000, &num) < 0)
			return -1;
		s->agents = (int)num;
		s->has_agents = true;
	}
	return 0;
}

/* One item of `answer`: a variable's name, or alone, full or default. */
static int answer_item(struct ys *y, yaml_node_t *n, const char *where, size_t i, void *arg)
{
	unsigned *a = arg;
	const char *p;
	size_t len;
	char q[YS_PATH_MAX];

	if (ys_text(y, n, where, &p, &len) < 0)
		return -1;
	if ((len == 4 && memcmp(p, "full", 4) == 0) || (len == 7 && memcmp(p, "default", 7) == 0)) {
		if (i > 0 || *a != SETTINGS_ANSWER_LIST)
			return ys_fail(y, n->start_mark, where,
				       "%.*s stands alone, not in a list of variables", (int)len, p);
		*a = len == 4 ? SETTINGS_ANSWER_FULL : SETTINGS_ANSWER_READ;
		return 0;
	}
	for (unsigned b = 0; b < SETTINGS_NVARS; b++) {
		if (strlen(settings_answer_names[b]) != len ||
		    memcmp(settings_answer_names[b], p, len) != 0)
			continue;
		if (!(*a & SETTINGS_ANSWER_LIST))
			return ys_fail(y, n->start_mark, where,
				       "full and default stand alone, not in a list of variables");
		if (*a & 1u << b)
			return ys_fail(y, n->start_mark, where, "%s listed twice",
				       settings_answer_names[b]);
		*a |= 1u << b;
		return 0;
	}
	return ys_fail(y, n->start_mark, where,
		       "unknown variable %s (expected full, default, or a list of status, "
		       "retry_after, limit, remaining, reset, priority, reason, rule, policy, "
		       "ratelimit, place, shadow, degraded)",
		       ys_quote(q, sizeof(q), p, len));
}

/* listen_tls: {cert, key, ca}: file names, cert and key together. */
static int parse_listen_tls(struct ys *y, yaml_node_t *map, struct settings *s)
{
	static const char *const keys[] = {"cert", "key", "ca"};
	static const char *const where[] = {"listen_tls.cert", "listen_tls.key", "listen_tls.ca"};
	char *out[] = {s->listen_tls_cert, s->listen_tls_key, s->listen_tls_ca};
	yaml_node_t *k[3], *v[3];

	if (ys_map_fields(y, map, "listen_tls", keys, 3, k, v) < 0)
		return -1;
	if (!v[0] || !v[1])
		return ys_fail_missing(y, map, "listen_tls", !v[0] ? "cert" : "key",
				       " (the certificate and its key go together)");
	for (int i = 0; i < 3; i++) {
		if (!v[i])
			continue;
		if (ys_cstr(y, v[i], where[i], out[i], sizeof(s->listen_tls_cert)) < 0)
			return -1;
		if (!out[i][0])
			return ys_fail(y, v[i]->start_mark, where[i], "must not be empty");
	}
	return 0;
}

int settings_parse(struct ys *y, yaml_node_t *const vals[SETTINGS_NKEYS], struct settings *s)
{
	enum { K_LISTEN, K_THREADS, K_STORE, K_ANSWER, K_LISTEN_TLS };
	long long num;

	if (vals[K_LISTEN]) {
		/* (unix@PATH too: the message keeps to the common case) */
		if (get_addr(y, vals[K_LISTEN], "listen", ADDR_UNIX_AT,
			     "ADDR:PORT such as 127.0.0.1:12345",
			     &s->listen) < 0)
			return -1;
		s->has_listen = true;
	}
	if (vals[K_THREADS]) {
		if (ys_int(y, vals[K_THREADS], "threads", 1, 256, &num) < 0)
			return -1;
		s->threads = (int)num;
		s->has_threads = true;
	}
	if (vals[K_STORE] && parse_store(y, vals[K_STORE], s) < 0)
		return -1;
	if (vals[K_LISTEN_TLS] && parse_listen_tls(y, vals[K_LISTEN_TLS], s) < 0)
		return -1;
	if (vals[K_ANSWER]) {
		unsigned a = SETTINGS_ANSWER_LIST;

		if (ys_string_or_list(y, vals[K_ANSWER], "answer", SETTINGS_NVARS, "variables",
				      answer_item, &a) < 0)
			return -1;
		s->answer = a;
		s->has_answer = true;
	}
	return 0;
}
