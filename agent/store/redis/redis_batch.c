/* SPDX-License-Identifier: Apache-2.0 */
/* redis_batch.c: a batch's call, encoded (see redis_batch.h). */
#include "redis_batch.h"

#include <string.h>

#include "alloc.h"
#include "redis_encode.h"
#include "redis_keys.h"

/* FCALL, its name, 0 and the requests; a rule and a key per limit per
 * query, at most */
static size_t max_argc(size_t batch_max)
{
	return 6 + batch_max * (1 + LIMIT_SET_MAX);
}

int redis_batch_init(struct redis_batch_enc *e, size_t batch_max, const struct redis_keys *keys)
{
	memset(e, 0, sizeof(*e));
	e->batch_max = batch_max;
	e->keys = keys;
	e->argv = xcalloc(max_argc(batch_max), sizeof(*e->argv));
	e->argvlen = xcalloc(max_argc(batch_max), sizeof(*e->argvlen));
	e->arena_cap = 2 + batch_max * (10 + 8 + RULE_BYTES_MAX +
					LIMIT_SET_MAX * (REDIS_KEY_NAME_MAX + 1 + 4));
	e->arena = xmalloc(e->arena_cap);
	if (!e->argv || !e->argvlen || !e->arena) {
		redis_batch_free(e);
		return -1;
	}
	return 0;
}

void redis_batch_free(struct redis_batch_enc *e)
{
	xfree(e->argv);
	xfree(e->argvlen);
	xfree(e->arena);
	xfree(e->cmd);
	memset(e, 0, sizeof(*e));
}

/* Bytes of the argv; NULL when the arena is full (it is sized for
 * batch_max queries of LIMIT_SET_MAX limits: cannot happen, checked
 * anyway). */
static uint8_t *arena_take(struct redis_batch_enc *e, size_t *used, size_t len)
{
	uint8_t *p;

	if (len > e->arena_cap - *used)
		return NULL;
	p = (uint8_t *)e->arena + *used;
	*used += len;
	return p;
}

/* The requests' ids (8 bytes each, 0 for none), for concurrency limits. */
static int put_ids(struct redis_batch_enc *e, const struct redis_query *rq, size_t n,
		   size_t *argc, size_t *used)
{
	uint8_t *p = arena_take(e, used, 8 * n);

	if (!p)
		return -1;
	for (size_t i = 0; i < n; i++)
		redis_put_be(p + 8 * i, rq[i].q.request_id, 8);
	e->argv[*argc] = (const char *)p;
	e->argvlen[(*argc)++] = 8 * n;
	return 0;
}

/* The keys of a batch with a rule with layers, whose queries may share
 * keys (a global limit, a limit per address): each query's limits get
 * positions of their own, first[i] the first, and the keymap (the next
 * argument) names the key at each position; each distinct key is named
 * once, after it, so the library decides the queries in turn on the same
 * state. */
static int put_keys_mapped(struct redis_batch_enc *e, const struct redis_query *rq, size_t n,
			   uint32_t *first, size_t *argc, size_t *used, bool ids)
{
	size_t npos = 0, nkeys = 0, k0;
	uint8_t *map;

	for (size_t i = 0; i < n; i++)
		npos += rq[i].q.nlimits;
	if (!(map = arena_take(e, used, 4 * npos)))
		return -1;
	e->argv[*argc] = (const char *)map;
	e->argvlen[(*argc)++] = 4 * npos;
	if (ids && put_ids(e, rq, n, argc, used) < 0)
		return -1;
	k0 = *argc;
	npos = 0;
	for (size_t i = 0; i < n; i++) {
		const struct decide_query *q = &rq[i].q;

		first[i] = (uint32_t)npos + 1;
		for (size_t j = 0; j < q->nlimits; j++) {
			char name[REDIS_KEY_NAME_MAX + 1];
			size_t k, len;
			uint8_t *p;

			len = redis_key_name(e->keys, decide_limit_key(q, j), q->rule->lidh[j],
					     &q->limits[j], name);
			for (k = 0; k < nkeys; k++)
				if (e->argvlen[k0 + k] == len &&
				    memcmp(e->argv[k0 + k], name, len) == 0)
					break;
			if (k == nkeys) {
				if (!(p = arena_take(e, used, len + 1)))
					return -1;
				memcpy(p, name, len + 1);
				e->argv[k0 + nkeys] = (const char *)p;
				e->argvlen[k0 + nkeys] = len;
				nkeys++;
			}
			redis_put_be(map + 4 * npos++, k + 1, 4);
		}
	}
	*argc += nkeys;
	return 0;
}

/* Each distinct client's keys, one per limit of its rule: a client's
 * queries of one rule share its keys; under another rule it has keys of
 * their own (redis_batch_take() saw to it that they are other keys). */
static int put_keys(struct redis_batch_enc *e, const struct redis_query *rq, size_t n,
		    uint32_t *first, size_t *argc, size_t *used)
{
	size_t nkeys = 0;
	uint8_t *p;

	for (size_t i = 0; i < n; i++) {
		const struct decide_query *q = &rq[i].q;
		size_t k;

		for (k = 0; k < i; k++)
			if (rq[k].q.limits == q->limits &&
			    memcmp(rq[k].q.key, q->key, IDENTITY_KEY_LEN) == 0)
				break;
		if (k < i) {
			first[i] = first[k];
			continue;
		}
		first[i] = (uint32_t)nkeys + 1;
		for (size_t j = 0; j < q->nlimits; j++) {
			if (!(p = arena_take(e, used, REDIS_KEY_NAME_MAX + 1)))
				return -1;
			e->argv[*argc] = (const char *)p;
			e->argvlen[(*argc)++] = redis_key_name(e->keys, q->key, q->rule->lidh[j],
							       &q->limits[j], (char *)p);
		}
		nkeys += q->nlimits;
	}
	return 0;
}

/* The argv of the call (see ratelimit.lua):
 *
 *     FCALL rl8_decide 0 <requests> <rule>... <key>...
 *
 * (rl8_decide_cluster on a Cluster: its keys may be of several slots). The
 * distinct rules of the batch go once each; then each distinct client's
 * keys, one per limit of its rule; <requests> is the number of rules
 * (2 bytes), then per query its first key (4 bytes), cost (4) and rule (2),
 * and, when any query of the call asks for a lease, the tokens it asks for
 * (4), big-endian. No key is named twice (see redis_batch_take()).
 * Returns argc, 0 when it cannot be made. */
static size_t batch_argv(struct redis_batch_enc *e, const struct redis_query *rq, size_t n,
			 bool cluster, bool unexpiring)
{
	size_t argc = 0, nrules = 0, used = 0, rec = 10;
	bool stacked = false, ids = false, leases = false;
	uint32_t first[1024];
	uint16_t ruleidx[1024];
	const struct decide_query *rule_q[1024];
	const char *fn = cluster ? "rl8_decide_cluster" : "rl8_decide";
	uint8_t *req, *p;

	if (n > sizeof(first) / sizeof(first[0]) || n > e->batch_max)
		return 0;
	e->argv[argc] = "FCALL";
	e->argvlen[argc++] = 5;
	e->argv[argc] = fn;
	e->argvlen[argc++] = strlen(fn);
	e->argv[argc] = "0";
	e->argvlen[argc++] = 1;
	for (size_t i = 0; i < n; i++)
		leases |= rq[i].lease != 0;
	if (leases)
		rec = 14; /* each request names the tokens it would lease */
	if (!(req = arena_take(e, &used, 2 + rec * n)))
		return 0;
	e->argv[argc] = (const char *)req;
	e->argvlen[argc++] = 2 + rec * n;
	for (size_t i = 0; i < n; i++) {
		const struct decide_query *q = &rq[i].q;
		size_t k;

		stacked |= q->rule->nstack > 0;
		ids |= q->request_id != 0;
		for (k = 0; k < nrules; k++)
			if (rule_q[k]->limits == q->limits && rule_q[k]->nlimits == q->nlimits)
				break;
		if (k == nrules) {
			if (!(p = arena_take(e, &used, RULE_BYTES_MAX)))
				return 0;
			rule_q[nrules++] = q;
			e->argv[argc] = (const char *)p;
			e->argvlen[argc++] = redis_limits_bytes(e->keys, q->limits, q->nlimits, unexpiring, p);
		}
		ruleidx[i] = (uint16_t)(k + 1);
	}
	if (stacked) {
		if (put_keys_mapped(e, rq, n, first, &argc, &used, ids) < 0)
			return 0;
		nrules |= 0x8000; /* a keymap follows the rules */
	} else if ((ids && put_ids(e, rq, n, &argc, &used) < 0) ||
		   put_keys(e, rq, n, first, &argc, &used) < 0) {
		return 0;
	}
	if (ids)
		nrules |= 0x4000; /* then the requests' ids */
	if (leases)
		nrules |= 0x2000; /* records of 14 bytes */
	redis_put_be(req, nrules, 2);
	for (size_t i = 0; i < n; i++) {
		uint8_t *at = req + 2 + rec * i;

		redis_put_be(at, first[i], 4);
		redis_put_be(at + 4, rq[i].q.cost, 4);
		redis_put_be(at + 8, ruleidx[i], 2);
		if (leases)
			redis_put_be(at + 10, rq[i].lease, 4);
	}
	return argc;
}

size_t redis_batch_encode(struct redis_batch_enc *e, const struct redis_query *rq, size_t n,
			  bool cluster, bool unexpiring, const char **out)
{
	size_t argc = batch_argv(e, rq, n, cluster, unexpiring), len;

	if (!argc)
		return 0;
	len = redis_resp_len(argc, e->argvlen);
	if (len > e->cmd_cap) {
		char *grown = xrealloc(e->cmd, len);

		if (!grown)
			return 0;
		e->cmd = grown;
		e->cmd_cap = len;
	}
	redis_resp_put(e->cmd, argc, e->argv, e->argvlen);
	*out = e->cmd;
	return len;
}

/* Whether two queries' rules share a limit (and so, for one client, a
 * key). */
static bool share_limit(const struct redis_query *a, const struct redis_query *b)
{
	for (size_t i = 0; i < a->q.nlimits; i++)
		for (size_t j = 0; j < b->q.nlimits; j++)
			if (a->q.rule->lidh[i] == b->q.rule->lidh[j])
				return true;
	return false;
}

/* A query sent after ASKING (a migrating slot) goes alone, as ASKING
 * admits one command, for the slot being imported. A rule with layers:
 * the call maps its keys (put_keys_mapped), any query may share them. */
size_t redis_batch_take(const struct redis_query *q, size_t cap, size_t head, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct redis_query *r = &q[(head + i) % cap];

		if (r->asking)
			return i ? i : 1;
		for (size_t k = 0; k < i && !r->q.rule->nstack; k++) {
			const struct redis_query *e = &q[(head + k) % cap];

			if (e->q.limits != r->q.limits &&
			    memcmp(e->q.key, r->q.key, IDENTITY_KEY_LEN) == 0 && share_limit(e, r))
				return i;
		}
	}
	return n;
}
