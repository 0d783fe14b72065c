/* SPDX-License-Identifier: Apache-2.0 */
/* store_redis_config.c: the Redis store's process-wide settings and
 * counters (see store_redis.h): its configuration (defaults, addresses,
 * the check at start), the counters of each server address, shared by
 * the workers' nodes to it and kept for the process's life, their sum
 * for the metrics, readiness and the passwords in force. */
#include "store_redis_int.h"

#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "redis_auth.h"
#include "redis_ready.h"

/* ---- configuration -------------------------------------------------------------- */

void store_redis_defaults(struct redis_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	addr_parse("127.0.0.1:6379", 0, &cfg->addr);
	cfg->timeout = 0.020;
	cfg->max_pending = 10000;
	cfg->batch_max = 64;
	cfg->pipeline = 2;
	cfg->local_cache = 1;
	cfg->lease_us = 0;
	cfg->lease_share = 10;
	cfg->info_interval = 10.;
	redis_keys_defaults(&cfg->keys);
}

int store_redis_set_addr(struct redis_config *cfg, const char *addr)
{
	return addr_parse(addr, ADDR_UNIX, &cfg->addr);
}

int store_redis_set_nodes(struct redis_config *cfg, const char *list)
{
	char buf[4096], *tok, *save = NULL;
	size_t n = 0;

	if (strlen(list) >= sizeof(buf))
		return -1;
	snprintf(buf, sizeof(buf), "%s", list);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (n == REDIS_NODES_MAX || addr_parse(tok, 0, &cfg->nodes[n]) < 0)
			return -1;
		for (size_t k = 0; k < n; k++)
			if (addr_equal(&cfg->nodes[k], &cfg->nodes[n]))
				return -1;
		n++;
	}
	if (n == 0)
		return -1;
	cfg->nnodes = n;
	return 0;
}

const char *store_redis_check(const struct redis_config *cfg)
{
	switch (cfg->topology) {
	case REDIS_STANDALONE:
		return NULL;
	case REDIS_SENTINEL:
		if (cfg->nnodes == 0)
			return "Sentinel needs the sentinels' addresses";
		if (!cfg->master[0])
			return "Sentinel needs the master's name (--redis-master)";
		return NULL;
	case REDIS_CLUSTER:
		if (cfg->nnodes == 0)
			return "Cluster needs seed nodes";
		return NULL;
	case REDIS_SHARDS:
		if (cfg->nnodes == 0)
			return "shards need their addresses";
		return NULL;
	}
	return "unknown topology";
}

const char *store_redis_topology_name(enum redis_topology t)
{
	switch (t) {
	case REDIS_STANDALONE:
		return "standalone";
	case REDIS_SENTINEL:
		return "sentinel";
	case REDIS_CLUSTER:
		return "cluster";
	case REDIS_SHARDS:
		return "shards";
	}
	return "?";
}

/* ---- per-node counters ---------------------------------------------------------- */

/* The counters of address a, made on first use. Any thread. */
struct redis_stats *node_stats(struct redis_store *rst, const struct addr *a)
{
	size_t n = atomic_load(&rst->nentries);
	struct node_entry *e;

	for (size_t i = 0; i < n; i++)
		if (addr_equal(&rst->entry[i]->addr, a))
			return &rst->entry[i]->stats;
	pthread_mutex_lock(&rst->lock);
	n = atomic_load(&rst->nentries);
	for (size_t i = 0; i < n; i++)
		if (addr_equal(&rst->entry[i]->addr, a)) {
			pthread_mutex_unlock(&rst->lock);
			return &rst->entry[i]->stats;
		}
	e = n < ENTRIES_MAX ? xcalloc(1, sizeof(*e)) : NULL;
	if (!e) {
		pthread_mutex_unlock(&rst->lock);
		return &rst->overflow.stats;
	}
	e->addr = *a;
	addr_format(a, e->name, sizeof(e->name));
	rst->entry[n] = e;
	/* published after it is whole: readers load the count first */
	atomic_store(&rst->nentries, n + 1);
	pthread_mutex_unlock(&rst->lock);
	return &e->stats;
}

void store_redis_each_node(struct store *st, redis_node_stats_fn *fn, void *arg)
{
	struct redis_store *rst = st->impl;
	size_t n;

	if (st->ops != &redis_ops)
		return;
	n = atomic_load(&rst->nentries);
	for (size_t i = 0; i < n; i++)
		fn(arg, rst->entry[i]->name, &rst->entry[i]->stats);
	if (n == ENTRIES_MAX)
		fn(arg, "other", &rst->overflow.stats);
}

/* struct redis_stats holds counters only (struct hist and struct
 * lease_stats too): summed as an array of them. */
_Static_assert(sizeof(struct redis_stats) % sizeof(counter_t) == 0, "counters only");

static void stats_add(void *to, const char *name, const struct redis_stats *from)
{
	counter_t *t = to;
	const counter_t *f = (const counter_t *)from;

	(void)name;
	for (size_t i = 0; i < sizeof(*from) / sizeof(counter_t); i++)
		STAT_ADD(t[i], STAT_GET(f[i]));
}

void store_redis_set_passwords(struct store *st, const char *password,
			       const char *sentinel_password)
{
	struct redis_store *rst = st->impl;

	if (st->ops == &redis_ops && rst->cfg.secrets)
		redis_secrets_set(rst->cfg.secrets, password, sentinel_password);
}

bool store_redis_ready(struct store *st, char *why, size_t len)
{
	if (st->ops != &redis_ops)
		return true;
	return redis_health_ready(st, ((struct redis_store *)st->impl)->cfg.topology == REDIS_CLUSTER,
				  why, len);
}

bool store_redis_stats(struct store *st, struct redis_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (st->ops != &redis_ops)
		return false;
	for (const struct store_worker *sw = st->workers; sw; sw = sw->next)
		if (sw->impl)
			stats_add(out, NULL, &((const struct redis_worker *)sw->impl)->stats);
	store_redis_each_node(st, stats_add, out);
	return true;
}
