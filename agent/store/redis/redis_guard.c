/* redis_guard.c: hiredis's reply builders, bounded and guarded (see
 * redis_guard.h). The builders see their context through the reader's
 * private pointer. */
#include "redis_guard.h"

#include <ctype.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static redisReplyObjectFunctions bounded_fn;
static const redisReplyObjectFunctions *hiredis_fn;
static pthread_once_t bounded_once = PTHREAD_ONCE_INIT;

static _Thread_local struct {
	const redisAsyncContext *ac;
	char why[128];
} refused;

/* Keeps why a reply part of ac was refused; returns false. */
static __attribute__((format(printf, 2, 3))) bool refuse(const redisAsyncContext *ac,
							 const char *fmt, ...)
{
	va_list ap;

	refused.ac = ac;
	va_start(ap, fmt);
	vsnprintf(refused.why, sizeof(refused.why), fmt, ap);
	va_end(ap);
	return false;
}

/* Whether the reply part task begins (of type `type`, `elements` for an
 * array) may be built; when not, the cause is kept (refused). */
static bool reply_wanted(const redisReadTask *task, int type, long long elements)
{
	const redisAsyncContext *ac = task->privdata;
	const redisReadTask *root = task->parent;
	const redisReply *msg;
	const char *kind;

	if (type == REDIS_REPLY_ARRAY && (elements < 0 || elements > REDIS_GUARD_ELEMENTS_MAX))
		return refuse(ac, "a reply of %lld elements, more than the %d allowed", elements,
			      REDIS_GUARD_ELEMENTS_MAX);
	if (!ac)
		return true;
	/* a reply, or a part of one: the replies before it were dispatched
	 * already, so a callback waiting now is the one it will get */
	if (ac->replies.head)
		return true;
	if (!(ac->c.flags & REDIS_SUBSCRIBED))
		return root || refuse(ac, "an unsolicited reply (no command waits for one)");
	/* subscribed: a message (or a reply to a command refused there) */
	if (!root && type == REDIS_REPLY_ARRAY)
		return elements >= 3 ||
		       refuse(ac, "a message of %lld elements on a subscribed connection", elements);
	if (!root)
		return ac->sub.invalid.head ||
		       refuse(ac, "an unsolicited reply on a subscribed connection");
	if (root->parent)
		return true;
	/* a message's kind and channel (or pattern): strings */
	if (task->idx < 2)
		return type == REDIS_REPLY_STRING ||
		       refuse(ac, "a message whose kind or channel is no string");
	if (task->idx > 2)
		return true;
	/* an unsubscription's count, which hiredis reads as an integer */
	msg = root->obj;
	kind = msg->element[0]->str;
	kind += tolower((unsigned char)kind[0]) == 'p';
	return type == REDIS_REPLY_INTEGER || strcasecmp(kind, "unsubscribe") != 0 ||
	       refuse(ac, "an unsubscription whose count is no integer");
}

static void *guarded_string(const redisReadTask *task, char *str, size_t len)
{
	return reply_wanted(task, task->type, 0) ? hiredis_fn->createString(task, str, len) : NULL;
}

static void *guarded_array(const redisReadTask *task, int elements)
{
	return reply_wanted(task, REDIS_REPLY_ARRAY, elements)
		       ? hiredis_fn->createArray(task, elements) : NULL;
}

static void *guarded_integer(const redisReadTask *task, long long value)
{
	return reply_wanted(task, REDIS_REPLY_INTEGER, 0) ? hiredis_fn->createInteger(task, value)
							   : NULL;
}

static void *guarded_nil(const redisReadTask *task)
{
	return reply_wanted(task, REDIS_REPLY_NIL, 0) ? hiredis_fn->createNil(task) : NULL;
}

static const redisReplyObjectFunctions *defaults_of;

static void bounded_init(void)
{
	hiredis_fn = defaults_of;
	bounded_fn = *defaults_of;
	bounded_fn.createString = guarded_string;
	bounded_fn.createArray = guarded_array;
	bounded_fn.createInteger = guarded_integer;
	bounded_fn.createNil = guarded_nil;
}

/* Puts the guards on r, a reader made with hiredis's own builders. */
static void install(redisReader *r, const redisAsyncContext *ac)
{
	if (!r->fn)
		return;
	if (r->fn != &bounded_fn) {
		defaults_of = r->fn;
		pthread_once(&bounded_once, bounded_init);
		if (r->fn == hiredis_fn)
			r->fn = &bounded_fn;
	}
	r->privdata = (void *)(uintptr_t)ac;
}

void redis_guard_attach(redisAsyncContext *ac)
{
	if (refused.ac == ac)
		refused.ac = NULL; /* a new context where a freed one was */
	install(ac->c.reader, ac);
}

void redis_guard_reader(redisReader *r, const redisAsyncContext *ac)
{
	install(r, ac);
}

const char *redis_guard_refusal(const redisReader *r)
{
	if (r->err == REDIS_ERR_OOM && !r->privdata && !refused.ac && refused.why[0])
		return refused.why;
	return NULL;
}

const char *redis_guard_errstr(const redisAsyncContext *ac)
{
	if (refused.ac == ac && ac->err == REDIS_ERR_OOM)
		return refused.why;
	return ac->errstr[0] ? ac->errstr : "connection to Redis lost";
}
