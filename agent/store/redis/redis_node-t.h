/* redis_node-t.h: a Redis node's state, shared by the node's two halves:
 * redis_node.c (connection, library, replies, deadlines) and redis_send.c
 * (batches and the calls that carry them). Nothing else includes it: the
 * node's users see redis_node.h. */
#ifndef RL_REDIS_NODE_T_H
#define RL_REDIS_NODE_T_H

#include <ev.h>
#include <hiredis/async.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "redis_node.h"

enum node_state {
	NODE_DISCONNECTED,
	NODE_CONNECTING,   /* connected or not, the library is not loaded yet */
	NODE_READY,
};

struct rbatch {
	struct redis_node *rn;
	struct rbatch *prev, *next;  /* in flight, oldest first */
	int answered;                /* its queries were answered degraded */
	int retried;                 /* sent again after the library was loaded again */
	int64_t sent;
	size_t n;
	struct redis_query rq[];
};

struct redis_node {
	struct ev_loop *loop;
	int worker;                  /* index, for logs */
	struct addr addr;
	const struct redis_config *cfg;
	const struct redis_node_cb *cb;
	void *owner;
	redisAsyncContext *ac;
	enum node_state state;
	double backoff;
	ev_timer reconnect_w;
	ev_timer deadline_w;
	ev_prepare send_w;
	/* queue of unsent queries: a ring of cfg->max_pending */
	struct redis_query *queue;
	size_t qhead, qlen;
	size_t inflight;             /* queries sent, not answered */
	int calls;                   /* script calls sent, reply not back */
	struct rbatch *oldest, *newest;
	struct redis_decision *decoded; /* a batch's decoded reply */
	int fails;                   /* calls in a row that failed */
	int64_t open_until;          /* breaker open: the next probe then */
	int probing;                 /* a probe is in flight */
	bool down;                   /* the last connection or handshake failed:
				      * decisions go to the failure policy at
				      * once until the node is ready again */
	int64_t down_since;          /* when down was last set */
	bool freeing;                /* redis_node_free() under way */
	int *shared_calls;           /* calls in flight of all the owner's nodes */
	ev_timer handshake_w;        /* connecting and loading the library */
	/* argv of one call */
	const char **argv;
	size_t *argvlen;
	char *arena;                 /* the bytes of the argv */
	size_t arena_cap;
	char *cmd;                   /* the call's RESP (cheaper than hiredis's) */
	size_t cmd_cap;
	struct redis_stats *stats;
	bool cluster;                /* rl7_decide_cluster (see redis_send_batch) */
	bool evicting;               /* the connection's last look at the server's
				      * eviction found it evicting */
	ev_timer eviction_w;         /* the next look, armed by each answered one */
	char name[ADDR_HOST_MAX + 16]; /* the address, for logs */
};

/* The node's side, for redis_send.c. */

/* The reply callback of a batch's call (priv: the batch). */
void redis_node_on_batch_reply(redisAsyncContext *ac, void *r, void *priv);
/* Takes b out of the list of batches in flight. */
void redis_node_unlink_batch(struct redis_node *rn, struct rbatch *b);
/* Answers b's queries degraded, once. */
void redis_node_fail_batch(struct redis_node *rn, struct rbatch *b);
/* Sets the deadline timer to the earliest deadline queued or in flight. */
void redis_node_arm_deadline(struct redis_node *rn);

#endif
