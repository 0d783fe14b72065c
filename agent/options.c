/* SPDX-License-Identifier: Apache-2.0 */
/* options.c: every option of the command line, declared once (options.h). */
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "log.h"
#include "rules.h"

/* A setter's outcome: 0 (go on), -1 (err says why), or OPTIONS_DONE. */
typedef int option_set_fn(struct options *o, const char *arg, char *err, size_t errlen);

struct option_def {
	const char *name;     /* --name */
	int short_name;       /* -x, or 0 */
	const char *arg;      /* its argument in --help; NULL: it takes none */
	const char *heading;  /* a line of --help before it, or NULL */
	const char *help;     /* its lines in --help, \n between them */
	option_set_fn *set;
};

static const char *version = "?";

/* Writes the error of a setter; returns -1. */
static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* Parses a decimal integer within [min, max]. Returns 0 or -1. */
static int parse_num(const char *s, long long min, long long max, long long *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

/* Parses a duration with its unit ("30s", "5m", "500ms") within [min, max]
 * seconds. Returns 0 or -1. */
static int parse_seconds(const char *s, double min, double max, double *out)
{
	int64_t us;
	double v;

	if (limit_parse_duration(s, &us) < 0)
		return -1;
	v = (double)us / 1e6;
	if (v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

/* An option of the Redis store: remembered, to warn when the store is the
 * in-memory one (main.c). */
static void redis_only(struct options *o, const char *name)
{
	if (!o->redis_only)
		o->redis_only = name;
}

/* ---- the setters, in the table's order ---------------------------------------- */

static int set_rules(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->rules_path = arg;
	return 0;
}

static int set_listen(struct options *o, const char *arg, char *err, size_t errlen)
{
	struct addr a;

	if (addr_parse(arg, ADDR_PORT0 | ADDR_UNIX_AT, &a) < 0)
		return fail(err, errlen, "--listen: expected ADDR:PORT or unix@PATH, got '%s'", arg);
	o->server.listen = a;
	o->listen_set = 1;
	return 0;
}

static int set_listen_tls_cert(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->listen_tls.cert = arg;
	return 0;
}

static int set_listen_tls_key(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->listen_tls.key = arg;
	return 0;
}

static int set_listen_tls_ca(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->listen_tls.ca = arg;
	return 0;
}

static int set_threads(struct options *o, const char *arg, char *err, size_t errlen)
{
	long long n;

	if (parse_num(arg, 1, 256, &n) < 0)
		return fail(err, errlen, "--threads: expected 1 to 256, got '%s'", arg);
	o->server.threads = (int)n;
	o->threads_set = 1;
	return 0;
}

static int set_limit(struct options *o, const char *arg, char *err, size_t errlen)
{
	static const char *const names[] = { "token", "sliding", "fixed", "log" };
	char *limit = o->limits[o->nlimits], *colon, why[256];
	struct limit_spec spec;
	size_t k = 0;

	if (o->nlimits == LIMIT_RULE_MAX)
		return fail(err, errlen, "at most %d limits", LIMIT_RULE_MAX);
	if (strlen(arg) >= sizeof(o->limits[0]))
		return fail(err, errlen, "--limit '%s': too long", arg);
	snprintf(limit, sizeof(o->limits[0]), "%s", arg);
	colon = strchr(limit, ':');
	o->algos[o->nlimits] = "token";
	if (colon) {
		*colon++ = '\0';
		while (k < 4 && strcmp(colon, names[k]) != 0)
			k++;
		if (k == 4)
			return fail(err, errlen,
				    "--limit '%s': unknown algorithm '%s' (token, sliding, fixed, log)",
				    arg, colon);
		o->algos[o->nlimits] = names[k];
	}
	if (limit_parse(limit, &spec, why, sizeof(why)) < 0)
		return fail(err, errlen, "--limit '%s': %s", arg, why);
	if (strcmp(o->algos[o->nlimits], "log") == 0 && spec.quota > LIMIT_LOG_QUOTA_MAX)
		return fail(err, errlen, "--limit '%s': a log's quota is at most %d (it keeps every "
			    "request of its period; sliding above)", arg, LIMIT_LOG_QUOTA_MAX);
	o->nlimits++;
	return 0;
}

static int set_burst(struct options *o, const char *arg, char *err, size_t errlen)
{
	if (parse_num(arg, 1, 1LL << 40, &o->burst) < 0)
		return fail(err, errlen, "--burst: expected a positive number, got '%s'", arg);
	return 0;
}

static int set_identity(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->identity = arg;
	return 0;
}

static int set_cost_arg(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->cost_arg = arg;
	return 0;
}

static int set_answer(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->answer = arg;
	return 0;
}

static int one_store(struct options *o, char *err, size_t errlen)
{
	if (o->redis_set)
		return fail(err, errlen,
			    "give one of --redis, --redis-sentinel, --redis-cluster, --redis-shards");
	o->use_redis = true;
	o->redis_set = 1;
	return 0;
}

static int set_redis(struct options *o, const char *arg, char *err, size_t errlen)
{
	if (store_redis_set_addr(&o->redis, arg) < 0)
		return fail(err, errlen, "--redis: expected HOST:PORT or a socket path, got '%s'",
			    arg);
	return one_store(o, err, errlen);
}

/* --redis-sentinel, --redis-cluster, --redis-shards */
static int set_nodes(struct options *o, const char *name, enum redis_topology t,
		     const char *arg, char *err, size_t errlen)
{
	if (o->redis_set)
		return one_store(o, err, errlen);
	if (store_redis_set_nodes(&o->redis, arg) < 0)
		return fail(err, errlen,
			    "%s: expected HOST:PORT,HOST:PORT,... (at most %d, each once), got '%s'",
			    name, REDIS_NODES_MAX, arg);
	o->redis.topology = t;
	return one_store(o, err, errlen);
}

static int set_sentinel(struct options *o, const char *arg, char *err, size_t errlen)
{
	return set_nodes(o, "--redis-sentinel", REDIS_SENTINEL, arg, err, errlen);
}

static int set_master(struct options *o, const char *arg, char *err, size_t errlen)
{
	if (!*arg || strlen(arg) >= sizeof(o->redis.master))
		return fail(err, errlen, "--redis-master: expected a name of 1 to %zu bytes",
			    sizeof(o->redis.master) - 1);
	snprintf(o->redis.master, sizeof(o->redis.master), "%s", arg);
	o->master_set = 1;
	return 0;
}

static int set_sentinel_password(struct options *o, const char *arg, char *err, size_t errlen)
{
	snprintf(o->redis.sentinel_password, sizeof(o->redis.sentinel_password), "%s", arg);
	o->sentinel_password_set = 1;
	o->sentinel_password_arg = 1;
	return 0;
}

static int set_cluster(struct options *o, const char *arg, char *err, size_t errlen)
{
	return set_nodes(o, "--redis-cluster", REDIS_CLUSTER, arg, err, errlen);
}

static int set_shards(struct options *o, const char *arg, char *err, size_t errlen)
{
	return set_nodes(o, "--redis-shards", REDIS_SHARDS, arg, err, errlen);
}

static int set_hash_key_file(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->hash_key_file = arg;
	return 0;
}

static int set_user(struct options *o, const char *arg, char *err, size_t errlen)
{
	snprintf(o->redis.user, sizeof(o->redis.user), "%s", arg);
	o->user_set = 1;
	redis_only(o, "--redis-user");
	return 0;
}

static int set_password(struct options *o, const char *arg, char *err, size_t errlen)
{
	snprintf(o->redis.password, sizeof(o->redis.password), "%s", arg);
	o->password_set = 1;
	o->password_arg = 1;
	redis_only(o, "--redis-password");
	return 0;
}

/* ---- TLS to Redis: any of these turns it on ---------------------------------- */

static int tls_on(struct options *o, const char *name)
{
	o->redis.tls.on = true;
	o->tls_set = 1;
	redis_only(o, name);
	return 0;
}

/* A file name or a server name into out[256]. */
static int tls_string(struct options *o, const char *name, const char *arg, char *out,
		      char *err, size_t errlen)
{
	if (!*arg || strlen(arg) >= 256)
		return fail(err, errlen, "%s: expected 1 to 255 bytes", name);
	snprintf(out, 256, "%s", arg);
	return tls_on(o, name);
}

static int set_tls(struct options *o, const char *arg, char *err, size_t errlen)
{
	return tls_on(o, "--redis-tls");
}

static int set_tls_ca(struct options *o, const char *arg, char *err, size_t errlen)
{
	return tls_string(o, "--redis-tls-ca", arg, o->redis.tls.ca, err, errlen);
}

static int set_tls_cert(struct options *o, const char *arg, char *err, size_t errlen)
{
	return tls_string(o, "--redis-tls-cert", arg, o->redis.tls.cert, err, errlen);
}

static int set_tls_key(struct options *o, const char *arg, char *err, size_t errlen)
{
	return tls_string(o, "--redis-tls-key", arg, o->redis.tls.key, err, errlen);
}

static int set_tls_server_name(struct options *o, const char *arg, char *err, size_t errlen)
{
	return tls_string(o, "--redis-tls-server-name", arg, o->redis.tls.server_name, err,
			  errlen);
}

static int set_tls_no_verify(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->redis.tls.no_verify = true;
	return tls_on(o, "--redis-tls-no-verify");
}

/* A duration as every other ("250ms", "1s"); a bare number is
 * milliseconds, as this option took before it took units. */
/* ---- secrets from files, read by main.c at start and at each reload -------- */

static int set_password_file(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->password_file = arg;
	o->password_set = 1;
	redis_only(o, "--redis-password-file");
	return 0;
}

static int set_sentinel_password_file(struct options *o, const char *arg, char *err,
				      size_t errlen)
{
	o->sentinel_password_file = arg;
	o->sentinel_password_set = 1;
	o->sentinel_password_arg = 1;
	return 0;
}

static int set_log_format(struct options *o, const char *arg, char *err, size_t errlen)
{
	if (!strcmp(arg, "text"))
		o->log_format = LOG_FORMAT_TEXT;
	else if (!strcmp(arg, "json"))
		o->log_format = LOG_FORMAT_JSON;
	else
		return fail(err, errlen, "--log-format: text or json, not '%s'", arg);
	return 0;
}

static int set_timeout(struct options *o, const char *arg, char *err, size_t errlen)
{
	long long n;
	double d;

	if (parse_num(arg, 1, 60000, &n) == 0)
		d = (double)n / 1000.;
	else if (parse_seconds(arg, 0.001, 60., &d) < 0)
		return fail(err, errlen, "--redis-timeout: expected a duration from 1ms to 60s "
			    "(250ms, 1s; a bare number is ms), got '%s'", arg);
	o->redis.timeout = d;
	o->timeout_set = 1;
	redis_only(o, "--redis-timeout");
	return 0;
}

static int set_info_interval(struct options *o, const char *arg, char *err, size_t errlen)
{
	double d;

	if (parse_seconds(arg, 0.1, 3600., &d) < 0)
		return fail(err, errlen, "--redis-info-interval: expected a duration from 100ms "
			    "to 1h, got '%s'", arg);
	o->redis.info_interval = d;
	redis_only(o, "--redis-info-interval");
	return 0;
}

static int set_batch(struct options *o, const char *arg, char *err, size_t errlen)
{
	long long n;

	if (parse_num(arg, 1, 1024, &n) < 0)
		return fail(err, errlen, "--redis-batch: expected 1 to 1024, got '%s'", arg);
	o->redis.batch_max = (int)n;
	redis_only(o, "--redis-batch");
	return 0;
}

static int set_pipeline(struct options *o, const char *arg, char *err, size_t errlen)
{
	long long n;

	if (parse_num(arg, 1, 1024, &n) < 0)
		return fail(err, errlen, "--redis-pipeline: expected 1 to 1024, got '%s'", arg);
	o->redis.pipeline = (int)n;
	redis_only(o, "--redis-pipeline");
	return 0;
}

static int set_max_pending(struct options *o, const char *arg, char *err, size_t errlen)
{
	long long n;

	if (parse_num(arg, 1, 1000000, &n) < 0)
		return fail(err, errlen, "--redis-max-pending: expected 1 to 1000000, got '%s'", arg);
	o->redis.max_pending = (int)n;
	redis_only(o, "--redis-max-pending");
	return 0;
}

static int set_packed(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->redis.keys.packed = true;
	return 0;
}

static int set_expiry(struct options *o, const char *arg, char *err, size_t errlen)
{
	if (!strcmp(arg, "auto"))
		o->redis.keys.expiry = REDIS_EXPIRY_AUTO;
	else if (!strcmp(arg, "always"))
		o->redis.keys.expiry = REDIS_EXPIRY_ALWAYS;
	else if (!strcmp(arg, "never"))
		o->redis.keys.expiry = REDIS_EXPIRY_NEVER;
	else
		return fail(err, errlen, "--redis-expiry: auto, always or never, not '%s'", arg);
	return 0;
}

static int set_no_expiry(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->redis.keys.expiry = REDIS_EXPIRY_NEVER;
	return 0;
}

static int set_packed_sets(struct options *o, const char *arg, char *err, size_t errlen)
{
	long long n;

	if (parse_num(arg, 1, 1 << REDIS_KEY_PACKED_BITS_MAX, &n) < 0 || (n & (n - 1)))
		return fail(err, errlen,
			    "--redis-packed-sets: expected a power of two from 1 to %d, got '%s'",
			    1 << REDIS_KEY_PACKED_BITS_MAX, arg);
	o->redis.keys.packed = true;
	for (o->redis.keys.packed_bits = 0; (1LL << o->redis.keys.packed_bits) < n;
	     o->redis.keys.packed_bits++)
		;
	return 0;
}

static int set_no_local_cache(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->redis.local_cache = 0;
	redis_only(o, "--no-local-cache");
	return 0;
}

static int set_lease(struct options *o, const char *arg, char *err, size_t errlen)
{
	double d;

	if (parse_seconds(arg, RULES_LEASE_MIN_US / 1e6, RULES_LEASE_MAX_US / 1e6, &d) < 0)
		return fail(err, errlen, "--lease: expected a duration from 10ms to 1s, got '%s'",
			    arg);
	o->redis.lease_us = (int64_t)(d * 1e6 + 0.5);
	return 0;
}

static int set_lease_share(struct options *o, const char *arg, char *err, size_t errlen)
{
	long long n;

	if (parse_num(arg, 1, RULES_LEASE_SHARE_MAX, &n) < 0)
		return fail(err, errlen, "--lease-share: expected 1 to %d (percent), got '%s'",
			    RULES_LEASE_SHARE_MAX, arg);
	o->redis.lease_share = (unsigned)n;
	return 0;
}

static int set_max_frame(struct options *o, const char *arg, char *err, size_t errlen)
{
	long long n;

	if (parse_num(arg, 16380, 16 * 1024 * 1024, &n) < 0)
		return fail(err, errlen, "--max-frame-size: expected 16380 to 16777216, got '%s'",
			    arg);
	o->server.conn.max_frame_size = (uint32_t)n;
	return 0;
}

static int set_max_conns(struct options *o, const char *arg, char *err, size_t errlen)
{
	long long n;

	if (parse_num(arg, 1, 1000000, &n) < 0)
		return fail(err, errlen, "--max-conns: expected 1 to 1000000, got '%s'", arg);
	o->server.conn.max_conns = (int)n;
	return 0;
}

static int set_idle_timeout(struct options *o, const char *arg, char *err, size_t errlen)
{
	if (parse_seconds(arg, 0.1, 86400., &o->server.conn.idle_timeout) < 0)
		return fail(err, errlen, "--idle-timeout: expected a duration from 100ms to 1d "
			    "(30s, 5m), got '%s'", arg);
	return 0;
}

static int set_hello_timeout(struct options *o, const char *arg, char *err, size_t errlen)
{
	if (parse_seconds(arg, 0.1, 3600., &o->server.conn.hello_timeout) < 0)
		return fail(err, errlen, "--hello-timeout: expected a duration from 100ms to 1h "
			    "(2s, 500ms), got '%s'", arg);
	return 0;
}

static int set_mem_max_keys(struct options *o, const char *arg, char *err, size_t errlen)
{
	long long n;

	if (parse_num(arg, 1, 1LL << 32, &n) < 0)
		return fail(err, errlen, "--mem-max-keys: expected a positive number, got '%s'",
			    arg);
	o->server.mem_max_keys = (size_t)n;
	return 0;
}

static int set_metrics(struct options *o, const char *arg, char *err, size_t errlen)
{
	if (addr_parse(arg, ADDR_UNIX_AT, &o->metrics) < 0)
		return fail(err, errlen, "--metrics: expected ADDR:PORT or unix@PATH, got '%s'", arg);
	o->use_metrics = true;
	return 0;
}

static int set_admin(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->admin = true;
	return 0;
}

static int set_admin_token_file(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->admin_token_file = arg;
	return 0;
}

static int set_fixed_answer(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->server.fixed_answer = true;
	return 0;
}

static int set_check(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->check = true;
	return 0;
}

static int set_explain(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->explain = true;
	return 0;
}

static int set_verbose(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->log_level = o->log_level < LOG_INFO ? LOG_INFO : LOG_DEBUG;
	return 0;
}

static int set_quiet(struct options *o, const char *arg, char *err, size_t errlen)
{
	o->log_level = LOG_WARN;
	return 0;
}

static int set_version(struct options *o, const char *arg, char *err, size_t errlen)
{
	printf("spoa-ratelimit %s\n", version);
	return OPTIONS_DONE;
}

static int set_help(struct options *o, const char *arg, char *err, size_t errlen)
{
	options_usage(stdout);
	return OPTIONS_DONE;
}

/* ---- the table ------------------------------------------------------------------- */

static const struct option_def defs[] = {
	{ "rules", 'f', "FILE", NULL, "rules file (YAML); SIGHUP reloads it", set_rules },
	{ "listen", 'l', "ADDR:PORT", NULL,
	  "listen address (default 127.0.0.1:12345;\nIPv6 as [::1]:12345; a Unix socket as\nunix@PATH)", set_listen },
	{ "listen-tls-cert", 0, "FILE", NULL,
	  "SPOP over TLS: the certificate chain (PEM)\nHAProxy verifies; needs --listen-tls-key;\n"
	  "SIGHUP reads both again for new connections", set_listen_tls_cert },
	{ "listen-tls-key", 0, "FILE", NULL, "the private key of --listen-tls-cert (PEM)",
	  set_listen_tls_key },
	{ "listen-tls-ca", 0, "FILE", NULL,
	  "HAProxy must present a client certificate\nsigned by this CA (PEM; server ... crt)",
	  set_listen_tls_ca },
	{ "threads", 't', "N", NULL, "worker threads (default: number of CPUs)", set_threads },
	{ "limit", 0, "N/P[:ALGO]", "Without a rules file, one rule \"default\" for every client:",
	  "a limit (default 100/1m); repeat for several,\nall checked; ALGO: token (default), "
	  "sliding,\nfixed, log (exact, N at most 1000)", set_limit },
	{ "burst", 0, "N", NULL, "token bucket capacity (default: N)", set_burst },
	{ "identity", 0, "LIST", NULL,
	  "arguments naming the client, first non-empty\nwins (default api_key,user,ip)",
	  set_identity },
	{ "cost-arg", 0, "NAME", NULL, "integer argument giving a request's weight", set_cost_arg },
	{ "answer", 0, "LIST", NULL,
	  "variables an answer carries: default (what\nHAProxy's rules read), full, or names\n"
	  "such as status,retry_after,ratelimit", set_answer },
	{ "redis", 0, "ADDR", "Redis (default: the in-memory store of this agent alone):",
	  "HOST:PORT or a Unix socket path", set_redis },
	{ "redis-sentinel", 0, "LIST", NULL,
	  "sentinels HOST:PORT,HOST:PORT,... (with\n--redis-master): the master they name",
	  set_sentinel },
	{ "redis-master", 0, "NAME", NULL, "the master's name in Sentinel", set_master },
	{ "redis-sentinel-password", 0, "PW", NULL,
	  "AUTH to the sentinels (or env\nRL_REDIS_SENTINEL_PASSWORD)", set_sentinel_password },
	{ "redis-cluster", 0, "LIST", NULL, "seed nodes of a Redis Cluster", set_cluster },
	{ "redis-shards", 0, "LIST", NULL, "independent servers, a client on one each",
	  set_shards },
	{ "hash-key-file", 0, "FILE", NULL,
	  "the secret client keys are hashed under,\nthe same file on every agent of a fleet",
	  set_hash_key_file },
	{ "redis-user", 0, "NAME", NULL, "ACL user for AUTH", set_user },
	{ "redis-password", 0, "PW", NULL, "AUTH password (or env RL_REDIS_PASSWORD)",
	  set_password },
	{ "redis-password-file", 0, "FILE", NULL,
	  "AUTH password read from FILE, at start and\nat each reload (a systemd credential)",
	  set_password_file },
	{ "redis-sentinel-password-file", 0, "FILE", NULL,
	  "the sentinels' AUTH password, from FILE", set_sentinel_password_file },
	{ "redis-tls", 0, NULL, NULL,
	  "TLS to Redis (and the sentinels), the server\nverified against the system's CAs",
	  set_tls },
	{ "redis-tls-ca", 0, "FILE", NULL, "verify the server against this CA instead",
	  set_tls_ca },
	{ "redis-tls-cert", 0, "FILE", NULL,
	  "client certificate (with --redis-tls-key),\nread again at each reload", set_tls_cert },
	{ "redis-tls-key", 0, "FILE", NULL, "the client certificate's private key",
	  set_tls_key },
	{ "redis-tls-server-name", 0, "NAME", NULL,
	  "the name verified and sent as SNI (default:\nthe host of each address)",
	  set_tls_server_name },
	{ "redis-tls-no-verify", 0, NULL, NULL,
	  "TLS without verifying the server (warned\nabout at every start)", set_tls_no_verify },
	{ "redis-timeout", 0, "D", NULL,
	  "deadline of a decision (default 20ms; a bare\nnumber is milliseconds)", set_timeout },
	{ "redis-batch", 0, "N", NULL, "decisions per Redis call (default 64)", set_batch },
	{ "redis-info-interval", 0, "D", NULL,
	  "each server's memory and key count read this\noften, for the metrics (default 10s)",
	  set_info_interval },
	{ "redis-pipeline", 0, "N", NULL, "Redis calls in flight per worker (default 2)",
	  set_pipeline },
	{ "redis-max-pending", 0, "N", NULL, "decisions waiting per worker (default 10000)",
	  set_max_pending },
	{ "redis-packed", 0, NULL, NULL,
	  "keep token buckets packed in sorted sets:\nless memory, more Redis CPU (docs/redis.md)",
	  set_packed },
	{ "redis-expiry", 0, "MODE", NULL,
	  "the limits' keys without an expiry, for a Redis\nthat evicts them (less memory, less "
	  "Redis CPU):\nauto (default) where the server evicts\n(maxmemory, allkeys-lru or "
	  "allkeys-lfu),\nnever (every server), always (none)\n(docs/redis.md)", set_expiry },
	{ "redis-no-expiry", 0, NULL, NULL, "--redis-expiry never", set_no_expiry },
	{ "redis-packed-sets", 0, "N", NULL,
	  "sorted sets per limit, a power of two from\n1 to 262144 (default 4096): about the\n"
	  "clients per limit / 25 (implies\n--redis-packed)", set_packed_sets },
	{ "no-local-cache", 0, NULL, NULL, "ask Redis even for clients known refused",
	  set_no_local_cache },
	{ "lease", 0, "D", NULL,
	  "lease tokens to busy clients for D (10ms to\n1s, e.g. 100ms): see docs/leases.md; "
	  "default\noff", set_lease },
	{ "lease-share", 0, "PCT", NULL,
	  "a lease's most, in percent of a limit's\ncapacity (1 to 50, default 10)",
	  set_lease_share },
	{ "max-frame-size", 0, "N", "Other:",
	  "own max SPOP frame size (default 16384,\nat least 16380)", set_max_frame },
	{ "max-conns", 0, "N", NULL, "connections per worker (default 10000)", set_max_conns },
	{ "idle-timeout", 0, "D", NULL,
	  "close a connection idle this long (default 5m;\nkeep it above HAProxy's idle "
	  "timeouts)", set_idle_timeout },
	{ "hello-timeout", 0, "D", NULL,
	  "time for a new connection's HELLO, and for any\nframe begun to arrive whole "
	  "(default 5s)", set_hello_timeout },
	{ "mem-max-keys", 0, "N", NULL, "client limits kept in memory (default 1000000)",
	  set_mem_max_keys },
	{ "metrics", 0, "ADDR:PORT", NULL, "serve Prometheus metrics at /metrics\n(ADDR:PORT or unix@PATH)", set_metrics },
	{ "admin", 0, NULL, NULL, "also serve /admin/client, /admin/reset,\n/admin/override, /admin/explain and\n/admin/rules there", set_admin },
	{ "admin-token-file", 0, "FILE", NULL,
	  "/admin/ requests must carry Authorization:\nBearer and the token in FILE (needed "
	  "unless\n--metrics is a loopback address)", set_admin_token_file },
	{ "fixed-answer", 0, NULL, NULL,
	  "benchmarks only: answer every check-rate with\nthe first one's answer, without "
	  "deciding\n(in-memory store)", set_fixed_answer },
	{ "check", 0, NULL, NULL, "validate the options and rules, then exit", set_check },
	{ "explain", 0, NULL, NULL,
	  "print as JSON what the rules give the request\nthat the operands ARG=VALUE... "
	  "describe (tier,\nendpoint, priority, layers, limits), against\na fresh memory "
	  "store, then exit", set_explain },
	{ "verbose", 'v', NULL, NULL, "more logs (repeat for debug)", set_verbose },
	{ "quiet", 'q', NULL, NULL, "errors and warnings only", set_quiet },
	{ "log-format", 0, "FMT", NULL,
	  "text (default) or json: one object a line\nwith time, level, msg and the line's fields",
	  set_log_format },
	{ "version", 0, NULL, NULL, "print the version and exit", set_version },
	{ "help", 'h', NULL, NULL, "this text", set_help },
};

#define NDEFS (sizeof(defs) / sizeof(defs[0]))
/* getopt_long's value of a long option: its index past the letters */
#define LONG_BASE 256
/* the column of the help texts */
#define HELP_COLUMN 28

void options_usage(FILE *out)
{
	fprintf(out, "usage: spoa-ratelimit [options]\n");
	for (size_t i = 0; i < NDEFS; i++) {
		const struct option_def *d = &defs[i];
		const char *p = d->help;
		int n;

		if (d->heading)
			fprintf(out, "  %s\n", d->heading);
		if (d->short_name)
			n = fprintf(out, "  -%c, --%s", d->short_name, d->name);
		else
			n = fprintf(out, "      --%s", d->name);
		if (d->arg)
			n += fprintf(out, " %s", d->arg);
		/* the help on the same line when there is room, else below */
		if (n >= HELP_COLUMN)
			n = fprintf(out, "\n") - 1;
		while (*p) {
			size_t len = strcspn(p, "\n");

			fprintf(out, "%*s%.*s\n", HELP_COLUMN - n, "", (int)len, p);
			n = 0;
			p += len + (p[len] == '\n');
		}
	}
}

void options_defaults(struct options *o)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	const char *pw = getenv("RL_REDIS_PASSWORD");
	const char *spw = getenv("RL_REDIS_SENTINEL_PASSWORD");

	memset(o, 0, sizeof(*o));
	server_config_defaults(&o->server);
	o->server.threads = ncpu > 0 ? (int)ncpu : 1;
	o->log_level = LOG_INFO;
	store_redis_defaults(&o->redis);
	if (spw) {
		snprintf(o->redis.sentinel_password, sizeof(o->redis.sentinel_password), "%s", spw);
		o->sentinel_password_set = 1;
	}
	if (pw) {
		snprintf(o->redis.password, sizeof(o->redis.password), "%s", pw);
		o->password_set = 1;
	}
}

/* The options that go together, checked once all are read. Returns 0, or
 * -1 with err set. */
static int check_together(struct options *o, char *err, size_t errlen)
{
	char where[ADDR_HOST_MAX + 16], why[1024];

	if (o->admin && !o->use_metrics)
		return fail(err, errlen,
			    "--admin serves on the --metrics listener: give --metrics ADDR:PORT");
	if (o->admin_token_file && !o->admin)
		return fail(err, errlen,
			    "--admin-token-file guards the endpoints of --admin: give --admin too");
	/* a Unix socket is reached by whoever may open the file: local */
	if (o->admin && !o->admin_token_file && !o->metrics.path[0] &&
	    !auth_host_is_loopback(o->metrics.host))
		return fail(err, errlen,
			    "--admin on --metrics %s, not a loopback address, would let anyone who "
			    "reaches it reset clients: give --admin-token-file FILE, or listen on "
			    "127.0.0.1", addr_format(&o->metrics, where, sizeof(where)));
	if (o->admin_token_file && auth_token_load(o->admin_token_file, &o->admin_token,
						   &o->admin_token_shared, why, sizeof(why)) < 0)
		return fail(err, errlen, "--admin-token-file %s", why);
	if (!o->listen_tls.cert != !o->listen_tls.key)
		return fail(err, errlen, "--listen-tls-cert and --listen-tls-key go together");
	if (o->listen_tls.ca && !o->listen_tls.cert)
		return fail(err, errlen, "--listen-tls-ca checks HAProxy's certificate over TLS: "
			    "give --listen-tls-cert and --listen-tls-key too");
	if (o->password_arg && o->password_file)
		return fail(err, errlen, "give --redis-password or --redis-password-file, not both");
	if (o->rules_path && (o->nlimits || o->burst || o->identity || o->cost_arg || o->answer))
		return fail(err, errlen,
			    "--limit, --burst, --identity, --cost-arg and --answer describe the rules "
			    "of the command line; with -f, write them in the rules file");
	return 0;
}

enum options_outcome options_parse(struct options *o, int argc, char **argv, char *err,
				   size_t errlen)
{
	struct option longopts[NDEFS + 1];
	char shortopts[2 * NDEFS + 1];
	size_t ns = 0;
	int opt, rc;

	for (size_t i = 0; i < NDEFS; i++) {
		longopts[i] = (struct option){ defs[i].name,
					       defs[i].arg ? required_argument : no_argument, NULL,
					       (int)(LONG_BASE + i) };
		if (defs[i].short_name) {
			shortopts[ns++] = (char)defs[i].short_name;
			if (defs[i].arg)
				shortopts[ns++] = ':';
		}
	}
	longopts[NDEFS] = (struct option){ NULL, 0, NULL, 0 };
	shortopts[ns] = '\0';
	err[0] = '\0';
	while ((opt = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		size_t i = opt >= LONG_BASE ? (size_t)(opt - LONG_BASE) : NDEFS;

		for (size_t k = 0; i == NDEFS && k < NDEFS; k++)
			if (defs[k].short_name && defs[k].short_name == opt)
				i = k;
		if (i >= NDEFS) {
			/* getopt said in one line what it did not know */
			fprintf(stderr, "Try 'spoa-ratelimit --help' for the options.\n");
			return OPTIONS_BAD;
		}
		rc = defs[i].set(o, optarg, err, errlen);
		if (rc == OPTIONS_DONE)
			return OPTIONS_DONE;
		if (rc < 0)
			return OPTIONS_BAD;
	}
	if (o->explain) {
		/* the request's arguments */
		o->explain_argv = argv + optind;
		o->explain_argc = argc - optind;
	} else if (optind < argc) {
		fail(err, errlen, "unexpected argument '%s'", argv[optind]);
		return OPTIONS_BAD;
	}
	return check_together(o, err, errlen) < 0 ? OPTIONS_BAD : OPTIONS_RUN;
}

void options_version(const char *v)
{
	version = v;
}
