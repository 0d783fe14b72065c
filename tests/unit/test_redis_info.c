/* SPDX-License-Identifier: Apache-2.0 */
/* Each server's memory and keys (redis_info.h): INFO's fields read, the
 * gauges set from the answers, failures counted, servers no longer
 * listed forgotten. The connection is a fake: commands are recorded and
 * answered by the test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "redis_auth.h"
#include "redis_conn.h"
#include "redis_info.h"
#include "redis_transport.h"
#include "store_redis.h"

/* ---- the clock and the fake connection ------------------------------------------ */

static int64_t now_us = 1000000;

int __wrap_clock_gettime(clockid_t id, struct timespec *ts);
int __wrap_clock_gettime(clockid_t id, struct timespec *ts)
{
	(void)id;
	ts->tv_sec = now_us / 1000000;
	ts->tv_nsec = (now_us % 1000000) * 1000;
	return 0;
}

struct waiting {
	redis_reply_fn *fn;
	void *priv;
	char cmd[32];
};

struct redis_conn {
	const struct redis_conn_cb *cb;
	void *owner;
	struct waiting w[16];
	size_t head, n;
	bool freed;
};

static struct redis_conn conns[8];
static size_t nconns, live;

struct redis_transport *redis_transport_new(const struct redis_config *cfg)
{
	(void)cfg;
	return NULL;
}

int redis_node_auth_argv(const struct redis_config *cfg, const char *argv[3], size_t argvlen[3])
{
	(void)cfg;
	(void)argv;
	(void)argvlen;
	return 0;
}

struct redis_conn *redis_conn_new(struct ev_loop *loop, struct redis_transport *t,
				  const struct addr *a, const struct redis_conn_cb *cb, void *owner,
				  char *why, size_t whylen)
{
	struct redis_conn *c = &conns[nconns++];

	(void)loop;
	(void)t;
	(void)a;
	(void)why;
	(void)whylen;
	memset(c, 0, sizeof(*c));
	c->cb = cb;
	c->owner = owner;
	live++;
	return c;
}

int redis_conn_command(struct redis_conn *c, redis_reply_fn *fn, void *priv, int argc,
		       const char **argv, const size_t *argvlen)
{
	struct waiting *w = &c->w[(c->head + c->n++) % 16];

	(void)argc;
	w->fn = fn;
	w->priv = priv;
	memcpy(w->cmd, argv[0], argvlen[0]);
	w->cmd[argvlen[0]] = '\0';
	return 0;
}

void redis_conn_set_owner(struct redis_conn *c, void *owner)
{
	c->owner = owner;
}

/* Ends the connection now: what waits gets NULL. */
void redis_conn_free(struct redis_conn *c)
{
	while (c->n) {
		struct waiting w = c->w[c->head];

		c->head = (c->head + 1) % 16;
		c->n--;
		if (w.fn)
			w.fn(c, NULL, w.priv);
	}
	c->freed = true;
	live--;
}

void redis_conn_drop(struct redis_conn **cp)
{
	struct redis_conn *c = *cp;

	*cp = NULL;
	if (!c)
		return;
	redis_conn_set_owner(c, NULL);
	redis_conn_free(c);
}

const char *redis_conn_errstr(const struct redis_conn *c)
{
	(void)c;
	return "connection refused";
}

/* Answers the oldest command of c with r; returns its name. */
static const char *answer(struct redis_conn *c, redisReply *r)
{
	static char cmd[32];
	struct waiting w;

	assert_true(c->n > 0);
	w = c->w[c->head];
	c->head = (c->head + 1) % 16;
	c->n--;
	memcpy(cmd, w.cmd, sizeof(cmd));
	if (w.fn)
		w.fn(c, r, w.priv);
	return cmd;
}

/* hz 100, as docs/redis.md asks: its key expiry (2.5 ms) is within the
 * tests' 20 ms deadline, and says nothing */
static const char server_text[] = "# Server\r\nredis_version:7.0.15\r\nhz:100\r\n"
				   "configured_hz:100\r\n";

static void answer_look_hz(struct redis_conn *c, const char *info, const char *server,
			   long long keys)
{
	redisReply mem = { .type = REDIS_REPLY_STRING, .str = (char *)info, .len = strlen(info) };
	redisReply srv = { .type = REDIS_REPLY_STRING, .str = (char *)server,
			   .len = strlen(server) };
	redisReply n = { .type = REDIS_REPLY_INTEGER, .integer = keys };

	assert_string_equal(answer(c, &mem), "INFO");
	assert_string_equal(answer(c, &srv), "INFO");
	assert_string_equal(answer(c, &n), "DBSIZE");
}

static void answer_look(struct redis_conn *c, const char *info, long long keys)
{
	answer_look_hz(c, info, server_text, keys);
}

/* ---- the test's servers ------------------------------------------------------------ */

static struct redis_stats stats[4];
static struct addr addrs[4];

static struct redis_stats *stats_of(void *owner, const struct addr *at)
{
	(void)owner;
	for (size_t i = 0; i < 4; i++)
		if (addr_equal(&addrs[i], at))
			return &stats[i];
	fail();
	return NULL;
}

static const char info_text[] =
	"# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n"
	"used_memory_rss:3000000\r\nmaxmemory:4194304\r\nmaxmemory_human:4.00M\r\n"
	"maxmemory_policy:noeviction\r\n";

static void setup_servers(void)
{
	memset(stats, 0, sizeof(stats));
	nconns = live = 0;
	assert_int_equal(addr_parse("127.0.0.1:7001", 0, &addrs[0]), 0);
	assert_int_equal(addr_parse("127.0.0.1:7002", 0, &addrs[1]), 0);
	assert_int_equal(addr_parse("127.0.0.1:7003", 0, &addrs[2]), 0);
	assert_int_equal(addr_parse("127.0.0.1:7004", 0, &addrs[3]), 0);
}

/* INFO's fields: exact names (used_memory is not used_memory_rss nor
 * used_memory_human), digits only, absent ones said. */
static void test_field(void **state)
{
	uint64_t v = 7;

	(void)state;
	assert_int_equal(redis_info_field(info_text, strlen(info_text), "used_memory", &v), 0);
	assert_int_equal(v, 1048576);
	assert_int_equal(redis_info_field(info_text, strlen(info_text), "maxmemory", &v), 0);
	assert_int_equal(v, 4194304);
	assert_int_equal(redis_info_field(info_text, strlen(info_text), "used_memory_rss", &v), 0);
	assert_int_equal(v, 3000000);
	assert_int_equal(redis_info_field(info_text, strlen(info_text), "used", &v), -1);
	assert_int_equal(redis_info_field(info_text, strlen(info_text), "maxmemory_policy", &v),
			 -1);
	assert_int_equal(redis_info_field("maxmemory:0", 11, "maxmemory", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(redis_info_field("maxmemory:", 10, "maxmemory", &v), -1);
	assert_int_equal(redis_info_field("maxmemory:12x\r\n", 15, "maxmemory", &v), -1);
	assert_int_equal(redis_info_field("maxmemory:99999999999999999999999\r\n", 35,
					  "maxmemory", &v), -1);
	/* a length that stops inside a line reads no further */
	assert_int_equal(redis_info_field("maxmemory:123", 12, "maxmemory", &v), 0);
	assert_int_equal(v, 12);
}

/* Each server listed gets a connection of its own; the answers set its
 * gauges; a look still unanswered is not sent again until its time is
 * over, then counted failed and made again. */
static void test_poll(void **state)
{
	struct redis_config cfg;
	struct redis_info *ri;

	(void)state;
	setup_servers();
	memset(&cfg, 0, sizeof(cfg));
	cfg.timeout = 0.020;
	ri = redis_info_new(NULL, &cfg, stats_of, NULL);
	redis_info_poll(ri, addrs, 2, 5000000);
	assert_int_equal(nconns, 2);
	assert_int_equal(STAT_GET(stats[0].info_read), 0);
	answer_look(&conns[0], info_text, 42);
	assert_int_equal(STAT_GET(stats[0].info_read), 1);
	assert_int_equal(STAT_GET(stats[0].used_memory), 1048576);
	assert_int_equal(STAT_GET(stats[0].maxmemory), 4194304);
	assert_int_equal(STAT_GET(stats[0].keys), 42);
	assert_int_equal(STAT_GET(stats[1].info_read), 0);

	/* server 1 never answers: skipped, then failed after the timeout */
	now_us += 1000000;
	redis_info_poll(ri, addrs, 2, 5000000);
	assert_int_equal(conns[0].n, 3);
	assert_int_equal(conns[1].n, 3);
	assert_int_equal(STAT_GET(stats[1].info_failures), 0);
	now_us += 5000000;
	redis_info_poll(ri, addrs, 2, 5000000);
	assert_int_equal(STAT_GET(stats[1].info_failures), 1);
	assert_true(conns[1].freed);
	assert_int_equal(nconns, 3);
	answer_look(&conns[2], "used_memory:5\r\nmaxmemory:0\r\n", 0);
	assert_int_equal(STAT_GET(stats[1].info_read), 1);
	assert_int_equal(STAT_GET(stats[1].maxmemory), 0);
	assert_int_equal(STAT_GET(stats[1].info_failures), 1);
	/* the old keeps its figures until the next answer */
	answer_look(&conns[0], "used_memory:2048\r\nmaxmemory:4096\r\n", 43);
	assert_int_equal(STAT_GET(stats[0].used_memory), 2048);
	assert_int_equal(STAT_GET(stats[0].keys), 43);
	redis_info_free(ri);
	assert_int_equal(live, 0);
	assert_int_equal(STAT_GET(stats[0].info_read), 0);
}

/* An error reply (INFO refused by an ACL, say) is counted, the gauges
 * kept as they were, the connection made again at the next look. */
static void test_refused(void **state)
{
	struct redis_config cfg;
	struct redis_info *ri;
	redisReply err = { .type = REDIS_REPLY_ERROR, .str = "NOPERM no", .len = 9 };

	(void)state;
	setup_servers();
	memset(&cfg, 0, sizeof(cfg));
	cfg.timeout = 0.020;
	ri = redis_info_new(NULL, &cfg, stats_of, NULL);
	redis_info_poll(ri, addrs, 1, 5000000);
	answer_look(&conns[0], info_text, 7);
	redis_info_poll(ri, addrs, 1, 5000000);
	assert_string_equal(answer(&conns[0], &err), "INFO");
	assert_int_equal(STAT_GET(stats[0].info_failures), 1);
	assert_true(conns[0].freed);
	assert_int_equal(STAT_GET(stats[0].keys), 7);
	/* INFO without the fields: failed too */
	redis_info_poll(ri, addrs, 1, 5000000);
	assert_int_equal(nconns, 2);
	answer(&conns[1], &(redisReply){ .type = REDIS_REPLY_STRING, .str = "# Memory\r\n",
					 .len = 10 });
	assert_int_equal(STAT_GET(stats[0].info_failures), 2);
	redis_info_free(ri);
	assert_int_equal(live, 0);
}

/* How long key expiry may hold a server: 25% of 1/hz, read from INFO
 * server (hz, not configured_hz: with dynamic-hz the server raises it
 * under many clients); unknown (0) when not said; the figure follows
 * each look. */
static void test_expiry_stall(void **state)
{
	struct redis_config cfg;
	struct redis_info *ri;

	(void)state;
	assert_int_equal(redis_info_expiry_stall_us(10), 25000);
	assert_int_equal(redis_info_expiry_stall_us(100), 2500);
	assert_int_equal(redis_info_expiry_stall_us(500), 500);
	assert_int_equal(redis_info_expiry_stall_us(0), 0);
	setup_servers();
	memset(&cfg, 0, sizeof(cfg));
	cfg.timeout = 0.020;
	ri = redis_info_new(NULL, &cfg, stats_of, NULL);
	redis_info_poll(ri, addrs, 1, 5000000);
	answer_look_hz(&conns[0], info_text, "configured_hz:10\r\nhz:10\r\n", 1);
	assert_int_equal(STAT_GET(stats[0].expiry_stall_us), 25000);
	redis_info_poll(ri, addrs, 1, 5000000);
	answer_look_hz(&conns[0], info_text, "configured_hz:10\r\nhz:40\r\n", 1);
	assert_int_equal(STAT_GET(stats[0].expiry_stall_us), 6250);
	/* a server that does not say keeps the last figure, and the look
	 * is not failed */
	redis_info_poll(ri, addrs, 1, 5000000);
	answer_look_hz(&conns[0], info_text, "# Server\r\n", 1);
	assert_int_equal(STAT_GET(stats[0].expiry_stall_us), 6250);
	assert_int_equal(STAT_GET(stats[0].info_failures), 0);
	assert_int_equal(STAT_GET(stats[0].info_read), 1);
	redis_info_free(ri);
	assert_int_equal(live, 0);
}

/* A server no longer listed (a former master, a shard set changed)
 * loses its connection and its gauges; a new one gets its own. */
static void test_forgotten(void **state)
{
	struct redis_config cfg;
	struct redis_info *ri;

	(void)state;
	setup_servers();
	memset(&cfg, 0, sizeof(cfg));
	cfg.timeout = 0.020;
	ri = redis_info_new(NULL, &cfg, stats_of, NULL);
	redis_info_poll(ri, addrs, 3, 5000000);
	for (size_t i = 0; i < 3; i++)
		answer_look(&conns[i], info_text, (long long)i);
	redis_info_poll(ri, addrs + 1, 3, 5000000);
	assert_true(conns[0].freed);
	assert_int_equal(STAT_GET(stats[0].info_read), 0);
	assert_int_equal(STAT_GET(stats[1].info_read), 1);
	assert_int_equal(STAT_GET(stats[0].info_failures), 0);
	assert_int_equal(nconns, 4);
	/* nothing listed (no master known yet): nothing looked at */
	redis_info_poll(ri, NULL, 0, 5000000);
	assert_int_equal(live, 0);
	assert_int_equal(STAT_GET(stats[3].info_read), 0);
	redis_info_free(ri);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_field),
		cmocka_unit_test(test_poll),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_forgotten),
		cmocka_unit_test(test_expiry_stall),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
