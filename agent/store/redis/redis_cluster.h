/* SPDX-License-Identifier: Apache-2.0 */
/* redis_cluster.h: what a Redis Cluster client computes without talking to
 * the cluster: the slot of a key, the map of slots to masters read from a
 * CLUSTER SLOTS reply, and the meaning of the errors a node answers with
 * (MOVED, ASK, TRYAGAIN, ...). Pure: no I/O, no clock, no allocation.
 *
 * Security guarantees of redis_cluster_map_parse(), for any input bytes:
 *  - it reads data[0..min(len, REDIS_CLUSTER_REPLY_MAX)) and nothing else;
 *    bounds are checked as `n > (size_t)(end - p)`, which cannot overflow;
 *  - it allocates nothing, so no count the server sends sizes anything;
 *    counts are checked against the caps below before any element is read,
 *    nesting is capped at REDIS_CLUSTER_DEPTH_MAX, strings and lines at
 *    REDIS_CLUSTER_STR_MAX bytes;
 *  - a reply longer than REDIS_CLUSTER_REPLY_MAX bytes is an error, so a
 *    caller that buffers until "complete or error" buffers at most that;
 *  - its work is linear in the bytes read (plus a scan of at most
 *    REDIS_CLUSTER_MASTERS_MAX addresses per slot range).
 *
 * The reply is read as RESP2 (what hiredis 0.14 speaks): arrays, bulk and
 * simple strings, integers, errors. RESP3 types are errors. */
#ifndef RL_REDIS_CLUSTER_H
#define RL_REDIS_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "addr.h"

#define REDIS_CLUSTER_SLOTS 16384          /* slots 0..16383 */
#define REDIS_CLUSTER_MASTERS_MAX 256      /* distinct master addresses in a map */
#define REDIS_CLUSTER_NO_NODE 0xffffu      /* a slot that no master serves */
#define REDIS_CLUSTER_REPLICAS_MAX 64      /* replicas listed with one range */
#define REDIS_CLUSTER_NODE_FIELDS_MAX 16   /* [endpoint, port, id, metadata, ...] */
#define REDIS_CLUSTER_NEST_MAX 64          /* elements of an array within a node */
#define REDIS_CLUSTER_DEPTH_MAX 4          /* arrays within a node's fields */
#define REDIS_CLUSTER_STR_MAX 1024         /* bytes of a string or a line */
#define REDIS_CLUSTER_REPLY_MAX (32u << 20) /* bytes of a whole reply */

enum redis_cluster_rc {
	REDIS_CLUSTER_ERR = -1,      /* not a reply this parser accepts; more bytes cannot help */
	REDIS_CLUSTER_OK = 0,        /* a whole reply, read and valid */
	REDIS_CLUSTER_NEED_MORE = 1, /* no error so far, the reply has not ended */
};

/* Which master serves each slot. A plain value: no pointers, no
 * allocation; copy it with memcpy. About 127 KiB: keep it off the stack. */
struct redis_cluster_map {
	size_t nmasters;
	struct addr master[REDIS_CLUSTER_MASTERS_MAX]; /* distinct, in order of first range */
	uint16_t slot[REDIS_CLUSTER_SLOTS];  /* index into master[], or REDIS_CLUSTER_NO_NODE */
	size_t covered;                      /* slots that have a master */
	char errstr[128];                    /* why, after REDIS_CLUSTER_ERR */
};

/* The slot of a key, as Redis computes it: CRC16-CCITT (XMODEM) of the key
 * modulo 16384, or of its hash tag when it has one: the bytes between the
 * first '{' and the first '}' after it, when there is at least one. */
uint16_t redis_cluster_slot(const char *key, size_t len);

/* An empty map: no masters, every slot REDIS_CLUSTER_NO_NODE. */
void redis_cluster_map_init(struct redis_cluster_map *map);

/* Reads a CLUSTER SLOTS reply from data[0..len) into *map. Each entry must
 * be [start, end, master, replica...] with integers 0 <= start <= end <=
 * 16383, ranges that do not overlap, at most REDIS_CLUSTER_REPLICAS_MAX
 * replicas; each node [endpoint, port, id, ...] with an endpoint string
 * (an IP literal or a hostname of letters, digits and "-._:%"), a port
 * integer 1..65535, an id string if present and fields after it of any
 * RESP2 shape within the caps. An empty or null endpoint means the address
 * the reply came from: the host of *reached (which may be NULL when the
 * caller has none; such a reply is then an error). The endpoint "?" (no
 * known endpoint, from cluster-preferred-endpoint-type hostname) leaves its
 * range without a master. Replicas are checked the same way and dropped.
 *
 * REDIS_CLUSTER_OK: *map holds the reply's masters (at most
 * REDIS_CLUSTER_MASTERS_MAX; one more is an error) and every slot no range
 * covered is REDIS_CLUSTER_NO_NODE; *used is the reply's length (bytes
 * after it are not looked at). REDIS_CLUSTER_NEED_MORE: every byte so far
 * is valid. REDIS_CLUSTER_ERR: map->errstr says why (an error reply from
 * the server is quoted, printable bytes only). *map is unspecified unless
 * REDIS_CLUSTER_OK: parse into a spare map and keep the one in use. */
enum redis_cluster_rc redis_cluster_map_parse(struct redis_cluster_map *map, const char *data,
					      size_t len, const struct addr *reached, size_t *used);

/* The master serving slot: its index in map->master, or -1 when no master
 * does or slot is out of range. */
int redis_cluster_master_of(const struct redis_cluster_map *map, unsigned slot);

/* The address of that master, or NULL. */
const struct addr *redis_cluster_node_of(const struct redis_cluster_map *map, unsigned slot);

/* 1 when every slot has a master of the same address in both maps (or none
 * in both), whatever the order of their masters; else 0. A caller that
 * refreshes the map reconnects only when this says 0. */
int redis_cluster_map_equal(const struct redis_cluster_map *a, const struct redis_cluster_map *b);

/* What an error reply means to a cluster client. */
enum redis_cluster_error_kind {
	REDIS_CLUSTER_E_OTHER,       /* no cluster meaning: the command failed */
	REDIS_CLUSTER_E_MOVED,       /* the slot lives at addr now: the map is stale */
	REDIS_CLUSTER_E_ASK,         /* the slot is migrating: this once, ASKING at addr */
	REDIS_CLUSTER_E_TRYAGAIN,    /* keys of a migrating slot split between nodes; also a
				      * script's undeclared keys during a migration */
	REDIS_CLUSTER_E_CLUSTERDOWN, /* the cluster, or the slot, is not served; also a
				      * script's command while the cluster is down */
	REDIS_CLUSTER_E_READONLY,    /* a write reached a replica: the map is stale */
	REDIS_CLUSTER_E_LOADING,     /* the node is loading its data set */
	REDIS_CLUSTER_E_MASTERDOWN,  /* a replica lost its master and serves no stale data */
	REDIS_CLUSTER_E_NOFUNCTION,  /* FCALL of a function the node has not loaded */
	REDIS_CLUSTER_E_CROSSSLOT,   /* keys of several slots in one command, or in a script */
	REDIS_CLUSTER_E_NONLOCAL_KEY, /* a script touched a key of a slot the node does not serve */
};

struct redis_cluster_error {
	enum redis_cluster_error_kind kind;
	unsigned slot;        /* MOVED, ASK: 0..16383 */
	int has_addr;         /* MOVED, ASK: addr is where to go; 0 for the endpoint "?" */
	struct addr addr;     /* host and port; path empty */
};

/* Reads the text of an error reply, as hiredis gives it (redisReply.str:
 * no leading '-', no CRLF): s[0..len), not NUL-terminated, any bytes.
 * "MOVED <slot> <host>:<port>" and "ASK ..." are split at the last colon
 * (Redis writes IPv6 hosts without brackets); an empty host means the host
 * of *answered, the node that sent the error (NULL: none, an error). Other
 * kinds are known by their first word, and the script errors of Redis 6
 * and 7 by their text within an "ERR" reply.
 *
 * Returns 0 with *out filled (kind REDIS_CLUSTER_E_OTHER for any error
 * without a cluster meaning), or -1 when a MOVED or ASK has a malformed
 * slot or address: *out is then kind REDIS_CLUSTER_E_OTHER, and the caller
 * may well refresh its map. */
int redis_cluster_error(const char *s, size_t len, const struct addr *answered,
			struct redis_cluster_error *out);

#endif
