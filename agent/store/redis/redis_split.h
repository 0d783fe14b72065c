/* SPDX-License-Identifier: Apache-2.0 */
/* redis_split.h: a decision whose keys live on several Redis servers.
 *
 * A rule with layers on a Cluster or shards: a layer's keys (one for every
 * client, one per address) live where their own tag says, often not with
 * the client's. Such a decision is made in parts, one per part of the
 * rule (its own limits, each layer's), each decided on its own server,
 * all or nothing there, at once; the decision is allowed when every part
 * is. When a part refuses or cannot be decided, the parts that took are
 * given back (the library's rl8_refund, without waiting: never sent
 * twice): tokens, a window's count, a log's entry, a concurrency place
 * (the refund names the request's id). So no limit ever lets through more
 * than it allows; what it
 * costs is a window of about one round trip in which tokens a refused
 * decision took are not yet back, during which another request may be
 * refused that would have passed (and a refund that is lost, counted,
 * holds its tokens until they refill).
 *
 * The owner (the Redis store) sends the parts, gives back, and receives
 * the outcome through the callbacks it passes; this module only keeps
 * the parts' results and puts them together. */
#ifndef RL_REDIS_SPLIT_H
#define RL_REDIS_SPLIT_H

#include "redis_node.h"

struct redis_split_cb {
	/* Sends part r (r->split, r->part set) where its keys live. Returns 0,
	 * or -1 when it cannot be sent (nothing taken). */
	int (*send)(void *owner, const struct redis_query *r);
	/* Gives back what part r took at redis_now. */
	void (*refund)(void *owner, const struct redis_query *r, int64_t redis_now);
	/* The decision: res NULL when it could not be made (decider
	 * STORE_SATURATED: a part's deadline passed while its server kept
	 * answering, else the failure policy answers), else res[0..q->nlimits) and the deciding limit. */
	void (*done)(void *owner, const struct decide_query *q, const struct store_ref *ref,
		     const struct limit_result *res, int decider);
};

/* Starts the decision of r in parts. Returns 0, or -1 when no part could
 * be sent (nothing taken: r is the caller's to answer). */
int redis_split_start(const struct redis_query *r, const struct redis_split_cb *cb,
		      void *owner);

/* The outcome of part r (res NULL: not decided, decider STORE_SATURATED
 * or -1 as in store_complete(); redis_now, Redis's clock
 * of a decided part). The last part's outcome ends the decision. */
void redis_split_part(const struct redis_query *r, const struct limit_result *res, int decider,
		      int64_t redis_now);

#endif
