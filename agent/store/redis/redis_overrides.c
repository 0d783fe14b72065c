/* SPDX-License-Identifier: Apache-2.0 */
/* redis_overrides.c: the fleet's overrides, read in pages on a connection
 * of their own, expired ones taken out (see redis_overrides.h). */
#include "redis_overrides.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "overrides.h"
#include "redis_auth.h"
#include "redis_conn.h"
#include "redis_node.h"
#include "redis_transport.h"
#include "store.h"
#include "store_redis.h"

#define PAGE "1000"                /* HSCAN's COUNT: about the fields of a reply */
#define CURSOR_MAX 32              /* a cursor's digits, NUL included */
#define READ_TIMEOUT_US 5000000    /* a read: the version and every page */
#define PURGE_BATCH 500            /* fields per deletion */

/* KEYS[1] the hash, ARGV[1] the time (ms, wall clock), ARGV[2..] fields:
 * deletes each field whose value ("N/P EXPIRES_MS") ends before then, as
 * it is now (a PUT since, with a later end or none, stays); returns how
 * many went. */
static const char purge_script[] =
	"local now, n = tonumber(ARGV[1]), 0\n"
	"for i = 2, #ARGV do\n"
	"  local v = redis.call('HGET', KEYS[1], ARGV[i])\n"
	"  local e = v and tonumber(string.match(v, ' (%d+)$'))\n"
	"  if e and e > 0 and e <= now then n = n + redis.call('HDEL', KEYS[1], ARGV[i]) end\n"
	"end\n"
	"return n\n";

struct redis_overrides {
	struct ev_loop *loop;
	const struct redis_config *cfg;
	redis_overrides_fn *fn;
	void *owner;
	struct redis_conn *ac;
	struct addr at;                /* where ac goes */
	char name[ADDR_HOST_MAX + 16]; /* at, for logs */
	bool failing;                  /* the last connection or read failed (logged) */
	bool busy;                     /* a read under way */
	int64_t busy_since;
	long long version;             /* of the set handed over; -1: none yet */
	long long reading;             /* of the set being read */
	struct override_entry *e;      /* what the pages gave so far */
	size_t n, cap;
	bool truncated;                /* more than OVERRIDES_MAX */
	struct overrides *set;         /* the last set handed over (a reference) */
	int64_t due;                   /* its next expiry not taken out, 0 none */
	bool purge_failed;             /* logged once */
};

static void failed(struct redis_overrides *p, const char *why)
{
	if (!p->failing)
		log_warn("redis: overrides: %s: %s (read again at the next poll)", p->name, why);
	p->failing = true;
}

static void read_ok(struct redis_overrides *p)
{
	if (p->failing)
		log_info("redis: overrides: %s: read again", p->name);
	p->failing = false;
}

/* Closes the connection (from a callback too: it is freed once the
 * callback returns); its replies still due find it gone. */
static void drop(struct redis_overrides *p)
{
	p->busy = false;
	redis_conn_drop(&p->ac);
}

static void on_connect(void *owner, struct redis_conn *ac, bool ok)
{
	struct redis_overrides *p = owner;

	if (ok)
		return;
	/* the connection is freed after this callback */
	if (p->ac == ac) {
		p->ac = NULL;
		p->busy = false;
	}
	failed(p, redis_conn_errstr(ac));
}

static void on_disconnect(void *owner, struct redis_conn *ac, bool lost)
{
	struct redis_overrides *p = owner;

	if (p->ac != ac)
		return;
	p->ac = NULL;
	p->busy = false;
	if (lost)
		failed(p, redis_conn_errstr(ac));
}

static const struct redis_conn_cb conn_cb = {
	.connected = on_connect,
	.disconnected = on_disconnect,
};

/* Whether a reply is for the connection in use; a NULL one (the
 * connection going) ends the read. */
static bool current(struct redis_overrides *p, const struct redis_conn *ac, const void *reply)
{
	if (p->ac != ac)
		return false;
	if (!reply) {
		p->busy = false;
		return false;
	}
	return true;
}

static void on_auth(struct redis_conn *ac, redisReply *r, void *priv)
{
	struct redis_overrides *p = priv;
	const redisReply *reply = r;
	char why[160];

	if (!current(p, ac, reply) || reply->type != REDIS_REPLY_ERROR)
		return;
	snprintf(why, sizeof(why), "AUTH failed: %s", reply->str);
	failed(p, why);
	drop(p);
}

static int connect_to(struct redis_overrides *p, const struct addr *at)
{
	const char *argv[3];
	size_t argvlen[3];
	int argc;
	char why[160];

	p->at = *at;
	addr_format(at, p->name, sizeof(p->name));
	p->ac = redis_conn_new(p->loop, redis_transport_new(p->cfg), at, &conn_cb, p, why,
			       sizeof(why));
	if (!p->ac) {
		failed(p, why);
		return -1;
	}
	argc = redis_node_auth_argv(p->cfg, argv, argvlen);
	if (argc)
		redis_conn_command(p->ac, on_auth, p, argc, argv, argvlen);
	return 0;
}

/* ---- reading ------------------------------------------------------------------- */

static void on_page(struct redis_conn *ac, redisReply *r, void *priv);

static void ask_page(struct redis_overrides *p, const char *cursor, size_t len)
{
	char key[REDIS_OVERRIDES_KEY_MAX];
	const char *argv[5] = { "HSCAN", key, cursor, "COUNT", PAGE };
	size_t argvlen[5] = { 5, redis_overrides_key(false, key), len, 5, sizeof(PAGE) - 1 };

	if (redis_conn_command(p->ac, on_page, p, 5, argv, argvlen) < 0)
		p->busy = false;
}

/* The set read is whole (or as much of it as is kept): handed over. */
static void finish(struct redis_overrides *p)
{
	struct overrides *o = overrides_new(p->e, p->n);

	xfree(p->e);
	p->e = NULL;
	p->n = p->cap = 0;
	p->busy = false;
	if (!o) {
		failed(p, "out of memory for the set");
		return;
	}
	if (p->truncated)
		log_warn("redis: overrides: %s: more than %d in the hash: the first %d read apply",
			 p->name, OVERRIDES_MAX, OVERRIDES_MAX);
	read_ok(p);
	p->version = p->reading;
	overrides_acquire(o);
	overrides_release(p->set);
	p->set = o;
	p->due = 0;
	for (size_t i = 0; i < overrides_count(o); i++) {
		int64_t exp = overrides_at(o, i)->expires_ms;

		if (exp && (!p->due || exp < p->due))
			p->due = exp;
	}
	p->fn(p->owner, o);
}

/* Appends one field and its value; a malformed one is skipped. */
static void take(struct redis_overrides *p, const redisReply *f, const redisReply *v)
{
	if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
		return;
	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 1024;
		struct override_entry *e;

		if (p->cap == OVERRIDES_MAX) {
			p->truncated = true;
			return;
		}
		if (cap > OVERRIDES_MAX)
			cap = OVERRIDES_MAX;
		e = xrealloc(p->e, cap * sizeof(*e));
		if (!e) {
			p->truncated = true;
			return;
		}
		p->e = e;
		p->cap = cap;
	}
	if (overrides_read(f->str, f->len, v->str, v->len, &p->e[p->n]) == 0)
		p->n++;
}

/* One page: [cursor, [field, value, ...]]; cursor "0" is the last. */
static void on_page(struct redis_conn *ac, redisReply *r, void *priv)
{
	struct redis_overrides *p = priv;
	const redisReply *reply = r, *cur, *kv;

	if (!current(p, ac, reply))
		return;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
	    (cur = reply->element[0])->type != REDIS_REPLY_STRING || cur->len == 0 ||
	    cur->len >= CURSOR_MAX || (kv = reply->element[1])->type != REDIS_REPLY_ARRAY ||
	    kv->elements % 2) {
		failed(p, reply->type == REDIS_REPLY_ERROR ? reply->str : "malformed HSCAN reply");
		drop(p);
		return;
	}
	for (size_t i = 0; i + 1 < kv->elements; i += 2)
		take(p, kv->element[i], kv->element[i + 1]);
	if ((cur->len == 1 && cur->str[0] == '0') || p->truncated)
		finish(p);
	else
		ask_page(p, cur->str, cur->len);
}

static void on_version(struct redis_conn *ac, redisReply *r, void *priv)
{
	struct redis_overrides *p = priv;
	const redisReply *reply = r;
	long long v = 0;

	if (!current(p, ac, reply))
		return;
	if (reply->type != REDIS_REPLY_STRING && reply->type != REDIS_REPLY_NIL) {
		failed(p, reply->type == REDIS_REPLY_ERROR ? reply->str : "malformed GET reply");
		p->busy = false;
		return;
	}
	if (reply->type == REDIS_REPLY_STRING)
		v = strtoll(reply->str, NULL, 10);
	if (v == p->version) {
		read_ok(p);
		p->busy = false;
		return;
	}
	p->reading = v;
	p->n = 0;
	p->truncated = false;
	ask_page(p, "0", 1);
}

/* ---- expired entries ---------------------------------------------------------- */

static void on_purged(struct redis_conn *ac, redisReply *r, void *priv)
{
	struct redis_overrides *p = priv;
	const redisReply *reply = r;

	if (!current(p, ac, reply))
		return;
	if (reply->type == REDIS_REPLY_ERROR && !p->purge_failed) {
		log_warn("redis: overrides: %s: cannot take expired overrides out: %s", p->name,
			 reply->str);
		p->purge_failed = true;
	}
}

/* Sends one deletion of the fields of e[0..n). */
static void purge_batch(struct redis_overrides *p, const struct override_entry *const *e,
			size_t n, int64_t now_ms)
{
	char key[REDIS_OVERRIDES_KEY_MAX], now[24];
	const char **argv = xcalloc(5 + n, sizeof(*argv));
	size_t *argvlen = xcalloc(5 + n, sizeof(*argvlen));
	char (*field)[2 * IDENTITY_KEY_LEN + 1] = xcalloc(n, sizeof(*field));
	size_t argc = 0;

	if (argv && argvlen && field) {
		argv[argc] = "EVAL";
		argvlen[argc++] = 4;
		argv[argc] = purge_script;
		argvlen[argc++] = sizeof(purge_script) - 1;
		argv[argc] = "1";
		argvlen[argc++] = 1;
		argv[argc] = key;
		argvlen[argc++] = redis_overrides_key(false, key);
		argv[argc] = now;
		argvlen[argc++] = (size_t)snprintf(now, sizeof(now), "%lld", (long long)now_ms);
		for (size_t i = 0; i < n; i++) {
			overrides_field(e[i]->key, field[i]);
			argv[argc] = field[i];
			argvlen[argc++] = 2 * IDENTITY_KEY_LEN;
		}
		redis_conn_command(p->ac, on_purged, p, (int)argc, argv, argvlen);
	}
	xfree(argv);
	xfree(argvlen);
	xfree(field);
}

/* The entries of the last set read that ended since the last look go
 * out of the hash, in batches. (They were inert already: a decision
 * ignores an override past its end.) */
static void purge(struct redis_overrides *p)
{
	const struct override_entry *batch[PURGE_BATCH];
	int64_t now = clock_wall_ms(), next = 0;
	size_t n = 0;

	if (!p->set || !p->due || p->due > now)
		return;
	for (size_t i = 0; i < overrides_count(p->set); i++) {
		const struct override_entry *e = overrides_at(p->set, i);

		if (!e->expires_ms || e->expires_ms < p->due)
			continue; /* never ends, or taken out already */
		if (e->expires_ms > now) {
			if (!next || e->expires_ms < next)
				next = e->expires_ms;
			continue;
		}
		batch[n++] = e;
		if (n == PURGE_BATCH) {
			purge_batch(p, batch, n, now);
			n = 0;
		}
	}
	if (n)
		purge_batch(p, batch, n, now);
	p->due = next;
}

/* ---- polls ------------------------------------------------------------------------ */

void redis_overrides_poll(struct redis_overrides *p, const struct addr *at, bool touch)
{
	char key[REDIS_OVERRIDES_KEY_MAX];
	const char *argv[2] = { "GET", key };
	size_t argvlen[2] = { 3, 0 };

	if (p->busy && clock_now_us() - p->busy_since > READ_TIMEOUT_US) {
		failed(p, "no answer in time");
		drop(p);
	}
	if (p->busy)
		return;
	if (p->ac && !addr_equal(&p->at, at))
		drop(p);
	if (!p->ac && connect_to(p, at) < 0)
		return;
	purge(p);
	if (touch) {
		/* Keys without an expiry live in a Redis that evicts the least
		 * used: the hash, read only when it changes, is used here, as
		 * the version is, so that it is never among them. */
		argv[0] = "TOUCH";
		argvlen[0] = 5;
		argvlen[1] = redis_overrides_key(false, key);
		redis_conn_command(p->ac, NULL, NULL, 2, argv, argvlen);
		argv[0] = "GET";
		argvlen[0] = 3;
	}
	argvlen[1] = redis_overrides_key(true, key);
	if (redis_conn_command(p->ac, on_version, p, 2, argv, argvlen) == 0) {
		p->busy = true;
		p->busy_since = clock_now_us();
	}
}

struct redis_overrides *redis_overrides_new(struct ev_loop *loop, const struct redis_config *cfg,
					    redis_overrides_fn *fn, void *owner)
{
	struct redis_overrides *p = xcalloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->loop = loop;
	p->cfg = cfg;
	p->fn = fn;
	p->owner = owner;
	p->version = -1;
	return p;
}

void redis_overrides_free(struct redis_overrides *p)
{
	if (!p)
		return;
	drop(p);
	xfree(p->e);
	overrides_release(p->set);
	xfree(p);
}
