#include <errno.h>
#include <ev.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "addr.h"
#include "admin.h"
#include "alloc.h"
#include "auth.h"
#include "decide.h"
#include "http.h"
#include "limit.h"
#include "log.h"
#include "metrics.h"
#include "rules.h"
#include "rules_reader.h"
#include "server.h"
#include "secret.h"
#include "settings.h"
#include "store.h"
#include "store_redis.h"

#define RL_VERSION "0.2.0"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: spoa-ratelimit [options]\n"
		"  -f, --rules FILE          rules file (YAML); SIGHUP reloads it\n"
		"  -l, --listen ADDR:PORT    listen address (default 127.0.0.1:12345;\n"
		"                            IPv6 as [::1]:12345)\n"
		"  -t, --threads N           worker threads (default: number of CPUs)\n"
		"  Without a rules file, one rule \"default\" for every client:\n"
		"      --limit N/P[:ALGO]    a limit (default 100/1m); repeat for several,\n"
		"                            all checked; ALGO: token (default), sliding,\n"
		"                            fixed\n"
		"      --burst N             token bucket capacity (default: N)\n"
		"      --identity LIST       arguments naming the client, first non-empty\n"
		"                            wins (default api_key,user,ip)\n"
		"      --cost-arg NAME       integer argument giving a request's weight\n"
		"  Redis (default: the in-memory store of this agent alone):\n"
		"      --redis ADDR          HOST:PORT or a Unix socket path\n"
		"      --redis-sentinel LIST sentinels HOST:PORT,HOST:PORT,... (with\n"
		"                            --redis-master): the master they name\n"
		"      --redis-master NAME   the master's name in Sentinel\n"
		"      --redis-sentinel-password PW  AUTH to the sentinels (or env\n"
		"                            RL_REDIS_SENTINEL_PASSWORD)\n"
		"      --redis-cluster LIST  seed nodes of a Redis Cluster\n"
		"      --redis-shards LIST   independent servers, a client on one each\n"
		"      --hash-key-file FILE  the secret client keys are hashed under,\n"
		"                            the same file on every agent of a fleet\n"
		"      --redis-user NAME     ACL user for AUTH\n"
		"      --redis-password PW   AUTH password (or env RL_REDIS_PASSWORD)\n"
		"      --redis-timeout MS    deadline of a decision (default 20)\n"
		"      --redis-batch N       decisions per Redis call (default 64)\n"
		"      --redis-pipeline N    Redis calls in flight per worker (default 2)\n"
		"      --redis-max-pending N decisions waiting per worker (default 10000)\n"
		"      --redis-packed        keep token buckets packed in sorted sets:\n"
		"                            less memory, more Redis CPU (docs/redis.md)\n"
		"      --redis-expiry MODE   the limits' keys without an expiry, for a Redis\n"
		"                            that evicts them (less memory, less Redis CPU):\n"
		"                            auto (default) where the server evicts\n"
		"                            (maxmemory, allkeys-lru or allkeys-lfu),\n"
		"                            never (every server), always (none)\n"
		"                            (docs/redis.md)\n"
		"      --redis-no-expiry     --redis-expiry never\n"
		"      --redis-packed-sets N sorted sets per limit, a power of two from\n"
		"                            1 to 262144 (default 4096): about the\n"
		"                            clients per limit / 25 (implies\n"
		"                            --redis-packed)\n"
		"      --no-local-cache      ask Redis even for clients known refused\n"
		"      --lease D             lease tokens to busy clients for D (10ms to\n"
		"                            1s, e.g. 100ms): see docs/leases.md; default\n"
		"                            off\n"
		"      --lease-share PCT     a lease's most, in percent of a limit's\n"
		"                            capacity (1 to 50, default 10)\n"
		"  Other:\n"
		"      --max-frame-size N    own max SPOP frame size (default 16384,\n"
		"                            at least 16380)\n"
		"      --max-conns N         connections per worker (default 10000)\n"
		"      --idle-timeout D      close a connection idle this long (default 5m;\n"
		"                            keep it above HAProxy's idle timeouts)\n"
		"      --hello-timeout D     time for a new connection's HELLO, and for any\n"
		"                            frame begun to arrive whole (default 5s)\n"
		"      --mem-max-keys N      client limits kept in memory (default 1000000)\n"
		"      --metrics ADDR:PORT   serve Prometheus metrics at /metrics\n"
		"      --admin               also serve /admin/client and /admin/reset there\n"
		"      --admin-token-file FILE\n"
		"                            /admin/ requests must carry Authorization:\n"
		"                            Bearer and the token in FILE (needed unless\n"
		"                            --metrics is a loopback address)\n"
		"      --fixed-answer        benchmarks only: answer every check-rate with\n"
		"                            the first one's answer, without deciding\n"
		"                            (in-memory store)\n"
		"      --check               validate the options and rules, then exit\n"
		"  -v, --verbose             more logs (repeat for debug)\n"
		"  -q, --quiet               errors and warnings only\n"
		"      --version             print the version and exit\n"
		"  -h, --help                this text\n");
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

/* Names given on the command line end up in generated YAML: keep them to
 * the characters of argument names. */
static int safe_name(const char *s, size_t max)
{
	size_t n = strlen(s);

	return n > 0 && n < max &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == n;
}

enum {
	OPT_LIMIT = 256,
	OPT_BURST,
	OPT_IDENTITY,
	OPT_MAX_FRAME,
	OPT_MAX_CONNS,
	OPT_IDLE_TIMEOUT,
	OPT_HELLO_TIMEOUT,
	OPT_MEM_KEYS,
	OPT_CHECK,
	OPT_VERSION,
	OPT_COST_ARG,
	OPT_REDIS,
	OPT_HASH_KEY_FILE,
	OPT_REDIS_SENTINEL,
	OPT_REDIS_MASTER,
	OPT_REDIS_SENTINEL_PASSWORD,
	OPT_REDIS_CLUSTER,
	OPT_REDIS_SHARDS,
	OPT_REDIS_USER,
	OPT_REDIS_PASSWORD,
	OPT_REDIS_TIMEOUT,
	OPT_REDIS_BATCH,
	OPT_REDIS_PIPELINE,
	OPT_REDIS_PENDING,
	OPT_NO_CACHE,
	OPT_REDIS_PACKED,
	OPT_REDIS_PACKED_SETS,
	OPT_REDIS_NO_EXPIRY,
	OPT_REDIS_EXPIRY,
	OPT_FIXED_ANSWER,
	OPT_LEASE,
	OPT_LEASE_SHARE,
	OPT_METRICS,
	OPT_ADMIN,
	OPT_ADMIN_TOKEN_FILE,
};

/* What the command line said, before the rules file is read. */
struct cli {
	const char *rules_path;
	char limits[LIMIT_RULE_MAX][64];
	const char *algos[LIMIT_RULE_MAX];
	int nlimits;
	long long burst;
	const char *identity;
	const char *cost_arg;
	int listen_set, threads_set, redis_set, timeout_set, user_set, password_set;
	int master_set, sentinel_password_set;
	const char *hash_key_file;
	int check;
	bool packed;             /* --redis-packed */
	unsigned packed_bits;    /* --redis-packed-sets: log2 of it */
	enum store_expiry expiry; /* --redis-expiry */
	int use_metrics;
	struct addr metrics;
	const char *admin_token_file;
};

static struct ev_loop *main_loop;
static struct server srv;
static struct cli cli;
static struct auth_token admin_token;
static uint64_t generation; /* of the rules: 1 at start, +1 per reload */
static uint8_t hash_key[16];  /* client keys are hashed under it */

/* The rules the command line describes, as a rules file would: the same
 * loader validates both. */
static struct rules *rules_from_cli(char *err, size_t errlen)
{
	char yaml[8192];
	size_t n = 0;

	if (cli.nlimits == 0 && !cli.identity && !cli.cost_arg && !cli.burst)
		return rules_default();
	if (cli.nlimits == 0) {
		snprintf(cli.limits[0], sizeof(cli.limits[0]), "100/1m");
		cli.algos[0] = "token";
		cli.nlimits = 1;
	}
	n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "limits:\n");
	for (int i = 0; i < cli.nlimits; i++) {
		n += (size_t)snprintf(yaml + n, sizeof(yaml) - n,
				      "  - { rate: \"%s\", algorithm: %s", cli.limits[i],
				      cli.algos[i]);
		if (cli.burst && strcmp(cli.algos[i], "token") == 0)
			n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, ", burst: %lld",
					      cli.burst);
		n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, " }\n");
	}
	if (cli.identity) {
		char list[512], *tok, *save = NULL;

		snprintf(list, sizeof(list), "%s", cli.identity);
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
	if (cli.cost_arg) {
		if (!safe_name(cli.cost_arg, RULES_NAME_MAX)) {
			snprintf(err, errlen, "--cost-arg: bad argument name '%s'", cli.cost_arg);
			return NULL;
		}
		n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "cost_argument: %s\n",
				      cli.cost_arg);
	}
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
	if (cli.rules_path)
		return rules_reader_load(cli.rules_path, RULES_READER_TIMEOUT, err, errlen);
	return rules_from_cli(err, errlen);
}

/* A reload reads the file on a thread of its own (rules_reader.h), so that
 * the main thread, which serves /metrics and takes signals, never waits
 * for a file: the result comes back through reload_done_w, or the reload
 * fails after RULES_READER_TIMEOUT. One at a time; a SIGHUP meanwhile
 * reads the file once more after it. */
static struct rules_reader *reload_rr;
static int reload_again;
static ev_async reload_done_w;
static ev_timer reload_timeout_w;

static void reload_failed(const char *err)
{
	log_err("reload failed, the rules in force stay: %s", err);
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
	reload_rr = rules_reader_start(cli.rules_path, reload_ready, NULL, err, sizeof(err));
	if (!reload_rr) {
		reload_failed(err);
		return;
	}
	ev_timer_set(&reload_timeout_w, RULES_READER_TIMEOUT, 0.);
	ev_timer_start(main_loop, &reload_timeout_w);
}

static void reload_apply(struct rules *r)
{
	const struct settings *old;

	old = rules_settings(atomic_load(&srv.rules));
	if (!settings_equal(old, rules_settings(r)))
		log_warn("reload: listen, threads and store settings take effect at restart only");
	if (rules_any_lease(r) && !srv.store->ops->shared)
		log_warn("reload: lease in the rules is ignored: leases are taken from Redis, and "
			 "this agent keeps its buckets in memory");
	rules_set_gen(r, ++generation);
	rules_set_secret(r, hash_key);
	server_swap_rules(&srv, r);
	STAT_INC(srv.reloads);
	log_info("reloaded %s: %zu rule(s)", cli.rules_path, rules_count(r));
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
	if (reload_again)
		reload_start();
}

static void on_reload_timeout(struct ev_loop *loop, ev_timer *t, int revents)
{
	char err[1024];

	if (!reload_rr)
		return;
	rules_reader_abandon(reload_rr);
	reload_rr = NULL;
	snprintf(err, sizeof(err), "%s: not read after %.0f s (a mount that does not answer?)",
		 cli.rules_path, RULES_READER_TIMEOUT);
	reload_failed(err);
	if (reload_again)
		reload_start();
}

static void on_signal(struct ev_loop *loop, ev_signal *s, int revents)
{
	if (s->signum != SIGHUP) {
		log_info("signal %d: stopping", s->signum);
		ev_break(loop, EVBREAK_ALL);
		return;
	}
	if (!cli.rules_path) {
		log_info("SIGHUP: no rules file to reload");
		return;
	}
	if (reload_rr) {
		log_info("SIGHUP: a reload is under way; the file is read again after it");
		reload_again = 1;
		return;
	}
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

static void serve_admin(struct http_req *req, void *arg)
{
	admin_serve(&srv, main_loop, cli.admin_token_file ? &admin_token : NULL, req);
}

/* The --metrics listener: /metrics, /healthz and, with --admin, /admin/.
 * NULL after logging why. */
static struct http_server *ops_start(void)
{
	struct http_server *h = http_new(main_loop);
	char err[512], where[ADDR_HOST_MAX + 16];

	if (!h || http_route(h, "GET", "/metrics", serve_metrics, NULL) < 0 ||
	    http_route(h, "GET", "/healthz", serve_healthz, NULL) < 0 ||
	    (srv.admin && (http_route(h, "GET", "/admin/", serve_admin, NULL) < 0 ||
			   http_route(h, "POST", "/admin/", serve_admin, NULL) < 0 ||
			   http_route(h, "PUT", "/admin/", serve_admin, NULL) < 0 ||
			   http_route(h, "DELETE", "/admin/", serve_admin, NULL) < 0))) {
		log_err("metrics: out of memory");
		http_free(h);
		return NULL;
	}
	if (http_listen(h, &cli.metrics, err, sizeof(err)) < 0) {
		log_err("metrics: %s", err);
		http_free(h);
		return NULL;
	}
	log_info("metrics on http://%s/metrics", addr_format(&cli.metrics, where, sizeof(where)));
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
	const char *path = cli.hash_key_file ? cli.hash_key_file
			   : st->has_hash_key_file ? st->hash_key_file : NULL;
	char secret[SECRET_MAX], err[512];
	bool loose;
	long n;

	if (!path) {
		if (use_redis) {
			memcpy(hash_key, rules_secret(rules), sizeof(hash_key));
			if (!cli.check)
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
static int apply_settings(const struct settings *st, struct redis_config *rcfg,
			  int *use_redis)
{
	if (st->has_listen && !cli.listen_set)
		srv.cfg.listen = st->listen;
	if (st->has_threads && !cli.threads_set)
		srv.cfg.threads = st->threads;
	if (!cli.redis_set && st->has_store && st->store != SETTINGS_STORE_MEMORY) {
		/* addresses were validated when the file was read */
		rcfg->addr = st->address;
		memcpy(rcfg->nodes, st->nodes, sizeof(rcfg->nodes));
		rcfg->nnodes = st->nnodes;
		rcfg->topology = st->store == SETTINGS_STORE_SENTINEL ? REDIS_SENTINEL
				 : st->store == SETTINGS_STORE_CLUSTER ? REDIS_CLUSTER
				 : st->store == SETTINGS_STORE_SHARDS ? REDIS_SHARDS
									: REDIS_STANDALONE;
		*use_redis = 1;
	}
	if (st->has_master && !cli.master_set)
		snprintf(rcfg->master, sizeof(rcfg->master), "%s", st->master);
	if (st->has_sentinel_password && !cli.sentinel_password_set)
		snprintf(rcfg->sentinel_password, sizeof(rcfg->sentinel_password), "%s",
			 st->sentinel_password);
	if (st->has_timeout && !cli.timeout_set)
		rcfg->timeout = st->timeout_ms / 1000.;
	if (st->has_user && !cli.user_set)
		snprintf(rcfg->user, sizeof(rcfg->user), "%s", st->user);
	if (st->has_password && !cli.password_set)
		snprintf(rcfg->password, sizeof(rcfg->password), "%s", st->password);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "rules", required_argument, NULL, 'f' },
		{ "listen", required_argument, NULL, 'l' },
		{ "threads", required_argument, NULL, 't' },
		{ "limit", required_argument, NULL, OPT_LIMIT },
		{ "burst", required_argument, NULL, OPT_BURST },
		{ "identity", required_argument, NULL, OPT_IDENTITY },
		{ "cost-arg", required_argument, NULL, OPT_COST_ARG },
		{ "max-frame-size", required_argument, NULL, OPT_MAX_FRAME },
		{ "max-conns", required_argument, NULL, OPT_MAX_CONNS },
		{ "idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT },
		{ "hello-timeout", required_argument, NULL, OPT_HELLO_TIMEOUT },
		{ "mem-max-keys", required_argument, NULL, OPT_MEM_KEYS },
		{ "redis", required_argument, NULL, OPT_REDIS },
		{ "hash-key-file", required_argument, NULL, OPT_HASH_KEY_FILE },
		{ "redis-sentinel", required_argument, NULL, OPT_REDIS_SENTINEL },
		{ "redis-master", required_argument, NULL, OPT_REDIS_MASTER },
		{ "redis-sentinel-password", required_argument, NULL, OPT_REDIS_SENTINEL_PASSWORD },
		{ "redis-cluster", required_argument, NULL, OPT_REDIS_CLUSTER },
		{ "redis-shards", required_argument, NULL, OPT_REDIS_SHARDS },
		{ "redis-user", required_argument, NULL, OPT_REDIS_USER },
		{ "redis-password", required_argument, NULL, OPT_REDIS_PASSWORD },
		{ "redis-timeout", required_argument, NULL, OPT_REDIS_TIMEOUT },
		{ "redis-batch", required_argument, NULL, OPT_REDIS_BATCH },
		{ "redis-pipeline", required_argument, NULL, OPT_REDIS_PIPELINE },
		{ "redis-max-pending", required_argument, NULL, OPT_REDIS_PENDING },
		{ "no-local-cache", no_argument, NULL, OPT_NO_CACHE },
		{ "redis-packed", no_argument, NULL, OPT_REDIS_PACKED },
		{ "redis-packed-sets", required_argument, NULL, OPT_REDIS_PACKED_SETS },
		{ "redis-no-expiry", no_argument, NULL, OPT_REDIS_NO_EXPIRY },
		{ "redis-expiry", required_argument, NULL, OPT_REDIS_EXPIRY },
		{ "lease", required_argument, NULL, OPT_LEASE },
		{ "lease-share", required_argument, NULL, OPT_LEASE_SHARE },
		{ "metrics", required_argument, NULL, OPT_METRICS },
		{ "admin", no_argument, NULL, OPT_ADMIN },
		{ "admin-token-file", required_argument, NULL, OPT_ADMIN_TOKEN_FILE },
		{ "fixed-answer", no_argument, NULL, OPT_FIXED_ANSWER },
		{ "check", no_argument, NULL, OPT_CHECK },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static struct redis_config rcfg;
	const char *env_pw = getenv("RL_REDIS_PASSWORD");
	int use_redis = 0;
	struct http_server *ops = NULL;
	struct rules *rules;
	char err[1024], layout_log[64] = "";
	long long num;
	int opt, level = LOG_INFO;
	bool token_shared = false;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	ev_signal sig_int, sig_term, sig_hup;
	ev_timer collect, log_reports;

	server_config_defaults(&srv.cfg);
	srv.cfg.threads = ncpu > 0 ? (int)ncpu : 1;
	srv.lfd = -1;
	cli.packed_bits = STORE_KEY_PACKED_BITS_DEFAULT;
	store_redis_defaults(&rcfg);
	if (getenv("RL_REDIS_SENTINEL_PASSWORD")) {
		snprintf(rcfg.sentinel_password, sizeof(rcfg.sentinel_password), "%s",
			 getenv("RL_REDIS_SENTINEL_PASSWORD"));
		cli.sentinel_password_set = 1;
	}
	if (env_pw) {
		snprintf(rcfg.password, sizeof(rcfg.password), "%s", env_pw);
		cli.password_set = 1;
	}

#define BAD(...)                                                               \
	do {                                                                  \
		fprintf(stderr, "spoa-ratelimit: " __VA_ARGS__);              \
		fputc('\n', stderr);                                          \
		return 2;                                                     \
	} while (0)

	while ((opt = getopt_long(argc, argv, "f:l:t:vqh", opts, NULL)) != -1) {
		switch (opt) {
		case 'f':
			cli.rules_path = optarg;
			break;
		case 'l': {
			struct addr a;

			if (addr_parse(optarg, ADDR_PORT0, &a) < 0)
				BAD("--listen: expected ADDR:PORT, got '%s'", optarg);
			srv.cfg.listen = a;
			cli.listen_set = 1;
			break;
		}
		case 't':
			if (parse_num(optarg, 1, 256, &num) < 0)
				BAD("--threads: expected 1 to 256, got '%s'", optarg);
			srv.cfg.threads = (int)num;
			cli.threads_set = 1;
			break;
		case OPT_LIMIT: {
			char *colon;
			struct limit_spec spec;

			if (cli.nlimits == LIMIT_RULE_MAX)
				BAD("at most %d limits", LIMIT_RULE_MAX);
			if (strlen(optarg) >= sizeof(cli.limits[0]))
				BAD("--limit '%s': too long", optarg);
			snprintf(cli.limits[cli.nlimits], sizeof(cli.limits[0]), "%s", optarg);
			colon = strchr(cli.limits[cli.nlimits], ':');
			cli.algos[cli.nlimits] = "token";
			if (colon) {
				*colon++ = '\0';
				static const char *const names[] = { "token", "sliding", "fixed", "log" };
				size_t k = 0;

				while (k < 4 && strcmp(colon, names[k]) != 0)
					k++;
				if (k == 4)
					BAD("--limit '%s': unknown algorithm '%s' (token, sliding, fixed, log)",
					    optarg, colon);
				cli.algos[cli.nlimits] = names[k];
			}
			if (limit_parse(cli.limits[cli.nlimits], &spec, err, sizeof(err)) < 0)
				BAD("--limit '%s': %s", optarg, err);
			if (strcmp(cli.algos[cli.nlimits], "log") == 0 &&
			    spec.quota > LIMIT_LOG_QUOTA_MAX)
				BAD("--limit '%s': a log's quota is at most %d (it keeps every request "
				    "of its period; sliding above)", optarg, LIMIT_LOG_QUOTA_MAX);
			cli.nlimits++;
			break;
		}
		case OPT_BURST:
			if (parse_num(optarg, 1, 1LL << 40, &cli.burst) < 0)
				BAD("--burst: expected a positive number, got '%s'", optarg);
			break;
		case OPT_IDENTITY:
			cli.identity = optarg;
			break;
		case OPT_COST_ARG:
			cli.cost_arg = optarg;
			break;
		case OPT_MAX_FRAME:
			if (parse_num(optarg, 16380, 16 * 1024 * 1024, &num) < 0)
				BAD("--max-frame-size: expected 16380 to 16777216, got '%s'", optarg);
			srv.cfg.conn.max_frame_size = (uint32_t)num;
			break;
		case OPT_MAX_CONNS:
			if (parse_num(optarg, 1, 1000000, &num) < 0)
				BAD("--max-conns: expected 1 to 1000000, got '%s'", optarg);
			srv.cfg.conn.max_conns = (int)num;
			break;
		case OPT_IDLE_TIMEOUT:
			if (parse_seconds(optarg, 0.1, 86400., &srv.cfg.conn.idle_timeout) < 0)
				BAD("--idle-timeout: expected a duration from 100ms to 1d (30s, 5m), got '%s'",
				    optarg);
			break;
		case OPT_HELLO_TIMEOUT:
			if (parse_seconds(optarg, 0.1, 3600., &srv.cfg.conn.hello_timeout) < 0)
				BAD("--hello-timeout: expected a duration from 100ms to 1h (2s, 500ms), got '%s'",
				    optarg);
			break;
		case OPT_MEM_KEYS:
			if (parse_num(optarg, 1, 1LL << 32, &num) < 0)
				BAD("--mem-max-keys: expected a positive number, got '%s'", optarg);
			srv.cfg.mem_max_keys = (size_t)num;
			break;
		case OPT_REDIS:
			if (store_redis_set_addr(&rcfg, optarg) < 0)
				BAD("--redis: expected HOST:PORT or a socket path, got '%s'", optarg);
			if (cli.redis_set)
				BAD("give one of --redis, --redis-sentinel, --redis-cluster, --redis-shards");
			use_redis = 1;
			cli.redis_set = 1;
			break;
		case OPT_REDIS_SENTINEL:
		case OPT_REDIS_CLUSTER:
		case OPT_REDIS_SHARDS:
			if (cli.redis_set)
				BAD("give one of --redis, --redis-sentinel, --redis-cluster, --redis-shards");
			if (store_redis_set_nodes(&rcfg, optarg) < 0)
				BAD("%s: expected HOST:PORT,HOST:PORT,... (at most %d, each once), got '%s'",
				    opt == OPT_REDIS_SENTINEL ? "--redis-sentinel"
				    : opt == OPT_REDIS_CLUSTER ? "--redis-cluster" : "--redis-shards",
				    REDIS_NODES_MAX, optarg);
			rcfg.topology = opt == OPT_REDIS_SENTINEL ? REDIS_SENTINEL
					: opt == OPT_REDIS_CLUSTER ? REDIS_CLUSTER : REDIS_SHARDS;
			use_redis = 1;
			cli.redis_set = 1;
			break;
		case OPT_HASH_KEY_FILE:
			cli.hash_key_file = optarg;
			break;
		case OPT_REDIS_MASTER:
			if (!*optarg || strlen(optarg) >= sizeof(rcfg.master))
				BAD("--redis-master: expected a name of 1 to %zu bytes",
				    sizeof(rcfg.master) - 1);
			snprintf(rcfg.master, sizeof(rcfg.master), "%s", optarg);
			cli.master_set = 1;
			break;
		case OPT_REDIS_SENTINEL_PASSWORD:
			snprintf(rcfg.sentinel_password, sizeof(rcfg.sentinel_password), "%s", optarg);
			cli.sentinel_password_set = 1;
			break;
		case OPT_REDIS_USER:
			snprintf(rcfg.user, sizeof(rcfg.user), "%s", optarg);
			cli.user_set = 1;
			break;
		case OPT_REDIS_PASSWORD:
			snprintf(rcfg.password, sizeof(rcfg.password), "%s", optarg);
			cli.password_set = 1;
			break;
		case OPT_REDIS_TIMEOUT:
			if (parse_num(optarg, 1, 60000, &num) < 0)
				BAD("--redis-timeout: expected 1 to 60000 ms, got '%s'", optarg);
			rcfg.timeout = (double)num / 1000.;
			cli.timeout_set = 1;
			break;
		case OPT_REDIS_BATCH:
			if (parse_num(optarg, 1, 1024, &num) < 0)
				BAD("--redis-batch: expected 1 to 1024, got '%s'", optarg);
			rcfg.batch_max = (int)num;
			break;
		case OPT_REDIS_PIPELINE:
			if (parse_num(optarg, 1, 1024, &num) < 0)
				BAD("--redis-pipeline: expected 1 to 1024, got '%s'", optarg);
			rcfg.pipeline = (int)num;
			break;
		case OPT_REDIS_PENDING:
			if (parse_num(optarg, 1, 1000000, &num) < 0)
				BAD("--redis-max-pending: expected 1 to 1000000, got '%s'", optarg);
			rcfg.max_pending = (int)num;
			break;
		case OPT_NO_CACHE:
			rcfg.local_cache = 0;
			break;
		case OPT_REDIS_PACKED:
			cli.packed = true;
			break;
		case OPT_REDIS_NO_EXPIRY:
			cli.expiry = STORE_EXPIRY_NEVER;
			break;
		case OPT_REDIS_EXPIRY:
			if (!strcmp(optarg, "auto"))
				cli.expiry = STORE_EXPIRY_AUTO;
			else if (!strcmp(optarg, "always"))
				cli.expiry = STORE_EXPIRY_ALWAYS;
			else if (!strcmp(optarg, "never"))
				cli.expiry = STORE_EXPIRY_NEVER;
			else
				BAD("--redis-expiry: auto, always or never, not '%s'", optarg);
			break;
		case OPT_REDIS_PACKED_SETS:
			if (parse_num(optarg, 1, 1 << STORE_KEY_PACKED_BITS_MAX, &num) < 0 ||
			    (num & (num - 1)))
				BAD("--redis-packed-sets: expected a power of two from 1 to %d, got '%s'",
				    1 << STORE_KEY_PACKED_BITS_MAX, optarg);
			cli.packed = true;
			for (cli.packed_bits = 0; (1LL << cli.packed_bits) < num; cli.packed_bits++)
				;
			break;
		case OPT_FIXED_ANSWER:
			srv.cfg.fixed_answer = true;
			break;
		case OPT_LEASE: {
			double d;

			if (parse_seconds(optarg, RULES_LEASE_MIN_US / 1e6,
					  RULES_LEASE_MAX_US / 1e6, &d) < 0)
				BAD("--lease: expected a duration from 10ms to 1s, got '%s'", optarg);
			rcfg.lease_us = (int64_t)(d * 1e6 + 0.5);
			break;
		}
		case OPT_LEASE_SHARE:
			if (parse_num(optarg, 1, RULES_LEASE_SHARE_MAX, &num) < 0)
				BAD("--lease-share: expected 1 to %d (percent), got '%s'",
				    RULES_LEASE_SHARE_MAX, optarg);
			rcfg.lease_share = (unsigned)num;
			break;
		case OPT_METRICS:
			if (addr_parse(optarg, 0, &cli.metrics) < 0)
				BAD("--metrics: expected ADDR:PORT, got '%s'", optarg);
			cli.use_metrics = 1;
			break;
		case OPT_ADMIN:
			srv.admin = 1;
			break;
		case OPT_ADMIN_TOKEN_FILE:
			cli.admin_token_file = optarg;
			break;
		case OPT_CHECK:
			cli.check = 1;
			break;
		case 'v':
			level = level < LOG_INFO ? LOG_INFO : LOG_DEBUG;
			break;
		case 'q':
			level = LOG_WARN;
			break;
		case OPT_VERSION:
			printf("spoa-ratelimit %s\n", RL_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc)
		BAD("unexpected argument '%s'", argv[optind]);
	if (srv.admin && !cli.use_metrics)
		BAD("--admin serves on the --metrics listener: give --metrics ADDR:PORT");
	if (cli.admin_token_file && !srv.admin)
		BAD("--admin-token-file guards the endpoints of --admin: give --admin too");
	if (srv.admin && !cli.admin_token_file && !auth_host_is_loopback(cli.metrics.host))
		BAD("--admin on --metrics %s, not a loopback address, would let anyone who reaches "
		    "it reset clients: give --admin-token-file FILE, or listen on 127.0.0.1",
		    addr_format(&cli.metrics, err, sizeof(err)));
	if (cli.admin_token_file && auth_token_load(cli.admin_token_file, &admin_token,
						    &token_shared, err, sizeof(err)) < 0)
		BAD("--admin-token-file %s", err);
	if (cli.rules_path && (cli.nlimits || cli.burst || cli.identity || cli.cost_arg))
		BAD("--limit, --burst, --identity and --cost-arg describe the rules of the "
		    "command line; with -f, write them in the rules file");
	log_set_level(level);
	if (token_shared)
		log_warn("--admin-token-file %s can be read or written by group or others: "
			 "chmod 600 it", cli.admin_token_file);

	rules = load_rules(err, sizeof(err));
	if (!rules) {
		fprintf(stderr, "spoa-ratelimit: %s\n", err);
		return cli.check ? 1 : 2;
	}
	if (apply_settings(rules_settings(rules), &rcfg, &use_redis) < 0) {
		rules_release(rules);
		return cli.check ? 1 : 2;
	}
	if (!use_redis && (rcfg.lease_us || rules_any_lease(rules))) {
		fprintf(stderr, "spoa-ratelimit: %s: leases are taken from Redis: give a Redis store\n",
			rcfg.lease_us ? "--lease" : "lease (rules file)");
		rules_release(rules);
		return cli.check ? 1 : 2;
	}
	if (!use_redis && cli.packed) {
		fprintf(stderr, "spoa-ratelimit: --redis-packed: with a Redis store only\n");
		rules_release(rules);
		return cli.check ? 1 : 2;
	}
	if ((!use_redis || cli.packed) && cli.expiry == STORE_EXPIRY_NEVER) {
		fprintf(stderr, "spoa-ratelimit: --redis-expiry never: %s\n",
			use_redis ? "packed buckets have their sets' expiry: one or the other"
				  : "with a Redis store only");
		rules_release(rules);
		return cli.check ? 1 : 2;
	}
	if (use_redis && srv.cfg.fixed_answer) {
		fprintf(stderr, "spoa-ratelimit: --fixed-answer: with the in-memory store only\n");
		rules_release(rules);
		return cli.check ? 1 : 2;
	}
	if (use_redis && store_redis_check(&rcfg)) {
		fprintf(stderr, "spoa-ratelimit: %s\n", store_redis_check(&rcfg));
		rules_release(rules);
		return cli.check ? 1 : 2;
	}
	if (set_hash_key(rules, use_redis) < 0) {
		rules_release(rules);
		return cli.check ? 1 : 2;
	}
	if (cli.check) {
		printf("%s: ok, %zu rule(s)\n", cli.rules_path ? cli.rules_path : "command line",
		       rules_count(rules));
		rules_release(rules);
		return 0;
	}
	rules_set_gen(rules, ++generation);
	rules_set_secret(rules, hash_key);
	atomic_init(&srv.rules, rules);

	/* (before the workers name any key) */
	store_key_packing(cli.packed, cli.packed_bits);
	/* packed buckets: their sets' expiry is how their members go */
	store_key_expiry(cli.packed && cli.expiry == STORE_EXPIRY_AUTO ? STORE_EXPIRY_ALWAYS
								      : cli.expiry);
	signal(SIGPIPE, SIG_IGN);
	srv.store = use_redis ? store_redis_new(&rcfg, srv.cfg.mem_max_keys)
			      : store_memory_new(srv.cfg.mem_max_keys);
	if (!srv.store) {
		log_err("cannot allocate the store");
		return 1;
	}
	main_loop = ev_default_loop(EVFLAG_AUTO);
	/* Signals are caught from here on (and handled once the loop runs):
	 * whoever sends SIGTERM as soon as "listening on" is logged finds the
	 * agent stopping cleanly, not killed by the default action. */
	ev_signal_init(&sig_int, on_signal, SIGINT);
	ev_signal_init(&sig_term, on_signal, SIGTERM);
	ev_signal_init(&sig_hup, on_signal, SIGHUP);
	ev_signal_start(main_loop, &sig_int);
	ev_signal_start(main_loop, &sig_term);
	ev_signal_start(main_loop, &sig_hup);
	ev_async_init(&reload_done_w, on_reload_done);
	ev_async_start(main_loop, &reload_done_w);
	ev_timer_init(&reload_timeout_w, on_reload_timeout, RULES_READER_TIMEOUT, 0.);
	/* Metrics listen before the SPOP port does, so whoever waits for the
	 * "listening on" line finds both ready. */
	server_raise_fd_limit(); /* the operations listener's cap follows it */
	if (cli.use_metrics) {
		ops = ops_start();
		if (!ops)
			return 1;
	}
	if (server_listen(&srv) < 0)
		return 1;
	ev_timer_init(&collect, on_collect, 0.5, 0.5);
	ev_timer_start(main_loop, &collect);
	ev_timer_init(&log_reports, on_log_reports, 1., 1.);
	ev_timer_start(main_loop, &log_reports);
	if (server_start(&srv) < 0) {
		server_stop(&srv);
		return 1;
	}
	if (cli.packed)
		snprintf(layout_log, sizeof(layout_log), ", packed buckets (%u sets per limit)",
			 1U << cli.packed_bits);
	else if (cli.expiry == STORE_EXPIRY_NEVER)
		snprintf(layout_log, sizeof(layout_log), ", keys without an expiry");
	else if (use_redis && cli.expiry == STORE_EXPIRY_AUTO)
		snprintf(layout_log, sizeof(layout_log),
			 ", keys without an expiry where the server evicts them");
	log_info("%d worker thread(s), %zu rule(s) from %s, %s store%s%s%s", srv.cfg.threads,
		 rules_count(rules), rules_source(rules), use_redis ? "Redis" : "in-memory",
		 use_redis ? ", " : "", use_redis ? store_redis_topology_name(rcfg.topology) : "",
		 layout_log);
	ev_run(main_loop, 0);
	if (reload_rr)
		rules_reader_abandon(reload_rr);
	http_free(ops);
	server_stop(&srv);
	rules_release(atomic_load(&srv.rules));
	store_free(srv.store);
	log_report_suppressed(log_now_ms(), 1);
	log_info("stopped");
	return 0;
}
