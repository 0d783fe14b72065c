/* SPDX-License-Identifier: Apache-2.0 */
/* redis_guard.h: hiredis's reply builders, bounded, for the reader of
 * every connection to Redis (redis_conn.c).
 *
 * hiredis 0.14 allocates whatever count of elements a server announces
 * for an array; the guard refuses an array larger than
 * REDIS_GUARD_ELEMENTS_MAX while the reader builds it (a decision's reply
 * is one string; the admin's MGET has a key per limit, the overrides come
 * in pages). A refusal is a reader error, which ends the connection alone;
 * redis_guard_refusal() says why (the reader calls any refusal "Out of
 * memory"). What no command waits for, and a subscription's malformed
 * messages, are the connection's to refuse (redis_conn.c). The guard does
 * no I/O and keeps no state but that cause. */
#ifndef RL_REDIS_GUARD_H
#define RL_REDIS_GUARD_H

#include <hiredis/read.h>

#define REDIS_GUARD_ELEMENTS_MAX 65536

/* Puts the bound on r, a reader made with hiredis's own builders
 * (redisReaderCreate). */
void redis_guard_reader(redisReader *r);

/* Why r stopped on a refusal of the guard, or NULL when it did not. Right
 * after the feed or read that failed, on r's thread. */
const char *redis_guard_refusal(const redisReader *r);

#endif
