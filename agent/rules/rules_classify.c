/* SPDX-License-Identifier: Apache-2.0 */
/* rules_classify.c: the classification of a request against loaded rules
 * (see rules.h), the hot path of every decision.
 *
 * Pure: no I/O, no clock, no allocation, no lock; it reads the rules
 * (immutable once loaded, see rules_int.h) and the caller's arguments, and
 * writes only the verdict. Bytes are compared exactly (same length, same
 * bytes; hosts ignoring ASCII case; the path in its normal form, see
 * request_path), and no argument is read past its length. Its cost is
 * linear in the number of endpoints and priority classes, both capped by
 * the loader, and in the path's length.
 */
#include "rules_int.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "identity.h"
#include "spop.h"
#include "urlpath.h"

/* ---- arguments ----------------------------------------------------------- */

int rules_args_add(struct rules_args *args, struct spop_str name, const struct spop_data *val)
{
	if (args->n >= RULES_ARGS_MAX)
		return -1;
	args->a[args->n].name = name;
	args->a[args->n].val = *val;
	args->n++;
	return 0;
}

/* Decodes each argument in its place (spop_kv_get inline). Returns 0, or -1
 * when the items are broken or fewer than nargs; every one is checked. */
static int args_decode(struct rules_args *args, struct spop_cursor *kv, unsigned nargs)
{
	unsigned i;

	args->n = 0;
	for (i = 0; i < nargs && i < RULES_ARGS_MAX; i++) {
		struct rules_arg *a = &args->a[i];

		if (spop_kv_get(kv, &a->name, &a->val) != 1)
			return -1;
		args->n++;
	}
	return spop_kv_skip(kv, nargs - i);
}

void rules_args_from_kv(struct rules_args *args, struct spop_cursor kv, unsigned nargs)
{
	args_decode(args, &kv, nargs);
}

static const struct spop_data *args_find(const struct rules_args *args, const char *name,
					  size_t len)
{
	size_t n = args->n < RULES_ARGS_MAX ? args->n : RULES_ARGS_MAX;

	for (size_t i = 0; i < n; i++) {
		const struct spop_str *an = &args->a[i].name;

		if (an->len == len && (len == 0 || memcmp(an->ptr, name, len) == 0))
			return &args->a[i].val;
	}
	return NULL;
}

const struct spop_data *rules_args_get(const struct rules_args *args, const char *name)
{
	return args_find(args, name, strlen(name));
}

/* ---- requests -------------------------------------------------------------- */

/* The n bytes at p (n = 2, 4 or 8, a constant where it is inlined) as one
 * word, read in one load. */
static inline __attribute__((always_inline)) uint64_t load_n(const char *p, size_t n)
{
	uint64_t v8;
	uint32_t v4;
	uint16_t v2;

	if (n == 8) {
		memcpy(&v8, p, 8);
		return v8;
	}
	if (n == 4) {
		memcpy(&v4, p, 4);
		return v4;
	}
	memcpy(&v2, p, 2);
	return v2;
}

/* Whether the first and the last n bytes of a and b (len >= n) are the
 * same: with n <= len <= 2n, two loads that overlap cover every byte. */
static inline __attribute__((always_inline)) bool ends_same(const char *a, const char *b,
							    size_t len, size_t n)
{
	return load_n(a, n) == load_n(b, n) && load_n(a + len - n, n) == load_n(b + len - n, n);
}

/* memcmp() == 0 for the few bytes of an argument name, inline: a call
 * costs more than the comparison, and as much again in the registers the
 * caller's decoding loop saves around it. No load reaches past a + len or
 * b + len. */
static inline bool name_same(const char *a, const char *b, size_t len)
{
	if (len > 16)
		return memcmp(a, b, len) == 0;
	if (len >= 8)
		return ends_same(a, b, len, 8);
	if (len >= 4)
		return ends_same(a, b, len, 4);
	if (len >= 2)
		return ends_same(a, b, len, 2);
	return len == 0 || a[0] == b[0];
}

/* The index in the rules' lookup of the name `name` (exactly), or -1. */
static inline __attribute__((always_inline)) int arg_find(const struct rules *r,
							   struct spop_str name)
{
	for (unsigned j = r->bucket[arg_bucket(name.ptr, name.len)]; j; j = r->lookup[j - 1].next) {
		const struct arg_lookup *l = &r->lookup[j - 1];

		if (l->len == name.len && name_same(l->name, name.ptr, name.len))
			return (int)j - 1;
	}
	return -1;
}

/* Gives every position of lookup entry j the value val. The callers do
 * it once per entry, for the first argument of its name: then all of an
 * entry's positions are set, or none. */
static void arg_fill(const struct rules *r, unsigned j, struct rules_request *req,
		     const struct spop_data *val)
{
	const struct arg_lookup *l = &r->lookup[j];

	req->position[l->position] = val;
	for (unsigned m = l->also; m; m &= m - 1)
		req->position[__builtin_ctz(m)] = val;
}

/* memset() of the positions, which GCC compiles to `rep stos`, a string
 * instruction slow to start for 120 bytes: sixteen-byte copies of a zero
 * object instead. Every decision clears them. */
static inline void positions_clear(struct rules_request *req)
{
	typedef struct {
		const struct spop_data *position[RULES_POSITIONS_MAX];
	} positions;
	static const positions none;

	_Static_assert(sizeof(positions) == sizeof(req->position), "the positions, as one object");
	memcpy(req->position, &none, sizeof(none));
}

/* The positions of a request from arguments decoded already (the first
 * RULES_ARGS_MAX, as args_find sees them). */
static void request_from_args(const struct rules *r, const struct rules_args *args,
			      struct rules_request *req)
{
	size_t n = args->n < RULES_ARGS_MAX ? args->n : RULES_ARGS_MAX;

	positions_clear(req);
	req->args = args;
	for (size_t i = 0; i < n; i++) {
		int j = arg_find(r, args->a[i].name);

		if (j >= 0 && !req->position[r->lookup[j].position])
			arg_fill(r, (unsigned)j, req, &args->a[i].val);
	}
}

void rules_request_from_args(const struct rules *r, const struct rules_args *args,
			     struct rules_request *req)
{
	request_from_args(r, args, req);
}

int rules_request_decode(const struct rules *r, struct rules_request *req,
			 struct spop_cursor *kv, unsigned nargs)
{
	struct spop_cursor c = *kv;

	if (r->match_args) {
		/* Conditions may name any argument: keep them all. */
		if (args_decode(&req->all, kv, nargs) < 0)
			return -1;
		request_from_args(r, &req->all, req);
		return 0;
	}
	positions_clear(req);
	req->args = NULL;
	for (unsigned i = 0; i < nargs; i++) {
		struct spop_data *val = NULL;
		struct spop_str name;
		int j = -1;

		if (spop_str_get(&c.p, c.end, &name) != SPOP_OK)
			return -1;
		if (i < RULES_ARGS_MAX)
			j = arg_find(r, name);
		if (j >= 0 && !req->position[r->lookup[j].position])
			val = &req->val[j];
		/* Read into its position, or only checked. */
		if (spop_data_get(&c.p, c.end, val, NULL) != SPOP_OK)
			return -1;
		if (val)
			arg_fill(r, (unsigned)j, req, val);
	}
	*kv = c;
	return 0;
}

/* ---- classification ------------------------------------------------------ */

struct request {
	const struct rules_request *req;
	const struct rules *r;
	size_t host_noport;
	size_t tier;
	/* The path conditions read: made by request_path() when the first
	 * of them is tested; path_state 0 before, 1 a path, -1 none. */
	int path_state;
	const char *path;
	size_t path_len;
	char path_buf[RULES_PATH_MAX + 1];
};

size_t rules_host_noport(const char *h, size_t len)
{
	const char *colon;

	if (len && h[0] == '[') {
		const char *rb = memchr(h, ']', len);

		return rb ? (size_t)(rb - h) + 1 : len;
	}
	colon = memchr(h, ':', len);
	if (!colon || memchr(colon + 1, ':', len - (size_t)(colon - h) - 1))
		return len;
	return (size_t)(colon - h);
}

static bool is_text(const struct spop_data *d)
{
	return d && (d->type == SPOP_T_STR || d->type == SPOP_T_BIN);
}

static bool bytes_eq(const char *a, size_t alen, const struct rules_value *v)
{
	return alen == v->len && (alen == 0 || memcmp(a, v->ptr, alen) == 0);
}

static bool cond_exact(const struct rules_cond *c, const struct spop_data *d)
{
	if (!is_text(d))
		return false;
	for (size_t i = 0; i < c->n; i++)
		if (bytes_eq(d->u.str.ptr, d->u.str.len, &c->v[i]))
			return true;
	return false;
}

/* The path the conditions read, or NULL when the request has none (no
 * path argument, or not text): its normal form (urlpath.h), unless the
 * rules say `paths: raw`. Made once per request, at the first condition
 * that reads it. Only its first path_cap bytes are kept, one more than the
 * longest value of a condition: a long path costs time linear in its
 * length, and no memory, and is never cut short so that a prefix would
 * differ (a ".." at the end is resolved as well). */
static __attribute__((noinline)) void request_path_make(struct request *q)
{
	const struct spop_data *d = q->req->position[POS_PATH];

	q->path_state = -1;
	if (!is_text(d))
		return;
	q->path_state = 1;
	/* (most paths are their own normal form: no copy) */
	if (q->r->paths_raw || urlpath_plain(d->u.str.ptr, d->u.str.len)) {
		q->path = d->u.str.ptr;
		q->path_len = d->u.str.len;
		return;
	}
	q->path = q->path_buf;
	q->path_len = urlpath_normalise(d->u.str.ptr, d->u.str.len, q->path_buf, q->r->path_cap);
}

static inline const char *request_path(struct request *q, size_t *len)
{
	if (q->path_state == 0)
		request_path_make(q);
	*len = q->path_len;
	return q->path_state > 0 ? q->path : NULL;
}

/* A path is under a prefix when it equals it or continues it at a segment
 * boundary: "/api/search" covers "/api/search/x" and "/api/search?q=1",
 * not "/api/searches". A prefix that ends with "/" covers all below it.
 * (p holds the path's first path_cap bytes, len of them: every value is
 * shorter, so a path as long as a value is whole, and a longer one has
 * the byte after the value.) */
static bool cond_path(const struct rules_cond *c, struct request *q)
{
	size_t len;
	const char *p = request_path(q, &len);

	if (!p)
		return false;
	for (size_t i = 0; i < c->n; i++) {
		const struct rules_value *v = &c->v[i];

		if (len < v->len || memcmp(p, v->ptr, v->len) != 0)
			continue;
		if (len == v->len || v->ptr[v->len - 1] == '/' || p[v->len] == '/' ||
		    p[v->len] == '?')
			return true;
	}
	return false;
}

static bool host_eq(const char *h, size_t len, const struct rules_value *v)
{
	if (len != v->len)
		return false;
	for (size_t i = 0; i < len; i++) {
		char ch = h[i];

		if (ch >= 'A' && ch <= 'Z')
			ch = (char)(ch + 32);
		if (ch != v->ptr[i])
			return false;
	}
	return true;
}

/* Hosts ignore ASCII case; a value without a port ignores the request's
 * port, a value with one must match it too. */
static bool cond_host(const struct rules_cond *c, const struct spop_data *d, size_t noport)
{
	if (!is_text(d))
		return false;
	for (size_t i = 0; i < c->n; i++) {
		const struct rules_value *v = &c->v[i];

		if (host_eq(d->u.str.ptr, v->port ? d->u.str.len : noport, v))
			return true;
	}
	return false;
}

/* Argument values compare as text: strings and binaries as they are,
 * integers in decimal, booleans as true/false, addresses in their usual
 * forms. NULL matches nothing. */
static bool cond_arg(const struct rules_cond *c, const struct spop_data *d)
{
	char buf[64];
	size_t n;

	if (!d || d->type == SPOP_T_NULL)
		return false;
	if (d->type == SPOP_T_STR || d->type == SPOP_T_BIN)
		return cond_exact(c, d);
	/* the text a client is identified by: one rendering for both */
	n = identity_text(d, buf, sizeof(buf));
	if (n == 0)
		return false;
	for (size_t i = 0; i < c->n; i++)
		if (bytes_eq(buf, n, &c->v[i]))
			return true;
	return false;
}

static bool match_holds(const struct rules_match *m, struct request *q)
{
	if (m->method.n && !cond_exact(&m->method, q->req->position[POS_METHOD]))
		return false;
	if (m->path.n && !cond_path(&m->path, q))
		return false;
	if (m->host.n && !cond_host(&m->host, q->req->position[POS_HOST], q->host_noport))
		return false;
	if (m->ntiers) {
		size_t i;

		for (i = 0; i < m->ntiers; i++)
			if (m->tiers[i] == q->tier)
				break;
		if (i == m->ntiers)
			return false;
	}
	for (size_t i = 0; i < m->nargs; i++) {
		const struct rules_arg_cond *a = &m->args[i];

		if (!cond_arg(&a->c, args_find(q->req->args, a->name, a->name_len)))
			return false;
	}
	return true;
}

/* Empty values do not identify anyone: NULL, and empty strings (a missing
 * header arrives as an empty string or as NULL depending on the sample). */
static bool data_is_empty(const struct spop_data *d)
{
	switch ((enum spop_type)d->type) {
	case SPOP_T_NULL:
		return true;
	case SPOP_T_STR:
	case SPOP_T_BIN:
		return d->u.str.len == 0;
	case SPOP_T_BOOL:
	case SPOP_T_INT32:
	case SPOP_T_UINT32:
	case SPOP_T_INT64:
	case SPOP_T_UINT64:
	case SPOP_T_IPV4:
	case SPOP_T_IPV6:
		return false;
	}
	return true;
}


/* A request's weight: a positive integer, or a string of 1 to 20 decimal
 * digits, capped at 2^32-1; anything else gives `dflt`. */
static uint32_t cost_of(const struct spop_data *d, uint32_t dflt)
{
	int64_t v;

	if (!d)
		return dflt;
	if (is_text(d)) {
		uint64_t u = 0;
		size_t len = d->u.str.len;

		if (len == 0 || len > 20)
			return dflt;
		for (size_t i = 0; i < len; i++) {
			char ch = d->u.str.ptr[i];

			if (ch < '0' || ch > '9')
				return dflt;
			if (u > UINT32_MAX)
				continue; /* saturated; keep checking digits */
			u = u * 10 + (uint64_t)(ch - '0');
		}
		if (u == 0)
			return dflt;
		return u > UINT32_MAX ? UINT32_MAX : (uint32_t)u;
	}
	if (!spop_data_int(d, &v) || v <= 0)
		return dflt;
	return v > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static size_t resolve_tier(const struct rules *r, const struct spop_data *d)
{
	if (is_text(d) && d->u.str.len > 0 && d->u.str.len < RULES_NAME_MAX) {
		for (size_t i = 0; i < r->ntiers; i++) {
			const struct rule *t = &r->rule[i];

			if (t->kind == RULES_KIND_TIER && strlen(t->name) == d->u.str.len &&
			    memcmp(t->name, d->u.str.ptr, d->u.str.len) == 0)
				return i;
		}
	}
	return r->default_tier;
}

void rules_classify(const struct rules *r, const struct rules_args *args,
		    struct rules_verdict *out)
{
	struct rules_request req;

	request_from_args(r, args, &req);
	rules_classify_request(r, &req, out);
}

void rules_classify_request(const struct rules *r, const struct rules_request *req,
			    struct rules_verdict *out)
{
	const struct spop_data *const *at = req->position;
	struct request q;
	const struct rule *rule;
	const struct spop_data *d;
	int64_t in_use, free_conns;

	/* (the layers' part is written below for the layers there are) */
	memset(out, 0, offsetof(struct rules_verdict, layer_identity));
	q.req = req;
	q.r = r;
	q.path_state = 0;
	q.host_noport = 0;
	if (is_text(at[POS_HOST]))
		q.host_noport = rules_host_noport(at[POS_HOST]->u.str.ptr,
						  at[POS_HOST]->u.str.len);
	q.tier = resolve_tier(r, at[POS_TIER]);

	out->tier = &r->rule[q.tier];
	rule = out->tier;
	for (size_t i = 0; i < r->neps; i++) {
		if (match_holds(&r->ep[i], &q)) {
			rule = &r->rule[r->ntiers + i];
			break;
		}
	}
	out->rule = rule;

	out->priority = r->default_priority;
	for (size_t i = 0; i < r->nclasses; i++) {
		if (match_holds(&r->classes[i].m, &q)) {
			out->priority = r->classes[i].priority;
			break;
		}
	}

	out->shadow = r->shadow || rule->shadow;
	out->shed_shadow = r->shadow || r->shed.shadow;
	out->on_failure = rule->on_failure;
	out->cost = rule->cost;
	if (r->cost_arg[0])
		out->cost = cost_of(at[POS_COST], rule->cost);

	out->identity = -1;
	for (size_t k = 0; k < r->identity.n; k++) {
		d = at[POS_IDENTITY + k];
		if (d && !data_is_empty(d)) {
			out->identity = (int)k;
			out->identity_val = d;
			break;
		}
	}
	for (size_t p = 0; p < rule->nstack; p++) {
		const struct rule *l = rule->stack[p];

		out->layer_identity[p] = out->identity;
		out->layer_val[p] = out->identity_val;
		if (l->scope == RULES_SCOPE_GLOBAL) {
			out->layer_identity[p] = RULES_ID_GLOBAL;
			out->layer_val[p] = NULL;
		} else if (l->scope == RULES_SCOPE_ARGS) {
			out->layer_identity[p] = -1;
			out->layer_val[p] = NULL;
			for (size_t j = 0; j < l->nidk; j++) {
				d = at[POS_IDENTITY + l->idk[j]];
				if (d && !data_is_empty(d)) {
					out->layer_identity[p] = l->idk[j];
					out->layer_val[p] = d;
					break;
				}
			}
		}
	}

	if (rule->extras) {
		if (rule->conc && at[POS_REQUEST_ID] && !data_is_empty(at[POS_REQUEST_ID]))
			out->request_id = at[POS_REQUEST_ID];
		if (rule->has_max_override && at[POS_OVERRIDE] &&
		    !data_is_empty(at[POS_OVERRIDE]))
			out->override = at[POS_OVERRIDE];
	}
	if (spop_data_int(at[POS_IN_USE], &in_use) && spop_data_int(at[POS_FREE], &free_conns)) {
		out->load_known = true;
		out->in_use = in_use;
		out->free_conns = free_conns;
	}
}
