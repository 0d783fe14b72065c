/* store_redis.h: decisions against buckets kept in Redis, shared by every
 * agent of a fleet.
 *
 * Each worker has its own asynchronous hiredis connection on its own loop.
 * Queries wait in a bounded queue and leave in batches, one EVALSHA of the
 * decision script per batch and loop iteration, several batches pipelined.
 * Every query has a deadline: one whose answer is not back in time is
 * answered without the store (fail-open, degraded). A client refused until
 * time T is answered locally until T.
 *
 * A reply callback never holds a connection pointer: answers go back
 * through conn_answer() with the connection's slot and generation. */
#ifndef RL_STORE_REDIS_H
#define RL_STORE_REDIS_H

#include <stdint.h>

#include "stats.h"

#include "decide.h"

struct worker;
struct rstore;

enum redis_encoding {
	REDIS_ENC_MSGPACK = 0,
	REDIS_ENC_PLAIN = 1,
};

struct redis_config {
	char host[256];          /* empty: no Redis, in-memory store */
	int port;
	char unix_path[256];     /* used instead of host:port when set */
	char user[128];          /* ACL user, optional */
	char password[256];      /* AUTH, optional */
	double timeout;          /* deadline of a decision, seconds */
	int max_pending;         /* queries waiting per worker, queued or sent */
	int batch_max;           /* queries per script call */
	int pipeline;            /* script calls in flight per worker */
	enum redis_encoding encoding;
	int local_cache;         /* answer known-refused clients locally */
};

/* Where an answer goes: a connection by slot and generation, and the ids of
 * the NOTIFY it answers. */
struct store_ref {
	uint32_t slot;
	uint32_t gen;
	uint64_t stream_id;
	uint64_t frame_id;
};

struct rstore_stats {
	counter_t queries;        /* submitted */
	counter_t batches;        /* script calls sent */
	counter_t replies;        /* decisions that came back from Redis */
	counter_t local_refusals; /* answered from the refused-until cache */
	counter_t timeouts;       /* answered degraded: deadline passed */
	counter_t unavailable;    /* answered degraded: no connection, queue full */
	counter_t errors;         /* error replies */
	counter_t reconnects;
	counter_t noscript;
	counter_t breaker_trips;  /* circuit breaker opened */
	counter_t breaker_skips;  /* decisions made without Redis while open */
	struct hist call_time;    /* script call sent -> its reply */
	struct hist wait_time;    /* query submitted -> answered by Redis */
};

void redis_config_defaults(struct redis_config *cfg);

/* Parses "HOST:PORT", "[V6]:PORT" or a Unix socket path ("/..."). */
int redis_config_set_addr(struct redis_config *cfg, const char *addr);

/* Creates the worker's store and starts connecting. NULL on failure. */
struct rstore *rstore_new(struct worker *w, const struct redis_config *cfg);

/* Answers every query still waiting (degraded) and frees the store. */
void rstore_free(struct rstore *rs);

/* Submits a query. Returns 1 when it was answered at once into *d (local
 * refusal, store unavailable), or 0 when the answer will come through
 * conn_answer(). */
int rstore_submit(struct rstore *rs, const struct decide_query *q,
		  const struct store_ref *ref, struct decide_decision *d);

/* Forgets cached refusals: the rules they were made under are gone. */
void rstore_rules_changed(struct rstore *rs);

const struct rstore_stats *rstore_get_stats(const struct rstore *rs);

#endif
