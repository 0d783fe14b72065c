/* SPDX-License-Identifier: Apache-2.0 */
/* inflight.c: the requests of each client in flight (see inflight.h).
 *
 * Layout. Shards, each with a mutex, a table of clients (chained buckets)
 * and two pools, clients and places, each a free list over a
 * preallocated array. A client is one key under one limit; its places
 * are a chain, newest first. Expired places are reclaimed when their
 * client is next looked at, and a client with no place left is freed;
 * when a shard's pools run short, the expired places of every client of
 * the shard (clients that never came back) are reclaimed at once. */
#include "inflight.h"

#include <pthread.h>
#include <string.h>

#include "alloc.h"

#define IF_SHARDS 16

struct if_place {
	uint64_t id;
	int64_t deadline;
	uint32_t next;        /* the client's next place + 1, or the free list's */
};

struct if_client {
	uint8_t key[IDENTITY_KEY_LEN];
	uint64_t lidh;
	uint32_t next;        /* the bucket's next client + 1, or the free list's */
	uint32_t places;      /* first place + 1 */
	uint32_t n;           /* places in its chain */
};

struct inflight_shard {
	pthread_mutex_t lock;
	uint32_t *bucket;     /* client + 1 */
	uint32_t mask;
	struct if_client *client;
	struct if_place *place;
	uint32_t cap;         /* clients and places, each */
	uint32_t free_client, free_place; /* + 1, 0: the list is empty */
	/* from here on, never used: handed out after the free lists, so the
	 * pools' memory is touched only as they are used */
	uint32_t fresh_client, fresh_place;
	uint64_t used;
	/* at most the earliest deadline of the places held (INT64_MAX: none
	 * since the last reclaim): no place has ended before it */
	int64_t min_deadline;
};

struct inflight {
	struct inflight_shard sh[IF_SHARDS];
};

static uint64_t hash_of(const uint8_t key[IDENTITY_KEY_LEN], uint64_t lidh)
{
	uint64_t a;

	/* the key is a keyed SipHash already: uniform */
	memcpy(&a, key, sizeof(a));
	a ^= lidh * 0x9e3779b97f4a7c15ULL;
	return a ^ (a >> 29);
}

struct inflight *inflight_new(size_t max_flights)
{
	struct inflight *in = xcalloc(1, sizeof(*in));
	uint32_t cap = (uint32_t)(max_flights / IF_SHARDS + 1), nb = 2;

	if (!in)
		return NULL;
	while (nb < cap)
		nb <<= 1;
	for (int s = 0; s < IF_SHARDS; s++) {
		struct inflight_shard *sh = &in->sh[s];

		pthread_mutex_init(&sh->lock, NULL);
		sh->bucket = xcalloc(nb, sizeof(*sh->bucket));
		sh->client = xcalloc(cap, sizeof(*sh->client));
		sh->place = xcalloc(cap, sizeof(*sh->place));
		if (!sh->bucket || !sh->client || !sh->place) {
			inflight_free(in);
			return NULL;
		}
		sh->mask = nb - 1;
		sh->cap = cap;
		sh->min_deadline = INT64_MAX;
	}
	return in;
}

void inflight_free(struct inflight *in)
{
	if (!in)
		return;
	for (int s = 0; s < IF_SHARDS; s++) {
		if (in->sh[s].bucket)
			pthread_mutex_destroy(&in->sh[s].lock);
		xfree(in->sh[s].bucket);
		xfree(in->sh[s].client);
		xfree(in->sh[s].place);
	}
	xfree(in);
}

static struct inflight_shard *shard_of(struct inflight *in, uint64_t h)
{
	return &in->sh[h >> 60 & (IF_SHARDS - 1)];
}

/* The client (key, lidh) + 1 in sh, and its predecessor in the bucket's
 * chain (+ 1, 0 for the bucket itself), or 0. */
static uint32_t find(const struct inflight_shard *sh, uint64_t h, const uint8_t *key,
		     uint64_t lidh, uint32_t *prev)
{
	uint32_t p = 0;

	for (uint32_t c = sh->bucket[h & sh->mask]; c; p = c, c = sh->client[c - 1].next) {
		const struct if_client *x = &sh->client[c - 1];

		if (x->lidh == lidh && memcmp(x->key, key, IDENTITY_KEY_LEN) == 0) {
			if (prev)
				*prev = p;
			return c;
		}
	}
	return 0;
}

/* A client and a place + 1, 0 when the pool is used up. */
static uint32_t take_client(struct inflight_shard *sh)
{
	uint32_t c = sh->free_client;

	if (c) {
		sh->free_client = sh->client[c - 1].next;
		return c;
	}
	return sh->fresh_client < sh->cap ? ++sh->fresh_client : 0;
}

static uint32_t take_place(struct inflight_shard *sh)
{
	uint32_t p = sh->free_place;

	if (p) {
		sh->free_place = sh->place[p - 1].next;
		return p;
	}
	return sh->fresh_place < sh->cap ? ++sh->fresh_place : 0;
}

static void free_place(struct inflight_shard *sh, uint32_t p)
{
	sh->place[p - 1].next = sh->free_place;
	sh->free_place = p;
	sh->used--;
}

/* Unlinks client c (prev: its predecessor, see find) and frees it with
 * its places. */
static void free_client(struct inflight_shard *sh, uint64_t h, uint32_t c, uint32_t prev)
{
	struct if_client *x = &sh->client[c - 1];

	while (x->places) {
		uint32_t p = x->places;

		x->places = sh->place[p - 1].next;
		free_place(sh, p);
	}
	if (prev)
		sh->client[prev - 1].next = x->next;
	else
		sh->bucket[h & sh->mask] = x->next;
	x->next = sh->free_client;
	sh->free_client = c;
}

/* Drops c's places that have ended by now; sets *has when one is id's,
 * *last to the latest deadline left. Returns how many are left. */
static uint32_t prune(struct inflight_shard *sh, struct if_client *x, int64_t now, uint64_t id,
		      bool *has, int64_t *last)
{
	uint32_t *link = &x->places;

	*has = false;
	*last = 0;
	while (*link) {
		uint32_t p = *link;
		struct if_place *pl = &sh->place[p - 1];

		if (pl->deadline <= now) {
			*link = pl->next;
			free_place(sh, p);
			x->n--;
			continue;
		}
		if (pl->id == id)
			*has = true;
		if (pl->deadline > *last)
			*last = pl->deadline;
		link = &pl->next;
	}
	return x->n;
}

/* The pools of sh are short: reclaims the places of every client of sh
 * that have ended by now, and frees the clients left without one. Walks
 * the whole shard, so only when a place may have ended (min_deadline),
 * which then becomes the earliest deadline left. */
static void reclaim(struct inflight_shard *sh, int64_t now)
{
	int64_t earliest = INT64_MAX;

	if (now < sh->min_deadline)
		return;
	for (uint32_t b = 0; b <= sh->mask; b++) {
		uint32_t prev = 0, c = sh->bucket[b];

		while (c) {
			struct if_client *x = &sh->client[c - 1];
			uint32_t next = x->next;
			int64_t last;
			bool has;

			if (prune(sh, x, now, 0, &has, &last) == 0) {
				free_client(sh, hash_of(x->key, x->lidh), c, prev);
			} else {
				for (uint32_t p = x->places; p; p = sh->place[p - 1].next)
					if (sh->place[p - 1].deadline < earliest)
						earliest = sh->place[p - 1].deadline;
				prev = c;
			}
			c = next;
		}
	}
	sh->min_deadline = earliest;
}

/* Whether sh has no room for one more place (and a client, for a client
 * it holds none of: !c). */
static bool no_room(const struct inflight_shard *sh, uint32_t c)
{
	return (!c && !sh->free_client && sh->fresh_client == sh->cap) ||
	       (!sh->free_place && sh->fresh_place == sh->cap);
}

int inflight_begin(struct inflight *in, const uint8_t key[IDENTITY_KEY_LEN], uint64_t lidh,
		   uint64_t id, const struct limit_spec *spec, int64_t now_us,
		   struct limit_result *res, struct inflight_hold *h)
{
	uint64_t hh = hash_of(key, lidh);
	struct inflight_shard *sh = shard_of(in, hh);
	uint32_t prev = 0, c, n = 0;
	int64_t last = 0;
	bool has = false;

	memset(res, 0, sizeof(*res));
	res->limit = spec->quota;
	pthread_mutex_lock(&sh->lock);
	c = find(sh, hh, key, lidh, &prev);
	if (c) {
		n = prune(sh, &sh->client[c - 1], now_us, id, &has, &last);
		if (n == 0) {
			free_client(sh, hh, c, prev);
			c = 0;
		}
	}
	h->sh = sh;
	h->h = hh;
	memcpy(h->key, key, IDENTITY_KEY_LEN);
	h->lidh = lidh;
	h->id = id;
	h->deadline = now_us + spec->period_us;
	h->take = false;
	if (has) {
		/* this request holds a place already (sent again) */
		res->allowed = true;
		res->remaining = spec->quota > n ? spec->quota - n : 0;
		res->reset_us = last - now_us;
		res->next_ttl_us = res->reset_us;
		return 0;
	}
	if (n >= spec->quota) {
		res->allowed = false;
		res->retry_after_us = LIMIT_US_PER_S;
		res->reset_us = last - now_us;
		return 0;
	}
	if (no_room(sh, c)) {
		/* (c, if any, holds places that have not ended: it stays) */
		reclaim(sh, now_us);
		if (no_room(sh, c)) {
			pthread_mutex_unlock(&sh->lock);
			return -1;
		}
	}
	res->allowed = true;
	res->remaining = spec->quota - n - 1;
	res->reset_us = (h->deadline > last ? h->deadline : last) - now_us;
	res->next_ttl_us = res->reset_us;
	h->take = true;
	return 0;
}

void inflight_end(struct inflight_hold *h, bool take)
{
	struct inflight_shard *sh = h->sh;
	uint32_t c, p;

	if (take && h->take) {
		c = find(sh, h->h, h->key, h->lidh, NULL);
		if (!c) {
			/* inflight_begin() saw a free client */
			c = take_client(sh);
			memcpy(sh->client[c - 1].key, h->key, IDENTITY_KEY_LEN);
			sh->client[c - 1].lidh = h->lidh;
			sh->client[c - 1].places = 0;
			sh->client[c - 1].n = 0;
			sh->client[c - 1].next = sh->bucket[h->h & sh->mask];
			sh->bucket[h->h & sh->mask] = c;
		}
		p = take_place(sh);
		sh->place[p - 1].id = h->id;
		sh->place[p - 1].deadline = h->deadline;
		sh->place[p - 1].next = sh->client[c - 1].places;
		sh->client[c - 1].places = p;
		sh->client[c - 1].n++;
		sh->used++;
		if (h->deadline < sh->min_deadline)
			sh->min_deadline = h->deadline;
	}
	pthread_mutex_unlock(&sh->lock);
}

int inflight_release(struct inflight *in, const uint8_t key[IDENTITY_KEY_LEN], uint64_t lidh,
		     uint64_t id)
{
	uint64_t hh = hash_of(key, lidh);
	struct inflight_shard *sh = shard_of(in, hh);
	uint32_t prev = 0, c;
	int found = 0;

	pthread_mutex_lock(&sh->lock);
	c = find(sh, hh, key, lidh, &prev);
	if (c) {
		struct if_client *x = &sh->client[c - 1];

		for (uint32_t *link = &x->places; *link; link = &sh->place[*link - 1].next) {
			uint32_t p = *link;

			if (sh->place[p - 1].id == id) {
				*link = sh->place[p - 1].next;
				free_place(sh, p);
				x->n--;
				found = 1;
				break;
			}
		}
		if (x->n == 0)
			free_client(sh, hh, c, prev);
	}
	pthread_mutex_unlock(&sh->lock);
	return found;
}

size_t inflight_reset(struct inflight *in, const uint8_t key[IDENTITY_KEY_LEN])
{
	size_t n = 0;

	/* a key's clients may be under any limit: every shard is looked at */
	for (int s = 0; s < IF_SHARDS; s++) {
		struct inflight_shard *sh = &in->sh[s];

		pthread_mutex_lock(&sh->lock);
		for (uint32_t b = 0; b <= sh->mask; b++) {
			uint32_t prev = 0, c = sh->bucket[b];

			while (c) {
				struct if_client *x = &sh->client[c - 1];
				uint32_t next = x->next;

				if (memcmp(x->key, key, IDENTITY_KEY_LEN) == 0) {
					n += x->n;
					free_client(sh, hash_of(x->key, x->lidh), c, prev);
				} else {
					prev = c;
				}
				c = next;
			}
		}
		pthread_mutex_unlock(&sh->lock);
	}
	return n;
}

uint32_t inflight_look(struct inflight *in, const uint8_t key[IDENTITY_KEY_LEN], uint64_t lidh,
		       int64_t now_us)
{
	uint64_t hh = hash_of(key, lidh);
	struct inflight_shard *sh = shard_of(in, hh);
	uint32_t c, n = 0;

	pthread_mutex_lock(&sh->lock);
	c = find(sh, hh, key, lidh, NULL);
	for (uint32_t p = c ? sh->client[c - 1].places : 0; p; p = sh->place[p - 1].next)
		n += sh->place[p - 1].deadline > now_us;
	pthread_mutex_unlock(&sh->lock);
	return n;
}

uint64_t inflight_count(struct inflight *in)
{
	uint64_t n = 0;

	for (int s = 0; s < IF_SHARDS; s++) {
		pthread_mutex_lock(&in->sh[s].lock);
		n += in->sh[s].used;
		pthread_mutex_unlock(&in->sh[s].lock);
	}
	return n;
}
