#include "admin.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "alloc.h"
#include "decide.h"
#include "identity.h"
#include "log.h"
#include "query.h"
#include "out.h"
#include "server.h"
#include "store.h"

#define ADMIN_PARAMS_MAX 32
#define ADMIN_TEXT_MAX 512

/* Both stores answer admin requests before store_admin() returns. */
static void admin_done(struct store_admin *a)
{
	*(int *)a->priv = 1;
}

int admin_handle(struct server *srv, const char *method, const char *target, char *body,
		 size_t cap, const char **status)
{
	struct out o = { body, cap, 0, 0, 0 };
	char query[ADMIN_TEXT_MAX * 2];
	const char *q = strchr(target, '?');
	struct rules_args args;
	struct rules_verdict v;
	struct ruleset *rs = atomic_load(&srv->rules);
	const struct rules_names *ids;
	char text[ADMIN_TEXT_MAX];
	size_t tlen, plen, nrules;
	int reset, done = 0;
	struct store_admin a;

	plen = q ? (size_t)(q - target) : strlen(target);
	if (plen == 13 && memcmp(target, "/admin/client", 13) == 0 && strcmp(method, "GET") == 0) {
		reset = 0;
	} else if (plen == 12 && memcmp(target, "/admin/reset", 12) == 0 &&
		   strcmp(method, "POST") == 0) {
		reset = 1;
	} else {
		*status = "404 Not Found";
		outf(&o, "{\"error\": \"GET /admin/client?ARG=VALUE... or POST /admin/reset?ARG=VALUE...\"}\n");
		return o.err ? -1 : (int)o.len;
	}
	snprintf(query, sizeof(query), "%s", q ? q + 1 : "");
	query_parse(query, &args);
	rules_classify(rs->rules, &args, &v);
	ids = rules_identity(rs->rules);
	if (v.identity < 0 || !v.identity_val) {
		*status = "400 Bad Request";
		outf(&o, "{\"error\": \"name the client with one of its identity arguments (");
		for (size_t i = 0; i < ids->n; i++)
			outf(&o, "%s%s", i ? ", " : "", ids->name[i]);
		outf(&o, ")\"}\n");
		return o.err ? -1 : (int)o.len;
	}
	tlen = identity_text(v.identity_val, text, sizeof(text));
	/* Every rule of the client, each with its own key. */
	nrules = rules_count(rs->rules);
	memset(&a, 0, sizeof(a));
	a.reset = reset;
	a.item = xcalloc(nrules ? nrules : 1, sizeof(*a.item));
	if (!a.item)
		return -1;
	a.n = nrules;
	a.done = admin_done;
	a.priv = &done;
	for (size_t i = 0; i < nrules; i++) {
		a.item[i].rule = rules_rule_at(rs->rules, i);
		decide_key(rs, ids->name[v.identity], text, tlen, a.item[i].rule->name,
			   a.item[i].key);
		a.item[i].out = (struct out){ NULL, 0, 0, 0, 1 };
	}
	store_admin(srv->store, &a);
	if (!done || a.error[0]) {
		*status = "502 Bad Gateway";
		outf(&o, "{\"error\": ");
		out_json_str(&o, a.error, strlen(a.error));
		outf(&o, "}\n");
		goto out;
	}
	*status = "200 OK";
	outf(&o, "{\"identity\": ");
	out_json_str(&o, ids->name[v.identity], strlen(ids->name[v.identity]));
	outf(&o, ", \"value\": ");
	out_json_str(&o, text, tlen);
	outf(&o, ", \"store\": \"%s\", \"rules\": [", srv->store->ops->name);
	for (size_t i = 0; i < nrules; i++) {
		const struct store_admin_item *it = &a.item[i];
		char key[STORE_KEY_NAME_LEN + 1];

		store_key_name(it->key, key);
		outf(&o, "%s{\"rule\": ", i ? ", " : "");
		out_json_str(&o, it->rule->name, strlen(it->rule->name));
		outf(&o, ", \"key\": \"%s\"", key);
		if (it->out.err)
			o.err = 1;
		else if (it->out.len)
			outf(&o, "%.*s", (int)it->out.len, it->out.buf);
		outf(&o, "}");
	}
	outf(&o, "]}\n");
	if (reset)
		log_info("admin: reset the buckets of %s=%.*s", ids->name[v.identity], (int)tlen, text);
out:
	for (size_t i = 0; i < a.n; i++)
		xfree(a.item[i].out.buf);
	xfree(a.item);
	return o.err ? -1 : (int)o.len;
}
