/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the pure parts of the cluster client (redis_cluster.c). The
 * first byte chooses what the rest is fed to (its two low bits):
 *   0  a CLUSTER SLOTS reply, no address the reply came from
 *   1  a CLUSTER SLOTS reply, reached at 10.1.2.3:7000
 *   2  the text of an error reply, no node that answered
 *   3  the text of an error reply, from 10.1.2.3:7000
 * Besides reading no byte out of bounds, every result must keep what the
 * header promises; a broken promise aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "redis_cluster.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct addr from = { .host = "10.1.2.3", .port = "7000" };

static void check_port(const char *port)
{
	char *end;
	long v = strtol(port, &end, 10);

	if (port[0] == '\0' || *end != '\0' || v < 1 || v > 65535)
		abort();
}

/* What an accepted map must be: masters distinct and each serving a slot,
 * every slot a master or none, `covered` their count. */
static void check_map(const struct redis_cluster_map *m)
{
	static size_t owned[REDIS_CLUSTER_MASTERS_MAX];
	size_t covered = 0;

	if (m->nmasters > REDIS_CLUSTER_MASTERS_MAX)
		abort();
	memset(owned, 0, sizeof(owned));
	for (unsigned s = 0; s < REDIS_CLUSTER_SLOTS; s++) {
		if (m->slot[s] == REDIS_CLUSTER_NO_NODE) {
			if (redis_cluster_node_of(m, s) != NULL)
				abort();
			continue;
		}
		if (m->slot[s] >= m->nmasters || redis_cluster_node_of(m, s) != &m->master[m->slot[s]])
			abort();
		owned[m->slot[s]]++;
		covered++;
	}
	if (covered != m->covered)
		abort();
	for (size_t i = 0; i < m->nmasters; i++) {
		if (owned[i] == 0 || m->master[i].host[0] == '\0' || m->master[i].path[0] != '\0' ||
		    memchr(m->master[i].host, '\0', sizeof(m->master[i].host)) == NULL)
			abort();
		check_port(m->master[i].port);
		for (size_t j = 0; j < i; j++)
			if (strcmp(m->master[i].host, m->master[j].host) == 0 &&
			    strcmp(m->master[i].port, m->master[j].port) == 0)
				abort();
	}
}

static void fuzz_map(const char *data, size_t size, const struct addr *reached)
{
	static struct redis_cluster_map m, again;
	size_t used = 0, used2 = 0;

	switch (redis_cluster_map_parse(&m, data, size, reached, &used)) {
	case REDIS_CLUSTER_OK:
		if (used == 0 || used > size)
			abort();
		check_map(&m);
		/* the reply alone reads the same, and any shorter prefix of it
		 * is only unfinished */
		if (redis_cluster_map_parse(&again, data, used, reached, &used2) != REDIS_CLUSTER_OK ||
		    used2 != used || !redis_cluster_map_equal(&m, &again) ||
		    !redis_cluster_map_equal(&again, &m))
			abort();
		if (redis_cluster_map_parse(&again, data, used - 1, reached, &used2) !=
		    REDIS_CLUSTER_NEED_MORE)
			abort();
		break;
	case REDIS_CLUSTER_NEED_MORE:
		if (size >= REDIS_CLUSTER_REPLY_MAX)
			abort();
		break;
	case REDIS_CLUSTER_ERR:
		if (m.errstr[0] == '\0' || memchr(m.errstr, '\0', sizeof(m.errstr)) == NULL)
			abort();
		break;
	}
}

static void fuzz_error(const char *data, size_t size, const struct addr *answered)
{
	struct redis_cluster_error e;
	int rc = redis_cluster_error(data, size, answered, &e);

	if (rc != 0 && (rc != -1 || e.kind != REDIS_CLUSTER_E_OTHER))
		abort();
	if (e.kind != REDIS_CLUSTER_E_MOVED && e.kind != REDIS_CLUSTER_E_ASK)
		return;
	if (e.slot >= REDIS_CLUSTER_SLOTS)
		abort();
	if (e.has_addr) {
		if (e.addr.host[0] == '\0' || memchr(e.addr.host, '\0', sizeof(e.addr.host)) == NULL)
			abort();
		check_port(e.addr.port);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct addr *addr;

	if (size < 1)
		return 0;
	addr = data[0] & 1 ? &from : NULL;
	if (data[0] & 2)
		fuzz_error((const char *)data + 1, size - 1, addr);
	else
		fuzz_map((const char *)data + 1, size - 1, addr);
	return 0;
}
