/* SPDX-License-Identifier: Apache-2.0 */
/* redis_node_int.h: a node's insides, shared by redis_node.c (the
 * connection, sending, replies) and redis_deadline.c (deadlines and the
 * breaker's judgement of silence). Nothing else includes it. */
#ifndef RL_REDIS_NODE_INT_H
#define RL_REDIS_NODE_INT_H

#include "redis_breaker.h"
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
	struct redis_conn *conn;     /* NULL while disconnected */
	enum node_state state;
	double backoff;
	ev_timer reconnect_w;
	ev_timer deadline_w;
	int64_t due;                 /* when deadline_w is due; 0 idle */
	ev_prepare send_w;
	/* Answers given before the loop blocks (in send_w: a send that
	 * failed, a query past its deadline) go out in one more turn of the
	 * loop: the owner's prepare watcher that writes them may have run
	 * already in this one, and nothing else would wake the loop. */
	ev_idle kick_w;
	unsigned answers;            /* answers given without Redis, counted */
	/* queue of unsent queries: a ring of cfg->max_pending */
	struct redis_query *queue;
	size_t qhead, qlen;
	size_t inflight;             /* queries sent, not answered */
	int calls;                   /* script calls sent, reply not back */
	struct rbatch *oldest, *newest;
	struct redis_decision *decoded; /* a batch's decoded reply */
	struct redis_breaker breaker;
	bool down;                   /* the last connection or handshake failed:
				      * decisions go to the failure policy at
				      * once until the node is ready again */
	int64_t down_since;          /* when down was last set */
	bool freeing;                /* redis_node_free() under way */
	bool refused;                /* this connection's handshake failed: what
				      * it still answers is ignored */
	int *shared_calls;           /* calls in flight of all the owner's nodes */
	ev_timer handshake_w;        /* connecting and loading the library */
	struct redis_batch_enc enc;  /* the calls' encoder */
	struct redis_stats *stats;
	bool cluster;                /* rl8_decide_cluster (see redis_batch.h) */
	bool evicting;               /* the connection's last look at the server's
				      * eviction found it evicting */
	ev_timer eviction_w;         /* the next look, armed by each answered one */
	char name[ADDR_HOST_MAX + 16]; /* the address, for logs */
};

/* The failure policy answers r (sent: it was in a call). */
void redis_node_answer_degraded(struct redis_node *rn, const struct redis_query *r, bool sent);

/* Every query of b not answered yet goes to the failure policy. */
void redis_node_fail_batch(struct redis_node *rn, struct rbatch *b);

/* (Re)arms the deadline watcher for the next deadline, or the breaker's
 * next look. */
void redis_node_arm_deadline(struct redis_node *rn);

/* The deadline watcher's callback. */
void redis_node_on_deadline(struct ev_loop *loop, ev_timer *t, int revents);

#endif
