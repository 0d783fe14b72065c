/* settings.c: the process settings of a rules file (see settings.h). */
#include "settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limit.h"
#include "yaml_strict.h"

const char *const settings_keys[SETTINGS_NKEYS] = {"listen", "threads", "store"};

void settings_defaults(struct settings *s)
{
	memset(s, 0, sizeof(*s));
	addr_parse("127.0.0.1:12345", 0, &s->listen);
	s->threads = 0;
	s->store = SETTINGS_STORE_MEMORY;
	addr_parse("127.0.0.1:6379", 0, &s->address);
	s->timeout_ms = 20;
	s->agents = 1;
}

static bool addr_equal(const struct addr *a, const struct addr *b)
{
	return strcmp(a->host, b->host) == 0 && strcmp(a->port, b->port) == 0 &&
	       strcmp(a->path, b->path) == 0;
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
	       a->has_agents == b->has_agents && a->agents == b->agents;
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

/* The password, "${NAME}" standing for the value of environment variable
 * NAME (only a whole "${NAME}": "x${NAME}" is taken as written). */
static int get_password(struct ys *y, yaml_node_t *n, struct settings *s)
{
	static const char *const where = "store.password";
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
	if (len >= sizeof(s->password))
		return ys_fail(y, n->start_mark, where, "longer than %zu bytes",
			       sizeof(s->password) - 1);
	memcpy(s->password, p, len);
	s->password[len] = '\0';
	s->has_password = true;
	return 0;
}

static int parse_store(struct ys *y, yaml_node_t *map, struct settings *s)
{
	enum { K_TYPE, K_ADDRESS, K_USER, K_PASSWORD, K_TIMEOUT, K_AGENTS, K_N };
	static const char *const keys[K_N] = {"type", "address", "user",
					      "password", "timeout", "agents"};
	static const char *const types[] = {"memory", "redis"};
	yaml_node_t *k[K_N], *v[K_N];
	int type = 0;
	long long num;
	int64_t us;

	if (ys_map_fields(y, map, "store", keys, K_N, k, v) < 0)
		return -1;
	if (v[K_TYPE]) {
		if (ys_word(y, v[K_TYPE], "store.type", types, 2, "memory or redis", &type) < 0)
			return -1;
		s->has_store = true;
		s->store = type == 1 ? SETTINGS_STORE_REDIS : SETTINGS_STORE_MEMORY;
	}
	if (type == 0) {
		/* Keys that would have no effect are errors: an operator who
		 * wrote an address expects Redis to be used. */
		for (int i = K_ADDRESS; i < K_N; i++) {
			char where[YS_PATH_MAX];

			if (!k[i])
				continue;
			ys_path_key(where, "store", keys[i]);
			return ys_fail(y, k[i]->start_mark, where,
				       "applies to type redis only (add type: redis)");
		}
		return 0;
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
	if (v[K_PASSWORD] && get_password(y, v[K_PASSWORD], s) < 0)
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

int settings_parse(struct ys *y, yaml_node_t *const vals[SETTINGS_NKEYS], struct settings *s)
{
	enum { K_LISTEN, K_THREADS, K_STORE };
	long long num;

	if (vals[K_LISTEN]) {
		if (get_addr(y, vals[K_LISTEN], "listen", 0, "ADDR:PORT such as 127.0.0.1:12345",
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
	return 0;
}
