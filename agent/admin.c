#include "admin.h"

#include <hiredis/hiredis.h>
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

#define ADMIN_PARAMS_MAX 32
#define ADMIN_TEXT_MAX 512

/* A JSON string: quotes, backslashes and control bytes escaped. */
static void out_json_str(struct out *o, const char *s, size_t len)
{
	outf(o, "\"");
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			outf(o, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			outf(o, "\\u%04x", c);
		else
			outf(o, "%c", c);
	}
	outf(o, "\"");
}

/* A synchronous connection for one admin request; NULL with a message. */
static redisContext *admin_redis(const struct redis_config *cfg, struct out *err)
{
	struct timeval tv = { 1, 0 };
	redisContext *rc = cfg->unix_path[0] ? redisConnectUnixWithTimeout(cfg->unix_path, tv)
					     : redisConnectWithTimeout(cfg->host, cfg->port, tv);

	if (!rc || rc->err) {
		outf(err, "cannot connect to Redis: %s", rc ? rc->errstr : "out of memory");
		if (rc)
			redisFree(rc);
		return NULL;
	}
	redisSetTimeout(rc, tv);
	if (cfg->password[0]) {
		const char *argv[3] = { "AUTH", cfg->user, cfg->password };
		size_t argvlen[3] = { 4, strlen(cfg->user), strlen(cfg->password) };
		redisReply *r = cfg->user[0]
				       ? redisCommandArgv(rc, 3, argv, argvlen)
				       : redisCommandArgv(rc, 2, (const char *[]){ "AUTH", cfg->password },
							  (const size_t[]){ 4, strlen(cfg->password) });

		if (!r || r->type == REDIS_REPLY_ERROR) {
			outf(err, "Redis AUTH failed: %s", r ? r->str : rc->errstr);
			if (r)
				freeReplyObject(r);
			redisFree(rc);
			return NULL;
		}
		freeReplyObject(r);
	}
	return rc;
}

static void redis_rule(redisContext *rc, const char *key, int reset, struct out *o)
{
	const char *argv[2] = { reset ? "DEL" : "HGETALL", key };
	size_t argvlen[2] = { strlen(argv[0]), strlen(key) };
	redisReply *r = redisCommandArgv(rc, 2, argv, argvlen);

	if (!r || r->type == REDIS_REPLY_ERROR) {
		outf(o, ", \"error\": ");
		out_json_str(o, r ? r->str : rc->errstr, strlen(r ? r->str : rc->errstr));
		if (r)
			freeReplyObject(r);
		return;
	}
	if (reset) {
		outf(o, ", \"deleted\": %lld", r->integer);
		freeReplyObject(r);
		return;
	}
	outf(o, ", \"fields\": {");
	for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
		outf(o, "%s", i ? ", " : "");
		out_json_str(o, r->element[i]->str, r->element[i]->len);
		outf(o, ": ");
		out_json_str(o, r->element[i + 1]->str, r->element[i + 1]->len);
	}
	outf(o, "}");
	freeReplyObject(r);
	argv[0] = "PTTL";
	argvlen[0] = 4;
	r = redisCommandArgv(rc, 2, argv, argvlen);
	if (r && r->type == REDIS_REPLY_INTEGER)
		outf(o, ", \"ttl_ms\": %lld", r->integer);
	if (r)
		freeReplyObject(r);
}

static void memory_rule(struct server *srv, const struct rules_rule *rule, const uint8_t *key,
			int reset, struct out *o)
{
	struct limit_result res[RULES_LIMITS_MAX];
	char period[32];

	if (reset) {
		outf(o, ", \"deleted\": %zu", memstore_reset(srv->mem, key));
		return;
	}
	if (rule->nlimits == 0) {
		outf(o, ", \"limits\": []");
		return;
	}
	/* weight 0: a look that takes nothing */
	memstore_check(srv->mem, key, rule->limits, rule->nlimits, server_now_us(), 0, res);
	outf(o, ", \"limits\": [");
	for (size_t i = 0; i < rule->nlimits; i++) {
		limit_format_period(rule->limits[i].period_us, period, sizeof(period));
		outf(o, "%s{\"limit\": \"%llu/%s\", \"remaining\": %llu, \"reset\": %lld}",
		     i ? ", " : "", (unsigned long long)rule->limits[i].quota, period,
		     (unsigned long long)res[i].remaining, (long long)limit_ceil_s(res[i].reset_us));
	}
	outf(o, "]");
}

int admin_handle(struct server *srv, const char *method, const char *path, const char *query,
		 char *body, size_t cap, int *status)
{
	struct out o = { body, cap, 0, 0, 0 };
	char qbuf[ADMIN_TEXT_MAX * 2];
	struct rules_args args;
	struct rules_verdict v;
	struct ruleset *rs = atomic_load(&srv->rules);
	const struct rules_names *ids;
	char text[ADMIN_TEXT_MAX];
	size_t tlen;
	int reset;
	redisContext *rc = NULL;

	if (strcmp(path, "/admin/client") == 0 && strcmp(method, "GET") == 0) {
		reset = 0;
	} else if (strcmp(path, "/admin/reset") == 0 && strcmp(method, "POST") == 0) {
		reset = 1;
	} else {
		*status = 404;
		outf(&o, "{\"error\": \"GET /admin/client?ARG=VALUE... or POST /admin/reset?ARG=VALUE...\"}\n");
		return o.err ? -1 : (int)o.len;
	}
	/* query_parse() decodes in place */
	snprintf(qbuf, sizeof(qbuf), "%s", query);
	query_parse(qbuf, &args);
	rules_classify(rs->rules, &args, &v);
	ids = rules_identity(rs->rules);
	if (v.identity < 0 || !v.identity_val) {
		*status = 400;
		outf(&o, "{\"error\": \"name the client with one of its identity arguments (");
		for (size_t i = 0; i < ids->n; i++)
			outf(&o, "%s%s", i ? ", " : "", ids->name[i]);
		outf(&o, ")\"}\n");
		return o.err ? -1 : (int)o.len;
	}
	tlen = identity_text(v.identity_val, text, sizeof(text));
	if (srv->redis) {
		struct out err = { text + tlen + 1, sizeof(text) - tlen - 1, 0, 0, 0 };

		err.buf[0] = '\0';
		rc = admin_redis(srv->redis, &err);
		if (!rc) {
			*status = 502;
			outf(&o, "{\"error\": ");
			out_json_str(&o, err.buf, err.len);
			outf(&o, "}\n");
			return o.err ? -1 : (int)o.len;
		}
	}
	*status = 200;
	outf(&o, "{\"identity\": ");
	out_json_str(&o, ids->name[v.identity], strlen(ids->name[v.identity]));
	outf(&o, ", \"value\": ");
	out_json_str(&o, text, tlen);
	outf(&o, ", \"store\": \"%s\", \"rules\": [", srv->redis ? "redis" : "memory");
	/* Every rule of the client, each with its own key. */
	for (size_t i = 0; i < rules_count(rs->rules); i++) {
		const struct rules_rule *rule = rules_rule_at(rs->rules, i);
		uint8_t key[IDENTITY_KEY_LEN];
		char hex[IDENTITY_HEX_LEN + 1], rkey[IDENTITY_HEX_LEN + 8];

		decide_key(rs, ids->name[v.identity], text, tlen, rule->name, key);
		identity_hex(key, hex);
		snprintf(rkey, sizeof(rkey), "rl:{%s}", hex);
		outf(&o, "%s{\"rule\": ", i ? ", " : "");
		out_json_str(&o, rule->name, strlen(rule->name));
		outf(&o, ", \"key\": \"%s\"", rkey);
		if (rc)
			redis_rule(rc, rkey, reset, &o);
		else
			memory_rule(srv, rule, key, reset, &o);
		outf(&o, "}");
	}
	outf(&o, "]}\n");
	if (rc)
		redisFree(rc);
	if (reset) {
		/* Workers forget what they cached about refused clients. */
		atomic_fetch_add(&srv->reset_epoch, 1);
		log_info("admin: reset the buckets of %s=%.*s", ids->name[v.identity], (int)tlen, text);
	}
	return o.err ? -1 : (int)o.len;
}
