#include <errno.h>
#include <ev.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decide.h"
#include "log.h"
#include "memstore.h"
#include "metrics.h"
#include "server.h"

#define RL_VERSION "0.1.0"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: spoa-ratelimit [options]\n"
		"  -l, --listen ADDR:PORT    listen address (default 127.0.0.1:12345;\n"
		"                            IPv6 as [::1]:12345)\n"
		"  -t, --threads N           worker threads (default: number of CPUs)\n"
		"      --limit N/P[:ALGO]    a limit of every client (default 100/1m);\n"
		"                            repeat for several limits, all checked;\n"
		"                            ALGO: token (default), sliding, fixed\n"
		"      --burst N             token bucket capacity (default: N)\n"
		"      --cost-arg NAME       integer argument giving a request's weight\n"
		"  Redis (default: the in-memory store of this agent alone):\n"
		"      --redis ADDR          HOST:PORT or a Unix socket path\n"
		"      --redis-user NAME     ACL user for AUTH\n"
		"      --redis-password PW   AUTH password (or env RL_REDIS_PASSWORD)\n"
		"      --redis-timeout MS    deadline of a decision (default 20)\n"
		"      --redis-batch N       decisions per script call (default 64)\n"
		"      --redis-max-pending N decisions waiting per worker (default 10000)\n"
		"      --redis-encoding E    msgpack (default) or plain script arguments\n"
		"      --no-local-cache      ask Redis even for clients known refused\n"
		"      --identity LIST       arguments naming the client, first non-empty\n"
		"                            wins (default api_key,user,ip)\n"
		"      --max-frame-size N    own max SPOP frame size (default 16384,\n"
		"                            at least 16380)\n"
		"      --max-conns N         connections per worker (default 10000)\n"
		"      --mem-max-keys N      clients tracked in memory (default 1000000)\n"
		"      --metrics ADDR:PORT   serve Prometheus metrics at /metrics\n"
		"      --check               validate the options and exit\n"
		"  -v, --verbose             more logs (repeat for debug)\n"
		"  -q, --quiet               errors and warnings only\n"
		"      --version             print the version and exit\n"
		"  -h, --help                this text\n");
}

static int parse_listen(const char *s, struct server_config *cfg)
{
	const char *colon;
	size_t hlen;

	if (s[0] == '[') {
		const char *rb = strchr(s, ']');

		if (!rb || rb[1] != ':')
			return -1;
		hlen = (size_t)(rb - s - 1);
		if (hlen == 0 || hlen >= sizeof(cfg->host))
			return -1;
		memcpy(cfg->host, s + 1, hlen);
		cfg->host[hlen] = '\0';
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -1;
		hlen = (size_t)(colon - s);
		if (hlen == 0 || hlen >= sizeof(cfg->host))
			return -1;
		memcpy(cfg->host, s, hlen);
		cfg->host[hlen] = '\0';
	}
	colon++;
	if (*colon == '\0' || strlen(colon) >= sizeof(cfg->port) ||
	    strspn(colon, "0123456789") != strlen(colon) || atoi(colon) < 1 ||
	    atoi(colon) > 65535)
		return -1;
	snprintf(cfg->port, sizeof(cfg->port), "%s", colon);
	return 0;
}

/* Parses a positive decimal integer within [min, max]. Returns 0 or -1. */
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

enum {
	OPT_LIMIT = 256,
	OPT_BURST,
	OPT_IDENTITY,
	OPT_MAX_FRAME,
	OPT_MAX_CONNS,
	OPT_MEM_KEYS,
	OPT_CHECK,
	OPT_VERSION,
	OPT_COST_ARG,
	OPT_REDIS,
	OPT_REDIS_USER,
	OPT_REDIS_PASSWORD,
	OPT_REDIS_TIMEOUT,
	OPT_REDIS_BATCH,
	OPT_REDIS_PENDING,
	OPT_REDIS_ENCODING,
	OPT_NO_CACHE,
	OPT_METRICS,
};

/* Parses "N/P" with an optional ":token", ":sliding" or ":fixed". */
static int parse_limit_arg(const char *arg, struct limit_spec *out, char *err, size_t errlen)
{
	char buf[128];
	char *colon;

	if (strlen(arg) >= sizeof(buf)) {
		snprintf(err, errlen, "too long");
		return -1;
	}
	snprintf(buf, sizeof(buf), "%s", arg);
	colon = strchr(buf, ':');
	if (colon)
		*colon++ = '\0';
	if (limit_parse(buf, out, err, errlen) < 0)
		return -1;
	if (!colon || strcmp(colon, "token") == 0)
		out->algo = LIMIT_TOKEN_BUCKET;
	else if (strcmp(colon, "sliding") == 0)
		out->algo = LIMIT_SLIDING_WINDOW;
	else if (strcmp(colon, "fixed") == 0)
		out->algo = LIMIT_FIXED_WINDOW;
	else {
		snprintf(err, errlen, "unknown algorithm '%s' (token, sliding, fixed)", colon);
		return -1;
	}
	return 0;
}

static struct ev_loop *main_loop;
static struct server srv;

static void on_signal(struct ev_loop *loop, ev_signal *s, int revents)
{
	if (s->signum == SIGHUP) {
		log_info("SIGHUP: nothing to reload (no rules file)");
		return;
	}
	log_info("signal %d: stopping", s->signum);
	ev_break(loop, EVBREAK_ALL);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "threads", required_argument, NULL, 't' },
		{ "limit", required_argument, NULL, OPT_LIMIT },
		{ "burst", required_argument, NULL, OPT_BURST },
		{ "identity", required_argument, NULL, OPT_IDENTITY },
		{ "max-frame-size", required_argument, NULL, OPT_MAX_FRAME },
		{ "max-conns", required_argument, NULL, OPT_MAX_CONNS },
		{ "mem-max-keys", required_argument, NULL, OPT_MEM_KEYS },
		{ "check", no_argument, NULL, OPT_CHECK },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ "cost-arg", required_argument, NULL, OPT_COST_ARG },
		{ "redis", required_argument, NULL, OPT_REDIS },
		{ "redis-user", required_argument, NULL, OPT_REDIS_USER },
		{ "redis-password", required_argument, NULL, OPT_REDIS_PASSWORD },
		{ "redis-timeout", required_argument, NULL, OPT_REDIS_TIMEOUT },
		{ "redis-batch", required_argument, NULL, OPT_REDIS_BATCH },
		{ "redis-max-pending", required_argument, NULL, OPT_REDIS_PENDING },
		{ "redis-encoding", required_argument, NULL, OPT_REDIS_ENCODING },
		{ "no-local-cache", no_argument, NULL, OPT_NO_CACHE },
		{ "metrics", required_argument, NULL, OPT_METRICS },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static struct decide_config dcfg;
	static struct redis_config rcfg;
	const char *env_pw = getenv("RL_REDIS_PASSWORD");
	int use_redis = 0, nlimits = 0, use_metrics = 0;
	struct server_config mcfg;
	struct metrics *metrics = NULL;
	char err[128];
	long long num, burst = 0;
	int opt, check = 0, level = LOG_INFO;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	ev_signal sig_int, sig_term, sig_hup;

	server_config_defaults(&srv.cfg);
	srv.cfg.threads = ncpu > 0 ? (int)ncpu : 1;
	srv.lfd = -1;
	decide_config_defaults(&dcfg);
	redis_config_defaults(&rcfg);
	if (env_pw)
		snprintf(rcfg.password, sizeof(rcfg.password), "%s", env_pw);

	while ((opt = getopt_long(argc, argv, "l:t:vqh", opts, NULL)) != -1) {
		switch (opt) {
		case 'l':
			if (parse_listen(optarg, &srv.cfg) < 0) {
				fprintf(stderr, "spoa-ratelimit: --listen: expected ADDR:PORT, got '%s'\n", optarg);
				return 2;
			}
			break;
		case 't':
			if (parse_num(optarg, 1, 256, &num) < 0) {
				fprintf(stderr, "spoa-ratelimit: --threads: expected 1 to 256, got '%s'\n", optarg);
				return 2;
			}
			srv.cfg.threads = (int)num;
			break;
		case OPT_LIMIT:
			if (nlimits == DECIDE_MAX_LIMITS) {
				fprintf(stderr, "spoa-ratelimit: at most %d limits\n", DECIDE_MAX_LIMITS);
				return 2;
			}
			if (parse_limit_arg(optarg, &dcfg.limits[nlimits], err, sizeof(err)) < 0) {
				fprintf(stderr, "spoa-ratelimit: --limit '%s': %s\n", optarg, err);
				return 2;
			}
			dcfg.nlimits = (size_t)++nlimits;
			break;
		case OPT_COST_ARG:
			if (strlen(optarg) == 0 || strlen(optarg) >= DECIDE_NAME_MAX) {
				fprintf(stderr, "spoa-ratelimit: --cost-arg: bad name\n");
				return 2;
			}
			snprintf(dcfg.cost_arg, sizeof(dcfg.cost_arg), "%s", optarg);
			break;
		case OPT_REDIS:
			if (redis_config_set_addr(&rcfg, optarg) < 0) {
				fprintf(stderr, "spoa-ratelimit: --redis: expected HOST:PORT or a socket path, got '%s'\n", optarg);
				return 2;
			}
			use_redis = 1;
			break;
		case OPT_REDIS_USER:
			snprintf(rcfg.user, sizeof(rcfg.user), "%s", optarg);
			break;
		case OPT_REDIS_PASSWORD:
			snprintf(rcfg.password, sizeof(rcfg.password), "%s", optarg);
			break;
		case OPT_REDIS_TIMEOUT:
			if (parse_num(optarg, 1, 60000, &num) < 0) {
				fprintf(stderr, "spoa-ratelimit: --redis-timeout: expected 1 to 60000 ms, got '%s'\n", optarg);
				return 2;
			}
			rcfg.timeout = (double)num / 1000.;
			break;
		case OPT_REDIS_BATCH:
			if (parse_num(optarg, 1, 1024, &num) < 0) {
				fprintf(stderr, "spoa-ratelimit: --redis-batch: expected 1 to 1024, got '%s'\n", optarg);
				return 2;
			}
			rcfg.batch_max = (int)num;
			break;
		case OPT_REDIS_PENDING:
			if (parse_num(optarg, 1, 1000000, &num) < 0) {
				fprintf(stderr, "spoa-ratelimit: --redis-max-pending: expected 1 to 1000000, got '%s'\n", optarg);
				return 2;
			}
			rcfg.max_pending = (int)num;
			break;
		case OPT_REDIS_ENCODING:
			if (strcmp(optarg, "msgpack") == 0)
				rcfg.encoding = REDIS_ENC_MSGPACK;
			else if (strcmp(optarg, "plain") == 0)
				rcfg.encoding = REDIS_ENC_PLAIN;
			else {
				fprintf(stderr, "spoa-ratelimit: --redis-encoding: msgpack or plain, got '%s'\n", optarg);
				return 2;
			}
			break;
		case OPT_METRICS:
			if (parse_listen(optarg, &mcfg) < 0) {
				fprintf(stderr, "spoa-ratelimit: --metrics: expected ADDR:PORT, got '%s'\n", optarg);
				return 2;
			}
			use_metrics = 1;
			break;
		case OPT_NO_CACHE:
			rcfg.local_cache = 0;
			break;
		case OPT_BURST:
			if (parse_num(optarg, 1, 1LL << 40, &burst) < 0) {
				fprintf(stderr, "spoa-ratelimit: --burst: expected a positive number, got '%s'\n", optarg);
				return 2;
			}
			break;
		case OPT_IDENTITY:
			if (decide_set_identity(&dcfg, optarg) < 0) {
				fprintf(stderr, "spoa-ratelimit: --identity: expected up to %d comma-separated names, got '%s'\n",
					DECIDE_MAX_IDENTITY, optarg);
				return 2;
			}
			break;
		case OPT_MAX_FRAME:
			if (parse_num(optarg, 16380, 16 * 1024 * 1024, &num) < 0) {
				fprintf(stderr, "spoa-ratelimit: --max-frame-size: expected 16380 to 16777216, got '%s'\n", optarg);
				return 2;
			}
			srv.cfg.max_frame_size = (uint32_t)num;
			break;
		case OPT_MAX_CONNS:
			if (parse_num(optarg, 1, 1000000, &num) < 0) {
				fprintf(stderr, "spoa-ratelimit: --max-conns: expected 1 to 1000000, got '%s'\n", optarg);
				return 2;
			}
			srv.cfg.max_conns = (int)num;
			break;
		case OPT_MEM_KEYS:
			if (parse_num(optarg, 1, 1LL << 32, &num) < 0) {
				fprintf(stderr, "spoa-ratelimit: --mem-max-keys: expected a positive number, got '%s'\n", optarg);
				return 2;
			}
			srv.cfg.mem_max_keys = (size_t)num;
			break;
		case OPT_CHECK:
			check = 1;
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
	if (optind < argc) {
		fprintf(stderr, "spoa-ratelimit: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	for (size_t i = 0; i < dcfg.nlimits; i++)
		if (dcfg.limits[i].algo == LIMIT_TOKEN_BUCKET)
			dcfg.limits[i].burst = (uint64_t)burst;
	log_set_level(level);
	if (check) {
		printf("configuration ok\n");
		return 0;
	}

	signal(SIGPIPE, SIG_IGN);
	srv.dcfg = &dcfg;
	srv.redis = use_redis ? &rcfg : NULL;
	srv.mem = memstore_new(srv.cfg.mem_max_keys);
	if (!srv.mem) {
		log_err("cannot allocate the in-memory store");
		return 1;
	}
	if (server_listen(&srv) < 0)
		return 1;
	main_loop = ev_default_loop(EVFLAG_AUTO);
	ev_signal_init(&sig_int, on_signal, SIGINT);
	ev_signal_init(&sig_term, on_signal, SIGTERM);
	ev_signal_init(&sig_hup, on_signal, SIGHUP);
	ev_signal_start(main_loop, &sig_int);
	ev_signal_start(main_loop, &sig_term);
	ev_signal_start(main_loop, &sig_hup);
	if (server_start(&srv) < 0) {
		server_stop(&srv);
		return 1;
	}
	log_info("%d worker thread(s), %zu limit(s), %s store", srv.cfg.threads,
		 dcfg.nlimits, use_redis ? "Redis" : "in-memory");
	if (use_metrics) {
		metrics = metrics_start(main_loop, &srv, mcfg.host, mcfg.port);
		if (!metrics) {
			server_stop(&srv);
			return 1;
		}
	}
	ev_run(main_loop, 0);
	metrics_stop(metrics);
	server_stop(&srv);
	memstore_free(srv.mem);
	log_info("stopped");
	return 0;
}
