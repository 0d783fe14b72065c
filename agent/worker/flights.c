/* SPDX-License-Identifier: Apache-2.0 */
/* flights.c: the requests in flight to each backend under adaptive
 * shedding (flights.h). */
#include "flights.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "alloc.h"

#define SHARD_SLOTS (FLIGHTS_CAPACITY / FLIGHTS_SHARDS)
_Static_assert(SHARD_SLOTS >= FLIGHTS_PROBE, "a probe fits a shard");
_Static_assert((SHARD_SLOTS & (SHARD_SLOTS - 1)) == 0, "shard slots: a power of two");

struct entry {
	uint64_t id;              /* 0: free */
	int64_t start_us;
	int64_t deadline_us;
	uint32_t backend;
};

struct shard {
	pthread_mutex_t lock;
	struct entry *slot;       /* SHARD_SLOTS */
	/* no entry's deadline is earlier: a sweep before it skips the shard
	 * (lowered by each entry, set exactly by each sweep of the shard,
	 * left as it was when an entry leaves) */
	int64_t first_deadline_us;
};

struct backend {
	char name[FLIGHTS_NAME_MAX];
	size_t len;
	atomic_uint inflight;
	atomic_uint limit;
	_Atomic uint64_t samples, drops, shed;
	pthread_mutex_t lock;     /* al */
	struct adaptive_limit al;
};

struct flights {
	pthread_mutex_t add_lock; /* adding a backend, allocating entries */
	atomic_uint nbackends;    /* published after the backend is written */
	struct backend be[FLIGHTS_BACKENDS_MAX];
	struct shard shard[FLIGHTS_SHARDS];
	struct entry *entries;    /* FLIGHTS_CAPACITY, with the first backend */
	_Atomic int64_t next_sweep_us;
	_Atomic uint64_t untracked;
};

struct flights *flights_new(void)
{
	struct flights *f = xcalloc(1, sizeof(*f));

	if (!f)
		return NULL;
	pthread_mutex_init(&f->add_lock, NULL);
	for (int i = 0; i < FLIGHTS_BACKENDS_MAX; i++)
		pthread_mutex_init(&f->be[i].lock, NULL);
	for (int s = 0; s < FLIGHTS_SHARDS; s++) {
		pthread_mutex_init(&f->shard[s].lock, NULL);
		f->shard[s].first_deadline_us = INT64_MAX;
	}
	return f;
}

void flights_free(struct flights *f)
{
	if (!f)
		return;
	for (int s = 0; s < FLIGHTS_SHARDS; s++)
		pthread_mutex_destroy(&f->shard[s].lock);
	for (int i = 0; i < FLIGHTS_BACKENDS_MAX; i++)
		pthread_mutex_destroy(&f->be[i].lock);
	pthread_mutex_destroy(&f->add_lock);
	xfree(f->entries);
	xfree(f);
}

bool flights_active(const struct flights *f)
{
	return atomic_load_explicit(&f->nbackends, memory_order_acquire) > 0;
}

/* The backend named (name, len) among the first n, or NULL. */
static struct backend *named(struct flights *f, unsigned n, const char *name, size_t len)
{
	for (unsigned i = 0; i < n; i++)
		if (f->be[i].len == len && memcmp(f->be[i].name, name, len) == 0)
			return &f->be[i];
	return NULL;
}

/* The backend named (name, len), added when new; NULL when there is no
 * room (or no memory for the entries). */
static struct backend *backend_of(struct flights *f, const char *name, size_t len,
				  const struct adaptive_config *c, int64_t now_us)
{
	unsigned n = atomic_load_explicit(&f->nbackends, memory_order_acquire);
	struct backend *b = named(f, n, name, len);

	if (b || len >= FLIGHTS_NAME_MAX)
		return b;
	/* again under the lock: another thread may have added it since */
	pthread_mutex_lock(&f->add_lock);
	n = atomic_load_explicit(&f->nbackends, memory_order_relaxed);
	b = named(f, n, name, len);
	if (!b && n < FLIGHTS_BACKENDS_MAX) {
		if (!f->entries) {
			f->entries = xcalloc(FLIGHTS_CAPACITY, sizeof(*f->entries));
			for (int s = 0; f->entries && s < FLIGHTS_SHARDS; s++)
				f->shard[s].slot = f->entries + (size_t)s * SHARD_SLOTS;
		}
		if (f->entries) {
			b = &f->be[n];
			memcpy(b->name, name, len);
			b->name[len] = '\0';
			b->len = len;
			adaptive_init(&b->al, c, now_us);
			atomic_store(&b->limit, adaptive_current(&b->al, c));
			atomic_store_explicit(&f->nbackends, n + 1, memory_order_release);
		}
	}
	pthread_mutex_unlock(&f->add_lock);
	return b;
}

static struct shard *shard_of(struct flights *f, uint64_t id)
{
	return &f->shard[id % FLIGHTS_SHARDS];
}

static size_t home_of(uint64_t id)
{
	return (size_t)(id / FLIGHTS_SHARDS) & (SHARD_SLOTS - 1);
}

/* One sample of backend b: a request of latency_us ended at now_us. */
static void sample(struct backend *b, const struct adaptive_config *c, int64_t latency_us,
		   uint32_t inflight, int64_t now_us)
{
	pthread_mutex_lock(&b->lock);
	adaptive_sample(&b->al, c, latency_us, inflight, now_us);
	atomic_store_explicit(&b->limit, adaptive_current(&b->al, c), memory_order_relaxed);
	pthread_mutex_unlock(&b->lock);
}

/* Forgets the entry e (its shard locked) of a request that ended. */
static struct backend *leave_entry(struct flights *f, struct entry *e)
{
	struct backend *b = &f->be[e->backend];

	e->id = 0;
	atomic_fetch_sub_explicit(&b->inflight, 1, memory_order_relaxed);
	return b;
}

size_t flights_expire(struct flights *f, const struct adaptive_config *c, int64_t now_us)
{
	size_t dropped = 0;

	if (!flights_active(f))
		return 0;
	for (int s = 0; s < FLIGHTS_SHARDS; s++) {
		struct shard *sh = &f->shard[s];
		int64_t first = INT64_MAX;

		pthread_mutex_lock(&sh->lock);
		/* a shard's entries end long before their timeout, so most
		 * sweeps find no shard due: none of its 4096 slots is read */
		if (sh->first_deadline_us > now_us) {
			pthread_mutex_unlock(&sh->lock);
			continue;
		}
		for (size_t i = 0; i < SHARD_SLOTS; i++) {
			struct entry *e = &sh->slot[i];
			struct backend *b;
			int64_t waited;

			if (!e->id)
				continue;
			if (e->deadline_us > now_us) {
				if (e->deadline_us < first)
					first = e->deadline_us;
				continue;
			}
			waited = now_us - e->start_us;
			b = leave_entry(f, e);
			atomic_fetch_add_explicit(&b->drops, 1, memory_order_relaxed);
			/* sampled under the shard's lock: lock order shard, backend */
			sample(b, c, waited, atomic_load(&b->inflight) + 1, now_us);
			dropped++;
		}
		sh->first_deadline_us = first;
		pthread_mutex_unlock(&sh->lock);
	}
	return dropped;
}

/* Takes a place in the table for request id of backend b: 0, or -1 when
 * its probe is full (or it is in flight already). */
static int track(struct flights *f, struct backend *b, uint64_t id,
		 const struct adaptive_config *c, int64_t now_us)
{
	struct shard *sh = shard_of(f, id);
	size_t home = home_of(id);
	struct entry *free_e = NULL;

	pthread_mutex_lock(&sh->lock);
	for (size_t i = 0; i < FLIGHTS_PROBE; i++) {
		struct entry *e = &sh->slot[(home + i) & (SHARD_SLOTS - 1)];

		if (e->id == id) {
			free_e = NULL;
			break;
		}
		if (!e->id && !free_e)
			free_e = e;
	}
	if (free_e) {
		free_e->id = id;
		free_e->start_us = now_us;
		free_e->deadline_us = now_us + c->timeout_us;
		free_e->backend = (uint32_t)(b - f->be);
		if (free_e->deadline_us < sh->first_deadline_us)
			sh->first_deadline_us = free_e->deadline_us;
	}
	pthread_mutex_unlock(&sh->lock);
	return free_e ? 0 : -1;
}

enum flights_verdict flights_enter(struct flights *f, const char *name, size_t len, uint64_t id,
				   int priority, bool shadow, const struct adaptive_config *c,
				   int64_t now_us)
{
	struct backend *b;
	int64_t sweep = atomic_load_explicit(&f->next_sweep_us, memory_order_relaxed);
	uint32_t thr, cur;
	bool over = false;

	if (now_us >= sweep &&
	    atomic_compare_exchange_strong(&f->next_sweep_us, &sweep, now_us + FLIGHTS_SWEEP_US))
		flights_expire(f, c, now_us);
	b = backend_of(f, name, len, c, now_us);
	if (!b || !id) {
		atomic_fetch_add_explicit(&f->untracked, 1, memory_order_relaxed);
		return FLIGHTS_UNTRACKED;
	}
	thr = adaptive_threshold(atomic_load_explicit(&b->limit, memory_order_relaxed), priority);
	cur = atomic_load_explicit(&b->inflight, memory_order_relaxed);
	do {
		if (cur >= thr) {
			if (!shadow) {
				atomic_fetch_add_explicit(&b->shed, 1, memory_order_relaxed);
				return FLIGHTS_SHED;
			}
			over = true;
		}
	} while (!atomic_compare_exchange_weak_explicit(&b->inflight, &cur, cur + 1,
							memory_order_relaxed,
							memory_order_relaxed));
	if (track(f, b, id, c, now_us) < 0) {
		atomic_fetch_sub_explicit(&b->inflight, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&f->untracked, 1, memory_order_relaxed);
		return FLIGHTS_UNTRACKED;
	}
	return over ? FLIGHTS_SHADOW_SHED : FLIGHTS_ADMITTED;
}

/* Finds request id's entry and forgets it: its backend, with *start_us,
 * or NULL when it is not in flight. */
static struct backend *untrack(struct flights *f, uint64_t id, int64_t *start_us,
			       uint32_t *inflight)
{
	struct shard *sh;
	size_t home = home_of(id);
	struct backend *b = NULL;

	if (!id || !flights_active(f))
		return NULL;
	sh = shard_of(f, id);
	pthread_mutex_lock(&sh->lock);
	for (size_t i = 0; i < FLIGHTS_PROBE; i++) {
		struct entry *e = &sh->slot[(home + i) & (SHARD_SLOTS - 1)];

		if (e->id == id) {
			*start_us = e->start_us;
			*inflight = atomic_load(&f->be[e->backend].inflight);
			b = leave_entry(f, e);
			break;
		}
	}
	pthread_mutex_unlock(&sh->lock);
	return b;
}

void flights_cancel(struct flights *f, uint64_t id)
{
	int64_t start;
	uint32_t inflight;

	untrack(f, id, &start, &inflight);
}

int flights_leave(struct flights *f, uint64_t id, const struct adaptive_config *c,
		  int64_t now_us)
{
	int64_t start = 0;
	uint32_t inflight = 0;
	struct backend *b = untrack(f, id, &start, &inflight);

	if (!b)
		return 0;
	atomic_fetch_add_explicit(&b->samples, 1, memory_order_relaxed);
	sample(b, c, now_us - start, inflight, now_us);
	return 1;
}

size_t flights_backends(const struct flights *f, struct flights_backend_stats *out, size_t max)
{
	unsigned n = atomic_load_explicit(&f->nbackends, memory_order_acquire);
	size_t k = 0;

	for (unsigned i = 0; i < n && k < max; i++, k++) {
		const struct backend *b = &f->be[i];

		memcpy(out[k].name, b->name, b->len + 1);
		out[k].limit = atomic_load((atomic_uint *)&b->limit);
		out[k].inflight = atomic_load((atomic_uint *)&b->inflight);
		out[k].samples = atomic_load((_Atomic uint64_t *)&b->samples);
		out[k].drops = atomic_load((_Atomic uint64_t *)&b->drops);
		out[k].shed = atomic_load((_Atomic uint64_t *)&b->shed);
	}
	return k;
}

uint64_t flights_untracked(const struct flights *f)
{
	return atomic_load((_Atomic uint64_t *)&f->untracked);
}
