/* SPDX-License-Identifier: Apache-2.0 */
/* memstore.c: the in-memory store (see memstore.h).
 *
 * Layout. One entry per (client key, limit index), so a client with one
 * limit takes one entry and max_keys bounds memory whatever the mix. A
 * client's entries all live in the shard chosen by its key, so a decision
 * over its limits takes one lock. Each shard preallocates its entries
 * (a free list) and an open-addressing index (linear probing, at most half
 * full, deletion by backward shift, so no tombstones pile up); nothing is
 * allocated once the store exists.
 *
 * Keys come from identity_key(), a keyed SipHash, so clients cannot choose
 * them to collide, and they are uniform: their bits index the table as
 * they are.
 *
 * Each entry remembers a fingerprint of the limit spec it was counted
 * under: when a rule changes (say 100/1m becomes 50/1m), the old state is
 * not reinterpreted under the new spec, the key starts fresh.
 *
 * Logs. A log limit's entry holds its requests in chunks of MS_LOG_CHUNK
 * from a pool per shard, chained oldest first: a log of k requests takes
 * ceil(k / MS_LOG_CHUNK) chunks or one more, k at most the quota
 * (LIMIT_LOG_QUOTA_MAX). The pool has as many chunks as the shard has
 * entries (at least a full log's worth); chunks are handed out from a
 * free list, then from the never-used rest, so the pool's memory is
 * touched only as logs use it. Like entries, chunks are never allocated
 * per decision: an entry that goes (swept, evicted, reset) gives its
 * chunks back, and a log that needs a chunk when none is free makes room
 * by evicting another log, as a new client does.
 */
#include "memstore.h"

#include <pthread.h>
#include <string.h>

#include "alloc.h"

#define MS_SHARDS_MAX 64
#define MS_FREE 0xff              /* idx of an unused entry */
#define MS_SHARD_CAP_MAX (1u << 28)
#define MS_EVICT_SAMPLE 16        /* entries looked at per eviction */
#define MS_EVICT_TRIES 4          /* samples without a candidate: give up */
#define MS_LOG_CHUNK 12           /* requests per chunk of a log: 128 bytes */
/* the chunks of one log at its largest */
#define MS_LOG_CHUNKS_MAX ((LIMIT_LOG_QUOTA_MAX + MS_LOG_CHUNK - 1) / MS_LOG_CHUNK + 1)

/* A log entry's st, when `log` is set: a = its first chunk + 1, b = its
 * last chunk + 1, c = the index of its oldest request in the first chunk
 * << 32 | its number of requests (>= 1: a log without requests has no
 * chunk). */
struct ms_entry {
	uint8_t key[IDENTITY_KEY_LEN];
	uint64_t fp;          /* fingerprint of the spec the state belongs to */
	int64_t expire_us;    /* from then on the state is as good as fresh */
	int64_t refused_until; /* a request was refused by it until then */
	struct limit_state st;
	uint32_t hash;        /* index hash; for a free entry, next free + 1 */
	uint8_t idx;          /* limit index, MS_FREE when unused */
	uint8_t log;          /* st holds a log's chunks */
};

/* Requests of a log, in order of time; a log's last chunk may be partly
 * used, its first may start past 0. */
struct ms_chunk {
	int64_t t[MS_LOG_CHUNK];
	uint16_t cost[MS_LOG_CHUNK]; /* <= LIMIT_LOG_QUOTA_MAX */
	uint32_t next;        /* the next chunk + 1, or a free chunk's */
	uint32_t owner;       /* the entry whose log it is + 1, 0 when free */
};
_Static_assert(sizeof(struct ms_chunk) == MEMSTORE_LOG_CHUNK_BYTES, "memstore.h says its size");

struct ms_shard {
	pthread_mutex_t lock;
	struct ms_entry *entries;
	uint32_t *cells;      /* entry index + 1, 0 for an empty cell */
	uint32_t mask;        /* cells - 1 */
	uint32_t cap;
	uint32_t used;
	uint32_t free_head;   /* entry index + 1, 0 when none is free */
	uint32_t fresh;       /* entries from here on were never used: their
	                       * memory is not touched until then */
	int64_t min_expire;   /* no entry expires before this (lower bound) */
	uint64_t full;
	uint64_t reclaimed;
	uint64_t evicted;
	uint32_t rnd;         /* xorshift state for eviction samples */
	struct ms_chunk *chunks; /* the logs' pool */
	uint32_t nchunks;
	uint32_t chunks_used;
	uint32_t chunk_fresh; /* chunks from here on were never used */
	uint32_t chunk_free;  /* chunk index + 1, 0 when the list is empty */
	/* Keeps one shard's hot fields off the next shard's cache line. */
	char pad[64];
};

struct memstore {
	struct ms_shard *shards;
	unsigned nshards;     /* a power of two */
};

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

/* A key is a keyed SipHash output, uniform already: its first eight bytes
 * pick the shard and seed the cells as they are (hashing it again cost as
 * much as the rest of a lookup). */
static uint64_t key_hash(const uint8_t key[IDENTITY_KEY_LEN])
{
	uint64_t a;

	memcpy(&a, key, 8);
	return a;
}

static uint32_t cell_hash(uint64_t kh, unsigned idx)
{
	return (uint32_t)mix64(kh + (idx + 1) * 0x9e3779b97f4a7c15ULL);
}

/* The fields folded with odd multipliers, then mixed once: every decision
 * computes it for each of its limits. */
static uint64_t spec_fp(const struct limit_spec *s)
{
	uint64_t h = s->quota * 0x243f6a8885a308d3ULL + (uint64_t)s->period_us;

	h = h * 0x9e3779b97f4a7c15ULL + s->burst;
	return mix64(h * 0xbf58476d1ce4e5b9ULL + (uint64_t)s->algo);
}

static struct ms_shard *shard_of(struct memstore *ms, uint64_t kh)
{
	/* High bits pick the shard, low bits (through cell_hash) the cell. */
	return &ms->shards[(kh >> 58) & (ms->nshards - 1)];
}

/* Returns the cell holding (key, idx), or -1. */
static long find_cell(const struct ms_shard *sh, const uint8_t *key, unsigned idx,
		      uint32_t h)
{
	for (uint32_t i = h & sh->mask;; i = (i + 1) & sh->mask) {
		uint32_t s = sh->cells[i];
		const struct ms_entry *e;

		if (s == 0)
			return -1;
		e = &sh->entries[s - 1];
		if (e->hash == h && e->idx == idx && memcmp(e->key, key, IDENTITY_KEY_LEN) == 0)
			return (long)i;
	}
}

/* ---- logs ----------------------------------------------------------------------- */

/* A chunk for the log of entry e (the caller made sure one is free). */
static uint32_t chunk_take(struct ms_shard *sh, const struct ms_entry *e)
{
	uint32_t c;

	if (sh->chunk_free) {
		c = sh->chunk_free - 1;
		sh->chunk_free = sh->chunks[c].next;
	} else {
		c = sh->chunk_fresh++;
	}
	sh->chunks[c].next = 0;
	sh->chunks[c].owner = (uint32_t)(e - sh->entries) + 1;
	sh->chunks_used++;
	return c;
}

static void chunk_give(struct ms_shard *sh, uint32_t c)
{
	sh->chunks[c].next = sh->chunk_free;
	sh->chunks[c].owner = 0;
	sh->chunk_free = c + 1;
	sh->chunks_used--;
}

static uint32_t log_count(const struct ms_entry *e)
{
	return e->log ? (uint32_t)e->st.c : 0;
}

/* Gives back every chunk of e's log; e's state is then all zero. */
static void log_clear(struct ms_shard *sh, struct ms_entry *e)
{
	uint32_t c = (uint32_t)e->st.a;

	while (e->log && c) {
		uint32_t next = sh->chunks[c - 1].next;

		chunk_give(sh, c - 1);
		c = next;
	}
	e->log = 0;
	memset(&e->st, 0, sizeof(e->st));
}

/* Copies e's log into out[0..max), oldest first; returns how many. */
static size_t log_read(const struct ms_shard *sh, const struct ms_entry *e,
		       struct limit_log_entry *out, size_t max)
{
	uint32_t c = (uint32_t)e->st.a, i = (uint32_t)((uint64_t)e->st.c >> 32);
	size_t n = log_count(e), k = 0;

	while (k < n && k < max && c) {
		const struct ms_chunk *ch = &sh->chunks[c - 1];

		for (; i < MS_LOG_CHUNK && k < n && k < max; i++, k++) {
			out[k].t = ch->t[i];
			out[k].cost = ch->cost[i];
		}
		c = ch->next;
		i = 0;
	}
	return k;
}

/* Drops the oldest d requests of e's log (all of them: no chunk left). */
static void log_drop(struct ms_shard *sh, struct ms_entry *e, size_t d)
{
	uint32_t n = log_count(e), head, off;

	if (d == 0)
		return;
	if (d >= n) {
		log_clear(sh, e);
		return;
	}
	head = (uint32_t)e->st.a - 1;
	off = (uint32_t)((uint64_t)e->st.c >> 32) + (uint32_t)d;
	while (off >= MS_LOG_CHUNK) {
		uint32_t next = sh->chunks[head].next - 1;

		chunk_give(sh, head);
		head = next;
		off -= MS_LOG_CHUNK;
	}
	e->st.a = (int64_t)head + 1;
	e->st.c = (int64_t)((uint64_t)off << 32 | (n - (uint32_t)d));
}

/* Whether recording a request at `at` in e's log takes a new chunk. */
static bool log_needs_chunk(const struct ms_shard *sh, const struct ms_entry *e, int64_t at)
{
	uint32_t n = log_count(e), used;
	const struct ms_chunk *tail;

	if (n == 0)
		return true;
	used = ((uint32_t)((uint64_t)e->st.c >> 32) + n - 1) % MS_LOG_CHUNK + 1;
	tail = &sh->chunks[e->st.b - 1];
	return tail->t[used - 1] != at && used == MS_LOG_CHUNK;
}

/* Records a request of weight cost at `at` (at or after the newest): the
 * newest takes it when it is of the same time. A new chunk must be free
 * when log_needs_chunk() says so. */
static void log_push(struct ms_shard *sh, struct ms_entry *e, int64_t at, uint32_t cost)
{
	uint32_t n = log_count(e), used, c;
	struct ms_chunk *tail;

	if (n == 0) {
		c = chunk_take(sh, e);
		e->log = 1;
		e->st.a = e->st.b = (int64_t)c + 1;
		e->st.c = 0;
		used = 0;
	} else {
		used = ((uint32_t)((uint64_t)e->st.c >> 32) + n - 1) % MS_LOG_CHUNK + 1;
		tail = &sh->chunks[e->st.b - 1];
		if (tail->t[used - 1] == at) {
			tail->cost[used - 1] = (uint16_t)(tail->cost[used - 1] + cost);
			return;
		}
		if (used == MS_LOG_CHUNK) {
			c = chunk_take(sh, e);
			tail->next = c + 1;
			e->st.b = (int64_t)c + 1;
			used = 0;
		}
	}
	tail = &sh->chunks[e->st.b - 1];
	tail->t[used] = at;
	tail->cost[used] = (uint16_t)cost;
	e->st.c++;
}

/* Empties cell i and frees its entry. Later entries of the same probe run
 * move back into the hole, so lookups never need tombstones. */
static void delete_cell(struct ms_shard *sh, uint32_t i)
{
	uint32_t ent = sh->cells[i] - 1;
	uint32_t j = i;

	log_clear(sh, &sh->entries[ent]);
	sh->entries[ent].idx = MS_FREE;
	sh->entries[ent].hash = sh->free_head;
	sh->free_head = ent + 1;
	sh->used--;
	sh->cells[i] = 0;
	for (;;) {
		uint32_t home;

		j = (j + 1) & sh->mask;
		if (sh->cells[j] == 0)
			return;
		home = sh->entries[sh->cells[j] - 1].hash & sh->mask;
		/* Move it if the hole lies on its probe path (home .. j). */
		if (((j - home) & sh->mask) >= ((j - i) & sh->mask)) {
			sh->cells[i] = sh->cells[j];
			sh->cells[j] = 0;
			i = j;
		}
	}
}

static void delete_entry(struct ms_shard *sh, uint32_t ent)
{
	const struct ms_entry *e = &sh->entries[ent];
	long s = find_cell(sh, e->key, e->idx, e->hash);

	if (s >= 0)
		delete_cell(sh, (uint32_t)s);
}

static bool kept(long ent, const long *keep, size_t nkeep)
{
	for (size_t j = 0; j < nkeep; j++)
		if (keep[j] == ent)
			return true;
	return false;
}

/* Deletes the shard's entries that are fresh again at now, but those of
 * `keep` (entries a decision holds: they are written next); recomputes the
 * lower bound of expiries. Returns how many went. */
static size_t sweep_shard(struct ms_shard *sh, int64_t now, const long *keep, size_t nkeep)
{
	int64_t min = INT64_MAX;
	size_t n = 0;

	if (sh->used == 0 || now < sh->min_expire)
		return 0;
	for (uint32_t k = 0; k < sh->fresh; k++) {
		struct ms_entry *e = &sh->entries[k];

		if (e->idx == MS_FREE)
			continue;
		if (now >= e->expire_us && !kept((long)k, keep, nkeep)) {
			delete_entry(sh, k);
			n++;
		} else if (e->expire_us < min) {
			min = e->expire_us;
		}
	}
	sh->min_expire = min;
	sh->reclaimed += n;
	return n;
}

static uint32_t free_count(const struct ms_shard *sh)
{
	return sh->cap - sh->used;
}

/* Evicts, from a sample of the shard's entries, the one that loses the
 * least: the soonest back to full (smallest expire_us), never one that
 * refused a request and would still refuse it, never one of `keep`.
 * Returns 1 when one went, 0 when the sample held none that may go. */
static int evict_one(struct ms_shard *sh, int64_t now, const long *keep, size_t nkeep)
{
	long best = -1;

	for (int k = 0; k < MS_EVICT_SAMPLE; k++) {
		uint32_t x = sh->rnd, ent;
		const struct ms_entry *e;

		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		sh->rnd = x;
		ent = x % sh->cap;
		e = &sh->entries[ent];
		if (ent >= sh->fresh || e->idx == MS_FREE || e->refused_until > now ||
		    kept((long)ent, keep, nkeep))
			continue;
		if (best < 0 || e->expire_us < sh->entries[best].expire_us)
			best = (long)ent;
	}
	if (best < 0)
		return 0;
	delete_entry(sh, (uint32_t)best);
	sh->evicted++;
	return 1;
}

/* Makes room for `need` new entries: fresh ones are reclaimed first, then
 * the least valuable evicted (evict_one). Returns 0, or -1 when the shard
 * cannot make room without forgetting a client it refuses. */
static int make_room(struct ms_shard *sh, size_t need, int64_t now, const long *keep,
		     size_t nkeep)
{
	int misses = 0;

	if (free_count(sh) >= need)
		return 0;
	sweep_shard(sh, now, keep, nkeep);
	while (free_count(sh) < need) {
		if (evict_one(sh, now, keep, nkeep)) {
			misses = 0;
			continue;
		}
		if (++misses == MS_EVICT_TRIES)
			return -1;
	}
	return 0;
}

/* Evicts, as evict_one() does, an entry that holds a log, sampling the
 * chunks in use (so a log is found however few entries are logs, the
 * longest most often). Returns 1 when one went, else 0. */
static int evict_log(struct ms_shard *sh, int64_t now, const long *keep, size_t nkeep)
{
	long best = -1;

	for (int k = 0; k < MS_EVICT_SAMPLE && sh->chunk_fresh > 0; k++) {
		uint32_t x = sh->rnd, owner;
		const struct ms_entry *e;

		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		sh->rnd = x;
		owner = sh->chunks[x % sh->chunk_fresh].owner;
		if (owner == 0)
			continue;
		e = &sh->entries[owner - 1];
		if (e->refused_until > now || kept((long)owner - 1, keep, nkeep))
			continue;
		if (best < 0 || e->expire_us < sh->entries[best].expire_us)
			best = (long)owner - 1;
	}
	if (best < 0)
		return 0;
	delete_entry(sh, (uint32_t)best);
	sh->evicted++;
	return 1;
}

/* Before the logs among limits[] record an admitted request: each drops
 * what its step (next[i]: a = the time to record, b = the requests to
 * drop, -1 for all) says, then a chunk is made free for each that needs
 * one, as make_room() does for entries. The drops change no decision:
 * what they drop has left its window, or is a log read as empty (another
 * spec's, or expired). Returns 0, or -1 when no chunk can be freed without
 * forgetting a client refused now. */
static int log_room(struct ms_shard *sh, const struct limit_spec *limits, size_t n,
		    const long *ent, const struct limit_state *next, int64_t now)
{
	size_t need = 0;
	int misses = 0;

	for (size_t i = 0; i < n; i++) {
		struct ms_entry *e;

		if (limits[i].algo != LIMIT_LOG)
			continue;
		if (ent[i] < 0) {
			need++;
			continue;
		}
		e = &sh->entries[ent[i]];
		if (e->log)
			log_drop(sh, e, next[i].b < 0 ? log_count(e) : (size_t)next[i].b);
		need += log_needs_chunk(sh, e, next[i].a);
	}
	if (sh->nchunks - sh->chunks_used >= need)
		return 0;
	sweep_shard(sh, now, ent, n);
	while (sh->nchunks - sh->chunks_used < need) {
		if (evict_log(sh, now, ent, n)) {
			misses = 0;
			continue;
		}
		if (++misses == MS_EVICT_TRIES)
			return -1;
	}
	return 0;
}

/* Takes a free entry for (key, idx) and indexes it (make_room() made
 * sure there is one). Returns the entry index, or -1. */
static long insert(struct ms_shard *sh, const uint8_t *key, unsigned idx, uint32_t h)
{
	uint32_t ent, i;
	struct ms_entry *e;

	if (sh->free_head != 0) {
		ent = sh->free_head - 1;
		sh->free_head = sh->entries[ent].hash;
	} else if (sh->fresh < sh->cap) {
		ent = sh->fresh++;
	} else {
		return -1;
	}
	e = &sh->entries[ent];
	memset(e, 0, sizeof(*e));
	memcpy(e->key, key, IDENTITY_KEY_LEN);
	e->idx = (uint8_t)idx;
	e->hash = h;
	for (i = h & sh->mask; sh->cells[i] != 0; i = (i + 1) & sh->mask)
		;
	sh->cells[i] = ent + 1;
	sh->used++;
	return (long)ent;
}

static int shard_init(struct ms_shard *sh, uint32_t cap)
{
	uint32_t ncells = 2;

	memset(sh, 0, sizeof(*sh));
	/* At most half full keeps probe runs short. */
	while (ncells < 2 * (uint64_t)cap)
		ncells <<= 1;
	sh->entries = xcalloc(cap ? cap : 1, sizeof(*sh->entries));
	sh->cells = xcalloc(ncells, sizeof(*sh->cells));
	/* never written until used (chunk_fresh): as large as it is, the
	 * pool takes memory only as logs fill it */
	sh->nchunks = cap > MS_LOG_CHUNKS_MAX ? cap : MS_LOG_CHUNKS_MAX;
	sh->chunks = xcalloc(sh->nchunks, sizeof(*sh->chunks));
	if (!sh->entries || !sh->cells || !sh->chunks ||
	    pthread_mutex_init(&sh->lock, NULL) != 0) {
		xfree(sh->entries);
		xfree(sh->cells);
		xfree(sh->chunks);
		return -1;
	}
	sh->mask = ncells - 1;
	sh->cap = cap;
	/* no free list to write: a new entry is a deleted one (the free
	 * list), else the next never used (`fresh`), so that a large store
	 * takes memory only as it fills (the agent starts in milliseconds,
	 * not after writing 72 MB) */
	sh->free_head = 0;
	sh->fresh = 0;
	sh->min_expire = INT64_MAX;
	sh->rnd = 0x9e3779b9u ^ cap;
	return 0;
}

static void shard_destroy(struct ms_shard *sh)
{
	pthread_mutex_destroy(&sh->lock);
	xfree(sh->entries);
	xfree(sh->cells);
	xfree(sh->chunks);
}

struct memstore *memstore_new(size_t max_keys)
{
	struct memstore *ms;
	unsigned nshards = 1;

	/* A small store gets fewer shards, so that each keeps room for a
	 * client with all its limits. */
	while (nshards < MS_SHARDS_MAX && (size_t)nshards * 2 * LIMIT_SET_MAX <= max_keys)
		nshards <<= 1;
	if (max_keys / nshards + 1 > MS_SHARD_CAP_MAX)
		return NULL;
	ms = xcalloc(1, sizeof(*ms));
	if (!ms)
		return NULL;
	ms->shards = xcalloc(nshards, sizeof(*ms->shards));
	if (!ms->shards) {
		xfree(ms);
		return NULL;
	}
	for (unsigned i = 0; i < nshards; i++) {
		/* Spread the remainder so the total is exactly max_keys. */
		uint32_t cap = (uint32_t)(max_keys / nshards + (i < max_keys % nshards));

		if (shard_init(&ms->shards[i], cap) != 0) {
			while (i-- > 0)
				shard_destroy(&ms->shards[i]);
			xfree(ms->shards);
			xfree(ms);
			return NULL;
		}
	}
	ms->nshards = nshards;
	return ms;
}

void memstore_free(struct memstore *ms)
{
	if (!ms)
		return;
	for (unsigned i = 0; i < ms->nshards; i++)
		shard_destroy(&ms->shards[i]);
	xfree(ms->shards);
	xfree(ms);
}

/* The entry's state is of spec fp and has TTL ttl. */
static void set_expiry(struct ms_shard *sh, struct ms_entry *e, uint64_t fp, int64_t ttl,
		       int64_t now)
{
	e->fp = fp;
	/* saturated (a TTL is at least 1: only upward) */
	if (__builtin_add_overflow(now, ttl, &e->expire_us))
		e->expire_us = INT64_MAX;
	if (e->expire_us < sh->min_expire)
		sh->min_expire = e->expire_us;
}

/* Keeps st, whose TTL is ttl, as the entry's state (a log it held, of a
 * limit that changed algorithm, goes). */
static void store_state(struct ms_shard *sh, struct ms_entry *e, uint64_t fp,
			const struct limit_state *st, int64_t ttl, int64_t now)
{
	if (e->log)
		log_clear(sh, e);
	e->st = *st;
	set_expiry(sh, e, fp, ttl, now);
}

/* Records an admitted request of weight cost in e's log, at the time its
 * step says (log_room() dropped what the step drops, and made room). */
static void log_store(struct ms_shard *sh, struct ms_entry *e, uint64_t fp,
		      const struct limit_state *step, uint32_t cost, int64_t ttl, int64_t now)
{
	log_push(sh, e, step->a, cost);
	set_expiry(sh, e, fp, ttl, now);
}

/* One limit at now: limit_eval() on the state cur, or for a log, its
 * requests, read from entry ent (-1: none) unless memstore_check() found
 * it fresh (cur all zero then; a log's cur.a is never 0). A log's step
 * goes to *next, for log_room() and log_store(): a = where to record the
 * request, b = how many to drop first, -1 for all. */
static void eval_one(const struct ms_shard *sh, long ent, const struct limit_spec *l,
		     const struct limit_state *cur, int64_t now, uint32_t cost,
		     struct limit_state *next, struct limit_result *res)
{
	struct limit_log_entry buf[LIMIT_LOG_QUOTA_MAX];
	struct limit_log_step step;
	size_t n = 0;

	if (l->algo != LIMIT_LOG) {
		limit_eval(l, cur, now, cost, next, res);
		return;
	}
	if (ent >= 0 && sh->entries[ent].log && cur->a != 0)
		n = log_read(sh, &sh->entries[ent], buf, LIMIT_LOG_QUOTA_MAX);
	limit_log_eval(l, n ? buf : NULL, n, now, cost, &step, res);
	next->a = step.at;
	next->b = n > 0 ? (int64_t)step.keep : -1;
	next->c = 0;
}


int memstore_check(struct memstore *ms, const uint8_t key[IDENTITY_KEY_LEN],
		   const struct limit_spec *limits, size_t n, int64_t now_us,
		   uint32_t cost, struct limit_result *res)
{
	struct limit_state cur[LIMIT_RULE_MAX], next[LIMIT_RULE_MAX];
	long ent[LIMIT_RULE_MAX];
	uint64_t fp[LIMIT_RULE_MAX];
	uint32_t h[LIMIT_RULE_MAX];
	uint64_t kh;
	struct ms_shard *sh;
	int refused = 0, logs = 0;
	size_t missing = 0;

	if (n == 0 || n > LIMIT_RULE_MAX)
		return -1;
	kh = key_hash(key);
	sh = shard_of(ms, kh);
	pthread_mutex_lock(&sh->lock);
	for (size_t i = 0; i < n; i++) {
		long s;

		fp[i] = spec_fp(&limits[i]);
		h[i] = cell_hash(kh, (unsigned)i);
		s = find_cell(sh, key, (unsigned)i, h[i]);
		ent[i] = s < 0 ? -1 : (long)sh->cells[s] - 1;
		memset(&cur[i], 0, sizeof(cur[i]));
		if (ent[i] >= 0) {
			const struct ms_entry *e = &sh->entries[ent[i]];

			/* Past its TTL or counted under another spec: fresh. */
			if (e->fp == fp[i] && now_us < e->expire_us)
				cur[i] = e->st;
		}
		if (limits[i].algo == LIMIT_LOG) {
			logs = 1;
			eval_one(sh, ent[i], &limits[i], &cur[i], now_us, cost, &next[i], &res[i]);
		} else {
			limit_eval(&limits[i], &cur[i], now_us, cost, &next[i], &res[i]);
		}
		if (!res[i].allowed)
			refused = 1;
	}
	if (refused || cost == 0) {
		/* Nothing is taken: the limits that would have allowed report
		 * what they still hold, not what this request would have left.
		 * A refusing limit's entry is marked, so that eviction spares
		 * the client while it is refused. */
		for (size_t i = 0; i < n && cost > 0; i++) {
			struct limit_state unused;

			if (res[i].allowed)
				eval_one(sh, ent[i], &limits[i], &cur[i], now_us, 0, &unused, &res[i]);
			else if (ent[i] >= 0)
				sh->entries[ent[i]].refused_until = now_us + res[i].retry_after_us;
		}
		pthread_mutex_unlock(&sh->lock);
		return limit_decider(res, n);
	}
	for (size_t i = 0; i < n; i++)
		missing += ent[i] < 0;
	if (missing && make_room(sh, missing, now_us, ent, n) < 0) {
		/* Every entry that could go is a client refused now: forgetting
		 * one would let it through. The caller decides without state. */
		sh->full++;
		pthread_mutex_unlock(&sh->lock);
		return MEMSTORE_NO_ROOM;
	}
	/* a log needs a chunk as a new client needs an entry */
	if (logs && log_room(sh, limits, n, ent, next, now_us) < 0) {
		sh->full++;
		pthread_mutex_unlock(&sh->lock);
		return MEMSTORE_NO_ROOM;
	}
	for (size_t i = 0; i < n; i++) {
		if (ent[i] < 0)
			ent[i] = insert(sh, key, (unsigned)i, h[i]);
		if (limits[i].algo == LIMIT_LOG)
			log_store(sh, &sh->entries[ent[i]], fp[i], &next[i], cost,
				  res[i].next_ttl_us, now_us);
		else
			store_state(sh, &sh->entries[ent[i]], fp[i], &next[i],
				    res[i].next_ttl_us, now_us);
	}
	pthread_mutex_unlock(&sh->lock);
	return limit_decider(res, n);
}

/* memstore_check() when the limits' keys differ (a rule with layers):
 * the shards of the keys are locked in their order in the store, so that
 * two such decisions never wait for each other in a cycle. */
int memstore_check_keys(struct memstore *ms, const uint8_t *const *keys,
			const struct limit_spec *limits, size_t n, int64_t now_us,
			uint32_t cost, struct limit_result *res)
{
	struct limit_state cur[LIMIT_SET_MAX], next[LIMIT_SET_MAX];
	long ent[LIMIT_SET_MAX], keep[LIMIT_SET_MAX];
	uint64_t fp[LIMIT_SET_MAX];
	uint32_t h[LIMIT_SET_MAX];
	unsigned idx[LIMIT_SET_MAX];
	struct ms_shard *sh[LIMIT_SET_MAX], *locked[LIMIT_SET_MAX];
	size_t nlocked = 0;
	int refused = 0, rc;

	if (n == 0 || n > LIMIT_SET_MAX)
		return -1;
	for (size_t i = 0; i < n; i++) {
		uint64_t kh = key_hash(keys[i]);
		size_t j;

		/* a key's limits are numbered from 0, as memstore_check's */
		idx[i] = 0;
		for (j = 0; j < i; j++)
			idx[i] += memcmp(keys[j], keys[i], IDENTITY_KEY_LEN) == 0;
		h[i] = cell_hash(kh, idx[i]);
		sh[i] = shard_of(ms, kh);
		/* insertion into the sorted set of shards to lock */
		for (j = 0; j < nlocked && locked[j] < sh[i]; j++)
			;
		if (j == nlocked || locked[j] != sh[i]) {
			memmove(&locked[j + 1], &locked[j], (nlocked - j) * sizeof(locked[0]));
			locked[j] = sh[i];
			nlocked++;
		}
	}
	for (size_t j = 0; j < nlocked; j++)
		pthread_mutex_lock(&locked[j]->lock);
	for (size_t i = 0; i < n; i++) {
		long s = find_cell(sh[i], keys[i], idx[i], h[i]);

		fp[i] = spec_fp(&limits[i]);
		ent[i] = s < 0 ? -1 : (long)sh[i]->cells[s] - 1;
		memset(&cur[i], 0, sizeof(cur[i]));
		if (ent[i] >= 0) {
			const struct ms_entry *e = &sh[i]->entries[ent[i]];

			if (e->fp == fp[i] && now_us < e->expire_us)
				cur[i] = e->st;
		}
		eval_one(sh[i], ent[i], &limits[i], &cur[i], now_us, cost, &next[i], &res[i]);
		if (!res[i].allowed)
			refused = 1;
	}
	rc = limit_decider(res, n);
	if (refused || cost == 0) {
		/* as memstore_check: nothing taken, what each holds reported */
		for (size_t i = 0; i < n && cost > 0; i++) {
			struct limit_state unused;

			if (res[i].allowed)
				eval_one(sh[i], ent[i], &limits[i], &cur[i], now_us, 0, &unused,
					 &res[i]);
			else if (ent[i] >= 0)
				sh[i]->entries[ent[i]].refused_until = now_us + res[i].retry_after_us;
		}
		goto out;
	}
	/* room in each shard (entries, then logs' chunks), sparing the
	 * entries this decision reads there */
	for (size_t j = 0; j < nlocked; j++) {
		struct limit_spec ls[LIMIT_SET_MAX];
		struct limit_state ns[LIMIT_SET_MAX];
		size_t missing = 0, nkeep = 0;

		for (size_t i = 0; i < n; i++) {
			if (sh[i] != locked[j])
				continue;
			if (ent[i] < 0)
				missing++;
			ls[nkeep] = limits[i];
			ns[nkeep] = next[i];
			keep[nkeep++] = ent[i];
		}
		if ((missing && make_room(locked[j], missing, now_us, keep, nkeep) < 0) ||
		    log_room(locked[j], ls, nkeep, keep, ns, now_us) < 0) {
			locked[j]->full++;
			rc = MEMSTORE_NO_ROOM;
			goto out;
		}
	}
	for (size_t i = 0; i < n; i++) {
		struct ms_entry *e;

		if (ent[i] < 0)
			ent[i] = insert(sh[i], keys[i], idx[i], h[i]);
		e = &sh[i]->entries[ent[i]];
		if (limits[i].algo == LIMIT_LOG)
			log_store(sh[i], e, fp[i], &next[i], cost, res[i].next_ttl_us, now_us);
		else
			store_state(sh[i], e, fp[i], &next[i], res[i].next_ttl_us, now_us);
	}
out:
	for (size_t j = nlocked; j-- > 0;)
		pthread_mutex_unlock(&locked[j]->lock);
	return rc;
}

int memstore_put(struct memstore *ms, const uint8_t key[IDENTITY_KEY_LEN], unsigned idx,
		 const struct limit_spec *spec, const struct limit_state *st, int64_t now_us,
		 int64_t ttl_us)
{
	uint64_t kh = key_hash(key);
	struct ms_shard *sh = shard_of(ms, kh);
	uint32_t h = cell_hash(kh, idx);
	long s, ent;

	pthread_mutex_lock(&sh->lock);
	s = find_cell(sh, key, idx, h);
	ent = s < 0 ? -1 : (long)sh->cells[s] - 1;
	if (ent < 0) {
		if (make_room(sh, 1, now_us, NULL, 0) < 0) {
			sh->full++;
			pthread_mutex_unlock(&sh->lock);
			return -1;
		}
		ent = insert(sh, key, idx, h);
	}
	store_state(sh, &sh->entries[ent], spec_fp(spec), st, ttl_us, now_us);
	pthread_mutex_unlock(&sh->lock);
	return 0;
}

int memstore_settle(struct memstore *ms, const uint8_t key[IDENTITY_KEY_LEN], unsigned idx,
		    const struct limit_spec *spec, int64_t now_us, int64_t take_us, int64_t delta)
{
	uint64_t kh = key_hash(key), fp = spec_fp(spec);
	struct ms_shard *sh = shard_of(ms, kh);
	uint32_t h = cell_hash(kh, idx);
	struct limit_state cur = { 0, 0, 0 }, next;
	long s, ent;
	int rc = 0;

	pthread_mutex_lock(&sh->lock);
	s = find_cell(sh, key, idx, h);
	ent = s < 0 ? -1 : (long)sh->cells[s] - 1;
	if (ent >= 0 && sh->entries[ent].fp == fp && now_us < sh->entries[ent].expire_us)
		cur = sh->entries[ent].st;
	if (limit_settle(spec, &cur, now_us, take_us, delta, &next)) {
		if (ent < 0 && make_room(sh, 1, now_us, NULL, 0) < 0) {
			sh->full++;
			rc = -1;
		} else {
			if (ent < 0)
				ent = insert(sh, key, idx, h);
			store_state(sh, &sh->entries[ent], fp, &next,
				    limit_ttl_us(spec, &next, now_us), now_us);
			rc = 1;
		}
	}
	pthread_mutex_unlock(&sh->lock);
	return rc;
}

size_t memstore_reset(struct memstore *ms, const uint8_t key[IDENTITY_KEY_LEN])
{
	uint64_t kh = key_hash(key);
	struct ms_shard *sh = shard_of(ms, kh);
	size_t n = 0;

	pthread_mutex_lock(&sh->lock);
	for (unsigned i = 0; i < LIMIT_SET_MAX; i++) {
		long s = find_cell(sh, key, i, cell_hash(kh, i));

		if (s >= 0) {
			delete_cell(sh, (uint32_t)s);
			n++;
		}
	}
	pthread_mutex_unlock(&sh->lock);
	return n;
}

size_t memstore_sweep(struct memstore *ms, int64_t now_us)
{
	size_t n = 0;

	for (unsigned i = 0; i < ms->nshards; i++) {
		pthread_mutex_lock(&ms->shards[i].lock);
		n += sweep_shard(&ms->shards[i], now_us, NULL, 0);
		pthread_mutex_unlock(&ms->shards[i].lock);
	}
	return n;
}

void memstore_count_full(struct memstore *ms, const uint8_t key[IDENTITY_KEY_LEN])
{
	struct ms_shard *sh = shard_of(ms, key_hash(key));

	pthread_mutex_lock(&sh->lock);
	sh->full++;
	pthread_mutex_unlock(&sh->lock);
}

void memstore_get_stats(struct memstore *ms, struct memstore_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < ms->nshards; i++) {
		struct ms_shard *sh = &ms->shards[i];

		pthread_mutex_lock(&sh->lock);
		out->keys += sh->used;
		out->full += sh->full;
		out->reclaimed += sh->reclaimed;
		out->evicted += sh->evicted;
		out->log_chunks += sh->chunks_used;
		out->max_keys += sh->cap;
		pthread_mutex_unlock(&sh->lock);
	}
}
