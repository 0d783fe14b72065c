/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: hiredis's reader under the guard (redis_guard.c): what a
 * server sends. Reading must never go out of bounds, no reply the guard
 * lets through holds an array larger than its bound, and a reader stopped
 * by the guard says why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "redis_guard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const redisReply *r)
{
	if (r->type != REDIS_REPLY_ARRAY)
		return;
	if (r->elements > REDIS_GUARD_ELEMENTS_MAX)
		abort();
	for (size_t i = 0; i < r->elements; i++)
		check(r->element[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	redisReader *r = redisReaderCreate();
	void *reply;
	int rc;

	if (!r)
		return 0;
	redis_guard_reader(r);
	rc = redisReaderFeed(r, (const char *)data, size);
	while (rc == REDIS_OK && (rc = redisReaderGetReply(r, &reply)) == REDIS_OK && reply) {
		check(reply);
		freeReplyObject(reply);
	}
	/* the guard's refusals are the reader's only "out of memory" here */
	if (rc != REDIS_OK && r->err == REDIS_ERR_OOM && !redis_guard_refusal(r))
		abort();
	redisReaderFree(r);
	return 0;
}
