/* SPDX-License-Identifier: Apache-2.0 */
/* redis_info.h: each server's memory and key count, as worker 0 of each
 * agent reads them (INFO memory, DBSIZE) for the metrics, and how long
 * its key expiry may hold it (INFO server's hz). Private to the Redis
 * store.
 *
 * One connection of its own per server, carrying no decisions: a server
 * slow to answer, a refused INFO or a lost connection costs that
 * connection only, and is counted (redis_stats.info_failures), never
 * touching a decision. Only the loop's thread touches it. */
#ifndef RL_REDIS_INFO_H
#define RL_REDIS_INFO_H

#include <ev.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"

struct redis_config;
struct redis_info;
struct redis_stats;

/* The counters of the server at `at` (store_redis_config.c's, by address). */
typedef struct redis_stats *redis_info_stats_fn(void *owner, const struct addr *at);

/* The reader, on loop, connecting as cfg says (cfg must outlive it).
 * NULL when out of memory. */
struct redis_info *redis_info_new(struct ev_loop *loop, const struct redis_config *cfg,
				  redis_info_stats_fn *stats_of, void *owner);

/* Closes every connection; the servers' gauges say "not read" again. */
void redis_info_free(struct redis_info *ri);

/* One look at each server of at[0..n) (the ones that hold the limiter's
 * keys now: the standalone server, Sentinel's master, each Cluster master,
 * each shard). A server no longer listed loses its connection and its
 * gauges; one whose last look is still unanswered is skipped, or counted
 * failed and connected again after `timeout_us`. */
void redis_info_poll(struct redis_info *ri, const struct addr *at, size_t n, int64_t timeout_us);

/* The longest, in microseconds, that a server whose INFO server says
 * `hz` may spend at a time expiring keys (0 when hz is 0: unknown).
 * Redis expires keys that nobody reads in a cycle run hz times a second
 * (serverCron), stopped after 25% of 1/hz, and the server answers
 * nothing meanwhile: 25 ms at Redis's default hz 10, 2.5 ms at hz 100.
 * It runs that long when many keys have expired, as a limiter's keys do
 * every second. (Its active-expire-effort setting, which INFO does not
 * show, lengthens it by up to 43/25: 1, the default, is assumed.) Pure. */
int64_t redis_info_expiry_stall_us(uint64_t hz);

/* The value of the INFO field `name` in text[0..len) ("name:VALUE\r\n"
 * lines), into *v: 0, or -1 when absent or not an unsigned integer. Pure. */
int redis_info_field(const char *text, size_t len, const char *name, uint64_t *v);

#endif
