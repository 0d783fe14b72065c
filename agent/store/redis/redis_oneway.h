/* SPDX-License-Identifier: Apache-2.0 */
/* redis_oneway.h: the calls a node sends without waiting for their
 * answer: a refund of a decision made in parts, a concurrency place given
 * back, a penalty's event, a lease's unspent tokens. Each is sent once and
 * never again, whatever comes back. Built on the node's public
 * redis_node_command(); only the worker's thread calls them. */
#ifndef RL_REDIS_ONEWAY_H
#define RL_REDIS_ONEWAY_H

#include <stddef.h>
#include <stdint.h>

#include "lease.h"
#include "redis_node.h"

/* Gives back to Redis what r took at redis_now (the library's
 * rl8_refund: every kind of state, a concurrency place and a log's entry
 * included), without waiting for the answer: a failure is counted
 * (refunds_lost), never retried, since a refund that ran twice would
 * give back twice. Returns 0 when sent, -1 when the node cannot send now. */
int redis_node_refund(struct redis_node *rn, const struct redis_query *r, int64_t redis_now);

/* Settles a charge of client key under rule (store_ops.charge) whose
 * estimate Redis took at take_us: delta > 0 more taken (the library's
 * rl8_charge), < 0 given back (rl8_refund, whose rules keep a limit from
 * being lifted), without waiting for the answer, sent once: a failure is
 * counted (charges_lost), never retried. Returns 0 when sent, else -1. */
int redis_node_charge(struct redis_node *rn, const struct rule *rule,
		      const uint8_t key[IDENTITY_KEY_LEN], int64_t take_us, int64_t delta);

/* Gives back the concurrency place of request id under limit j of rule
 * for client key (the library's rl8_release), without waiting for the
 * answer. Returns 0 when sent, -1 when the node cannot send now (the
 * place then ends at its deadline). */
int redis_node_release(struct redis_node *rn, const struct rule *rule, size_t j,
		       const uint8_t key[IDENTITY_KEY_LEN], uint64_t id);

/* Counts one event of rule's penalty for client key, and bans it when
 * they reach the penalty's limit (the library's rl8_penalize), without
 * waiting for the answer. Returns 0 when sent, -1 when the node cannot
 * send now (the event is not counted). */
int redis_node_penalize(struct redis_node *rn, const struct rule *rule,
			const uint8_t key[IDENTITY_KEY_LEN]);

/* Gives back a lease's unspent tokens (the library's rl8_return), without
 * waiting for the answer: sent once, never again. Returns 0 when sent, -1
 * when the node cannot send now (the tokens then refill in time). */
int redis_node_lease_return(struct redis_node *rn, const struct lease_return *ret);

#endif
