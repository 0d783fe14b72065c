/* SPDX-License-Identifier: Apache-2.0 */
#include "admin.h"

#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "auth.h"
#include "clock.h"
#include "decide.h"
#include "explain.h"
#include "http.h"
#include "identity.h"
#include "log.h"
#include "logtext.h"
#include "out.h"
#include "overrides.h"
#include "query.h"
#include "server.h"
#include "sha256.h"
#include "store.h"

/* A query fits in a request head, and so does any value decoded from it. */
#define ADMIN_TEXT_MAX HTTP_HEAD_MAX

/* One admin request waiting for the store. */
struct admin_req {
	struct store_admin a;
	struct http_req *req;
	struct store *store;
	struct rules *rules;        /* referenced until the answer */
	const char *kind;          /* identity argument's name, in rules */
	char text[ADMIN_TEXT_MAX]; /* its value, whole */
	size_t tlen;
	struct override_entry *ov; /* an override: one entry per rule */
	struct limit_spec *inforce; /* and the limit it gives under each */
};

/* Gives back the holds on the rules made for overrides that the items
 * name (decide_override_rule), and frees what the request holds. */
static void admin_req_free(struct admin_req *ar)
{
	for (size_t i = 0; i < ar->a.n; i++)
		rules_rule_unhold(ar->a.item[i].rule);
	xfree(ar->a.item);
	xfree(ar->ov);
	xfree(ar->inforce);
	rules_release(ar->rules);
	xfree(ar);
}

static void out_limit(struct out *o, const struct limit_spec *l)
{
	char period[32];

	limit_format_period(l->period_us, period, sizeof(period));
	outf(o, "\"%llu/%s\"", (unsigned long long)l->quota, period);
}

static void respond_json(struct http_req *req, int status, struct out *o)
{
	if (o->err)
		http_respond(req, 500, "text/plain", "", 0);
	else
		http_respond(req, status, "application/json", o->buf, o->len);
}

/* Each limit's key, by limit name: "keys": {...} (a rule without limits
 * has none). */
static void out_keys(struct out *o, const struct store_admin_item *it)
{
	const struct rule *rule = it->rule;

	for (size_t j = 0; j < rule->nown; j++) {
		outf(o, "%s", j ? ", " : ", \"keys\": {");
		out_json_str(o, rule->lid[j], strlen(rule->lid[j]));
		outf(o, ": \"%s\"%s", it->limit[j].name, j + 1 == rule->nown ? "}" : "");
	}
}

/* What the store found for one item (store.h: struct store_admin_item),
 * as the JSON members that follow its rule and key. */
static void out_item(struct out *o, const struct store_admin_item *it)
{
	const struct rule *rule = it->rule;
	char period[32];
	size_t any;

	if (it->out_of_memory)
		o->err = 1;
	switch (it->found) {
	case STORE_ADMIN_NOTHING:
		break;
	case STORE_ADMIN_DELETED:
		outf(o, ", \"deleted\": %lld", (long long)it->deleted);
		break;
	case STORE_ADMIN_STATE:
		outf(o, ", \"limits\": [");
		for (size_t k = 0; k < rule->nown; k++) {
			const struct store_admin_limit *l = &it->limit[k];

			limit_format_period(rule->limits[k].period_us, period, sizeof(period));
			if (rule->limits[k].algo == LIMIT_CONCURRENCY)
				outf(o, "%s{\"concurrency\": %llu, \"max_duration\": \"%s\", "
				     "\"in_flight\": %u}", k ? ", " : "",
				     (unsigned long long)rule->limits[k].quota, period, l->in_flight);
			else
				outf(o, "%s{\"limit\": \"%llu/%s\", \"remaining\": %llu, \"reset\": %lld}",
				     k ? ", " : "", (unsigned long long)rule->limits[k].quota, period,
				     (unsigned long long)l->remaining, (long long)limit_ceil_s(l->reset_us));
		}
		outf(o, "]");
		break;
	case STORE_ADMIN_REFUSED:
		if (it->limit[0].name[0])
			out_keys(o, it);
		outf(o, ", \"error\": ");
		if (it->refusal)
			out_json_str(o, it->refusal, it->refusal_len);
		break;
	case STORE_ADMIN_RAW:
		/* each limit's key, then the raw values held */
		out_keys(o, it);
		/* and what the values hold, where the store could read them */
		any = 0;
		for (size_t j = 0; j < rule->nown; j++) {
			const struct store_admin_limit *l = &it->limit[j];

			if (!l->has_state)
				continue;
			limit_format_period(rule->limits[j].period_us, period, sizeof(period));
			outf(o, "%s{\"limit\": \"%llu/%s\", \"remaining\": %llu, \"reset\": %lld}",
			     any++ ? ", " : ", \"limits\": [", (unsigned long long)rule->limits[j].quota,
			     period, (unsigned long long)l->remaining, (long long)limit_ceil_s(l->reset_us));
		}
		if (any)
			outf(o, "]");
		outf(o, ", \"fields\": {");
		any = 0;
		for (size_t j = 0; j < rule->nown; j++) {
			if (!it->limit[j].raw)
				continue;
			outf(o, "%s", any++ ? ", " : "");
			out_json_str(o, rule->lid[j], strlen(rule->lid[j]));
			outf(o, ": ");
			out_json_str(o, it->limit[j].raw, it->limit[j].raw_len);
		}
		outf(o, "}");
		break;
	}
	if (it->has_ttl)
		outf(o, ", \"ttl_ms\": %lld", (long long)it->ttl_ms);
}

/* Frees what the store allocated in the items. */
static void items_free(struct store_admin *a)
{
	for (size_t i = 0; i < a->n; i++) {
		xfree(a->item[i].refusal);
		for (size_t j = 0; j < LIMIT_RULE_MAX; j++)
			xfree(a->item[i].limit[j].raw);
	}
}

/* The store has answered: render every rule's state. */
static void admin_done(struct store_admin *a)
{
	struct admin_req *ar = a->priv;
	struct out o = { NULL, 0, 0, 0, 1 };
	int status = 200;

	if (a->error[0]) {
		status = a->status ? a->status : 502;
		outf(&o, "{\"error\": ");
		out_json_str(&o, a->error, strlen(a->error));
		outf(&o, "}\n");
	} else if (a->override) {
		outf(&o, "{\"identity\": ");
		out_json_str(&o, ar->kind, strlen(ar->kind));
		outf(&o, ", \"value\": ");
		out_json_str(&o, ar->text, ar->tlen);
		if (a->ov_remove) {
			outf(&o, ", \"override\": null");
		} else {
			/* the limit in force (max_override bounds it), then the
			 * one asked for */
			outf(&o, ", \"override\": ");
			out_limit(&o, &ar->inforce[0]);
			outf(&o, ", \"requested\": ");
			out_limit(&o, &a->ov[0].spec);
			outf(&o, ", \"expires_ms\": %lld", (long long)a->ov[0].expires_ms);
		}
		outf(&o, ", \"store\": \"%s\", \"rules\": [", ar->store->ops->name);
		for (size_t i = 0; i < a->n; i++) {
			outf(&o, "%s", i ? ", " : "");
			out_json_str(&o, a->item[i].rule->name, strlen(a->item[i].rule->name));
		}
		outf(&o, "]");
		for (size_t i = 0; !a->ov_remove && i < a->n; i++) {
			/* each rule's own bound may give another */
			outf(&o, "%s", i ? ", " : ", \"limits\": {");
			out_json_str(&o, a->item[i].rule->name, strlen(a->item[i].rule->name));
			outf(&o, ": ");
			out_limit(&o, &ar->inforce[i]);
			outf(&o, "%s", i + 1 == a->n ? "}" : "");
		}
		outf(&o, "}\n");
		char text[256]; /* longer values end in "..." */

		logtext(text, sizeof(text), ar->text, ar->tlen);
		log_info_kv(LOG_KV("identity", ar->kind, "client", text),
			    "admin: %s the override of %s=%s", a->ov_remove ? "removed" : "set",
			    ar->kind, text);
	} else {
		outf(&o, "{\"identity\": ");
		out_json_str(&o, ar->kind, strlen(ar->kind));
		outf(&o, ", \"value\": ");
		out_json_str(&o, ar->text, ar->tlen);
		outf(&o, ", \"store\": \"%s\", \"rules\": [", ar->store->ops->name);
		for (size_t i = 0; i < a->n; i++) {
			const struct store_admin_item *it = &a->item[i];

			outf(&o, "%s{\"rule\": ", i ? ", " : "");
			out_json_str(&o, it->rule->name, strlen(it->rule->name));
			outf(&o, ", \"key\": \"%s\"", it->label);
			out_item(&o, it);
			outf(&o, "}");
		}
		outf(&o, "]}\n");
		if (a->reset) {
			char text[256]; /* longer values end in "..." */

			logtext(text, sizeof(text), ar->text, ar->tlen);
			log_info_kv(LOG_KV("identity", ar->kind, "client", text),
				    "admin: reset the buckets of %s=%s", ar->kind, text);
		}
	}
	respond_json(ar->req, status, &o);
	xfree(o.buf);
	items_free(a);
	admin_req_free(ar);
}

/* Whether req may go on; when not, it is answered here. */
static bool admitted(const struct auth_token *token, struct http_req *req)
{
	static const char json[] = "application/json";

	if (token) {
		const char *auth = http_req_header(req, "authorization");
		static const char missing[] =
			"{\"error\": \"this endpoint needs Authorization: Bearer TOKEN\"}\n";
		static const char wrong[] = "{\"error\": \"invalid token\"}\n";

		if (auth_bearer_ok(token, auth))
			return true;
		if (!auth)
			http_respond_headers(req, 401, "WWW-Authenticate: Bearer realm=\"admin\"\r\n",
					     json, missing, sizeof(missing) - 1);
		else
			http_respond_headers(req, 401,
					     "WWW-Authenticate: Bearer realm=\"admin\", "
					     "error=\"invalid_token\"\r\n",
					     json, wrong, sizeof(wrong) - 1);
		return false;
	}
	if (http_req_header(req, "origin")) {
		static const char page[] = "{\"error\": \"refused: sent by a browser page\"}\n";

		http_respond(req, 403, json, page, sizeof(page) - 1);
		return false;
	}
	return true;
}

/* An override's limit and its ttl from the query: into *e (its key
 * aside). Returns 0, or -1 with the error in *o. */
static int override_args(const struct rules_args *args, struct override_entry *e,
			 struct out *o)
{
	const struct spop_data *limit = rules_args_get(args, "limit");
	const struct spop_data *ttl = rules_args_get(args, "ttl");
	char buf[64], err[128];
	int64_t us = 0;

	if (!limit || limit->type != SPOP_T_STR || limit->u.str.len >= sizeof(buf)) {
		outf(o, "{\"error\": \"limit=N/P is required, such as limit=5000/1m\"}\n");
		return -1;
	}
	memcpy(buf, limit->u.str.ptr, limit->u.str.len);
	buf[limit->u.str.len] = '\0';
	if (limit_parse(buf, &e->spec, err, sizeof(err)) < 0) {
		outf(o, "{\"error\": ");
		out_json_str(o, err, strlen(err));
		outf(o, "}\n");
		return -1;
	}
	e->expires_ms = 0;
	if (ttl) {
		if (ttl->type != SPOP_T_STR || ttl->u.str.len >= sizeof(buf)) {
			outf(o, "{\"error\": \"ttl: a duration such as 1h\"}\n");
			return -1;
		}
		memcpy(buf, ttl->u.str.ptr, ttl->u.str.len);
		buf[ttl->u.str.len] = '\0';
		if (limit_parse_duration(buf, &us) < 0 || us < 1000) {
			outf(o, "{\"error\": \"ttl: a duration such as 1h\"}\n");
			return -1;
		}
		e->expires_ms = clock_wall_ms() + us / 1000;
	}
	return 0;
}

/* The limit an override of `asked` gives under rule (bounded by its
 * max_override) into *out, once it is sure the agent can apply it: a
 * rule made for it (rules_override) can be had now. Returns 0, or -1
 * when there is no room for another (counted there). */
static int override_applies(struct rules *rules, const struct rule *rule,
			    const struct limit_spec *asked, struct limit_spec *out)
{
	const struct rule *made;

	if (rules_override_clamp(rule, asked, out) < 0)
		return -1;
	made = rules_override(rules, rule, out);
	if (!made)
		return -1;
	rules_rule_unhold(made);
	return 0;
}

/* Whether a client named by argument `kind` has buckets under rule. */
static bool admin_applies(const struct rules *rules, const struct rule *rule, const char *kind)
{
	const struct rules_names *names = rules_identity_names(rules);

	if (rule->kind != RULES_KIND_LAYER || rule->scope == RULES_SCOPE_CLIENT)
		return true;
	for (size_t k = 0; rule->scope == RULES_SCOPE_ARGS && k < rule->nidk; k++)
		if (strcmp(names->name[rule->idk[k]], kind) == 0)
			return true;
	return false;
}

/* Answers req with the JSON error in *o (freed). */
static void respond_error(struct http_req *req, int status, struct out *o)
{
	respond_json(req, status, o);
	xfree(o->buf);
}

/* ---- GET /admin/rules: the rules in force -------------------------------- */

static const char *kind_name(enum rules_kind k)
{
	switch (k) {
	case RULES_KIND_DEFAULT:
		return "default";
	case RULES_KIND_TIER:
		return "tier";
	case RULES_KIND_ENDPOINT:
		return "endpoint";
	case RULES_KIND_LAYER:
		return "layer";
	}
	return "tier";
}

static void out_str(struct out *o, const char *s)
{
	out_json_str(o, s, strlen(s));
}

/* A limit with its algorithm, burst and the share the local failure mode
 * applies (local). */
static void out_limit_full(struct out *o, const struct limit_spec *l, const struct limit_spec *local)
{
	outf(o, "{\"limit\": ");
	out_limit(o, l);
	outf(o, ", \"algorithm\": \"%s\"", limit_algo_name(l->algo));
	if (l->burst)
		outf(o, ", \"burst\": %llu", (unsigned long long)l->burst);
	if (local) {
		outf(o, ", \"local\": ");
		out_limit(o, local);
	}
	outf(o, "}");
}

static void out_cond(struct out *o, const char *name, const struct rules_cond *c, bool *first)
{
	if (!c->n)
		return;
	outf(o, "%s", *first ? "" : ", ");
	*first = false;
	out_str(o, name);
	outf(o, ": [");
	for (size_t i = 0; i < c->n; i++) {
		outf(o, "%s", i ? ", " : "");
		out_json_str(o, c->v[i].ptr, c->v[i].len);
	}
	outf(o, "]");
}

/* A match as the file writes it: {"method": [...], "path": [...], ...}. */
static void out_match(struct out *o, const struct rules *rules, const struct rules_match *m)
{
	bool first = true;

	outf(o, "{");
	out_cond(o, "method", &m->method, &first);
	out_cond(o, "path", &m->path, &first);
	out_cond(o, "host", &m->host, &first);
	if (m->ntiers) {
		outf(o, "%s\"tier\": [", first ? "" : ", ");
		first = false;
		for (size_t i = 0; i < m->ntiers; i++) {
			outf(o, "%s", i ? ", " : "");
			out_str(o, rules_rule_at(rules, m->tiers[i])->name);
		}
		outf(o, "]");
	}
	if (m->nargs) {
		outf(o, "%s\"args\": {", first ? "" : ", ");
		for (size_t k = 0; k < m->nargs; k++) {
			bool f = true;

			outf(o, "%s", k ? ", " : "");
			out_cond(o, m->args[k].name, &m->args[k].c, &f);
		}
		outf(o, "}");
	}
	outf(o, "}");
}

/* One rule: its own limits (each with its local share), the layers it
 * stacks, whom a layer counts, what it answers without the store. */
static void out_rule(struct out *o, const struct rules *rules, const struct rule *r)
{
	const struct rules_names *names = rules_identity_names(rules);

	outf(o, "{\"name\": ");
	out_str(o, r->name);
	outf(o, ", \"kind\": \"%s\", \"limits\": [", kind_name(r->kind));
	for (size_t k = 0; k < r->nown; k++) {
		outf(o, "%s", k ? ", " : "");
		out_limit_full(o, &r->limits[k], r->limits[k].algo == LIMIT_CONCURRENCY ||
							  r->limits[k].algo == LIMIT_BAN
						  ? NULL : &r->local[k]);
	}
	outf(o, "], \"stack\": [");
	for (size_t p = 0; p < r->nstack; p++) {
		outf(o, "%s", p ? ", " : "");
		out_str(o, r->stack[p]->name);
	}
	outf(o, "]");
	if (r->kind == RULES_KIND_LAYER) {
		outf(o, ", \"scope\": \"%s\"", r->scope == RULES_SCOPE_GLOBAL ? "global" :
					       r->scope == RULES_SCOPE_ARGS ? "arguments" : "client");
		for (size_t k = 0; r->scope == RULES_SCOPE_ARGS && k < r->nidk; k++) {
			outf(o, "%s", k ? ", " : ", \"identity\": [");
			out_str(o, names->name[r->idk[k]]);
			outf(o, "%s", k + 1 == r->nidk ? "]" : "");
		}
	}
	if (r->has_max_override) {
		outf(o, ", \"max_override\": ");
		out_limit(o, &r->max_override);
	}
	out_delay(o, r->delay_us);
	if (r->charge)
		outf(o, ", \"charge\": \"response\"");
	outf(o, ", \"cost\": %u, \"shadow\": %s, \"on_store_failure\": \"%s\", \"policy\": ", r->cost,
	     r->shadow ? "true" : "false", rules_failure_str(r->on_failure));
	out_json_str(o, r->policy, r->policy_len);
	if (r->kind == RULES_KIND_ENDPOINT) {
		outf(o, ", \"match\": ");
		out_match(o, rules, rules_endpoint_match(rules, r->index - rules_endpoint_first(rules)));
	}
	outf(o, "}");
}

/* shedding.adaptive, or null. */
static void out_adaptive(struct out *o, const struct adaptive_config *ac)
{
	if (!ac) {
		outf(o, "null");
		return;
	}
	outf(o, "{\"target_ms\": %.3f, \"min\": %u, \"max\": %u, \"initial\": %u, "
	     "\"timeout_ms\": %lld, \"backend\": ", (double)ac->target_us / 1000, ac->min, ac->max,
	     ac->initial, (long long)(ac->timeout_us / 1000));
	out_str(o, ac->backend_arg);
	outf(o, "}");
}

static void out_shedding(struct out *o, const struct shed_config *sc,
			 const struct adaptive_config *ac)
{
	outf(o, "{\"thresholds\": {");
	for (int p = 1; p < SHED_PRIORITIES; p++) {
		outf(o, "%s\"P%d\": ", p > 1 ? ", " : "", p);
		if (sc->threshold_bp[p] > SHED_NEVER && sc->threshold_bp[p] <= SHED_FULL)
			outf(o, "%.4f", (double)sc->threshold_bp[p] / SHED_FULL);
		else
			outf(o, "null");
	}
	outf(o, "}, \"ramp\": %.4f, \"retry_after_ms\": %lld, \"in_use\": ",
	     (double)sc->ramp_bp / SHED_FULL, (long long)(sc->retry_after_us / 1000));
	out_str(o, sc->in_use_arg);
	outf(o, ", \"free\": ");
	out_str(o, sc->free_arg);
	outf(o, ", \"shadow\": %s, \"adaptive\": ", sc->shadow ? "true" : "false");
	out_adaptive(o, ac);
	outf(o, "}");
}

/* The overrides of clients in force now (their keys hashed: the names
 * they were set under are not kept). */
static void out_overrides(struct out *o, struct server *srv)
{
	struct overrides *ovs = server_overrides(srv);
	int64_t now = clock_wall_ms();
	size_t shown = 0;

	outf(o, "[");
	for (size_t i = 0; ovs && i < overrides_count(ovs); i++) {
		const struct override_entry *e = overrides_at(ovs, i);
		char field[2 * IDENTITY_KEY_LEN + 1];

		if (e->expires_ms && e->expires_ms <= now)
			continue;
		overrides_field(e->key, field);
		outf(o, "%s{\"key\": \"%s\", \"limit\": ", shown++ ? ", " : "", field);
		out_limit(o, &e->spec);
		outf(o, ", \"expires_ms\": %lld}", (long long)e->expires_ms);
	}
	outf(o, "]");
	overrides_release(ovs);
}

/* Everything the rules in force decide by, as data: the file's top-level
 * choices, every rule with its limits as applied, the priority classes,
 * the shedding thresholds, the overrides in force and the arguments
 * found missing. */
static void rules_serve(struct server *srv, struct http_req *req)
{
	struct rules *rules = atomic_load(&srv->rules);
	const struct rules_names *ids = rules_identity(rules);
	struct out o = { NULL, 0, 0, 0, 1 };
	char hex[SHA256_HEX_LEN];
	uint64_t gen, missing = server_args_missing(srv, &gen);

	sha256_hex(rules_sha256(rules), hex);
	outf(&o, "{\"source\": ");
	out_str(&o, rules_source(rules));
	outf(&o, ", \"sha256\": \"%s\", \"generation\": %llu, \"identity\": [", hex,
	     (unsigned long long)rules_gen(rules));
	for (size_t i = 0; i < ids->n; i++) {
		outf(&o, "%s", i ? ", " : "");
		out_str(&o, ids->name[i]);
	}
	outf(&o, "], \"tier_argument\": ");
	out_str(&o, rules_tier_argument(rules));
	outf(&o, ", \"default_tier\": ");
	out_str(&o, rules_default_tier(rules)->name);
	outf(&o, ", \"cost_argument\": ");
	out_str(&o, rules_cost_argument(rules));
	outf(&o, ", \"override_argument\": ");
	out_str(&o, rules_override_argument(rules));
	outf(&o, ", \"shadow\": %s, \"on_store_failure\": \"%s\", \"agents\": %d, "
		 "\"paths\": \"%s\", \"default_priority\": %d, \"max_delayed\": %u, \"rules\": [",
	     rules_shadow(rules) ? "true" : "false", rules_failure_str(rules_on_failure(rules)),
	     rules_agents(rules), rules_paths_raw(rules) ? "raw" : "normalised",
	     rules_default_priority(rules), rules_max_delayed(rules));
	for (size_t i = 0; i < rules_count(rules); i++) {
		outf(&o, "%s", i ? ", " : "");
		out_rule(&o, rules, rules_rule_at(rules, i));
	}
	outf(&o, "], \"priorities\": [");
	for (size_t i = 0; i < rules_class_count(rules); i++) {
		int priority = 0;
		const struct rules_match *m = rules_class_match(rules, i, &priority);

		outf(&o, "%s{\"priority\": %d, \"match\": ", i ? ", " : "", priority);
		out_match(&o, rules, m);
		outf(&o, "}");
	}
	outf(&o, "], \"shedding\": ");
	out_shedding(&o, rules_shed(rules), rules_adaptive(rules));
	outf(&o, ", \"overrides\": ");
	out_overrides(&o, srv);
	outf(&o, ", \"arguments_missing\": [");
	for (size_t i = 0, n = 0; gen == rules_gen(rules) && i < rules_checked_count(rules); i++)
		if (missing & ((uint64_t)1 << i)) {
			outf(&o, "%s", n++ ? ", " : "");
			out_str(&o, rules_checked_name(rules, i));
		}
	outf(&o, "]}\n");
	respond_error(req, 200, &o);
}

/* Which request req is: 0 with the flags set, or -1 once answered (404,
 * GET /admin/rules, which needs no store, or GET /admin/explain,
 * explain.c's). */
static int route(struct server *srv, struct ev_loop *loop, struct http_req *req, bool *reset,
		 bool *override, bool *remove)
{
	const char *method = http_req_method(req), *path = http_req_path(req);
	struct out o = { NULL, 0, 0, 0, 1 };

	*reset = *override = *remove = false;
	if (strcmp(path, "/admin/rules") == 0 && strcmp(method, "GET") == 0) {
		rules_serve(srv, req);
		return -1;
	}
	if (strcmp(path, "/admin/explain") == 0 && strcmp(method, "GET") == 0) {
		explain_serve(srv, loop, req);
		return -1;
	}
	if (strcmp(path, "/admin/client") == 0 && strcmp(method, "GET") == 0)
		return 0;
	if (strcmp(path, "/admin/reset") == 0 && strcmp(method, "POST") == 0) {
		*reset = true;
		return 0;
	}
	if (strcmp(path, "/admin/override") == 0 &&
	    (strcmp(method, "PUT") == 0 || strcmp(method, "DELETE") == 0)) {
		*override = true;
		*remove = strcmp(method, "DELETE") == 0;
		return 0;
	}
	outf(&o, "{\"error\": \"GET /admin/rules, GET /admin/explain?ARG=VALUE..., "
		 "GET /admin/client?ARG=VALUE..., POST /admin/reset?ARG=VALUE..., "
		 "PUT /admin/override?ARG=VALUE&limit=N/P[&ttl=DURATION] or "
		 "DELETE /admin/override?ARG=VALUE\"}\n");
	respond_error(req, 404, &o);
	return -1;
}

/* A request for the client that v names (its value copied) under rules
 * (referenced until the answer), with room for an item per rule (and an
 * override per rule). NULL when out of memory. */
static struct admin_req *admin_req_new(struct server *srv, struct ev_loop *loop,
				       struct http_req *req, struct rules *rules,
				       const struct rules_verdict *v, bool override)
{
	size_t nrules = rules_count(rules), n = nrules ? nrules : 1;
	struct admin_req *ar = xcalloc(1, sizeof(*ar));
	char render[IDENTITY_RENDER_MAX];
	const char *value;
	size_t vlen;

	if (ar)
		ar->a.item = xcalloc(n, sizeof(*ar->a.item));
	if (!ar || !ar->a.item) {
		xfree(ar);
		return NULL;
	}
	/* The main thread holds the rules only while it reads them: keep a
	 * reference until the store answers. */
	rules_acquire(rules);
	ar->rules = rules;
	ar->req = req;
	ar->store = srv->store;
	ar->kind = rules_identity(rules)->name[v->identity];
	/* the value lives in the query's buffer, on the caller's stack */
	value = identity_value(v->identity_val, render, sizeof(render), &vlen);
	ar->tlen = vlen < sizeof(ar->text) ? vlen : sizeof(ar->text);
	memcpy(ar->text, value, ar->tlen);
	ar->a.loop = loop;
	ar->a.done = admin_done;
	ar->a.priv = ar;
	if (override && (!(ar->ov = xcalloc(n, sizeof(*ar->ov))) ||
			 !(ar->inforce = xcalloc(n, sizeof(*ar->inforce))))) {
		admin_req_free(ar);
		return NULL;
	}
	return ar;
}

/* Every rule of the client, each with its own key: tiers, endpoints, and
 * the layers that count this client by the argument that named it (not
 * the global ones, nor those keyed by another argument); for an override
 * (ov, whose key is set here), the rules that take one (max_override). A
 * look or a reset goes to the limits in force: a client's override's, as
 * its decisions do (decide_override()). Returns 0, or the HTTP status of
 * the error written into *o. */
static int add_items(struct admin_req *ar, struct server *srv, struct override_entry *ov,
		     struct out *o)
{
	struct store_admin *a = &ar->a;
	struct overrides *ovs = a->override ? NULL : server_overrides(srv);
	int status = 0;

	a->n = 0;
	for (size_t i = 0; i < rules_count(ar->rules) && !status; i++) {
		const struct rule *rule = rules_rule_at(ar->rules, i), *ovr;
		struct store_admin_item *it = &a->item[a->n];

		if (a->override ? !rule->has_max_override : !admin_applies(ar->rules, rule, ar->kind))
			continue;
		it->rule = rule;
		decide_key(ar->rules, ar->kind, ar->text, ar->tlen, it->rule->name, it->key);
		/* (held: given back when the request is freed) */
		if (ovs && (ovr = decide_override_rule(ar->rules, ovs, clock_wall_ms(), it->key,
						       rule)))
			it->rule = ovr;
		a->n++;
		if (a->override && !a->ov_remove &&
		    override_applies(ar->rules, rule, &ov->spec, &ar->inforce[a->n - 1]) < 0) {
			outf(o, "{\"error\": \"no room for another overridden limit: %d distinct "
				"ones are in use at once; the override was not set\"}\n",
			     RULES_OVERRIDES_MAX);
			status = 503;
		} else if (a->override) {
			ar->ov[a->n - 1] = *ov;
			memcpy(ar->ov[a->n - 1].key, it->key, IDENTITY_KEY_LEN);
		}
	}
	overrides_release(ovs);
	a->ov = ar->ov;
	a->nov = a->override ? a->n : 0;
	if (!status && a->override && a->n == 0) {
		outf(o, "{\"error\": \"no rule takes an override (max_override)\"}\n");
		status = 409;
	}
	return status;
}

void admin_serve(struct server *srv, struct ev_loop *loop, const struct auth_token *token,
		 struct http_req *req)
{
	char qbuf[ADMIN_TEXT_MAX + 1];
	struct out o = { NULL, 0, 0, 0, 1 };
	struct rules_args args;
	struct rules_verdict v;
	const struct rules_names *ids;
	struct admin_req *ar;
	struct rules *rules;
	struct override_entry ov = { 0 };
	bool reset, override, remove;
	int status;

	if (!admitted(token, req) || route(srv, loop, req, &reset, &override, &remove) < 0)
		return;
	rules = atomic_load(&srv->rules);
	/* query_parse() decodes in place */
	snprintf(qbuf, sizeof(qbuf), "%s", http_req_query(req));
	query_parse(qbuf, &args);
	if (override && !remove && override_args(&args, &ov, &o) < 0) {
		respond_error(req, 400, &o);
		return;
	}
	rules_classify(rules, &args, &v);
	ids = rules_identity(rules);
	if (v.identity < 0 || !v.identity_val) {
		outf(&o, "{\"error\": \"name the client with one of its identity arguments (");
		for (size_t i = 0; i < ids->n; i++)
			outf(&o, "%s%s", i ? ", " : "", ids->name[i]);
		outf(&o, ")\"}\n");
		respond_error(req, 400, &o);
		return;
	}
	ar = admin_req_new(srv, loop, req, rules, &v, override);
	if (!ar) {
		http_respond(req, 500, "text/plain", "", 0);
		return;
	}
	ar->a.reset = reset;
	ar->a.override = override;
	ar->a.ov_remove = remove;
	status = add_items(ar, srv, &ov, &o);
	if (status) {
		respond_error(req, status, &o);
		admin_req_free(ar);
		return;
	}
	store_admin(srv->store, &ar->a);
}
