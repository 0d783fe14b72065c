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
#include "server.h"

#define RL_VERSION "0.1.0"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: spoa-ratelimit [options]\n"
		"  -l, --listen ADDR:PORT    listen address (default 127.0.0.1:12345;\n"
		"                            IPv6 as [::1]:12345)\n"
		"  -t, --threads N           worker threads (default: number of CPUs)\n"
		"      --limit N/P           the limit of every client (default 100/1m)\n"
		"      --burst N             bucket capacity (default: N of --limit)\n"
		"      --identity LIST       arguments naming the client, first non-empty\n"
		"                            wins (default api_key,user,ip)\n"
		"      --max-frame-size N    own max SPOP frame size (default 16384,\n"
		"                            at least 16380)\n"
		"      --max-conns N         connections per worker (default 10000)\n"
		"      --mem-max-keys N      clients tracked in memory (default 1000000)\n"
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
};

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
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static struct decide_config dcfg;
	char err[128];
	long long num, burst = 0;
	int opt, check = 0, level = LOG_INFO;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	ev_signal sig_int, sig_term, sig_hup;

	server_config_defaults(&srv.cfg);
	srv.cfg.threads = ncpu > 0 ? (int)ncpu : 1;
	srv.lfd = -1;
	decide_config_defaults(&dcfg);

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
			if (limit_parse(optarg, &dcfg.limits[0], err, sizeof(err)) < 0) {
				fprintf(stderr, "spoa-ratelimit: --limit '%s': %s\n", optarg, err);
				return 2;
			}
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
	dcfg.limits[0].burst = (uint64_t)burst;
	log_set_level(level);
	if (check) {
		printf("configuration ok\n");
		return 0;
	}

	signal(SIGPIPE, SIG_IGN);
	srv.dcfg = &dcfg;
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
	log_info("%d worker thread(s), limit %llu per %llds, in-memory store",
		 srv.cfg.threads, (unsigned long long)dcfg.limits[0].quota,
		 (long long)(dcfg.limits[0].period_us / LIMIT_US_PER_S));
	ev_run(main_loop, 0);
	server_stop(&srv);
	memstore_free(srv.mem);
	log_info("stopped");
	return 0;
}
