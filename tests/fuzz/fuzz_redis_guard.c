/* Fuzz target: hiredis's reader under the guards (redis_guard.c). The
 * first byte sets the context's state: a callback waiting or not (bit 0),
 * subscribed or not (bit 1), a callback for commands refused while
 * subscribed or not (bit 2); the rest is what the server sends. Reading
 * must never go out of bounds, and every reply the guards let through
 * must be one hiredis 0.14 dispatches without an assertion: with no
 * callback waiting, nothing on a context not subscribed, and on a
 * subscribed one a message as hiredis reads it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <hiredis/hiredis.h>

#include "redis_guard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What hiredis's redisProcessCallbacks and __redisGetSubscribeCallback
 * assert of a reply that finds no callback waiting. */
static void check(const redisAsyncContext *ac, const redisReply *r)
{
	const char *kind;

	if (ac->replies.head)
		return;
	if (!(ac->c.flags & REDIS_SUBSCRIBED))
		abort();
	if (r->type != REDIS_REPLY_ARRAY) {
		if (!ac->sub.invalid.head)
			abort();
		return;
	}
	if (r->elements < 2 || r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_STRING)
		abort();
	kind = r->element[0]->str;
	kind += (kind[0] | 0x20) == 'p';
	if (strcasecmp(kind, "unsubscribe") == 0 &&
	    (r->elements < 3 || r->element[2]->type != REDIS_REPLY_INTEGER))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static redisAsyncContext ac;
	static redisCallback waiting;
	redisReader *r;
	void *reply;

	if (size < 1)
		return 0;
	memset(&ac, 0, sizeof(ac));
	ac.replies.head = data[0] & 1 ? &waiting : NULL;
	ac.c.flags = data[0] & 2 ? REDIS_SUBSCRIBED : 0;
	ac.sub.invalid.head = data[0] & 4 ? &waiting : NULL;
	r = redisReaderCreate();
	if (!r)
		return 0;
	redis_guard_reader(r, &ac);
	if (redisReaderFeed(r, (const char *)data + 1, size - 1) == REDIS_OK)
		while (redisReaderGetReply(r, &reply) == REDIS_OK && reply) {
			check(&ac, reply);
			freeReplyObject(reply);
		}
	redisReaderFree(r);
	return 0;
}
