/* SPDX-License-Identifier: Apache-2.0 */
#include "explain.h"

#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

#include "alloc.h"
#include "clock.h"
#include "adaptive.h"
#include "decide.h"
#include "flights.h"
#include "http.h"
#include "identity.h"
#include "out.h"
#include "overrides.h"
#include "query.h"
#include "server.h"
#include "store.h"

/* A value shown in the answer: longer ones are cut there. */
#define EXPLAIN_VALUE_MAX 256
/* The rule's own limits, then each layer's: one store item each. */
#define EXPLAIN_ITEMS (1 + RULES_STACK_MAX)

/* One request explained, while the store looks at its keys. */
struct explain {
	struct store_admin a;
	struct store_admin_item item[EXPLAIN_ITEMS];
	struct rules *rules;           /* referenced until the answer */
	const char *store_name;
	const struct rule *tier;
	const struct rule *file_rule;  /* the file's: the tier or an endpoint */
	const struct rule *rule;       /* applied, held: an override's maybe */
	int priority;
	uint32_t cost;
	bool shadow;
	bool load_known, shed;
	/* adaptive shedding: the backend the request names, its limit and
	 * requests in flight now, and whether this request would be shed */
	bool adaptive, adaptive_shed;
	char backend[FLIGHTS_NAME_MAX];
	uint32_t adaptive_limit, adaptive_inflight;
	const char *kind;              /* the identity argument that named it */
	char text[EXPLAIN_VALUE_MAX];  /* its value */
	size_t tlen;
	/* each layer's client: the argument (NULL: global or anonymous) and
	 * its value */
	const char *lkind[RULES_STACK_MAX];
	char ltext[RULES_STACK_MAX][EXPLAIN_VALUE_MAX];
	size_t ltlen[RULES_STACK_MAX];
	struct http_req *req;          /* NULL: the command line's */
	struct out o;                  /* the answer, once the store has looked */
	int status;
};

static void explain_free(struct explain *ex)
{
	for (size_t i = 0; i < ex->a.n; i++) {
		xfree(ex->item[i].refusal);
		for (size_t j = 0; j < LIMIT_RULE_MAX; j++)
			xfree(ex->item[i].limit[j].raw);
	}
	rules_rule_unhold(ex->rule);
	rules_release(ex->rules);
	xfree(ex->o.buf);
	xfree(ex);
}

static void out_str(struct out *o, const char *s)
{
	out_json_str(o, s, strlen(s));
}

/* Copies a value as the answer shows it (cut at EXPLAIN_VALUE_MAX). */
static size_t copy_value(const struct spop_data *d, char *buf)
{
	char render[IDENTITY_RENDER_MAX];
	size_t len = 0;
	const char *v = identity_value(d, render, sizeof(render), &len);

	if (len > EXPLAIN_VALUE_MAX)
		len = EXPLAIN_VALUE_MAX;
	memcpy(buf, v, len);
	return len;
}

/* ---- which arguments the rules read ---------------------------------------- */

static bool same(const struct spop_str *name, const char *s)
{
	return s && s[0] && strlen(s) == name->len && memcmp(s, name->ptr, name->len) == 0;
}

/* Whether the rules read an argument of that name: an identity argument
 * (the file's, the defaults', a layer's), one a condition names, the tier,
 * cost, override, load figures or request_id argument. */
static bool known_arg(const struct rules *r, const struct spop_str *name)
{
	const struct rules_names *ids = rules_identity_names(r);
	const struct shed_config *sc = rules_shed(r);

	for (size_t i = 0; i < ids->n; i++)
		if (same(name, ids->name[i]))
			return true;
	for (size_t i = 0; i < rules_checked_count(r); i++)
		if (same(name, rules_checked_name(r, i)))
			return true;
	return same(name, rules_tier_argument(r)) || same(name, rules_cost_argument(r)) ||
	       same(name, rules_override_argument(r)) || same(name, sc->in_use_arg) ||
	       same(name, sc->free_arg) || same(name, RULES_REQUEST_ID);
}

/* {"error": "..."} for an argument the rules never read. */
static void unknown_arg(const struct rules *r, const struct spop_str *name, struct out *o)
{
	const struct rules_names *ids = rules_identity_names(r);
	struct out m = { NULL, 0, 0, 0, 1 };

	outf(&m, "argument '%.*s': the rules read no argument of that name; they read ",
	     (int)(name->len > EXPLAIN_VALUE_MAX ? EXPLAIN_VALUE_MAX : name->len), name->ptr);
	for (size_t i = 0; i < ids->n; i++)
		outf(&m, "%s%s", i ? ", " : "", ids->name[i]);
	for (size_t i = 0; i < rules_checked_count(r); i++) {
		const char *c = rules_checked_name(r, i);
		bool dup = false;

		for (size_t k = 0; k < ids->n && !dup; k++)
			dup = strcmp(c, ids->name[k]) == 0;
		if (!dup)
			outf(&m, ", %s", c);
	}
	if (m.err)
		o->err = 1;
	outf(o, "{\"error\": ");
	out_json_str(o, m.buf ? m.buf : "", m.len);
	outf(o, "}\n");
	xfree(m.buf);
}

/* ---- the request, classified ------------------------------------------------- */

/* HAProxy sends the load figures as integers (be_conn, be_conn_free), and
 * classification reads them only so: a figure given as decimal text
 * becomes one. */
static void load_figures(const struct rules *r, struct rules_args *args)
{
	const struct shed_config *sc = rules_shed(r);

	for (size_t i = 0; i < args->n; i++) {
		struct rules_arg *a = &args->a[i];
		const char *p = a->val.u.str.ptr;
		size_t len = a->val.u.str.len, k = 0;
		int64_t v = 0;

		if (a->val.type != SPOP_T_STR ||
		    !(same(&a->name, sc->in_use_arg) || same(&a->name, sc->free_arg)))
			continue;
		while (k < len && k < 18 && p[k] >= '0' && p[k] <= '9')
			v = v * 10 + (p[k++] - '0');
		if (k == 0 || k != len)
			continue;
		a->val.type = SPOP_T_INT64;
		a->val.u.i64 = v;
	}
}

/* Classifies the request that args describe as a check-rate would be (ovs:
 * the operators' overrides in force, or NULL) and sets ex up to look at
 * its keys. Returns 0, or the HTTP status of the error written into *o. */
static int explain_prepare(struct explain *ex, struct rules *rules, const struct overrides *ovs,
			   struct rules_args *args, struct out *o)
{
	const struct rules_names *ids = rules_identity(rules);
	struct rules_request req;
	struct rules_verdict v;
	struct decide_query q;

	if (args->n == 0) {
		outf(o, "{\"error\": \"describe the request by its message arguments, such as "
			"api_key=K&path=/P\"}\n");
		return 400;
	}
	for (size_t i = 0; i < args->n; i++)
		if (!known_arg(rules, &args->a[i].name)) {
			unknown_arg(rules, &args->a[i].name, o);
			return 400;
		}
	load_figures(rules, args);
	rules_request_from_args(rules, args, &req);
	rules_classify_request(rules, &req, &v);
	if (v.identity < 0 || !v.identity_val) {
		outf(o, "{\"error\": \"name the client with one of its identity arguments (");
		for (size_t i = 0; i < ids->n; i++)
			outf(o, "%s%s", i ? ", " : "", ids->name[i]);
		outf(o, ")\"}\n");
		return 400;
	}
	/* rnd 0: shed whenever the load gives it any chance of it */
	decide_prepare_request(rules, &req, 0, &q);
	if (ovs)
		decide_override(rules, ovs, clock_wall_ms(), &q);
	/* the rule applied is ours until the answer: the thread's hold goes */
	rules_rule_hold(q.rule);
	decide_forget();
	ex->rule = q.rule;
	ex->tier = v.tier;
	ex->file_rule = v.rule;
	ex->priority = q.priority;
	ex->cost = q.cost;
	ex->shadow = q.shadow;
	ex->load_known = q.load_known;
	ex->shed = q.shed;
	ex->kind = ids->name[v.identity];
	ex->tlen = copy_value(v.identity_val, ex->text);
	for (size_t p = 0; p < q.rule->nstack; p++) {
		int k = v.layer_identity[p];

		ex->lkind[p] = k >= 0 ? rules_identity_names(rules)->name[k] : NULL;
		if (k >= 0 && v.layer_val[p])
			ex->ltlen[p] = copy_value(v.layer_val[p], ex->ltext[p]);
	}
	/* the rule's own limits under the client's key, each layer's under
	 * its own (decide_limit_key), as a check would count them */
	ex->item[0].rule = q.rule;
	memcpy(ex->item[0].key, q.key, IDENTITY_KEY_LEN);
	for (size_t p = 0; p < q.rule->nstack; p++) {
		ex->item[1 + p].rule = q.rule->stack[p];
		memcpy(ex->item[1 + p].key, q.lkey[p], IDENTITY_KEY_LEN);
	}
	ex->a.n = 1 + q.rule->nstack;
	ex->a.item = ex->item;
	return 0;
}

/* Under shedding.adaptive, the backend that args name (as a check-rate
 * would read it, rules_adaptive_args), as this agent sees it now (f: the
 * server's flights; NULL, or a backend not seen yet: its initial limit,
 * nothing in flight). */
static void explain_adaptive(struct explain *ex, struct rules *rules,
			     const struct rules_args *args, const struct flights *f)
{
	const struct adaptive_config *ac = rules_adaptive(rules);
	const struct spop_data *b, *rid;
	struct flights_backend_stats st[FLIGHTS_BACKENDS_MAX];
	struct adaptive_limit fresh;
	struct rules_request req;
	size_t n;

	if (!ac)
		return;
	rules_request_from_args(rules, args, &req);
	if (!rules_adaptive_args(rules, &req, &b, &rid) || b->u.str.len >= FLIGHTS_NAME_MAX)
		return;
	ex->adaptive = true;
	memcpy(ex->backend, b->u.str.ptr, b->u.str.len);
	ex->backend[b->u.str.len] = '\0';
	adaptive_init(&fresh, ac, 0);
	ex->adaptive_limit = adaptive_current(&fresh, ac);
	ex->adaptive_inflight = 0;
	n = f ? flights_backends(f, st, FLIGHTS_BACKENDS_MAX) : 0;
	for (size_t i = 0; i < n; i++)
		if (strcmp(st[i].name, ex->backend) == 0) {
			ex->adaptive_limit = st[i].limit;
			ex->adaptive_inflight = st[i].inflight;
		}
	/* the request itself would be one more in flight */
	ex->adaptive_shed = ex->adaptive_inflight >= adaptive_threshold(ex->adaptive_limit,
									 ex->priority);
}

/* ---- the answer ---------------------------------------------------------------- */

/* Limit k of an item: what it is, and what the store found it holds. */
static void out_limit(struct out *o, const struct store_admin_item *it, size_t k, bool first)
{
	const struct rule *rule = it->rule;
	const struct limit_spec *l = &rule->limits[k];
	const struct store_admin_limit *s = &it->limit[k];
	char period[32];

	limit_format_period(l->period_us, period, sizeof(period));
	outf(o, "%s{\"rule\": ", first ? "" : ", ");
	out_str(o, rule->name);
	outf(o, ", \"name\": ");
	out_str(o, rule->pname[k]);
	outf(o, ", \"algorithm\": \"%s\", \"quota\": %llu, \"period\": \"%s\"", limit_algo_name(l->algo),
	     (unsigned long long)l->quota, period);
	if (l->burst)
		outf(o, ", \"burst\": %llu", (unsigned long long)l->burst);
	if (l->algo == LIMIT_CONCURRENCY) {
		/* a shared store keeps no count of them to read */
		if (it->found == STORE_ADMIN_STATE)
			outf(o, ", \"in_flight\": %u}", s->in_flight);
		else
			outf(o, ", \"in_flight\": null}");
		return;
	}
	if (it->found == STORE_ADMIN_STATE || (it->found == STORE_ADMIN_RAW && s->has_state))
		outf(o, ", \"remaining\": %llu, \"reset\": %lld}", (unsigned long long)s->remaining,
		     (long long)limit_ceil_s(s->reset_us));
	else
		outf(o, ", \"remaining\": null, \"reset\": null}");
}

static void out_layers(struct out *o, const struct explain *ex)
{
	outf(o, "[");
	for (size_t p = 0; p < ex->rule->nstack; p++) {
		const struct rule *l = ex->rule->stack[p];

		outf(o, "%s{\"name\": ", p ? ", " : "");
		out_str(o, l->name);
		outf(o, ", \"scope\": \"%s\"", l->scope == RULES_SCOPE_GLOBAL ? "global" :
					       l->scope == RULES_SCOPE_ARGS ? "arguments" : "client");
		if (l->scope != RULES_SCOPE_GLOBAL) {
			outf(o, ", \"identity\": ");
			if (ex->lkind[p]) {
				out_str(o, ex->lkind[p]);
				outf(o, ", \"value\": ");
				out_json_str(o, ex->ltext[p], ex->ltlen[p]);
			} else {
				out_str(o, IDENTITY_ANONYMOUS);
			}
		}
		outf(o, "}");
	}
	outf(o, "]");
}

/* `delay`: how long a refused request may be held, or null. */
void out_delay(struct out *o, int64_t delay_us)
{
	char d[32];

	if (delay_us <= 0) {
		outf(o, ", \"delay\": null");
		return;
	}
	limit_format_period(delay_us, d, sizeof(d));
	outf(o, ", \"delay\": \"%s\"", d);
}

/* The whole answer, once the store has looked. */
static void out_explain(struct out *o, const struct explain *ex)
{
	const struct rule *r = ex->file_rule;
	bool first = true;

	outf(o, "{\"rule\": ");
	out_str(o, r->name);
	outf(o, ", \"tier\": ");
	out_str(o, ex->tier->name);
	outf(o, ", \"endpoint\": ");
	if (r->kind == RULES_KIND_ENDPOINT)
		out_str(o, r->name);
	else
		outf(o, "null");
	outf(o, ", \"priority\": %d, \"cost\": %u, \"shadow\": %s", ex->priority, ex->cost,
	     ex->shadow ? "true" : "false");
	if (ex->load_known)
		outf(o, ", \"shed\": %s", ex->shed ? "true" : "false");
	if (ex->adaptive) {
		outf(o, ", \"adaptive\": {\"backend\": ");
		out_json_str(o, ex->backend, strlen(ex->backend));
		outf(o, ", \"limit\": %" PRIu32 ", \"in_flight\": %" PRIu32 ", \"shed\": %s}",
		     ex->adaptive_limit, ex->adaptive_inflight, ex->adaptive_shed ? "true" : "false");
	}
	out_delay(o, ex->rule->delay_us);
	outf(o, ", \"overridden\": %s, \"identity\": ", ex->rule->derived ? "true" : "false");
	out_str(o, ex->kind);
	outf(o, ", \"value\": ");
	out_json_str(o, ex->text, ex->tlen);
	outf(o, ", \"store\": ");
	out_str(o, ex->store_name);
	outf(o, ", \"policy\": ");
	out_json_str(o, ex->rule->policy, ex->rule->policy_len);
	outf(o, ", \"layers\": ");
	out_layers(o, ex);
	outf(o, ", \"limits\": [");
	for (size_t i = 0; i < ex->a.n; i++)
		for (size_t k = 0; k < ex->item[i].rule->nown; k++) {
			out_limit(o, &ex->item[i], k, first);
			first = false;
		}
	outf(o, "]}\n");
}

/* The store has looked: the answer, or its error. */
static void explain_done(struct store_admin *a)
{
	struct explain *ex = a->priv;
	struct out *o = &ex->o;

	ex->status = 200;
	for (size_t i = 0; i < a->n && !a->error[0]; i++) {
		const struct store_admin_item *it = &a->item[i];

		if (it->out_of_memory)
			o->err = 1;
		if (it->found == STORE_ADMIN_REFUSED) {
			snprintf(a->error, sizeof(a->error), "the store refused the look: %.*s",
				 it->refusal ? (int)(it->refusal_len > 200 ? 200 : it->refusal_len)
					     : 0, it->refusal ? it->refusal : "");
		}
	}
	if (a->error[0]) {
		ex->status = a->status ? a->status : 502;
		outf(o, "{\"error\": ");
		out_str(o, a->error);
		outf(o, "}\n");
	} else {
		out_explain(o, ex);
	}
	if (!ex->req)
		return; /* explain_main() prints it */
	if (o->err)
		http_respond(ex->req, 500, "text/plain", "", 0);
	else
		http_respond(ex->req, ex->status, "application/json", o->buf, o->len);
	explain_free(ex);
}

static struct explain *explain_new(struct rules *rules, const char *store_name)
{
	struct explain *ex = xcalloc(1, sizeof(*ex));

	if (!ex)
		return NULL;
	rules_acquire(rules);
	ex->rules = rules;
	ex->store_name = store_name;
	ex->o = (struct out){ NULL, 0, 0, 0, 1 };
	ex->a.done = explain_done;
	ex->a.priv = ex;
	return ex;
}

void explain_serve(struct server *srv, struct ev_loop *loop, struct http_req *req)
{
	char qbuf[HTTP_HEAD_MAX + 1];
	struct rules_args args;
	struct rules *rules = atomic_load(&srv->rules);
	struct explain *ex = explain_new(rules, srv->store->ops->name);
	struct overrides *ovs;
	int status;

	if (!ex) {
		http_respond(req, 500, "text/plain", "", 0);
		return;
	}
	ex->req = req;
	ex->a.loop = loop;
	/* query_parse() decodes in place: args point into qbuf */
	snprintf(qbuf, sizeof(qbuf), "%s", http_req_query(req));
	query_parse(qbuf, &args);
	ovs = server_overrides(srv);
	status = explain_prepare(ex, rules, ovs, &args, &ex->o);
	overrides_release(ovs);
	if (!status)
		explain_adaptive(ex, rules, &args, srv->flights);
	if (status) {
		if (ex->o.err)
			http_respond(req, 500, "text/plain", "", 0);
		else
			http_respond(req, status, "application/json", ex->o.buf, ex->o.len);
		explain_free(ex);
		return;
	}
	store_admin(srv->store, &ex->a);
}

int explain_main(struct rules *rules, char **argv, int argc, FILE *out, FILE *err)
{
	struct rules_args args = { 0 };
	struct store *st = store_memory_new(1024);
	struct explain *ex;
	int status;

	if (!st) {
		fprintf(err, "spoa-ratelimit: --explain: out of memory\n");
		return 1;
	}
	rules_set_limit_space(rules, store_limit_space(st));
	for (int i = 0; i < argc; i++) {
		char *eq = strchr(argv[i], '=');
		struct spop_str name;
		struct spop_data val;

		if (!eq || eq == argv[i]) {
			fprintf(err, "spoa-ratelimit: --explain: '%s' is not ARG=VALUE\n", argv[i]);
			store_free(st);
			return 1;
		}
		name.ptr = argv[i];
		name.len = (size_t)(eq - argv[i]);
		val.type = SPOP_T_STR;
		val.u.str.ptr = eq + 1;
		val.u.str.len = strlen(eq + 1);
		if (rules_args_add(&args, name, &val) < 0) {
			fprintf(err, "spoa-ratelimit: --explain: at most %d arguments\n",
				RULES_ARGS_MAX);
			store_free(st);
			return 1;
		}
	}
	ex = explain_new(rules, "memory");
	if (!ex) {
		store_free(st);
		fprintf(err, "spoa-ratelimit: --explain: out of memory\n");
		return 1;
	}
	status = explain_prepare(ex, rules, NULL, &args, &ex->o);
	if (!status)
		explain_adaptive(ex, rules, &args, NULL);
	/* the memory store answers before store_admin() returns */
	if (!status)
		store_admin(st, &ex->a);
	if (ex->o.err) {
		fprintf(err, "spoa-ratelimit: --explain: out of memory\n");
		status = 1;
	} else if (status || ex->status != 200) {
		/* the error, as the endpoint would answer it */
		fwrite(ex->o.buf, 1, ex->o.len, err);
		status = 1;
	} else {
		fwrite(ex->o.buf, 1, ex->o.len, out);
	}
	explain_free(ex);
	store_free(st);
	return status;
}
