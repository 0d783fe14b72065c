/* SPDX-License-Identifier: Apache-2.0 */
/* redis_sentinel.c: the master's address from Redis Sentinel (see
 * redis_sentinel.h).
 *
 * Three short-lived or lasting connections (redis_conn.h), each with its
 * owner pointing here (cleared before the module frees them, so a late
 * callback finds NULL and returns):
 *   ask_ac   to one sentinel: SENTINEL get-master-addr-by-name, then closed
 *   role_ac  to the server it named: ROLE, then closed
 *   sub_ac   to one sentinel: SUBSCRIBE +switch-master, kept
 * A reply callback with a NULL reply means the connection is being freed
 * (it failed or was lost): the pointer is dropped, never freed again. */
#include "redis_sentinel.h"

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "log.h"
#include "redis_auth.h"
#include "redis_conn.h"
#include "redis_node.h"
#include "redis_transport.h"
#include "store_redis.h"

#define ASK_MIN_GAP_US 100000  /* asks at most this often */
#define BACKOFF_MIN 0.05
#define BACKOFF_MAX 1.0
#define RESUBSCRIBE 0.5
#define SWITCH_CHANNEL "+switch-master"

struct redis_sentinel {
	struct ev_loop *loop;
	int worker;
	const struct redis_config *cfg;
	const struct redis_sentinel_cb *cb;
	void *owner;
	size_t next;                /* the sentinel to ask next */
	struct redis_conn *ask_ac;
	struct redis_conn *role_ac;
	struct addr candidate;      /* named by a sentinel, ROLE not checked yet */
	struct redis_conn *sub_ac;
	size_t sub_idx;
	ev_timer ask_w;
	ev_timer sub_w;
	bool asking;                /* an ask or ROLE check is under way */
	int64_t last_ask;
	double backoff;
	bool have_master;
	struct addr master;
};

static void start_ask(struct redis_sentinel *s);
static void subscribe(struct redis_sentinel *s);

/* A connection on the worker's loop to `a`, data = s; NULL after logging.
 * A sentinel's is plain with store.sentinel_tls: false, the servers' not. */
static struct redis_conn *connect_to(struct redis_sentinel *s, const struct addr *a,
				     bool sentinel)
{
	char why[160];
	bool plain = sentinel && s->cfg->tls.sentinel_plain;
	struct redis_conn *ac = redis_conn_new(s->loop, redis_transport_new(plain ? NULL : s->cfg),
					       a, NULL, s, why, sizeof(why));

	if (!ac)
		log_warn("redis: sentinel: worker %d: cannot connect to %s:%s: %s", s->worker,
			 a->host, a->port, why);
	return ac;
}

/* AUTH to a sentinel, when the configuration has a sentinel password. */
static void sentinel_auth(struct redis_sentinel *s, struct redis_conn *ac)
{
	const char *argv[3];
	size_t argvlen[3];
	char password[sizeof(s->cfg->sentinel_password)];
	int n = 0;

	/* the one in force: a reload may have changed it */
	redis_auth_sentinel_password(s->cfg, password, sizeof(password));
	if (!password[0])
		return;
	argv[n] = "AUTH";
	argvlen[n++] = 4;
	if (s->cfg->sentinel_user[0]) {
		argv[n] = s->cfg->sentinel_user;
		argvlen[n++] = strlen(s->cfg->sentinel_user);
	}
	argv[n] = password;
	argvlen[n++] = strlen(password);
	redis_conn_command(ac, NULL, NULL, n, argv, argvlen);
	memset(password, 0, sizeof(password));
}

/* Closes a connection this module still holds (not one being freed):
 * once its replies are in; with `now`, at once (its callbacks see a NULL
 * owner and return). */
static void drop(struct redis_conn **acp, bool now)
{
	struct redis_conn *ac = *acp;

	*acp = NULL;
	if (!ac)
		return;
	redis_conn_set_owner(ac, NULL);
	if (now)
		redis_conn_free(ac);
	else
		redis_conn_disconnect(ac);
}

/* ---- asking ------------------------------------------------------------- */

static void schedule_ask(struct redis_sentinel *s, double after)
{
	ev_timer_stop(s->loop, &s->ask_w);
	ev_timer_set(&s->ask_w, after, 0.);
	ev_timer_start(s->loop, &s->ask_w);
}

/* This sentinel (or the server it named) did not give a master: the next
 * sentinel is asked after a backoff. */
static void ask_failed(struct redis_sentinel *s, const char *why)
{
	log_warn("redis: sentinel: worker %d: %s:%s: %s", s->worker,
		 s->cfg->nodes[s->next].host, s->cfg->nodes[s->next].port, why);
	s->asking = false;
	s->next = (s->next + 1) % s->cfg->nnodes;
	schedule_ask(s, s->backoff);
	s->backoff *= 2;
	if (s->backoff > BACKOFF_MAX)
		s->backoff = BACKOFF_MAX;
}

static void on_role(struct redis_conn *ac, redisReply *reply, void *priv)
{
	struct redis_sentinel *s = redis_conn_owner(ac);
	char where[ADDR_HOST_MAX + 16];

	if (!s)
		return;
	if (!reply) {
		/* the connection failed or closed before an answer */
		if (s->role_ac == ac)
			s->role_ac = NULL;
		ask_failed(s, "the master it names does not answer");
		return;
	}
	drop(&s->role_ac, false);
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
	    reply->element[0]->type != REDIS_REPLY_STRING ||
	    strcmp(reply->element[0]->str, "master") != 0) {
		ask_failed(s, "the server it names is not a master (yet)");
		return;
	}
	s->asking = false;
	s->backoff = BACKOFF_MIN;
	if (s->have_master && addr_equal(&s->master, &s->candidate))
		return;
	s->have_master = true;
	s->master = s->candidate;
	log_info("redis: sentinel: worker %d: master %s is %s", s->worker, s->cfg->master,
		 addr_format(&s->master, where, sizeof(where)));
	s->cb->master(s->owner, &s->master);
}

/* Confirms with ROLE that the server a sentinel named is a master. */
static void check_role(struct redis_sentinel *s)
{
	const char *argv[3];
	size_t argvlen[3];
	int n = redis_node_auth_argv(s->cfg, argv, argvlen);

	s->role_ac = connect_to(s, &s->candidate, false);
	if (!s->role_ac) {
		ask_failed(s, "cannot reach the master it names");
		return;
	}
	if (n)
		redis_conn_command(s->role_ac, NULL, NULL, n, argv, argvlen);
	redis_conn_command(s->role_ac, on_role, NULL, 1, (const char *[]){ "ROLE" },
			   (const size_t[]){ 4 });
}

static void on_master_addr(struct redis_conn *ac, redisReply *reply, void *priv)
{
	struct redis_sentinel *s = redis_conn_owner(ac);
	char text[ADDR_HOST_MAX + 16];

	if (!s)
		return;
	if (!reply) {
		if (s->ask_ac == ac)
			s->ask_ac = NULL;
		ask_failed(s, "no answer");
		return;
	}
	drop(&s->ask_ac, false);
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
	    reply->element[0]->type != REDIS_REPLY_STRING ||
	    reply->element[1]->type != REDIS_REPLY_STRING) {
		ask_failed(s, reply->type == REDIS_REPLY_ERROR ? reply->str
							       : "does not know the master");
		return;
	}
	/* ip and port as separate strings; an IPv6 address has colons */
	snprintf(text, sizeof(text), strchr(reply->element[0]->str, ':') ? "[%s]:%s" : "%s:%s",
		 reply->element[0]->str, reply->element[1]->str);
	if (addr_parse(text, 0, &s->candidate) < 0) {
		ask_failed(s, "names an address that does not parse");
		return;
	}
	check_role(s);
}

static void start_ask(struct redis_sentinel *s)
{
	const struct addr *a = &s->cfg->nodes[s->next];

	if (s->asking)
		return;
	s->asking = true;
	s->last_ask = clock_now_us();
	s->ask_ac = connect_to(s, a, true);
	if (!s->ask_ac) {
		ask_failed(s, "cannot connect");
		return;
	}
	sentinel_auth(s, s->ask_ac);
	redis_conn_command(s->ask_ac, on_master_addr, NULL, 3,
			   (const char *[]){ "SENTINEL", "get-master-addr-by-name", s->cfg->master },
			   (const size_t[]){ 8, 23, strlen(s->cfg->master) });
}

static void on_ask_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_sentinel *s = t->data;

	start_ask(s);
	if (!s->sub_ac && !ev_is_active(&s->sub_w))
		subscribe(s);
}

void redis_sentinel_ask(struct redis_sentinel *s)
{
	int64_t now = clock_now_us();

	if (s->asking || ev_is_active(&s->ask_w))
		return;
	if (now - s->last_ask < ASK_MIN_GAP_US)
		schedule_ask(s, (double)(s->last_ask + ASK_MIN_GAP_US - now) / 1e6);
	else
		start_ask(s);
}

/* ---- following failovers ------------------------------------------------ */

static void on_switch(struct redis_conn *ac, redisReply *reply, void *priv)
{
	struct redis_sentinel *s = redis_conn_owner(ac);
	size_t mlen;

	if (!s)
		return;
	if (!reply) {
		/* lost: subscribe on the next sentinel a little later */
		if (redis_conn_lost(ac))
			log_warn("redis: sentinel: worker %d: %s:%s: the subscription to %s went: %s",
				 s->worker, s->cfg->nodes[s->sub_idx].host,
				 s->cfg->nodes[s->sub_idx].port, SWITCH_CHANNEL, redis_conn_errstr(ac));
		if (s->sub_ac == ac)
			s->sub_ac = NULL;
		s->sub_idx = (s->sub_idx + 1) % s->cfg->nnodes;
		ev_timer_set(&s->sub_w, RESUBSCRIBE, 0.);
		ev_timer_start(s->loop, &s->sub_w);
		return;
	}
	/* ["message", "+switch-master", "<name> <old ip> <old port> <new ip> <new port>"] */
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
	    reply->element[0]->type != REDIS_REPLY_STRING ||
	    strcmp(reply->element[0]->str, "message") != 0 ||
	    reply->element[2]->type != REDIS_REPLY_STRING)
		return;
	mlen = strlen(s->cfg->master);
	if (reply->element[2]->len > mlen && reply->element[2]->str[mlen] == ' ' &&
	    memcmp(reply->element[2]->str, s->cfg->master, mlen) == 0) {
		log_info("redis: sentinel: worker %d: %s announced: %s", s->worker, SWITCH_CHANNEL,
			 reply->element[2]->str);
		/* ask the sentinel that announced it, now */
		ev_timer_stop(s->loop, &s->ask_w);
		s->backoff = BACKOFF_MIN;
		s->next = s->sub_idx;
		start_ask(s);
	}
}

static void subscribe(struct redis_sentinel *s)
{
	s->sub_ac = connect_to(s, &s->cfg->nodes[s->sub_idx], true);
	if (!s->sub_ac) {
		s->sub_idx = (s->sub_idx + 1) % s->cfg->nnodes;
		ev_timer_set(&s->sub_w, RESUBSCRIBE, 0.);
		ev_timer_start(s->loop, &s->sub_w);
		return;
	}
	sentinel_auth(s, s->sub_ac);
	redis_conn_subscribe(s->sub_ac, on_switch, NULL, 2,
			     (const char *[]){ "SUBSCRIBE", SWITCH_CHANNEL },
			     (const size_t[]){ 9, sizeof(SWITCH_CHANNEL) - 1 });
}

static void on_sub_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct redis_sentinel *s = t->data;

	if (!s->sub_ac)
		subscribe(s);
}

/* ---- life ----------------------------------------------------------------- */

struct redis_sentinel *redis_sentinel_new(struct ev_loop *loop, int worker,
					  const struct redis_config *cfg,
					  const struct redis_sentinel_cb *cb, void *owner)
{
	struct redis_sentinel *s = xcalloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->loop = loop;
	s->worker = worker;
	s->cfg = cfg;
	s->cb = cb;
	s->owner = owner;
	s->backoff = BACKOFF_MIN;
	/* workers start on different sentinels: the load spreads */
	s->next = (size_t)worker % cfg->nnodes;
	s->sub_idx = s->next;
	ev_timer_init(&s->ask_w, on_ask_timer, 0., 0.);
	s->ask_w.data = s;
	ev_timer_init(&s->sub_w, on_sub_timer, 0., 0.);
	s->sub_w.data = s;
	start_ask(s);
	subscribe(s);
	return s;
}

void redis_sentinel_free(struct redis_sentinel *s)
{
	if (!s)
		return;
	ev_timer_stop(s->loop, &s->ask_w);
	ev_timer_stop(s->loop, &s->sub_w);
	drop(&s->ask_ac, true);
	drop(&s->role_ac, true);
	drop(&s->sub_ac, true);
	xfree(s);
}
