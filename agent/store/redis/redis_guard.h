/* redis_guard.h: hiredis's reply builders, bounded and guarded, for
 * every hiredis context the store opens (decisions, the admin's, the
 * sentinels', the overrides').
 *
 * hiredis 0.14 trusts the server in three ways that let one bad reply
 * take the whole agent down; the guards refuse each such reply while the
 * reader builds it, before hiredis dispatches it:
 *  - an array larger than REDIS_GUARD_ELEMENTS_MAX: hiredis allocates
 *    whatever count a server announces (a decision's reply is one
 *    string; the admin's MGET has a key per limit, the overrides come in
 *    pages);
 *  - a reply no command waits for: hiredis asserts that a context with
 *    no callback waiting is subscribed, and aborts the process;
 *  - on a subscribed context, a message that is not an array of at least
 *    3 whose first two are strings (and third an integer for an
 *    unsubscription): hiredis asserts that too.
 * A refused reply is a reader error: the connection alone is dropped,
 * and redis_guard_errstr() says why (the reader calls any refusal "Out
 * of memory"). The guards do no I/O and keep no state but that cause. */
#ifndef RL_REDIS_GUARD_H
#define RL_REDIS_GUARD_H

#include <hiredis/async.h>
#include <hiredis/read.h>

#define REDIS_GUARD_ELEMENTS_MAX 65536

/* Puts the guards on a new context's reader. */
void redis_guard_attach(redisAsyncContext *ac);

/* The same on a bare reader whose replies are for ac (its callbacks and
 * flags are read, never written; NULL: the bound alone), made with
 * hiredis's own builders (redisReaderCreate). For tests. */
void redis_guard_reader(redisReader *r, const redisAsyncContext *ac);

/* Why reader r, set up by redis_guard_reader(r, NULL), stopped on a
 * refusal of the guards (what the reader itself calls "Out of memory"),
 * or NULL when it did not. Right after the feed or read that failed, on
 * r's thread. */
const char *redis_guard_refusal(const redisReader *r);

/* Why ac failed, for a log or an answer: the cause a guard found, else
 * ac's own error. Valid while ac is, on ac's thread. */
const char *redis_guard_errstr(const redisAsyncContext *ac);

#endif
