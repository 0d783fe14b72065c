/* SPDX-License-Identifier: Apache-2.0 */
/* redis_guard.c: hiredis's reply builders, bounded (see redis_guard.h). */
#include "redis_guard.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

static redisReplyObjectFunctions bounded_fn;
static const redisReplyObjectFunctions *hiredis_fn;
static pthread_once_t bounded_once = PTHREAD_ONCE_INIT;

/* The last refusal on this thread, and the reader it was for. */
static _Thread_local struct {
	const redisReader *r;
	char why[128];
} refused;

static void *bounded_array(const redisReadTask *task, int elements)
{
	if (elements < 0 || elements > REDIS_GUARD_ELEMENTS_MAX) {
		refused.r = task->privdata;
		snprintf(refused.why, sizeof(refused.why),
			 "a reply of %d elements, more than the %d allowed", elements,
			 REDIS_GUARD_ELEMENTS_MAX);
		return NULL;
	}
	return hiredis_fn->createArray(task, elements);
}

static const redisReplyObjectFunctions *defaults_of;

static void bounded_init(void)
{
	hiredis_fn = defaults_of;
	bounded_fn = *defaults_of;
	bounded_fn.createArray = bounded_array;
}

void redis_guard_reader(redisReader *r)
{
	if (!r->fn)
		return;
	if (r->fn != &bounded_fn) {
		defaults_of = r->fn;
		pthread_once(&bounded_once, bounded_init);
		if (r->fn == hiredis_fn)
			r->fn = &bounded_fn;
	}
	r->privdata = r;
	if (refused.r == r)
		refused.r = NULL; /* a new reader where a freed one was */
}

const char *redis_guard_refusal(const redisReader *r)
{
	return r->err == REDIS_ERR_OOM && refused.r == r ? refused.why : NULL;
}
