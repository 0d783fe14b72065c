/* redis_send.h: the sending half of a Redis node: the queued queries
 * leave in batches, one FCALL each, written before the loop blocks. */
#ifndef RL_REDIS_SEND_H
#define RL_REDIS_SEND_H

#include <ev.h>

#include "redis_node-t.h"

/* Sends what is queued, in batches, as many calls as the pipeline admits. */
void redis_send_batches(struct redis_node *rn);
/* Sends batch b's call (again, after the library was loaded again).
 * Returns 0, or -1 when it could not be made or queued. */
int redis_send_batch(struct redis_node *rn, struct rbatch *b);
/* The node's ev_prepare: sends and writes before the loop blocks. */
void redis_send_on_prepare(struct ev_loop *loop, ev_prepare *p, int revents);

#endif
