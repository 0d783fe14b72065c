/* rules_classify.c: the classification of a request against loaded rules
 * (see rules.h), the hot path of every decision.
 *
 * Pure: no I/O, no clock, no allocation, no lock; it reads the rules
 * (immutable once loaded, see rules_int.h) and the caller's arguments, and
 * writes only the verdict. Bytes are compared exactly (same length, same
 * bytes; hosts ignoring ASCII case), and no argument is read past its
 * length. Its cost is linear in the number of endpoints and priority
 * classes, both capped by the loader.
 */
#include "rules_int.h"

#include <stdint.h>
#include <string.h>

#include "identity.h"
#include "spop.h"

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

/* Decodes each argument in its place: this runs for every decision. */
int rules_args_decode(struct rules_args *args, struct spop_cursor *kv, unsigned nargs)
{
	unsigned i;

	args->n = 0;
	for (i = 0; i < nargs && i < RULES_ARGS_MAX; i++) {
		struct rules_arg *a = &args->a[i];

		if (spop_kv_next(kv, &a->name, &a->val) != 1)
			return -1;
		args->n++;
	}
	return spop_kv_skip(kv, nargs - i);
}

void rules_args_from_kv(struct rules_args *args, struct spop_cursor kv, unsigned nargs)
{
	rules_args_decode(args, &kv, nargs);
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

/* ---- classification ------------------------------------------------------ */

struct request {
	const struct rules_args *args;
	const struct spop_data *method, *path, *host;
	size_t host_noport;
	size_t tier;
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

static bool bytes_eq(const char *a, size_t alen, const struct mval *v)
{
	return alen == v->len && (alen == 0 || memcmp(a, v->ptr, alen) == 0);
}

static bool cond_exact(const struct cond *c, const struct spop_data *d)
{
	if (!is_text(d))
		return false;
	for (size_t i = 0; i < c->n; i++)
		if (bytes_eq(d->u.str.ptr, d->u.str.len, &c->v[i]))
			return true;
	return false;
}

/* A path is under a prefix when it equals it or continues it at a segment
 * boundary: "/api/search" covers "/api/search/x" and "/api/search?q=1",
 * not "/api/searches". A prefix that ends with "/" covers all below it. */
static bool cond_path(const struct cond *c, const struct spop_data *d)
{
	if (!is_text(d))
		return false;
	for (size_t i = 0; i < c->n; i++) {
		const struct mval *v = &c->v[i];
		const char *p = d->u.str.ptr;
		size_t len = d->u.str.len;

		if (len < v->len || memcmp(p, v->ptr, v->len) != 0)
			continue;
		if (len == v->len || v->ptr[v->len - 1] == '/' || p[v->len] == '/' ||
		    p[v->len] == '?')
			return true;
	}
	return false;
}

static bool host_eq(const char *h, size_t len, const struct mval *v)
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
static bool cond_host(const struct cond *c, const struct spop_data *d, size_t noport)
{
	if (!is_text(d))
		return false;
	for (size_t i = 0; i < c->n; i++) {
		const struct mval *v = &c->v[i];

		if (host_eq(d->u.str.ptr, v->port ? d->u.str.len : noport, v))
			return true;
	}
	return false;
}

/* Argument values compare as text: strings and binaries as they are,
 * integers in decimal, booleans as true/false, addresses in their usual
 * forms. NULL matches nothing. */
static bool cond_arg(const struct cond *c, const struct spop_data *d)
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

static bool match_holds(const struct match *m, const struct request *q)
{
	if (m->method.n && !cond_exact(&m->method, q->method))
		return false;
	if (m->path.n && !cond_path(&m->path, q->path))
		return false;
	if (m->host.n && !cond_host(&m->host, q->host, q->host_noport))
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
		const struct arg_cond *a = &m->args[i];

		if (!cond_arg(&a->c, args_find(q->args, a->name, a->name_len)))
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

/* An integer argument as int64 (UINT64 saturated). False for other types. */
static bool data_int(const struct spop_data *d, int64_t *out)
{
	if (!d)
		return false;
	switch ((enum spop_type)d->type) {
	case SPOP_T_INT32:
		*out = d->u.i32;
		return true;
	case SPOP_T_UINT32:
		*out = d->u.u32;
		return true;
	case SPOP_T_INT64:
		*out = d->u.i64;
		return true;
	case SPOP_T_UINT64:
		*out = d->u.u64 > INT64_MAX ? INT64_MAX : (int64_t)d->u.u64;
		return true;
	case SPOP_T_NULL:
	case SPOP_T_BOOL:
	case SPOP_T_IPV4:
	case SPOP_T_IPV6:
	case SPOP_T_STR:
	case SPOP_T_BIN:
		break;
	}
	return false;
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
	if (!data_int(d, &v) || v <= 0)
		return dflt;
	return v > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static size_t resolve_tier(const struct rules *r, const struct rules_args *args)
{
	const struct spop_data *d = args_find(args, r->tier_arg, strlen(r->tier_arg));

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
	struct request q;
	const struct rule *rule;
	const struct spop_data *d;
	int64_t in_use, free_conns;

	memset(out, 0, sizeof(*out));
	memset(&q, 0, sizeof(q));
	q.args = args;
	q.method = args_find(args, "method", 6);
	q.path = args_find(args, "path", 4);
	q.host = args_find(args, "host", 4);
	if (is_text(q.host))
		q.host_noport = rules_host_noport(q.host->u.str.ptr, q.host->u.str.len);
	q.tier = resolve_tier(r, args);

	out->tier = &r->rule[q.tier];
	rule = out->tier;
	for (size_t i = 0; i + r->ntiers < r->nrules; i++) {
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
		out->cost = cost_of(args_find(args, r->cost_arg, strlen(r->cost_arg)), rule->cost);

	out->identity = -1;
	for (size_t k = 0; k < r->identity.n; k++) {
		d = args_find(args, r->identity.name[k], strlen(r->identity.name[k]));
		if (d && !data_is_empty(d)) {
			out->identity = (int)k;
			out->identity_val = d;
			break;
		}
	}

	if (data_int(args_find(args, r->shed.in_use_arg, strlen(r->shed.in_use_arg)), &in_use) &&
	    data_int(args_find(args, r->shed.free_arg, strlen(r->shed.free_arg)), &free_conns)) {
		out->load_known = true;
		out->in_use = in_use;
		out->free_conns = free_conns;
	}
}

