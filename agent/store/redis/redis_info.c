/* SPDX-License-Identifier: Apache-2.0 */
/* redis_info.c: each server's memory, key count and key expiry, on
 * connections of their own (see redis_info.h). */
#include "redis_info.h"

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "redis_auth.h"
#include "redis_conn.h"
#include "redis_transport.h"
#include "store_redis.h"

/* One server looked at. Its own allocation: the replies due name it. */
struct probe {
	struct redis_info *ri;
	struct addr at;
	char name[ADDR_HOST_MAX + 16]; /* at, for logs */
	struct redis_stats *stats;
	struct redis_conn *ac;
	bool busy;                     /* a look under way */
	bool failing;                  /* the last look failed (logged) */
	int64_t busy_since;
	uint64_t used, max;            /* INFO memory's, until DBSIZE answers */
	bool seen;                     /* listed in the current poll */
	bool stall_over;               /* its key expiry may outlast the deadline
					* (logged when this changes) */
};

struct redis_info {
	struct ev_loop *loop;
	const struct redis_config *cfg;
	redis_info_stats_fn *stats_of;
	void *owner;
	struct probe **probe;
	size_t n, cap;
};

int redis_info_field(const char *text, size_t len, const char *name, uint64_t *v)
{
	size_t nlen = strlen(name);
	const char *p = text, *end = text + len;

	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		const char *stop = eol ? eol : end;

		if ((size_t)(stop - p) > nlen && !memcmp(p, name, nlen) && p[nlen] == ':') {
			const char *d = p + nlen + 1;
			uint64_t n = 0;

			if (d == stop || *d < '0' || *d > '9')
				return -1;
			for (; d < stop && *d >= '0' && *d <= '9'; d++) {
				if (n > (UINT64_MAX - 9) / 10)
					return -1;
				n = n * 10 + (uint64_t)(*d - '0');
			}
			if (d < stop && *d != '\r')
				return -1;
			*v = n;
			return 0;
		}
		p = stop + 1;
	}
	return -1;
}

int64_t redis_info_expiry_stall_us(uint64_t hz)
{
	return hz ? (int64_t)(250000 / hz) : 0;
}

static void failed(struct probe *p, const char *why)
{
	STAT_INC(p->stats->info_failures);
	if (!p->failing)
		log_warn("redis: %s: cannot read its memory and keys: %s (read again at the next "
			 "look)", p->name, why);
	p->failing = true;
	p->busy = false;
}

/* Closes the connection (from a callback too: freed once it returns);
 * its replies still due find it gone. */
static void drop(struct probe *p)
{
	p->busy = false;
	redis_conn_drop(&p->ac);
}

static void on_connect(void *owner, struct redis_conn *ac, bool ok)
{
	struct probe *p = owner;

	if (ok || p->ac != ac)
		return;
	/* the connection is freed after this callback; the look failed,
	 * counted once whether this or its replies' NULL comes first */
	p->ac = NULL;
	if (p->busy)
		failed(p, redis_conn_errstr(ac));
}

static void on_disconnect(void *owner, struct redis_conn *ac, bool lost)
{
	struct probe *p = owner;

	if (p->ac != ac)
		return;
	p->ac = NULL;
	if (p->busy)
		failed(p, lost ? redis_conn_errstr(ac) : "connection closed");
}

static const struct redis_conn_cb conn_cb = {
	.connected = on_connect,
	.disconnected = on_disconnect,
};

/* Whether a reply is for the connection in use and an answer: an error
 * or a NULL (the connection going) ends the look, failed. */
static bool answered(struct probe *p, const struct redis_conn *ac, const redisReply *r, int type)
{
	if (p->ac != ac || !p->busy)
		return false;
	if (!r) {
		failed(p, redis_conn_errstr(ac));
		return false;
	}
	if (r->type != type) {
		failed(p, r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
		drop(p);
		return false;
	}
	return true;
}

static void on_auth(struct redis_conn *ac, redisReply *r, void *priv)
{
	struct probe *p = priv;
	char why[160];

	if (p->ac != ac || !r || r->type != REDIS_REPLY_ERROR)
		return;
	snprintf(why, sizeof(why), "AUTH failed: %s", r->str);
	failed(p, why);
	drop(p);
}

static void on_memory(struct redis_conn *ac, redisReply *r, void *priv)
{
	struct probe *p = priv;

	if (!answered(p, ac, r, REDIS_REPLY_STRING))
		return;
	if (redis_info_field(r->str, r->len, "used_memory", &p->used) < 0 ||
	    redis_info_field(r->str, r->len, "maxmemory", &p->max) < 0) {
		failed(p, "INFO memory without used_memory or maxmemory");
		drop(p);
	}
}

/* INFO server: hz, for how long the key expiry may hold the server, said
 * when that outlasts a decision's deadline and when it no longer does.
 * A server that does not say (none known) is left as unknown. */
static void on_server(struct redis_conn *ac, redisReply *r, void *priv)
{
	struct probe *p = priv;
	int64_t deadline = (int64_t)(p->ri->cfg->timeout * 1e6), stall;
	uint64_t hz;

	if (!answered(p, ac, r, REDIS_REPLY_STRING) ||
	    redis_info_field(r->str, r->len, "hz", &hz) < 0)
		return;
	stall = redis_info_expiry_stall_us(hz);
	STAT_SET(p->stats->expiry_stall_us, (uint64_t)stall);
	if (stall >= deadline && !p->stall_over)
		log_warn("redis: %s: its key expiry may hold it %.1f ms at a time (hz %llu), not "
			 "less than a decision's %.1f ms deadline (--redis-timeout): decisions due "
			 "meanwhile are made by their rule's local bucket. Set hz 100 on the server "
			 "(2.5 ms; docs/redis.md, \"Key expiry\")", p->name, (double)stall / 1e3,
			 (unsigned long long)hz, (double)deadline / 1e3);
	else if (stall && stall < deadline && p->stall_over)
		log_info("redis: %s: its key expiry holds it at most %.1f ms (hz %llu), within a "
			 "decision's deadline", p->name, (double)stall / 1e3, (unsigned long long)hz);
	p->stall_over = stall >= deadline;
}

static void on_dbsize(struct redis_conn *ac, redisReply *r, void *priv)
{
	struct probe *p = priv;

	if (!answered(p, ac, r, REDIS_REPLY_INTEGER) || r->integer < 0)
		return;
	STAT_SET(p->stats->used_memory, p->used);
	STAT_SET(p->stats->maxmemory, p->max);
	STAT_SET(p->stats->keys, (uint64_t)r->integer);
	STAT_SET(p->stats->info_read, 1);
	if (p->failing)
		log_info("redis: %s: its memory and keys read again", p->name);
	p->failing = false;
	p->busy = false;
}

static int connect_to(struct probe *p)
{
	const char *argv[3];
	size_t argvlen[3];
	int argc;
	char why[160];

	p->ac = redis_conn_new(p->ri->loop, redis_transport_new(p->ri->cfg), &p->at, &conn_cb, p,
			       why, sizeof(why));
	if (!p->ac) {
		failed(p, why);
		return -1;
	}
	argc = redis_node_auth_argv(p->ri->cfg, argv, argvlen);
	if (argc)
		redis_conn_command(p->ac, on_auth, p, argc, argv, argvlen);
	return 0;
}

static void look(struct probe *p, int64_t timeout_us)
{
	const char *info[2] = { "INFO", "memory" }, *server[2] = { "INFO", "server" };
	const char *dbsize[1] = { "DBSIZE" };
	size_t infolen[2] = { 4, 6 }, dbsizelen[1] = { 6 };

	if (p->busy && clock_now_us() - p->busy_since > timeout_us) {
		failed(p, "no answer in time");
		drop(p);
	}
	if (p->busy || (!p->ac && connect_to(p) < 0))
		return;
	if (redis_conn_command(p->ac, on_memory, p, 2, info, infolen) < 0 ||
	    redis_conn_command(p->ac, on_server, p, 2, server, infolen) < 0 ||
	    redis_conn_command(p->ac, on_dbsize, p, 1, dbsize, dbsizelen) < 0) {
		failed(p, "connection closing");
		drop(p);
		return;
	}
	p->busy = true;
	p->busy_since = clock_now_us();
}

static void forget(struct probe *p)
{
	drop(p);
	STAT_SET(p->stats->info_read, 0);
	xfree(p);
}

static struct probe *probe_for(struct redis_info *ri, const struct addr *at)
{
	struct probe *p;

	for (size_t i = 0; i < ri->n; i++)
		if (addr_equal(&ri->probe[i]->at, at))
			return ri->probe[i];
	if (ri->n == ri->cap) {
		size_t cap = ri->cap ? 2 * ri->cap : 4;
		struct probe **a = xrealloc(ri->probe, cap * sizeof(*a));

		if (!a)
			return NULL;
		ri->probe = a;
		ri->cap = cap;
	}
	p = xcalloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->ri = ri;
	p->at = *at;
	addr_format(at, p->name, sizeof(p->name));
	p->stats = ri->stats_of(ri->owner, at);
	ri->probe[ri->n++] = p;
	return p;
}

void redis_info_poll(struct redis_info *ri, const struct addr *at, size_t n, int64_t timeout_us)
{
	size_t kept = 0;

	for (size_t i = 0; i < ri->n; i++)
		ri->probe[i]->seen = false;
	for (size_t i = 0; i < n; i++) {
		struct probe *p = probe_for(ri, &at[i]);

		if (p)
			p->seen = true;
	}
	for (size_t i = 0; i < ri->n; i++) {
		if (!ri->probe[i]->seen) {
			forget(ri->probe[i]);
			continue;
		}
		ri->probe[kept++] = ri->probe[i];
	}
	ri->n = kept;
	for (size_t i = 0; i < ri->n; i++)
		look(ri->probe[i], timeout_us);
}

struct redis_info *redis_info_new(struct ev_loop *loop, const struct redis_config *cfg,
				  redis_info_stats_fn *stats_of, void *owner)
{
	struct redis_info *ri = xcalloc(1, sizeof(*ri));

	if (!ri)
		return NULL;
	ri->loop = loop;
	ri->cfg = cfg;
	ri->stats_of = stats_of;
	ri->owner = owner;
	return ri;
}

void redis_info_free(struct redis_info *ri)
{
	if (!ri)
		return;
	for (size_t i = 0; i < ri->n; i++)
		forget(ri->probe[i]);
	xfree(ri->probe);
	xfree(ri);
}
