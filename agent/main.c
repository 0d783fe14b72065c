/* SPDX-License-Identifier: Apache-2.0 */
/* main.c: the agent's start, its signals and reloads, the operations
 * listener: the top. The options are options.c's. */
#include <ev.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "addr.h"
#include "admin.h"
#include "alloc.h"
#include "auth.h"
#include "decide.h"
#include "explain.h"
#include "http.h"
#include "limit.h"
#include "log.h"
#include "metrics.h"
#include "options.h"
#include "rules.h"
#include "rules_reader.h"
#include "sdnotify.h"
#include "server.h"
#include "secret.h"
#include "settings.h"
#include "store.h"
#include "redis_transport_tls.h"
#include "store_redis.h"

#define RL_VERSION "0.2.0"

/* Names given on the command line end up in generated YAML: keep them to
 * the characters of argument names. */
static int safe_name(const char *s, size_t max)
{
	size_t n = strlen(s);

	return n > 0 && n < max &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == n;
}

static struct ev_loop *main_loop;
static struct server srv;
static struct options opt;
static uint64_t generation; /* of the rules: 1 at start, +1 per reload */
static uint8_t hash_key[16];  /* client keys are hashed under it */
static struct conn_tls listen_tls; /* --listen-tls-*: the SPOP listener's */

/* --answer as the rules file's `answer`: a word, or a list of names
 * separated by commas (the loader checks the names). */
static int answer_from_cli(char *yaml, size_t cap, size_t *n, char *err, size_t errlen)
{
	char list[512], *tok, *save = NULL;

	snprintf(list, sizeof(list), "%s", opt.answer);
	*n += (size_t)snprintf(yaml + *n, cap - *n, "answer: [");
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!safe_name(tok, RULES_NAME_MAX)) {
			snprintf(err, errlen, "--answer: bad variable name '%s'", tok);
			return -1;
		}
		*n += (size_t)snprintf(yaml + *n, cap - *n, "%s%s", yaml[*n - 1] == '[' ? "" : ", ",
				       tok);
	}
	*n += (size_t)snprintf(yaml + *n, cap - *n, "]\n");
	return 0;
}

/* The rules the command line describes, as a rules file would: the same
 * loader validates both. */
static struct rules *rules_from_cli(char *err, size_t errlen)
{
	char yaml[8192];
	size_t n = 0;

	if (opt.nlimits == 0 && !opt.identity && !opt.cost_arg && !opt.burst && !opt.answer)
		return rules_default();
	if (opt.nlimits == 0) {
		snprintf(opt.limits[0], sizeof(opt.limits[0]), "100/1m");
		opt.algos[0] = "token";
		opt.nlimits = 1;
	}
	n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "limits:\n");
	for (int i = 0; i < opt.nlimits; i++) {
		n += (size_t)snprintf(yaml + n, sizeof(yaml) - n,
				      "  - { rate: \"%s\", algorithm: %s", opt.limits[i],
				      opt.algos[i]);
		if (opt.burst && strcmp(opt.algos[i], "token") == 0)
			n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, ", burst: %lld",
					      opt.burst);
		n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, " }\n");
	}
	if (opt.identity) {
		char list[512], *tok, *save = NULL;

		snprintf(list, sizeof(list), "%s", opt.identity);
		n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "identity: [");
		for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			if (!safe_name(tok, RULES_NAME_MAX)) {
				snprintf(err, errlen, "--identity: bad argument name '%s'", tok);
				return NULL;
			}
			n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "%s%s",
					      yaml[n - 1] == '[' ? "" : ", ", tok);
		}
		n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "]\n");
	}
	if (opt.cost_arg) {
		if (!safe_name(opt.cost_arg, RULES_NAME_MAX)) {
			snprintf(err, errlen, "--cost-arg: bad argument name '%s'", opt.cost_arg);
			return NULL;
		}
		n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "cost_argument: %s\n",
				      opt.cost_arg);
	}
	if (opt.answer && answer_from_cli(yaml, sizeof(yaml), &n, err, errlen) < 0)
		return NULL;
	if (n >= sizeof(yaml)) {
		snprintf(err, errlen, "command line too long");
		return NULL;
	}
	return rules_load_buffer(yaml, n, "command line", err, errlen);
}

/* The rules at start: a file is read on a thread of its own, within
 * RULES_READER_TIMEOUT (rules_reader.h). */
static struct rules *load_rules(char *err, size_t errlen)
{
	if (opt.rules_path)
		return rules_reader_load(opt.rules_path, RULES_READER_TIMEOUT, err, errlen);
	return rules_from_cli(err, errlen);
}

/* A reload reads the file on a thread of its own (rules_reader.h), so that
 * the main thread, which serves /metrics and takes signals, never waits
 * for a file: the result comes back through reload_done_w, or the reload
 * fails after RULES_READER_TIMEOUT. One at a time; a SIGHUP meanwhile
 * reads the file once more after it. */
static int read_passwords(const struct settings *st, struct redis_config *cfg, char *err,
			  size_t errlen);
static struct rules_reader *reload_rr;
static int reload_again;
static ev_async reload_done_w;
static ev_timer reload_timeout_w;

static void reload_failed(const char *err)
{
	log_err_kv(LOG_KV("file", opt.rules_path), "reload failed, the rules in force stay: %s",
		   err);
	STAT_INC(srv.reload_failures);
}

/* On the reader's thread. */
static void reload_ready(void *arg)
{
	ev_async_send(main_loop, &reload_done_w);
}

static void reload_start(void)
{
	char err[1024];

	reload_again = 0;
	reload_rr = rules_reader_start(opt.rules_path, reload_ready, NULL, err, sizeof(err));
	if (!reload_rr) {
		reload_failed(err);
		sdnotify_ready();
		return;
	}
	ev_timer_set(&reload_timeout_w, RULES_READER_TIMEOUT, 0.);
	ev_timer_start(main_loop, &reload_timeout_w);
}

/* A reload is over, applied or not: the next one asked for meanwhile, or
 * systemd told that the agent serves again. */
static void reload_next(void)
{
	if (reload_again)
		reload_start();
	else
		sdnotify_ready();
}

static void reload_apply(struct rules *r)
{
	const struct settings *old;
	struct redis_config now = opt.redis;
	char err[1024];
	int changed;

	/* The password files are read again: an unreadable one fails the
	 * reload, as --check (systemd's ExecReload=) would. */
	changed = opt.use_redis ? read_passwords(rules_settings(r), &now, err, sizeof(err)) : 0;
	if (changed > 0) {
		/* for the next connections; those made stay as they are */
		store_redis_set_passwords(srv.store, now.password, now.sentinel_password);
		memcpy(opt.redis.password, now.password, sizeof(now.password));
		memcpy(opt.redis.sentinel_password, now.sentinel_password,
		       sizeof(now.sentinel_password));
		log_info("reload: the password file holds a new password: the next connections "
			 "to Redis use it");
	}
	memset(&now, 0, sizeof(now));
	/* and so are the TLS files: new connections use them */
	if (changed >= 0 && opt.redis.tls_ctx &&
	    redis_tls_reload(opt.redis.tls_ctx, &opt.redis.tls, err, sizeof(err)) < 0)
		changed = -1;
	if (changed < 0) {
		rules_release(r);
		reload_failed(err);
		return;
	}
	old = rules_settings(atomic_load(&srv.rules));
	if (!settings_equal(old, rules_settings(r)))
		log_warn("reload: listen, threads and store settings take effect at restart only");
	if (rules_any_lease(r) && !srv.store->ops->shared)
		log_warn("reload: lease in the rules is ignored: leases are taken from Redis, and "
			 "this agent keeps its buckets in memory");
	rules_set_gen(r, ++generation);
	rules_set_secret(r, hash_key);
	rules_set_limit_space(r, store_limit_space(srv.store));
	server_swap_rules(&srv, r);
	STAT_INC(srv.reloads);
	log_info_kv(LOG_KV("file", opt.rules_path), "reloaded %s: %zu rule(s)", opt.rules_path,
		    rules_count(r));
}

static void on_reload_done(struct ev_loop *loop, ev_async *a, int revents)
{
	char err[1024];
	struct rules *r;

	if (!reload_rr || !rules_reader_wait(reload_rr, 0.))
		return; /* a wake-up from a load given up on */
	ev_timer_stop(loop, &reload_timeout_w);
	r = rules_reader_finish(reload_rr, err, sizeof(err));
	reload_rr = NULL;
	if (r)
		reload_apply(r);
	else
		reload_failed(err);
	reload_next();
}

static void on_reload_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
	char err[1024];

	if (!reload_rr)
		return;
	rules_reader_abandon(reload_rr);
	reload_rr = NULL;
	snprintf(err, sizeof(err), "%s: not read after %.0f s (a mount that does not answer?)",
		 opt.rules_path, RULES_READER_TIMEOUT);
	reload_failed(err);
	reload_next();
}

/* The SPOP listener's certificate and key (and CA) read again: new
 * connections take them, those open keep theirs. A file that does not
 * load leaves the ones in force. */
static void reload_listen_tls(const char *signame)
{
	char err[1024];

	if (!opt.listen_tls.cert)
		return;
	if (conn_tls_load(&listen_tls, &opt.listen_tls, err, sizeof(err)) < 0)
		log_err("%s: the TLS certificate in force stays: %s", signame, err);
	else
		log_info("%s: TLS certificate %s read again for new connections", signame,
			 opt.listen_tls.cert);
}

/* A reload without a rules file: the Redis TLS files alone, when any. */
static void reload_tls_alone(const char *name)
{
	char err[512];

	if (!opt.redis.tls_ctx) {
		log_info("%s: no rules file to reload", name);
		return;
	}
	if (redis_tls_reload(opt.redis.tls_ctx, &opt.redis.tls, err, sizeof(err)) < 0) {
		log_err("%s: reload failed, the Redis TLS files in force stay: %s", name, err);
		STAT_INC(srv.reload_failures);
		return;
	}
	STAT_INC(srv.reloads);
	log_info("%s: no rules file; the Redis TLS files were read again (reloaded)", name);
}

/* SIGINT, SIGTERM: drain and stop. SIGHUP and SIGUSR2 (HAProxy's
 * master-worker habit): reload the rules file. SIGUSR1: logged, nothing
 * else (its default action would kill the agent). */
static void on_signal(struct ev_loop *loop, ev_signal *s, int revents)
{
	const char *name = s->signum == SIGHUP ? "SIGHUP" : "SIGUSR2";

	if (s->signum == SIGUSR1) {
		log_info("SIGUSR1: ignored (SIGHUP or SIGUSR2 reload the rules, SIGTERM stops)");
		return;
	}
	if (s->signum != SIGHUP && s->signum != SIGUSR2) {
		log_info("signal %d: stopping", s->signum);
		sdnotify_stopping();
		ev_break(loop, EVBREAK_ALL);
		return;
	}
	reload_listen_tls(name);
	if (!opt.rules_path) {
		reload_tls_alone(name);
		return;
	}
	if (reload_rr) {
		log_info("%s: a reload is under way; the file is read again after it", name);
		reload_again = 1;
		return;
	}
	sdnotify_reloading();
	reload_start();
}

static void on_collect(struct ev_loop *loop, ev_timer *t, int revents)
{
	server_collect_rules(&srv);
}

/* Lines the log limiter held back are reported within a second of the end
 * of their window, whether or not their site logs again. */
static void on_log_reports(struct ev_loop *loop, ev_timer *t, int revents)
{
	log_report_suppressed(log_now_ms(), 0);
}

static void serve_metrics(struct http_req *req, void *arg)
{
	char *body = NULL;
	size_t len = metrics_render(&srv, &body);

	if (body)
		http_respond(req, 200, "text/plain; version=0.0.4", body, len);
	else
		http_respond(req, 500, "text/plain", "", 0);
	xfree(body);
}

static void serve_healthz(struct http_req *req, void *arg)
{
	http_respond(req, 200, "text/plain", "ok\n", 3);
}

/* Readiness: 200 while the store decides (the in-memory store always),
 * else 503 and why; /healthz is liveness only. */
static void serve_readyz(struct http_req *req, void *arg)
{
	char why[256], body[300];
	int n;

	if (store_redis_ready(srv.store, why, sizeof(why))) {
		http_respond(req, 200, "text/plain", "ready\n", 6);
		return;
	}
	n = snprintf(body, sizeof(body), "not ready: %s\n", why);
	http_respond(req, 503, "text/plain", body,
		     n < 0 ? 0 : (size_t)n < sizeof(body) ? (size_t)n : sizeof(body) - 1);
}

static void serve_admin(struct http_req *req, void *arg)
{
	admin_serve(&srv, main_loop, opt.admin_token_file ? &opt.admin_token : NULL, req);
}

/* The --metrics listener: /metrics, /healthz, /readyz and, with --admin, /admin/.
 * NULL after logging why. */
static struct http_server *ops_start(void)
{
	struct http_server *h = http_new(main_loop);
	char err[512], where[ADDR_HOST_MAX + 16];

	if (!h || http_route(h, "GET", "/metrics", serve_metrics, NULL) < 0 ||
	    http_route(h, "GET", "/healthz", serve_healthz, NULL) < 0 ||
	    http_route(h, "GET", "/readyz", serve_readyz, NULL) < 0 ||
	    (srv.admin && (http_route(h, "GET", "/admin/", serve_admin, NULL) < 0 ||
			   http_route(h, "POST", "/admin/", serve_admin, NULL) < 0 ||
			   http_route(h, "PUT", "/admin/", serve_admin, NULL) < 0 ||
			   http_route(h, "DELETE", "/admin/", serve_admin, NULL) < 0))) {
		log_err("metrics: out of memory");
		http_free(h);
		return NULL;
	}
	if (http_listen(h, &opt.metrics, err, sizeof(err)) < 0) {
		log_err("metrics: %s", err);
		http_free(h);
		return NULL;
	}
	if (opt.metrics.path[0])
		log_info("metrics on unix@%s, at /metrics", opt.metrics.path);
	else
		log_info("metrics on http://%s/metrics",
			 addr_format(&opt.metrics, where, sizeof(where)));
	return h;
}

/* The key client keys are hashed under: from --hash-key-file (or the rules
 * file's store.hash_key_file), shared by the fleet; else, with Redis, the
 * built-in one (and a warning: anyone can then craft identities that
 * collide or choose a Cluster slot); else, in memory, a random one for
 * this process. Returns 0, or -1 after logging why. */
static int set_hash_key(const struct rules *rules, int use_redis)
{
	const struct settings *st = rules_settings(rules);
	const char *path = opt.hash_key_file ? opt.hash_key_file
			   : st->has_hash_key_file ? st->hash_key_file : NULL;
	char secret[SECRET_MAX], err[512];
	bool loose;
	long n;

	if (!path) {
		if (use_redis) {
			memcpy(hash_key, rules_secret(rules), sizeof(hash_key));
			if (!opt.check)
				log_warn("no --hash-key-file: client keys are hashed under a key "
					 "anyone can read in the source, so identities can be crafted "
					 "to collide or to share a Redis slot; give every agent of the "
					 "fleet the same secret file");
			return 0;
		}
		if (secret_random_key(hash_key) < 0) {
			log_err("cannot read random bytes for the hash key");
			return -1;
		}
		return 0;
	}
	n = secret_read(path, secret, sizeof(secret), &loose, err, sizeof(err));
	if (n < 0) {
		log_err("hash key: %s", err);
		return -1;
	}
	if (loose)
		log_warn("hash key: %s can be read by group or others", path);
	secret_hash_key(secret, (size_t)n, hash_key);
	memset(secret, 0, sizeof(secret));
	return 0;
}

/* Settings of the rules file, where the command line did not say. */
static void apply_settings(const struct settings *st)
{
	struct redis_config *rcfg = &opt.redis;

	if (st->has_listen && !opt.listen_set)
		opt.server.listen = st->listen;
	if (st->listen_tls_cert[0] && !opt.listen_tls.cert) {
		/* copies: the rules, and their settings, go at a reload */
		static char cert[256], key[256], ca[256];

		opt.listen_tls.cert = strcpy(cert, st->listen_tls_cert);
		opt.listen_tls.key = strcpy(key, st->listen_tls_key);
		opt.listen_tls.ca = st->listen_tls_ca[0] ? strcpy(ca, st->listen_tls_ca) : NULL;
	}
	if (st->has_threads && !opt.threads_set)
		opt.server.threads = st->threads;
	if (!opt.redis_set && st->has_store && st->store != SETTINGS_STORE_MEMORY) {
		/* addresses were validated when the file was read */
		rcfg->addr = st->address;
		memcpy(rcfg->nodes, st->nodes, sizeof(rcfg->nodes));
		rcfg->nnodes = st->nnodes;
		rcfg->topology = st->store == SETTINGS_STORE_SENTINEL ? REDIS_SENTINEL
				 : st->store == SETTINGS_STORE_CLUSTER ? REDIS_CLUSTER
				 : st->store == SETTINGS_STORE_SHARDS ? REDIS_SHARDS
									: REDIS_STANDALONE;
		opt.use_redis = true;
	}
	if (st->has_master && !opt.master_set)
		snprintf(rcfg->master, sizeof(rcfg->master), "%s", st->master);
	if (st->has_sentinel_password && !opt.sentinel_password_set)
		snprintf(rcfg->sentinel_password, sizeof(rcfg->sentinel_password), "%s",
			 st->sentinel_password);
	if (st->has_timeout && !opt.timeout_set)
		rcfg->timeout = st->timeout_ms / 1000.;
	if (st->has_user && !opt.user_set)
		snprintf(rcfg->user, sizeof(rcfg->user), "%s", st->user);
	if (st->has_password && !opt.password_set)
		snprintf(rcfg->password, sizeof(rcfg->password), "%s", st->password);
	if (st->has_tls && !opt.tls_set) {
		rcfg->tls.on = st->tls;
		snprintf(rcfg->tls.ca, sizeof(rcfg->tls.ca), "%s", st->tls_ca);
		snprintf(rcfg->tls.cert, sizeof(rcfg->tls.cert), "%s", st->tls_cert);
		snprintf(rcfg->tls.key, sizeof(rcfg->tls.key), "%s", st->tls_key);
		snprintf(rcfg->tls.server_name, sizeof(rcfg->tls.server_name), "%s",
			 st->tls_server_name);
		rcfg->tls.no_verify = !st->tls_verify;
	}
	rcfg->tls.sentinel_plain = !st->sentinel_tls;
}

/* TLS to Redis, when on: its context, the files read now (an unreadable
 * or mismatched one stops the start and fails --check). Returns 0, or -1
 * with err set. */
static int start_tls(char *err, size_t errlen)
{
	if (!opt.use_redis || !opt.redis.tls.on)
		return 0;
	if (!(opt.redis.tls_ctx = redis_tls_new(&opt.redis.tls, err, errlen)))
		return -1;
	if (opt.redis.tls.no_verify)
		log_warn("--redis-tls-no-verify: the Redis servers are not verified: anyone on "
			 "the path can pose as one and read the traffic");
	return 0;
}

/* What the options and the rules' settings say together, once the rules
 * are read. Returns 0, or -1 with err set (empty: logged already). */
static int check_with_rules(const struct rules *rules, char *err, size_t errlen)
{
	const char *why;

	if (!opt.use_redis && (opt.redis.lease_us || rules_any_lease(rules)))
		snprintf(err, errlen, "%s: leases are taken from Redis: give a Redis store",
			 opt.redis.lease_us ? "--lease" : "lease (rules file)");
	else if (!opt.use_redis && opt.redis.keys.packed)
		snprintf(err, errlen, "--redis-packed: with a Redis store only");
	else if ((!opt.use_redis || opt.redis.keys.packed) &&
		 opt.redis.keys.expiry == REDIS_EXPIRY_NEVER)
		snprintf(err, errlen, "--redis-expiry never: %s",
			 opt.use_redis ? "packed buckets have their sets' expiry: one or the other"
				       : "with a Redis store only");
	else if (opt.use_redis && opt.server.fixed_answer)
		snprintf(err, errlen, "--fixed-answer: with the in-memory store only");
	else if (opt.use_redis && (why = store_redis_check(&opt.redis)))
		snprintf(err, errlen, "%s", why);
	else
		return set_hash_key(rules, opt.use_redis);
	return -1;
}

/* The password files in force: the command line's, else the rules file's
 * (store.password_file, store.sentinel_password_file) where no password
 * was given otherwise. */
static const char *password_path(const struct settings *st)
{
	if (opt.password_file)
		return opt.password_file;
	return opt.password_set || !st->password_file[0] ? NULL : st->password_file;
}

static const char *sentinel_password_path(const struct settings *st)
{
	if (opt.sentinel_password_file)
		return opt.sentinel_password_file;
	return opt.sentinel_password_set || !st->sentinel_password_file[0]
		       ? NULL : st->sentinel_password_file;
}

/* Reads the password file `path` (when not NULL) into out[0..cap). Returns
 * 1 when it differs from what out held, 0 when not, -1 with err set. */
static int read_password(const char *path, const char *what, char *out, size_t cap,
			 char *err, size_t errlen)
{
	char pw[256], why[512];
	bool loose;
	int changed;

	if (!path)
		return 0;
	if (secret_read_password(path, pw, sizeof(pw), &loose, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "%s: %s", what, why);
		return -1;
	}
	if (loose)
		log_warn("%s: %s can be read by group or others: chmod 600 it, or give it as "
			 "a systemd credential (LoadCredential=)", what, path);
	changed = strcmp(out, pw) != 0;
	snprintf(out, cap, "%s", pw);
	memset(pw, 0, sizeof(pw));
	return changed;
}

/* The passwords of the files in force, into the store's configuration at
 * start (cfg: &opt.redis) or into a copy at reload. Returns how many
 * changed, or -1 with err set. */
static int read_passwords(const struct settings *st, struct redis_config *cfg, char *err,
			  size_t errlen)
{
	int a = read_password(password_path(st), "Redis password file", cfg->password,
			      sizeof(cfg->password), err, errlen);
	int b = a < 0 ? -1 : read_password(sentinel_password_path(st),
					   "Sentinel password file", cfg->sentinel_password,
					   sizeof(cfg->sentinel_password), err, errlen);

	return a < 0 || b < 0 ? -1 : a + b;
}

/* Options that the store or the rules leave without effect: said, so
 * that nobody tunes a knob that turns nothing. */
static void warn_idle_options(void)
{
	int tokens = 0;

	if (opt.redis_only && !opt.use_redis)
		log_warn("%s: an option of the Redis store, which this agent does not use: "
			 "ignored", opt.redis_only);
	if (opt.use_redis && opt.redis.topology != REDIS_SENTINEL) {
		if (opt.master_set)
			log_warn("--redis-master: the master's name in Sentinel, without "
				 "--redis-sentinel: ignored");
		if (opt.sentinel_password_arg)
			log_warn("--redis-sentinel-password: without --redis-sentinel: ignored");
	}
	for (int i = 0; opt.burst && i < opt.nlimits; i++) {
		if (strcmp(opt.algos[i], "token") != 0)
			log_warn("--burst: the capacity of token buckets; the %s limit %s has "
				 "none and ignores it", opt.algos[i], opt.limits[i]);
		else
			tokens++;
	}
	if (tokens > 1)
		log_warn("--burst %lld: the capacity of each of the %d token limits alike; "
			 "a rules file gives each its own", opt.burst, tokens);
}

/* The rules at start, and everything checked against them: NULL with err
 * set (empty: logged already). */
static struct rules *prepare(char *err, size_t errlen)
{
	struct rules *rules = load_rules(err, errlen);

	if (!rules)
		return NULL;
	err[0] = '\0';
	apply_settings(rules_settings(rules));
	warn_idle_options();
	if (read_passwords(rules_settings(rules), &opt.redis, err, errlen) < 0) {
		rules_release(rules);
		return NULL;
	}
	if (check_with_rules(rules, err, errlen) < 0 || start_tls(err, errlen) < 0) {
		rules_release(rules);
		return NULL;
	}
	return rules;
}

/* Signals are caught from here on (and handled once the loop runs):
 * whoever sends SIGTERM as soon as "listening on" is logged finds the
 * agent stopping cleanly, not killed by the default action. */
static void watch_signals(void)
{
	static const int signums[] = { SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 };
	static ev_signal sigs[sizeof(signums) / sizeof(signums[0])];

	for (size_t i = 0; i < sizeof(signums) / sizeof(signums[0]); i++) {
		ev_signal_init(&sigs[i], on_signal, signums[i]);
		ev_signal_start(main_loop, &sigs[i]);
	}
	ev_async_init(&reload_done_w, on_reload_done);
	ev_async_start(main_loop, &reload_done_w);
	ev_timer_init(&reload_timeout_w, on_reload_timeout, RULES_READER_TIMEOUT, 0.);
}

/* The line that says the agent runs, and how. */
static void log_started(const struct rules *rules)
{
	const struct redis_keys *k = &opt.redis.keys;
	char layout[64] = "";

	if (k->packed)
		snprintf(layout, sizeof(layout), ", packed buckets (%u sets per limit)",
			 1U << k->packed_bits);
	else if (k->expiry == REDIS_EXPIRY_NEVER)
		snprintf(layout, sizeof(layout), ", keys without an expiry");
	else if (opt.use_redis && k->expiry == REDIS_EXPIRY_AUTO)
		snprintf(layout, sizeof(layout),
			 ", keys without an expiry where the server evicts them");
	log_info("%d worker thread(s), %zu rule(s) from %s, %s store%s%s%s", srv.cfg.threads,
		 rules_count(rules), rules_source(rules), opt.use_redis ? "Redis" : "in-memory",
		 opt.use_redis ? ", " : "", opt.use_redis ? store_redis_topology_name(opt.redis.topology) : "",
		 layout);
}

/* Runs the agent on `rules` (taking the reference) until a signal stops
 * it. Returns the exit status. */
static int run(struct rules *rules)
{
	static ev_timer collect, log_reports;
	struct http_server *ops = NULL;
	int rc = 1;

	srv.cfg = opt.server;
	srv.admin = opt.admin;
	srv.lfd = -1;
	signal(SIGPIPE, SIG_IGN);
	srv.store = opt.use_redis ? store_redis_new(&opt.redis, srv.cfg.mem_max_keys)
				  : store_memory_new(srv.cfg.mem_max_keys);
	if (!srv.store) {
		log_err("cannot allocate the store");
		rules_release(rules);
		return 1;
	}
	rules_set_gen(rules, ++generation);
	rules_set_secret(rules, hash_key);
	rules_set_limit_space(rules, store_limit_space(srv.store));
	atomic_init(&srv.rules, rules);
	main_loop = ev_default_loop(EVFLAG_AUTO);
	watch_signals();
	/* Metrics listen before the SPOP port does, so whoever waits for the
	 * "listening on" line finds both ready. */
	server_raise_fd_limit(); /* the operations listener's cap follows it */
	if ((opt.use_metrics && !(ops = ops_start())) || server_listen(&srv) < 0)
		return 1;
	ev_timer_init(&collect, on_collect, 0.5, 0.5);
	ev_timer_start(main_loop, &collect);
	ev_timer_init(&log_reports, on_log_reports, 1., 1.);
	ev_timer_start(main_loop, &log_reports);
	if (server_start(&srv) == 0) {
		log_started(rules);
		sdnotify_ready();
		ev_run(main_loop, 0);
		rc = 0;
	}
	if (reload_rr)
		rules_reader_abandon(reload_rr);
	http_free(ops);
	server_stop(&srv);
	conn_tls_free(&listen_tls);
	if (rc == 0) {
		rules_release(atomic_load(&srv.rules));
		store_free(srv.store);
		redis_tls_free(opt.redis.tls_ctx);
		log_report_suppressed(log_now_ms(), 1);
		log_info("stopped");
	}
	return rc;
}

int main(int argc, char **argv)
{
	char err[1024] = "";
	struct rules *rules;
	int status = 2;

	options_version(RL_VERSION);
	metrics_set_version(RL_VERSION);
	options_defaults(&opt);
	switch (options_parse(&opt, argc, argv, err, sizeof(err))) {
	case OPTIONS_DONE:
		return 0;
	case OPTIONS_BAD:
		goto fail;
	case OPTIONS_RUN:
		break;
	}
	log_set_level(opt.log_level);
	log_set_format(opt.log_format);
	log_detect_journal();
	if (opt.admin_token_shared)
		log_warn("--admin-token-file %s can be read or written by group or others: "
			 "chmod 600 it", opt.admin_token_file);
	if (opt.explain) {
		/* the rules alone, in memory: no store to reach, nothing to listen on */
		rules = load_rules(err, sizeof(err));
		if (!rules) {
			status = 1;
			goto fail;
		}
		status = explain_main(rules, opt.explain_argv, opt.explain_argc, stdout, stderr);
		rules_release(rules);
		return status;
	}
	rules = prepare(err, sizeof(err));
	if (!rules) {
		status = opt.check ? 1 : 2;
		goto fail;
	}
	/* the listener's certificate: at start and by --check alike */
	if (opt.listen_tls.cert &&
	    (opt.check ? conn_tls_check(&opt.listen_tls, err, sizeof(err))
		       : conn_tls_load(&listen_tls, &opt.listen_tls, err, sizeof(err))) < 0) {
		rules_release(rules);
		status = opt.check ? 1 : 2;
		goto fail;
	}
	if (opt.listen_tls.cert && !opt.check) {
		opt.server.conn.tls = &listen_tls;
		log_info("SPOP over TLS, certificate %s%s%s", opt.listen_tls.cert,
			 opt.listen_tls.ca ? ", HAProxy's signed by " : "",
			 opt.listen_tls.ca ? opt.listen_tls.ca : "");
	}
	if (opt.check) {
		/* -q: the exit status says it all (systemd's ExecReload=) */
		if (opt.log_level >= LOG_INFO)
			printf("%s: ok, %zu rule(s)\n",
			       opt.rules_path ? opt.rules_path : "command line", rules_count(rules));
		rules_release(rules);
		return 0;
	}
	return run(rules);
fail:
	if (err[0])
		fprintf(stderr, "spoa-ratelimit: %s\n", err);
	return status;
}
