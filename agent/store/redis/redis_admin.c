/* SPDX-License-Identifier: Apache-2.0 */
/* redis_admin.c: the admin endpoint's look at and reset of a client's keys
 * in the Redis store (store.h: struct store_admin), in every topology:
 * found where the store says they live (its locate callback: the latest
 * topology a worker learned), asked on connections of the request's own. */
#include "redis_admin.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "limit.h"
#include "overrides.h"
#include "redis_auth.h"
#include "redis_conn.h"
#include "redis_node.h"
#include "redis_transport.h"

/* An admin look or reset under way, on the caller's loop: one
 * asynchronous connection per server the client's keys live on, a
 * deadline, the items answered as their replies come. Never blocks the
 * loop that serves /healthz and /metrics. */
#define ADMIN_TIMEOUT 1.0
#define ADMIN_CONNS_MAX 16

struct admin_op;

struct admin_call {
	struct admin_op *op;
	size_t item;
	long long ttl;             /* the longest PTTL of the item's keys so far */
	size_t ttl_left;           /* PTTL replies still expected */
};

struct admin_op {
	struct store *st;
	struct store_admin *a;
	const struct redis_keys *keys; /* the store's naming */
	ev_timer timer;
	size_t pending;            /* replies still expected */
	bool finished;
	size_t nconns;
	struct {
		struct addr addr;
		struct redis_conn *ac;
	} conn[ADMIN_CONNS_MAX];
	struct admin_call *calls;  /* one per item */
};

static void admin_finish(struct admin_op *op, const char *error)
{
	struct store_admin *a = op->a;
	struct store *st = op->st;

	if (op->finished)
		return;
	op->finished = true;
	if (error && !a->error[0])
		snprintf(a->error, sizeof(a->error), "%s", error);
	ev_timer_stop(a->loop, &op->timer);
	/* pending callbacks run now with no reply and find op finished */
	for (size_t i = 0; i < op->nconns; i++) {
		struct redis_conn *ac = op->conn[i].ac;

		op->conn[i].ac = NULL;
		if (ac)
			redis_conn_free(ac);
	}
	xfree(op->calls);
	xfree(op);
	store_admin_done(st, a);
}

static void admin_reply(struct admin_op *op, const char *error)
{
	if (op->finished)
		return;
	if (error) {
		admin_finish(op, error);
		return;
	}
	if (--op->pending == 0)
		admin_finish(op, NULL);
}

static void on_admin_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
	admin_finish(t->data, "Redis did not answer in time");
}

/* A copy of n bytes, for the caller of the admin look (store.h), or NULL
 * with *oom set. */
static char *admin_copy(const char *p, size_t n, bool *oom)
{
	char *c = xmalloc(n ? n : 1);

	if (!c)
		*oom = true;
	else if (n)
		memcpy(c, p, n);
	return c;
}

_Static_assert(REDIS_KEY_NAME_MAX < STORE_ADMIN_NAME_MAX, "a key's name fits the admin's");

/* Redis's clock counts a token bucket's state from this moment (the
 * library's EPOCH, 2024-01-01, in microseconds; ratelimit.lua "Storage"). */
#define ADMIN_EPOCH_US 1704067200000000LL

static uint64_t gcd(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t r = a % b;

		a = b;
		b = r;
	}
	return a;
}

/* Reads a decimal integer of v[0..len) up to `stop` (or the end) into
 * *out; returns the byte after it, or NULL when there are no digits or
 * too many. */
static const char *read_int(const char *v, const char *end, char stop, int64_t *out)
{
	int64_t x = 0;
	const char *p = v;

	if (p < end && *p == '-')
		p++;
	if (p == end || *p < '0' || *p > '9')
		return NULL;
	for (; p < end && *p != stop; p++) {
		if (*p < '0' || *p > '9' || x > (INT64_MAX - 9) / 10)
			return NULL;
		x = x * 10 + (*p - '0');
	}
	*out = *v == '-' ? -x : x;
	return p;
}

/* The state the value v (len bytes; NULL: no key) of limit l holds, as
 * the library stores it (ratelimit.lua, "Storage"): a token bucket's
 * integer (A - EPOCH) * n + R or text "A+R", where T = p/n is
 * period/quota in lowest terms; a sliding window's "U:C:V" (its start
 * U - 2P); a fixed window's "U:C" (its start U - P). Returns 0, or -1
 * for another algorithm or a value of another shape, which the library
 * reads as no key (a full bucket) but is better shown as it is. */
static int admin_state(const struct limit_spec *l, const char *v, size_t len,
		       struct limit_state *st)
{
	const char *end = v + len, *p;
	int64_t x, y, z;
	uint64_t g;

	memset(st, 0, sizeof(*st));
	if (l->algo != LIMIT_TOKEN_BUCKET && l->algo != LIMIT_SLIDING_WINDOW &&
	    l->algo != LIMIT_FIXED_WINDOW)
		return -1;
	if (!v)
		return 0;
	switch (l->algo) {
	case LIMIT_TOKEN_BUCKET:
		g = gcd((uint64_t)l->period_us, l->quota);
		if ((p = read_int(v, end, '+', &x)) && p < end) {
			if (!read_int(p + 1, end, '\0', &y) || y < 0 || (uint64_t)y >= l->quota / g)
				return -1;
			st->a = x;
			st->b = y * (int64_t)g;
			return 0;
		}
		if (!p || x < 0)
			return -1;
		/* 1/n microsecond is g/quota of one */
		st->a = ADMIN_EPOCH_US + x / (int64_t)(l->quota / g);
		st->b = (x % (int64_t)(l->quota / g)) * (int64_t)g;
		return 0;
	case LIMIT_SLIDING_WINDOW:
		if (!(p = read_int(v, end, ':', &x)) || p == end ||
		    !(p = read_int(p + 1, end, ':', &y)) || p == end ||
		    !read_int(p + 1, end, '\0', &z))
			return -1;
		st->a = x - 2 * l->period_us;
		st->b = y;
		st->c = z;
		return 0;
	case LIMIT_FIXED_WINDOW:
		if (!(p = read_int(v, end, ':', &x)) || p == end || !read_int(p + 1, end, '\0', &y))
			return -1;
		st->a = x - l->period_us;
		st->b = y;
		return 0;
	case LIMIT_LOG:
	case LIMIT_CONCURRENCY:
	case LIMIT_BAN:
		break;
	}
	return -1;
}

/* What a look at the client's key of limit j shows beside its value: the
 * requests left and the time until full, as the memory store shows them,
 * on the agent's wall clock (Redis's TIME decides; on one machine, or
 * with NTP, they differ by far less than a second). */
static void admin_look(struct store_admin_limit *out, const struct limit_spec *l,
		       const char *v, size_t len)
{
	struct limit_state st, next;
	struct limit_result res;
	struct timespec ts;

	if (admin_state(l, v, len, &st) < 0)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	/* cost 0: a peek */
	limit_eval(l, &st, (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000, 0, &next, &res);
	out->remaining = res.remaining;
	out->reset_us = res.reset_us;
	out->has_state = true;
}

/* The values of a client's keys under its rule (MGET), by limit, or with
 * reset, how many keys went: into the item (store.h), as data. */
static void on_admin_main(struct redis_conn *ac, redisReply *r, void *priv)
{
	struct admin_call *call = priv;
	struct admin_op *op = call->op;
	redisReply *reply = r;
	struct store_admin_item *it;

	if (op->finished)
		return;
	if (!reply) {
		admin_reply(op, redis_conn_errstr(ac));
		return;
	}
	it = &op->a->item[call->item];
	if (reply->type == REDIS_REPLY_ERROR) {
		/* the keys' names still said: they need no Redis (a MOVED
		 * after a reshard names the node that holds them now) */
		it->found = STORE_ADMIN_REFUSED;
		it->refusal = admin_copy(reply->str, reply->len, &it->out_of_memory);
		it->refusal_len = reply->len;
		for (size_t j = 0; j < it->rule->nown; j++)
			redis_key_name(op->keys, it->key, it->rule->lidh[j], &it->rule->limits[j],
				       it->limit[j].name);
	} else if (op->a->reset) {
		it->found = STORE_ADMIN_DELETED;
		it->deleted = reply->integer;
	} else {
		const struct rule *rule = it->rule;

		it->found = STORE_ADMIN_RAW;
		for (size_t j = 0; j < rule->nown; j++)
			redis_key_name(op->keys, it->key, rule->lidh[j], &rule->limits[j],
				       it->limit[j].name);
		for (size_t j = 0; reply->type == REDIS_REPLY_ARRAY && j < reply->elements &&
				   j < rule->nown; j++) {
			const redisReply *v = reply->element[j];

			if (v->type != REDIS_REPLY_STRING) {
				admin_look(&it->limit[j], &rule->limits[j], NULL, 0);
				continue;
			}
			it->limit[j].raw = admin_copy(v->str, v->len, &it->out_of_memory);
			it->limit[j].raw_len = v->len;
			admin_look(&it->limit[j], &rule->limits[j], v->str, v->len);
		}
	}
	admin_reply(op, NULL);
}

static void on_admin_ttl(struct redis_conn *ac, redisReply *r, void *priv)
{
	struct admin_call *call = priv;
	struct admin_op *op = call->op;
	redisReply *reply = r;

	if (op->finished)
		return;
	if (!reply) {
		admin_reply(op, redis_conn_errstr(ac));
		return;
	}
	/* -2 (no key), -1 (no expiry) or the time left: the longest */
	if (reply->type == REDIS_REPLY_INTEGER && reply->integer > call->ttl)
		call->ttl = reply->integer;
	if (--call->ttl_left == 0) {
		op->a->item[call->item].has_ttl = true;
		op->a->item[call->item].ttl_ms = call->ttl;
	}
	admin_reply(op, NULL);
}

static void on_admin_auth(struct redis_conn *ac, redisReply *r, void *priv)
{
	struct admin_op *op = priv;
	redisReply *reply = r;
	char why[256];

	if (op->finished || !reply || reply->type != REDIS_REPLY_ERROR)
		return;
	snprintf(why, sizeof(why), "Redis AUTH failed: %s", reply->str);
	admin_finish(op, why);
}

/* The connection to `to` for this operation, opened on first use. */
static struct redis_conn *admin_conn(struct admin_op *op, const struct redis_config *cfg,
				     const struct addr *to)
{
	const char *argv[3];
	size_t argvlen[3];
	char why[160];
	int argc;
	struct redis_conn *ac;

	for (size_t i = 0; i < op->nconns; i++)
		if (addr_equal(&op->conn[i].addr, to))
			return op->conn[i].ac;
	if (op->nconns == ADMIN_CONNS_MAX)
		return NULL;
	ac = redis_conn_new(op->a->loop, redis_transport_new(cfg), to, NULL, op, why, sizeof(why));
	if (!ac)
		return NULL;
	op->conn[op->nconns].addr = *to;
	op->conn[op->nconns++].ac = ac;
	argc = redis_node_auth_argv(cfg, argv, argvlen);
	if (argc)
		redis_conn_command(ac, on_admin_auth, op, argc, argv, argvlen);
	return ac;
}

/* An override set: KEYS[1] the fleet's hash, KEYS[2] its version,
 * ARGV[1] the most entries the hash may hold, then fields and values.
 * The fields set, and the version +1, for every agent's poll to see; or,
 * when new fields would take the hash past the most, nothing but an
 * error "FULL <entries>". (Expired entries count until an agent's poll
 * takes them out, within about a second of their end.) */
static const char put_script[] =
	"local new = 0\n"
	"for i = 2, #ARGV, 2 do\n"
	"  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then new = new + 1 end\n"
	"end\n"
	"local held = redis.call('HLEN', KEYS[1])\n"
	"if new > 0 and held + new > tonumber(ARGV[1]) then\n"
	"  return redis.error_reply('FULL ' .. held)\n"
	"end\n"
	"redis.call('HSET', KEYS[1], unpack(ARGV, 2))\n"
	"return redis.call('INCR', KEYS[2])\n";

/* The reply to an override set (put_script) or removed (HDEL, then INCR
 * of the version, redis_overrides_key). */
static void on_override_reply(struct redis_conn *ac, redisReply *r, void *priv)
{
	struct admin_op *op = priv;
	redisReply *reply = r;
	char why[256];

	if (op->finished)
		return;
	if (!reply) {
		admin_reply(op, redis_conn_errstr(ac));
		return;
	}
	if (reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "FULL ", 5) == 0) {
		snprintf(why, sizeof(why), "at most %d operator overrides are kept, and Redis "
			 "holds %.20s: DELETE some, or let those with a ttl end", OVERRIDES_MAX,
			 reply->str + 5);
		op->a->status = 409;
		admin_reply(op, why);
		return;
	}
	if (reply->type == REDIS_REPLY_ERROR) {
		snprintf(why, sizeof(why), "Redis: %s", reply->str);
		admin_reply(op, why);
		return;
	}
	admin_reply(op, NULL);
}

static void override_op(struct admin_op *op, const struct redis_config *cfg,
			redis_admin_locate_fn *locate)
{
	struct store_admin *a = op->a;
	size_t argc = 0, nv = a->ov_remove ? 1 : 2;
	const char **argv = xcalloc(6 + nv * a->nov, sizeof(*argv));
	size_t *argvlen = xcalloc(6 + nv * a->nov, sizeof(*argvlen));
	char (*field)[2 * IDENTITY_KEY_LEN + 1] = xcalloc(a->nov + 1, sizeof(*field));
	char (*value)[OVERRIDE_VALUE_MAX] = xcalloc(a->nov + 1, sizeof(*value));
	char hash[REDIS_OVERRIDES_KEY_MAX], ver[REDIS_OVERRIDES_KEY_MAX], most[16];
	const char *incr[2] = { "INCR", ver };
	size_t incrlen[2] = { 4, 0 };
	struct redis_conn *ac = NULL;
	struct addr to;

	if (!argv || !argvlen || !field || !value) {
		snprintf(a->error, sizeof(a->error), "out of memory");
		goto out;
	}
	if (locate(op->st, redis_overrides_at, &to) < 0) {
		snprintf(a->error, sizeof(a->error), "no Redis node known yet");
		goto out;
	}
	if (!(ac = admin_conn(op, cfg, &to))) {
		snprintf(a->error, sizeof(a->error), "cannot connect to Redis");
		goto out;
	}
	incrlen[1] = redis_overrides_key(true, ver);
	if (a->ov_remove) {
		argv[argc] = "HDEL";
		argvlen[argc++] = 4;
		argv[argc] = hash;
		argvlen[argc++] = redis_overrides_key(false, hash);
	} else {
		argv[argc] = "EVAL";
		argvlen[argc++] = 4;
		argv[argc] = put_script;
		argvlen[argc++] = sizeof(put_script) - 1;
		argv[argc] = "2";
		argvlen[argc++] = 1;
		argv[argc] = hash;
		argvlen[argc++] = redis_overrides_key(false, hash);
		argv[argc] = ver;
		argvlen[argc++] = incrlen[1];
		argv[argc] = most;
		argvlen[argc++] = (size_t)snprintf(most, sizeof(most), "%d", OVERRIDES_MAX);
	}
	for (size_t i = 0; i < a->nov; i++) {
		overrides_field(a->ov[i].key, field[i]);
		argv[argc] = field[i];
		argvlen[argc++] = 2 * IDENTITY_KEY_LEN;
		if (!a->ov_remove) {
			argv[argc] = value[i];
			argvlen[argc++] = overrides_value(&a->ov[i], value[i]);
		}
	}
	if (redis_conn_command(ac, on_override_reply, op, (int)argc, argv, argvlen) == 0)
		op->pending++;
	if (a->ov_remove &&
	    redis_conn_command(ac, on_override_reply, op, 2, incr, incrlen) == 0)
		op->pending++;
out:
	xfree(argv);
	xfree(argvlen);
	xfree(field);
	xfree(value);
}

void redis_admin(struct store *st, struct store_admin *a, const struct redis_config *cfg,
		 redis_admin_locate_fn *locate)
{
	struct admin_op *op = xcalloc(1, sizeof(*op));

	if (!op || !(op->calls = xcalloc(a->n ? a->n : 1, sizeof(*op->calls)))) {
		xfree(op);
		snprintf(a->error, sizeof(a->error), "out of memory");
		store_admin_done(st, a);
		return;
	}
	op->st = st;
	op->a = a;
	op->keys = &cfg->keys;
	_Static_assert(REDIS_KEY_TAG_MAX < STORE_ADMIN_LABEL_MAX, "a tag fits the label");
	for (size_t i = 0; i < a->n; i++)
		redis_key_tag(&cfg->keys, a->item[i].key, a->item[i].label);
	ev_timer_init(&op->timer, on_admin_timeout, ADMIN_TIMEOUT, 0.);
	op->timer.data = op;
	/* each item's replies count before any can arrive */
	op->pending = 1;
	if (a->override)
		override_op(op, cfg, locate);
	for (size_t i = 0; !a->override && i < a->n; i++) {
		const struct rule *rule = a->item[i].rule;
		char key[LIMIT_SET_MAX][REDIS_KEY_NAME_MAX + 1], nkeys[8];
		const char *argv[3 + LIMIT_SET_MAX];
		size_t argvlen[3 + LIMIT_SET_MAX], argc = 0;
		bool packed = false;
		struct addr to;
		struct redis_conn *ac;

		op->calls[i].op = op;
		op->calls[i].item = i;
		op->calls[i].ttl = -2;
		if (!rule->nown) {
			a->item[i].found = a->reset ? STORE_ADMIN_DELETED : STORE_ADMIN_RAW;
			a->item[i].has_ttl = !a->reset;
			a->item[i].ttl_ms = -2;
			continue;
		}
		if (locate(st, a->item[i].key, &to) < 0) {
			snprintf(a->error, sizeof(a->error), "no Redis node known for this client yet");
			break;
		}
		ac = admin_conn(op, cfg, &to);
		if (!ac) {
			snprintf(a->error, sizeof(a->error), "cannot connect to Redis");
			break;
		}
		/* the client's keys under its rule, one per limit (one slot):
		 * MGET or DEL, or the library's rl8_peek or rl8_forget, which
		 * read and delete packed buckets too, with the same replies */
		for (size_t j = 0; j < rule->nown; j++)
			packed |= redis_key_packed(&cfg->keys, &rule->limits[j]);
		if (packed) {
			argv[argc++] = "FCALL";
			argv[argc++] = a->reset ? "rl8_forget" : "rl8_peek";
			argv[argc++] = nkeys;
			snprintf(nkeys, sizeof(nkeys), "%zu", rule->nown);
		} else {
			argv[argc++] = a->reset ? "DEL" : "MGET";
		}
		for (size_t j = 0; j < argc; j++)
			argvlen[j] = strlen(argv[j]);
		for (size_t j = 0; j < rule->nown; j++) {
			argv[argc] = key[j];
			argvlen[argc++] = redis_key_name(&cfg->keys, a->item[i].key, rule->lidh[j],
							 &rule->limits[j], key[j]);
		}
		if (redis_conn_command(ac, on_admin_main, &op->calls[i], (int)argc, argv,
				       argvlen) == 0)
			op->pending++;
		for (size_t j = 0; !a->reset && j < rule->nown; j++) {
			const char *pttl[2] = { "PTTL", key[j] };
			size_t pttllen[2] = { 4, redis_key_held_len(&cfg->keys, &rule->limits[j],
								    strlen(key[j])) };

			if (redis_conn_command(ac, on_admin_ttl, &op->calls[i], 2, pttl,
					       pttllen) == 0) {
				op->pending++;
				op->calls[i].ttl_left++;
			}
		}
	}
	if (a->error[0]) {
		admin_finish(op, NULL);
		return;
	}
	ev_timer_start(a->loop, &op->timer);
	admin_reply(op, NULL); /* the count's own 1 */
}
