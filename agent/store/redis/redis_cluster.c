/* SPDX-License-Identifier: Apache-2.0 */
#include "redis_cluster.h"

#include <stdio.h>
#include <string.h>

/* ---- key slots ---------------------------------------------------------- */

/* CRC16-CCITT, XMODEM variant (poly 0x1021, init 0, no reflection), the one
 * Redis Cluster hashes keys with; crc16_table[i] is the CRC of the byte i.
 * The unit test checks every entry against the bitwise definition. */
static const uint16_t crc16_table[256] = {
	0x0000, 0x1021, 0x2042, 0x3063, 0x4084, 0x50a5, 0x60c6, 0x70e7,
	0x8108, 0x9129, 0xa14a, 0xb16b, 0xc18c, 0xd1ad, 0xe1ce, 0xf1ef,
	0x1231, 0x0210, 0x3273, 0x2252, 0x52b5, 0x4294, 0x72f7, 0x62d6,
	0x9339, 0x8318, 0xb37b, 0xa35a, 0xd3bd, 0xc39c, 0xf3ff, 0xe3de,
	0x2462, 0x3443, 0x0420, 0x1401, 0x64e6, 0x74c7, 0x44a4, 0x5485,
	0xa56a, 0xb54b, 0x8528, 0x9509, 0xe5ee, 0xf5cf, 0xc5ac, 0xd58d,
	0x3653, 0x2672, 0x1611, 0x0630, 0x76d7, 0x66f6, 0x5695, 0x46b4,
	0xb75b, 0xa77a, 0x9719, 0x8738, 0xf7df, 0xe7fe, 0xd79d, 0xc7bc,
	0x48c4, 0x58e5, 0x6886, 0x78a7, 0x0840, 0x1861, 0x2802, 0x3823,
	0xc9cc, 0xd9ed, 0xe98e, 0xf9af, 0x8948, 0x9969, 0xa90a, 0xb92b,
	0x5af5, 0x4ad4, 0x7ab7, 0x6a96, 0x1a71, 0x0a50, 0x3a33, 0x2a12,
	0xdbfd, 0xcbdc, 0xfbbf, 0xeb9e, 0x9b79, 0x8b58, 0xbb3b, 0xab1a,
	0x6ca6, 0x7c87, 0x4ce4, 0x5cc5, 0x2c22, 0x3c03, 0x0c60, 0x1c41,
	0xedae, 0xfd8f, 0xcdec, 0xddcd, 0xad2a, 0xbd0b, 0x8d68, 0x9d49,
	0x7e97, 0x6eb6, 0x5ed5, 0x4ef4, 0x3e13, 0x2e32, 0x1e51, 0x0e70,
	0xff9f, 0xefbe, 0xdfdd, 0xcffc, 0xbf1b, 0xaf3a, 0x9f59, 0x8f78,
	0x9188, 0x81a9, 0xb1ca, 0xa1eb, 0xd10c, 0xc12d, 0xf14e, 0xe16f,
	0x1080, 0x00a1, 0x30c2, 0x20e3, 0x5004, 0x4025, 0x7046, 0x6067,
	0x83b9, 0x9398, 0xa3fb, 0xb3da, 0xc33d, 0xd31c, 0xe37f, 0xf35e,
	0x02b1, 0x1290, 0x22f3, 0x32d2, 0x4235, 0x5214, 0x6277, 0x7256,
	0xb5ea, 0xa5cb, 0x95a8, 0x8589, 0xf56e, 0xe54f, 0xd52c, 0xc50d,
	0x34e2, 0x24c3, 0x14a0, 0x0481, 0x7466, 0x6447, 0x5424, 0x4405,
	0xa7db, 0xb7fa, 0x8799, 0x97b8, 0xe75f, 0xf77e, 0xc71d, 0xd73c,
	0x26d3, 0x36f2, 0x0691, 0x16b0, 0x6657, 0x7676, 0x4615, 0x5634,
	0xd94c, 0xc96d, 0xf90e, 0xe92f, 0x99c8, 0x89e9, 0xb98a, 0xa9ab,
	0x5844, 0x4865, 0x7806, 0x6827, 0x18c0, 0x08e1, 0x3882, 0x28a3,
	0xcb7d, 0xdb5c, 0xeb3f, 0xfb1e, 0x8bf9, 0x9bd8, 0xabbb, 0xbb9a,
	0x4a75, 0x5a54, 0x6a37, 0x7a16, 0x0af1, 0x1ad0, 0x2ab3, 0x3a92,
	0xfd2e, 0xed0f, 0xdd6c, 0xcd4d, 0xbdaa, 0xad8b, 0x9de8, 0x8dc9,
	0x7c26, 0x6c07, 0x5c64, 0x4c45, 0x3ca2, 0x2c83, 0x1ce0, 0x0cc1,
	0xef1f, 0xff3e, 0xcf5d, 0xdf7c, 0xaf9b, 0xbfba, 0x8fd9, 0x9ff8,
	0x6e17, 0x7e36, 0x4e55, 0x5e74, 0x2e93, 0x3eb2, 0x0ed1, 0x1ef0,
};

static uint16_t crc16(const unsigned char *p, size_t n)
{
	uint16_t crc = 0;

	for (size_t i = 0; i < n; i++)
		crc = (uint16_t)(crc << 8) ^ crc16_table[((crc >> 8) ^ p[i]) & 0xff];
	return crc;
}

uint16_t redis_cluster_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len);

	if (open) {
		size_t after = (size_t)(open - key) + 1;
		const char *close = memchr(open + 1, '}', len - after);

		/* "{}" (an empty tag) hashes the whole key, as Redis does */
		if (close && close > open + 1) {
			key = open + 1;
			len = (size_t)(close - key);
		}
	}
	return crc16((const unsigned char *)key, len) & (REDIS_CLUSTER_SLOTS - 1);
}

/* ---- node addresses ------------------------------------------------------- */

/* An IP literal or a hostname, as Redis sends it: IPv6 without brackets,
 * maybe with a zone ("%eth0"). Anything else (a space, '/', a control
 * byte) would let a server smuggle what addr's grammar does not allow. */
static int host_ok(const char *h, size_t n)
{
	if (n == 0 || n > ADDR_HOST_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = h[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '.' || c == '_' || c == ':' || c == '%'))
			return 0;
	}
	return 1;
}

/* The address of a node that Redis announced as host[0..hlen) and port:
 * an empty host stands for the host of *reached. Returns 0 with *out
 * filled, 1 for the host "?" (the node's endpoint is unknown), -1 when the
 * host is not valid or empty with nothing to stand for it. */
static int node_addr(const char *host, size_t hlen, unsigned port, const struct addr *reached,
		     struct addr *out)
{
	memset(out, 0, sizeof(*out));
	if (hlen == 1 && host[0] == '?')
		return 1;
	if (hlen == 0) {
		if (!reached || reached->host[0] == '\0')
			return -1;
		memcpy(out->host, reached->host, sizeof(out->host));
	} else {
		if (!host_ok(host, hlen))
			return -1;
		memcpy(out->host, host, hlen);
	}
	snprintf(out->port, sizeof(out->port), "%u", port);
	return 0;
}

static int addr_same(const struct addr *a, const struct addr *b)
{
	return strcmp(a->port, b->port) == 0 && strcmp(a->host, b->host) == 0;
}

/* ---- a bounded RESP2 reader ---------------------------------------------- */

/* Written for this one reply rather than hiredis's reader: hiredis 0.14
 * has no element cap, so "*100000000\r\n" makes it allocate an array of
 * 800 MB before a single element arrives. This one allocates nothing,
 * checks every count against a cap before reading an element, and walks
 * only bytes that are there. Each step returns RD_OK, RD_MORE (the bytes
 * end inside it) or RD_ERR (with r->why set); after anything but RD_OK
 * the whole parse stops, so where the cursor is then does not matter. */

enum { RD_ERR = -1, RD_OK = 0, RD_MORE = 1 };

/* A header line: type byte, "-9223372036854775808" at most, then CRLF. */
#define HDR_MAX 32

struct rd {
	const char *base, *p, *end;
	const char *why;
	size_t at;          /* offset of the step that failed */
};

static int fail_at(struct rd *r, const char *at, const char *why)
{
	r->why = why;
	r->at = (size_t)(at - r->base);
	return RD_ERR;
}

static int fail(struct rd *r, const char *why)
{
	return fail_at(r, r->p, why);
}

/* The line at r->p, its type byte (already checked) included, of at most
 * max bytes before CRLF. RD_OK: s[0..n) is the line after the type byte, r->p is past the
 * LF. */
static int rd_line(struct rd *r, size_t max, const char **s, size_t *n)
{
	size_t avail = (size_t)(r->end - r->p);
	const char *cr = memchr(r->p, '\r', avail < max + 1 ? avail : max + 1);

	if (!cr)
		return avail > max ? fail(r, "line too long") : RD_MORE;
	if (cr + 1 == r->end)
		return RD_MORE;
	if (cr[1] != '\n')
		return fail(r, "CR without LF");
	*s = r->p + 1;
	*n = (size_t)(cr - r->p) - 1;
	r->p = cr + 2;
	return RD_OK;
}

/* Digits s[0..n), 1 to `most` of them (at most 19, so no overflow).
 * Returns 0 or -1. */
static int parse_digits(const char *s, size_t n, size_t most, uint64_t *v)
{
	uint64_t u = 0;

	if (n == 0 || n > most)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		u = u * 10 + (uint64_t)(s[i] - '0');
	}
	*v = u;
	return 0;
}

/* A decimal int64, optionally negative. Returns 0 or -1. */
static int parse_int(const char *s, size_t n, int64_t *v)
{
	uint64_t u;
	int neg = n > 0 && s[0] == '-';

	if (parse_digits(s + neg, n - (size_t)neg, 19, &u) < 0 || u > INT64_MAX)
		return -1;
	*v = neg ? -(int64_t)u : (int64_t)u;
	return 0;
}

/* A header of the given type (':', '*' or '$') and its integer. The type
 * is checked before the line has ended, so a wrong one fails at once. */
static int rd_header(struct rd *r, char type, int64_t *v)
{
	const char *s, *save = r->p;
	size_t n;
	int rc;

	if (r->p == r->end)
		return RD_MORE;
	if (*r->p != type)
		return fail(r, type == ':' ? "integer expected" :
			       type == '*' ? "array expected" : "string expected");
	rc = rd_line(r, HDR_MAX, &s, &n);
	if (rc != RD_OK)
		return rc;
	if (parse_int(s, n, v) < 0)
		return fail_at(r, save, "malformed integer");
	return RD_OK;
}

static int rd_int(struct rd *r, int64_t *v)
{
	return rd_header(r, ':', v);
}

/* An array header with a count in -1..max (-1: a null array). */
static int rd_array(struct rd *r, int64_t max, int64_t *count)
{
	const char *save = r->p;
	int rc = rd_header(r, '*', count);

	if (rc == RD_OK && (*count < -1 || *count > max))
		return fail_at(r, save, *count < -1 ? "negative count" : "too many elements");
	return rc;
}

/* A bulk string of at most REDIS_CLUSTER_STR_MAX bytes: *s = NULL for a
 * null one, else s[0..n). */
static int rd_str(struct rd *r, const char **s, size_t *n)
{
	const char *save = r->p;
	int64_t len;
	int rc = rd_header(r, '$', &len);

	if (rc != RD_OK)
		return rc;
	if (len == -1) {
		*s = NULL;
		*n = 0;
		return RD_OK;
	}
	if (len < -1 || len > REDIS_CLUSTER_STR_MAX)
		return fail_at(r, save, "bad string length");
	if ((size_t)len + 2 > (size_t)(r->end - r->p))
		return RD_MORE;
	if (r->p[len] != '\r' || r->p[len + 1] != '\n')
		return fail_at(r, r->p + len, "string without CRLF");
	*s = r->p;
	*n = (size_t)len;
	r->p += len + 2;
	return RD_OK;
}

/* Any RESP2 value, nested at most REDIS_CLUSTER_DEPTH_MAX deep from here. */
static int rd_skip(struct rd *r, int depth)
{
	const char *s;
	size_t n;
	int64_t v;
	int rc;

	if (r->p == r->end)
		return RD_MORE;
	switch (*r->p) {
	case '+':
	case '-':
		return rd_line(r, REDIS_CLUSTER_STR_MAX, &s, &n);
	case ':':
		return rd_int(r, &v);
	case '$':
		return rd_str(r, &s, &n);
	case '*':
		if (depth >= REDIS_CLUSTER_DEPTH_MAX)
			return fail(r, "nested too deep");
		rc = rd_array(r, REDIS_CLUSTER_NEST_MAX, &v);
		for (int64_t i = 0; rc == RD_OK && i < v; i++)
			rc = rd_skip(r, depth + 1);
		return rc;
	default:
		return fail(r, "unknown type");
	}
}

/* ---- the CLUSTER SLOTS reply ---------------------------------------------- */

struct node {
	const char *host;   /* NULL: a null endpoint */
	size_t hlen;
	unsigned port;
};

/* A node: [endpoint, port, id, anything...]. */
static int rd_node(struct rd *r, struct node *nd)
{
	const char *save = r->p, *id;
	int64_t n, port;
	size_t idlen;
	int rc;

	if ((rc = rd_array(r, REDIS_CLUSTER_NODE_FIELDS_MAX, &n)) != RD_OK)
		return rc;
	if (n < 2)
		return fail_at(r, save, "node without endpoint and port");
	if ((rc = rd_str(r, &nd->host, &nd->hlen)) != RD_OK)
		return rc;
	save = r->p;
	if ((rc = rd_int(r, &port)) != RD_OK)
		return rc;
	if (port < 1 || port > 65535)
		return fail_at(r, save, "port out of range");
	nd->port = (unsigned)port;
	if (n >= 3 && (rc = rd_str(r, &id, &idlen)) != RD_OK)
		return rc;
	for (int64_t i = 3; i < n; i++)
		if ((rc = rd_skip(r, 0)) != RD_OK)
			return rc;
	return RD_OK;
}

static int rd_slot(struct rd *r, int64_t min, int64_t *v)
{
	const char *save = r->p;
	int rc = rd_int(r, v);

	if (rc == RD_OK && *v >= REDIS_CLUSTER_SLOTS)
		return fail_at(r, save, "slot out of range");
	if (rc == RD_OK && *v < min)
		return fail_at(r, save, min ? "range ends before it starts" : "slot out of range");
	return rc;
}

/* The index of a master in map (added if new), or -1 when it would be one
 * too many. */
static int master_index(struct redis_cluster_map *map, const struct addr *a)
{
	for (size_t i = 0; i < map->nmasters; i++)
		if (addr_same(&map->master[i], a))
			return (int)i;
	if (map->nmasters == REDIS_CLUSTER_MASTERS_MAX)
		return -1;
	map->master[map->nmasters] = *a;
	return (int)map->nmasters++;
}

/* One entry: [start, end, master, replica...]. seen[] marks the slots of
 * the entries before, those left without a master included. */
static int rd_entry(struct rd *r, struct redis_cluster_map *map, const struct addr *reached,
		    uint8_t *seen)
{
	const char *save = r->p, *master_at;
	int64_t n, start, end;
	struct node master, replica;
	struct addr a;
	int rc, idx = -1;

	if ((rc = rd_array(r, 3 + REDIS_CLUSTER_REPLICAS_MAX, &n)) != RD_OK)
		return rc;
	if (n < 3)
		return fail_at(r, save, "entry without range and master");
	if ((rc = rd_slot(r, 0, &start)) != RD_OK || (rc = rd_slot(r, start, &end)) != RD_OK)
		return rc;
	master_at = r->p;
	if ((rc = rd_node(r, &master)) != RD_OK)
		return rc;
	/* replicas are checked as strictly, but not kept */
	for (int64_t i = 3; i < n; i++) {
		const char *at = r->p;

		if ((rc = rd_node(r, &replica)) != RD_OK)
			return rc;
		if (replica.hlen && node_addr(replica.host, replica.hlen, replica.port, NULL, &a) < 0)
			return fail_at(r, at, "bad replica endpoint");
	}

	rc = node_addr(master.host ? master.host : "", master.hlen, master.port, reached, &a);
	if (rc < 0)
		return fail_at(r, master_at, master.hlen ? "bad master endpoint" :
			       "empty master endpoint and no address it stands for");
	if (rc == 0 && (idx = master_index(map, &a)) < 0)
		return fail_at(r, master_at, "too many masters");
	for (int64_t s = start; s <= end; s++) {
		if (seen[s >> 3] & (1u << (s & 7)))
			return fail_at(r, save, "overlapping slot ranges");
		seen[s >> 3] |= (uint8_t)(1u << (s & 7));
		if (idx >= 0) {
			map->slot[s] = (uint16_t)idx;
			map->covered++;
		}
	}
	return RD_OK;
}

/* Quotes an error reply into errstr, printable ASCII only. */
static void quote_error(struct redis_cluster_map *map, const char *s, size_t n)
{
	static const char prefix[] = "error reply: ";
	size_t j = sizeof(prefix) - 1;

	memcpy(map->errstr, prefix, j);
	for (size_t i = 0; i < n && j + 1 < sizeof(map->errstr); i++)
		map->errstr[j++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	map->errstr[j] = '\0';
}

void redis_cluster_map_init(struct redis_cluster_map *map)
{
	map->nmasters = 0;
	map->covered = 0;
	map->errstr[0] = '\0';
	memset(map->slot, 0xff, sizeof(map->slot));
}

enum redis_cluster_rc redis_cluster_map_parse(struct redis_cluster_map *map, const char *data,
					      size_t len, const struct addr *reached, size_t *used)
{
	uint8_t seen[REDIS_CLUSTER_SLOTS / 8] = { 0 };
	size_t cap = len < REDIS_CLUSTER_REPLY_MAX ? len : REDIS_CLUSTER_REPLY_MAX;
	struct rd r = { data, data, data + cap, NULL, 0 };
	int64_t n;
	int rc;

	redis_cluster_map_init(map);
	if (cap > 0 && data[0] == '-') {
		const char *s;
		size_t sn;

		rc = rd_line(&r, REDIS_CLUSTER_STR_MAX, &s, &sn);
		if (rc == RD_OK) {
			quote_error(map, s, sn);
			return REDIS_CLUSTER_ERR;
		}
	} else {
		rc = rd_array(&r, REDIS_CLUSTER_SLOTS, &n);
		if (rc == RD_OK && n < 0)
			rc = fail_at(&r, data, "null reply");
		for (int64_t i = 0; rc == RD_OK && i < n; i++)
			rc = rd_entry(&r, map, reached, seen);
	}
	if (rc == RD_MORE && len >= REDIS_CLUSTER_REPLY_MAX) {
		r.p = r.end;
		rc = fail(&r, "reply too long");
	}
	if (rc == RD_MORE)
		return REDIS_CLUSTER_NEED_MORE;
	if (rc == RD_ERR) {
		snprintf(map->errstr, sizeof(map->errstr), "%s at byte %zu", r.why, r.at);
		return REDIS_CLUSTER_ERR;
	}
	*used = (size_t)(r.p - data);
	return REDIS_CLUSTER_OK;
}

int redis_cluster_master_of(const struct redis_cluster_map *map, unsigned slot)
{
	if (slot >= REDIS_CLUSTER_SLOTS || map->slot[slot] == REDIS_CLUSTER_NO_NODE)
		return -1;
	return map->slot[slot];
}

const struct addr *redis_cluster_node_of(const struct redis_cluster_map *map, unsigned slot)
{
	int i = redis_cluster_master_of(map, slot);

	return i < 0 ? NULL : &map->master[i];
}

int redis_cluster_map_equal(const struct redis_cluster_map *a, const struct redis_cluster_map *b)
{
	/* a's master index -> b's; MISSING never equals a slot of b */
	enum { MISSING = REDIS_CLUSTER_NO_NODE - 1 };
	uint16_t to_b[REDIS_CLUSTER_MASTERS_MAX];

	if (a->covered != b->covered)
		return 0;
	for (size_t i = 0; i < a->nmasters; i++) {
		to_b[i] = MISSING;
		for (size_t j = 0; j < b->nmasters; j++)
			if (addr_same(&a->master[i], &b->master[j])) {
				to_b[i] = (uint16_t)j;
				break;
			}
	}
	for (size_t s = 0; s < REDIS_CLUSTER_SLOTS; s++) {
		uint16_t x = a->slot[s];

		if ((x == REDIS_CLUSTER_NO_NODE ? x : to_b[x]) != b->slot[s])
			return 0;
	}
	return 1;
}

/* ---- error replies -------------------------------------------------------- */

/* How an error reply tells its kind: by its first word, or by a text
 * within an "ERR" reply, for a script's call the cluster refused (Redis
 * 7.0 and 7.2 "Script attempted to ...", Redis 6 "Lua script attempted
 * to ..." inside "Error running script"). */
static const struct {
	const char *code;  /* the first word, or NULL */
	const char *text;  /* else this, after "ERR " */
	enum redis_cluster_error_kind kind;
} error_kinds[] = {
	{ "MOVED", NULL, REDIS_CLUSTER_E_MOVED },
	{ "ASK", NULL, REDIS_CLUSTER_E_ASK },
	{ "TRYAGAIN", NULL, REDIS_CLUSTER_E_TRYAGAIN },
	{ "CLUSTERDOWN", NULL, REDIS_CLUSTER_E_CLUSTERDOWN },
	{ "READONLY", NULL, REDIS_CLUSTER_E_READONLY },
	{ "LOADING", NULL, REDIS_CLUSTER_E_LOADING },
	{ "MASTERDOWN", NULL, REDIS_CLUSTER_E_MASTERDOWN },
	{ "CROSSSLOT", NULL, REDIS_CLUSTER_E_CROSSSLOT },
	{ NULL, "attempted to access a non local key in a cluster node",
	  REDIS_CLUSTER_E_NONLOCAL_KEY },
	{ NULL, "attempted to access keys that do not hash to the same slot",
	  REDIS_CLUSTER_E_CROSSSLOT },
	{ NULL, "attempted to access keys that don't hash to the same slot",
	  REDIS_CLUSTER_E_CROSSSLOT },
	{ NULL, "while the cluster is down", REDIS_CLUSTER_E_CLUSTERDOWN },
	{ NULL, "attempted to access a slot not served", REDIS_CLUSTER_E_CLUSTERDOWN },
	{ NULL, "undeclared keys were accessed during rehashing of the slot",
	  REDIS_CLUSTER_E_TRYAGAIN },
	{ NULL, "Function not found", REDIS_CLUSTER_E_NOFUNCTION },
};

/* A number of 1 to 5 digits no greater than max. Returns 0 or -1. */
static int parse_small(const char *s, size_t n, unsigned max, unsigned *v)
{
	uint64_t u;

	if (parse_digits(s, n, 5, &u) < 0 || u > max)
		return -1;
	*v = (unsigned)u;
	return 0;
}

/* "<slot> <host>:<port>", the rest of a MOVED or ASK. Returns 0 or -1. */
static int parse_redirect(const char *s, size_t n, const struct addr *answered,
			  struct redis_cluster_error *out)
{
	const char *sp = memchr(s, ' ', n), *colon;
	size_t alen;
	unsigned port;
	int rc;

	if (!sp || parse_small(s, (size_t)(sp - s), REDIS_CLUSTER_SLOTS - 1, &out->slot) < 0)
		return -1;
	alen = n - (size_t)(sp - s) - 1;
	colon = memrchr(sp + 1, ':', alen);
	if (!colon)
		return -1;
	if (parse_small(colon + 1, (size_t)(s + n - colon - 1), 65535, &port) < 0 || port == 0)
		return -1;
	rc = node_addr(sp + 1, (size_t)(colon - sp - 1), port, answered, &out->addr);
	if (rc < 0)
		return -1;
	out->has_addr = rc == 0;
	return 0;
}

int redis_cluster_error(const char *s, size_t len, const struct addr *answered,
			struct redis_cluster_error *out)
{
	const char *sp = memchr(s, ' ', len);
	size_t clen = sp ? (size_t)(sp - s) : len;
	size_t rest = sp ? len - clen - 1 : 0;
	int is_err = sp && clen == 3 && memcmp(s, "ERR", 3) == 0;

	memset(out, 0, sizeof(*out));
	out->kind = REDIS_CLUSTER_E_OTHER;
	for (size_t i = 0; i < sizeof(error_kinds) / sizeof(error_kinds[0]); i++) {
		const char *code = error_kinds[i].code, *text = error_kinds[i].text;

		if (code ? strlen(code) != clen || memcmp(s, code, clen) != 0 :
			   !is_err || !memmem(sp + 1, rest, text, strlen(text)))
			continue;
		if ((error_kinds[i].kind == REDIS_CLUSTER_E_MOVED ||
		     error_kinds[i].kind == REDIS_CLUSTER_E_ASK) &&
		    (!sp || parse_redirect(sp + 1, rest, answered, out) < 0)) {
			memset(out, 0, sizeof(*out));
			out->kind = REDIS_CLUSTER_E_OTHER;
			return -1;
		}
		out->kind = error_kinds[i].kind;
		return 0;
	}
	return 0;
}
