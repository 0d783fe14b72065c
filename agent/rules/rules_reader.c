/* SPDX-License-Identifier: Apache-2.0 */
#include "rules_reader.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "rules.h"

/* One load, shared by its thread and the caller: whichever lets go last
 * frees it (refs), under its lock. */
struct rules_reader {
	pthread_mutex_t lock;
	pthread_cond_t cond;      /* on CLOCK_MONOTONIC: ready */
	int refs;
	int ready;
	int abandoned;
	void (*done)(void *);
	void *arg;
	struct rules *rules;      /* the result, until the caller takes it */
	char err[1024];
	char path[];
};

/* Loads given up on whose thread still runs. */
static atomic_int hung;

static void reader_free(struct rules_reader *rr)
{
	if (rr->rules)
		rules_release(rr->rules);
	pthread_cond_destroy(&rr->cond);
	pthread_mutex_destroy(&rr->lock);
	xfree(rr);
}

/* Drops one reference; the caller holds the lock, which this releases.
 * Frees rr when it was the last. */
static void reader_put(struct rules_reader *rr)
{
	int last = --rr->refs == 0;

	pthread_mutex_unlock(&rr->lock);
	if (last)
		reader_free(rr);
}

static void *reader_main(void *p)
{
	struct rules_reader *rr = p;
	char err[sizeof(rr->err)];
	struct rules *r = rules_load(rr->path, err, sizeof(err));

	pthread_mutex_lock(&rr->lock);
	rr->rules = r;
	memcpy(rr->err, err, sizeof(err));
	rr->ready = 1;
	if (rr->abandoned)
		atomic_fetch_sub(&hung, 1);
	else if (rr->done)
		rr->done(rr->arg); /* under the lock: never after an abandon */
	pthread_cond_broadcast(&rr->cond);
	reader_put(rr);
	return NULL;
}

struct rules_reader *rules_reader_start(const char *path, void (*done)(void *), void *arg,
					char *err, size_t errlen)
{
	size_t n = strlen(path) + 1;
	struct rules_reader *rr;
	pthread_condattr_t ca;
	pthread_attr_t ta;
	pthread_t t;
	sigset_t all, old;
	int rc;

	if (atomic_load(&hung) >= RULES_READER_HUNG_MAX) {
		snprintf(err, errlen, "%s: not read: %d earlier reads of rules files have not "
			 "returned (a mount that does not answer?)", path, RULES_READER_HUNG_MAX);
		return NULL;
	}
	rr = xcalloc(1, sizeof(*rr) + n);
	if (!rr) {
		snprintf(err, errlen, "%s: out of memory", path);
		return NULL;
	}
	memcpy(rr->path, path, n);
	rr->done = done;
	rr->arg = arg;
	rr->refs = 2;
	pthread_mutex_init(&rr->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&rr->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_attr_init(&ta);
	pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
	/* Signals stay with the thread that handles them. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(&t, &ta, reader_main, rr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&ta);
	if (rc != 0) {
		snprintf(err, errlen, "%s: cannot start a thread to read it: %s", path,
			 strerror(rc));
		reader_free(rr);
		return NULL;
	}
	return rr;
}

int rules_reader_wait(struct rules_reader *rr, double timeout)
{
	struct timespec until;
	int ready;

	clock_gettime(CLOCK_MONOTONIC, &until);
	if (timeout > 0.) {
		until.tv_sec += (time_t)timeout;
		until.tv_nsec += (long)((timeout - (double)(time_t)timeout) * 1e9);
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
	}
	pthread_mutex_lock(&rr->lock);
	while (!rr->ready && timeout > 0.)
		if (pthread_cond_timedwait(&rr->cond, &rr->lock, &until) == ETIMEDOUT)
			break;
	ready = rr->ready;
	pthread_mutex_unlock(&rr->lock);
	return ready;
}

struct rules *rules_reader_finish(struct rules_reader *rr, char *err, size_t errlen)
{
	struct rules *r;

	pthread_mutex_lock(&rr->lock);
	r = rr->rules;
	rr->rules = NULL;
	if (!r)
		snprintf(err, errlen, "%s", rr->err);
	reader_put(rr);
	return r;
}

void rules_reader_abandon(struct rules_reader *rr)
{
	pthread_mutex_lock(&rr->lock);
	if (!rr->ready) {
		rr->abandoned = 1;
		atomic_fetch_add(&hung, 1);
	}
	reader_put(rr);
}

struct rules *rules_reader_load(const char *path, double timeout, char *err, size_t errlen)
{
	struct rules_reader *rr = rules_reader_start(path, NULL, NULL, err, errlen);

	if (!rr)
		return NULL;
	if (rules_reader_wait(rr, timeout))
		return rules_reader_finish(rr, err, errlen);
	rules_reader_abandon(rr);
	snprintf(err, errlen, "%s: not read after %.0f s (a mount that does not answer?)", path,
		 timeout);
	return NULL;
}
