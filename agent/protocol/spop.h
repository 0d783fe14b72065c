/* SPDX-License-Identifier: Apache-2.0 */
/* spop.h: the SPOP 2.0 codec (HAProxy's Stream Processing Offload Protocol).
 *
 * Pure: no I/O, no clock, no allocation. Decoders read from a buffer that
 * the caller owns; decoded strings point into that buffer (zero copy).
 *
 * Security guarantees, for any input bytes:
 *  - no decoder reads outside [p, end); bounds are checked as
 *    `n > (size_t)(end - p)`, which cannot overflow;
 *  - varints are capped at SPOP_VARINT_MAX bytes;
 *  - spop_frame_peek() checks the announced length against the caller's
 *    maximum before anything else, so a peer cannot make the caller buffer
 *    or allocate more than it agreed to;
 *  - decoders never allocate, so a count sent by the peer sizes nothing.
 *
 * Decoders have three outcomes: SPOP_OK (complete), SPOP_NEED_MORE (the
 * bytes so far are a valid prefix) and SPOP_ERR (broken). Within a frame
 * that is already complete, "need more" means truncated data: the frame
 * level helpers (spop_kv_next, spop_msg_next, spop_hello_parse) report it
 * as an error with status SPOP_ST_INVALID.
 */
#ifndef RL_SPOP_H
#define RL_SPOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SPOP_VARINT_MAX 10        /* 2^64-1 takes 10 bytes */
#define SPOP_FRAME_HDR_MIN 7      /* type + flags + 1-byte sid + 1-byte fid */
#define SPOP_MIN_FRAME_SIZE 256   /* smallest max-frame-size we accept */
#define SPOP_OWN_FRAME_SIZE 16384 /* our default max-frame-size (>= 16380) */

enum spop_rc {
	SPOP_ERR = -1,
	SPOP_OK = 0,
	SPOP_NEED_MORE = 1,
};

enum spop_frame_type {
	SPOP_FRAME_UNSET = 0,
	SPOP_FRAME_HAPROXY_HELLO = 1,
	SPOP_FRAME_HAPROXY_DISCONNECT = 2,
	SPOP_FRAME_NOTIFY = 3,
	SPOP_FRAME_AGENT_HELLO = 101,
	SPOP_FRAME_AGENT_DISCONNECT = 102,
	SPOP_FRAME_ACK = 103,
};

#define SPOP_FLAG_FIN 0x00000001u
#define SPOP_FLAG_ABORT 0x00000002u

/* DISCONNECT status codes; error values of this module equal them. */
enum spop_status {
	SPOP_ST_NORMAL = 0,
	SPOP_ST_IO = 1,
	SPOP_ST_TIMEOUT = 2,
	SPOP_ST_TOO_BIG = 3,
	SPOP_ST_INVALID = 4,
	SPOP_ST_NO_VERSION = 5,
	SPOP_ST_NO_FRAME_SIZE = 6,
	SPOP_ST_NO_CAPABILITIES = 7,
	SPOP_ST_BAD_VERSION = 8,
	SPOP_ST_BAD_FRAME_SIZE = 9,
	SPOP_ST_NO_FRAGMENTATION = 10,
	SPOP_ST_INTERLACED = 11,
	SPOP_ST_NO_FRAME_ID = 12,
	SPOP_ST_RESOURCE = 13,
	SPOP_ST_UNKNOWN = 99,
};

/* Typed data: type in the low nibble, flags in the high nibble. */
enum spop_type {
	SPOP_T_NULL = 0,
	SPOP_T_BOOL = 1,
	SPOP_T_INT32 = 2,
	SPOP_T_UINT32 = 3,
	SPOP_T_INT64 = 4,
	SPOP_T_UINT64 = 5,
	SPOP_T_IPV4 = 6,
	SPOP_T_IPV6 = 7,
	SPOP_T_STR = 8,
	SPOP_T_BIN = 9,
};

#define SPOP_BOOL_TRUE_FLAG 0x10

enum spop_scope {
	SPOP_SCOPE_PROC = 0,
	SPOP_SCOPE_SESS = 1,
	SPOP_SCOPE_TXN = 2,
	SPOP_SCOPE_REQ = 3,
	SPOP_SCOPE_RES = 4,
};

enum spop_action {
	SPOP_ACT_SET_VAR = 1,
	SPOP_ACT_UNSET_VAR = 2,
};

/* A byte string inside a decoded buffer (not NUL-terminated). */
struct spop_str {
	const char *ptr;
	size_t len;
};

struct spop_data {
	uint8_t type; /* enum spop_type */
	union {
		int boolean;      /* 0 or 1 */
		int32_t i32;
		uint32_t u32;
		int64_t i64;
		uint64_t u64;
		uint8_t ipv4[4];
		uint8_t ipv6[16];
		struct spop_str str; /* SPOP_T_STR and SPOP_T_BIN */
	} u;
};

/* One decoded frame. `payload` points into the caller's buffer. */
struct spop_frame {
	uint32_t len;        /* bytes after the 4-byte length field */
	uint8_t type;        /* raw type byte, may be unknown */
	uint32_t flags;
	uint64_t stream_id;
	uint64_t frame_id;
	const uint8_t *payload;
	size_t payload_len;
};

/* A read position over a complete region (a payload or part of one). */
struct spop_cursor {
	const uint8_t *p;
	const uint8_t *end;
};

/* Parsed HAPROXY-HELLO. Strings point into the frame. */
struct spop_hello {
	uint32_t max_frame_size;
	int healthcheck;            /* 1 when the "healthcheck" key is true */
	int has_version, has_max_frame_size, has_capabilities;
	struct spop_str supported_versions;
	struct spop_str capabilities;
	struct spop_str engine_id;  /* ptr NULL when absent */
};

/* Write buffer with a sticky error: once a write does not fit, `err` is set,
 * every later write is a no-op, and the caller discards the buffer. */
struct spop_wbuf {
	uint8_t *buf;
	size_t cap;
	size_t len;
	int err;
};

/* ---- primitives ------------------------------------------------------- */

/* Decodes one varint at *p. On SPOP_OK, *out holds the value and *p is past
 * it. On SPOP_NEED_MORE or SPOP_ERR (more than SPOP_VARINT_MAX bytes, or a
 * value over 2^64-1), *p is unchanged. */
int spop_varint_decode(const uint8_t **p, const uint8_t *end, uint64_t *out);

/* Encodes v into out (at least SPOP_VARINT_MAX bytes); returns its length. */
size_t spop_varint_encode(uint64_t v, uint8_t *out);

/* The length spop_varint_encode() gives v, without writing it. */
static inline size_t spop_varint_len(uint64_t v)
{
	size_t n = 2;

	if (v < 240)
		return 1;
	for (v = (v - 240) >> 4; v >= 128; v = (v - 128) >> 7)
		n++;
	return n;
}

/* spop_varint_encode(), inline for the encoders of every answer, as the
 * end of what it wrote at p. The first byte holds the low 4 bits of
 * v - 240, each next one 7 more with the 0x80 flag on all but the last,
 * after 128 is taken off the rest: (w - 128) >> 7 is (w >> 7) - 1 for
 * w >= 128. A moving pointer rather than a count, so that a byte costs a
 * store, two arithmetic steps and one comparison: an answer writes a
 * dozen varints, some of five bytes and more (limits, timestamps). */
static inline __attribute__((always_inline)) uint8_t *spop_varint_at(uint8_t *p, uint64_t v)
{
	if (v < 240) {
		*p = (uint8_t)v;
		return p + 1;
	}
	*p++ = (uint8_t)(v | 0xF0);
	for (v = (v - 240) >> 4; v >= 128; v = (v >> 7) - 1)
		*p++ = (uint8_t)(v | 0x80);
	*p = (uint8_t)v;
	return p + 1;
}

/* spop_varint_at() as a length. */
static inline size_t spop_varint_put(uint64_t v, uint8_t *out)
{
	return (size_t)(spop_varint_at(out, v) - out);
}

/* Decodes a name: <varint length><bytes>. Cursor semantics as above. */
int spop_name_decode(const uint8_t **p, const uint8_t *end, struct spop_str *out);

/* Decodes one typed data item. Unknown types (10-15) are SPOP_ERR; so are
 * BOOL flags other than 0x00 and 0x10. Cursor semantics as above. */
int spop_data_decode(const uint8_t **p, const uint8_t *end, struct spop_data *out);

/* Reads the frame at the start of buf[0..avail). Checks the 4-byte length
 * against max_frame first: a length over it is SPOP_ERR with *status =
 * SPOP_ST_TOO_BIG, whatever follows. SPOP_NEED_MORE until the whole frame is
 * there. SPOP_ERR with SPOP_ST_INVALID for a length under
 * SPOP_FRAME_HDR_MIN or a broken header varint. On SPOP_OK the frame takes
 * 4 + f->len bytes of buf. Frame type and flags are not judged here. */
int spop_frame_peek(const uint8_t *buf, size_t avail, uint32_t max_frame,
		    struct spop_frame *f, int *status);

/* ---- lists inside a complete payload ------------------------------------
 * These return 1 when an item was read, 0 at the end of the region, and -1
 * on broken or truncated data (status SPOP_ST_INVALID). */

/* KV-LIST: [ <NAME> <TYPED-DATA> ]* */
int spop_kv_next(struct spop_cursor *c, struct spop_str *name, struct spop_data *val);

/* LIST-OF-MESSAGES: reads one message's name and argument count, checks that
 * its `nargs` KV items are well formed, and returns them in *args (a cursor
 * for spop_kv_next, which then cannot fail). *c ends past the message. */
int spop_msg_next(struct spop_cursor *c, struct spop_str *name, unsigned *nargs,
		  struct spop_cursor *args);

/* The same one step at a time, for a caller that decodes the arguments of
 * the message it wants while it checks them (one walk over them instead of
 * two): spop_msg_head() reads a message's name and argument count and
 * leaves *c at its first argument (1, 0 at the end of the region, -1 on
 * broken data); the caller then reads exactly `nargs` KV items with
 * spop_kv_next(), or skips them with spop_kv_skip(). */
static inline int spop_msg_head(struct spop_cursor *c, struct spop_str *name, unsigned *nargs);
/* Checks n KV items and leaves *c past them. Returns 0, or -1 when they are
 * broken or fewer than n (*c unchanged). */
int spop_kv_skip(struct spop_cursor *c, unsigned n);

/* Parses a HAPROXY-HELLO payload. Returns 0, or -1 with *status set to
 * SPOP_ST_INVALID (broken KV list), SPOP_ST_NO_VERSION,
 * SPOP_ST_NO_FRAME_SIZE, SPOP_ST_NO_CAPABILITIES, SPOP_ST_BAD_VERSION (no
 * "2.0" in supported-versions) or SPOP_ST_BAD_FRAME_SIZE (not an integer,
 * or under SPOP_MIN_FRAME_SIZE). Keys are matched exactly; unknown keys are
 * skipped. */
int spop_hello_parse(const uint8_t *payload, size_t len, struct spop_hello *h, int *status);

/* Returns 1 when a comma-separated version list (spaces allowed around
 * items) holds exactly "2.0". */
int spop_version_supported(struct spop_str versions);

/* ---- inline decoding -------------------------------------------------------
 * The KV items of a NOTIFY are read for every decision, a dozen of them: a
 * caller's loop over them inlines these readers and keeps its cursor in
 * registers. The decoders above are built on them, so both accept exactly
 * the same bytes, with the same three outcomes and cursor semantics. */

/* A varint read at some position: its value, the bytes it took and the
 * outcome. Returned by value (in two registers), so that the decoders built
 * on it take no local's address and keep their cursors in registers. */
struct spop_varint {
	uint64_t v;
	uint32_t len;
	int32_t rc;   /* SPOP_OK, SPOP_NEED_MORE or SPOP_ERR */
};

/* The varint at s (s <= end), whatever its length: the rare long ones. */
struct spop_varint spop_varint_read(const uint8_t *s, const uint8_t *end);

/* spop_varint_decode() with the one-byte case inline: names, lengths and
 * most integers of a message are under 240, and every argument has two or
 * three varints. */
static inline int spop_varint_get(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
	const uint8_t *s = *p;
	struct spop_varint r;

	if (s != end && *s < 240) {
		*out = *s;
		*p = s + 1;
		return SPOP_OK;
	}
	r = spop_varint_read(s, end);
	if (r.rc == SPOP_OK) {
		*out = r.v;
		*p = s + r.len;
	}
	return r.rc;
}

/* Reads <varint len><bytes>; a length past `end` is a valid prefix. */
static inline int spop_str_get(const uint8_t **p, const uint8_t *end, struct spop_str *out)
{
	const uint8_t *s = *p;
	uint64_t len;
	int rc;

	rc = spop_varint_get(&s, end, &len);
	if (rc != SPOP_OK)
		return rc;
	if (len > (uint64_t)(size_t)(end - s))
		return SPOP_NEED_MORE;
	out->ptr = (const char *)s;
	out->len = (size_t)len;
	*p = s + len;
	return SPOP_OK;
}

/* Reads n bytes (a constant where it is inlined, so that the copy is too)
 * into dst, or only skips them when dst is NULL. */
static inline int spop_bytes_get(const uint8_t **p, const uint8_t *end, uint8_t *dst, size_t n)
{
	if (n > (size_t)(end - *p))
		return SPOP_NEED_MORE;
	if (dst)
		memcpy(dst, *p, n);
	*p += n;
	return SPOP_OK;
}

/* Reads one typed data item into *out, or with out NULL only checks it
 * (spop_msg_next() checks every argument before any is used, so checking
 * stores nothing). Both accept exactly the same bytes. With raw, an
 * integer type's varint is also stored there untouched (other types leave
 * it alone), so that a caller judging a range (max-frame-size) sees what
 * the INT32/UINT32 casts would hide. */
static inline __attribute__((always_inline)) int
spop_data_get(const uint8_t **p, const uint8_t *end, struct spop_data *out, uint64_t *raw)
{
	const uint8_t *s = *p;
	uint8_t tb, type;
	uint64_t v = 0;
	int rc;

	if (s == end)
		return SPOP_NEED_MORE;
	tb = *s++;
	type = tb & 0x0F;
	if (out) {
		memset(out, 0, sizeof(*out));
		out->type = type;
	}
	switch ((enum spop_type)type) {
	case SPOP_T_NULL:
		break;
	case SPOP_T_BOOL:
		/* Only the "true" flag may be set; anything else means the
		 * peer and we disagree on the format. */
		if ((tb & 0xF0) != 0 && (tb & 0xF0) != SPOP_BOOL_TRUE_FLAG)
			return SPOP_ERR;
		if (out)
			out->u.boolean = (tb & SPOP_BOOL_TRUE_FLAG) ? 1 : 0;
		break;
	case SPOP_T_INT32:
	case SPOP_T_UINT32:
	case SPOP_T_INT64:
	case SPOP_T_UINT64:
		rc = spop_varint_get(&s, end, &v);
		if (rc != SPOP_OK)
			return rc;
		if (raw)
			*raw = v;
		if (!out)
			break;
		if (type == SPOP_T_INT32)
			out->u.i32 = (int32_t)(int64_t)v; /* sender sign-extends */
		else if (type == SPOP_T_UINT32)
			out->u.u32 = (uint32_t)v;
		else
			out->u.u64 = v; /* the same bits as i64 */
		break;
	case SPOP_T_IPV4:
		rc = spop_bytes_get(&s, end, out ? out->u.ipv4 : NULL, 4);
		if (rc != SPOP_OK)
			return rc;
		break;
	case SPOP_T_IPV6:
		rc = spop_bytes_get(&s, end, out ? out->u.ipv6 : NULL, 16);
		if (rc != SPOP_OK)
			return rc;
		break;
	case SPOP_T_STR:
	case SPOP_T_BIN: {
		struct spop_str str;

		rc = spop_str_get(&s, end, &str);
		if (rc != SPOP_OK)
			return rc;
		if (out)
			out->u.str = str;
		break;
	}
	default:
		return SPOP_ERR;
	}
	*p = s;
	return SPOP_OK;
}

/* spop_msg_head() is inline: a NOTIFY calls it once per message and once
 * more at the end of the list. */
static inline int spop_msg_head(struct spop_cursor *c, struct spop_str *name, unsigned *nargs)
{
	const uint8_t *p = c->p;

	if (p == c->end)
		return 0;
	if (spop_str_get(&p, c->end, name) != SPOP_OK || p == c->end)
		return -1;
	*nargs = *p++;
	c->p = p;
	return 1;
}

/* spop_kv_next(), inline. */
static inline int spop_kv_get(struct spop_cursor *c, struct spop_str *name,
			      struct spop_data *val)
{
	const uint8_t *p = c->p;

	if (p == c->end)
		return 0;
	if (spop_str_get(&p, c->end, name) != SPOP_OK ||
	    spop_data_get(&p, c->end, val, NULL) != SPOP_OK)
		return -1;
	c->p = p;
	return 1;
}

/* ---- encoders ----------------------------------------------------------- */

void spop_wbuf_init(struct spop_wbuf *w, uint8_t *buf, size_t cap);
void spop_put_u8(struct spop_wbuf *w, uint8_t v);
void spop_put_u32be(struct spop_wbuf *w, uint32_t v);
void spop_put_varint(struct spop_wbuf *w, uint64_t v);
void spop_put_bytes(struct spop_wbuf *w, const void *p, size_t n);
void spop_put_name(struct spop_wbuf *w, const char *name, size_t len);
void spop_put_data(struct spop_wbuf *w, const struct spop_data *d);

/* Starts a frame: reserves the length field, writes type, flags, stream-id
 * and frame-id. Returns the offset to hand to spop_frame_end(). */
size_t spop_frame_begin(struct spop_wbuf *w, uint8_t type, uint32_t flags,
			uint64_t stream_id, uint64_t frame_id);
/* Patches the length of the frame started at `start`. Returns 0, or -1 when
 * the buffer overflowed (w->err) or the frame exceeds max_frame bytes after
 * its length field. */
int spop_frame_end(struct spop_wbuf *w, size_t start, uint32_t max_frame);

/* Actions, for an ACK payload. */
void spop_put_set_var(struct spop_wbuf *w, uint8_t scope, const char *name,
		      size_t name_len, const struct spop_data *val);
void spop_put_unset_var(struct spop_wbuf *w, uint8_t scope, const char *name,
			size_t name_len);

/* A SET-VAR action's constant head (action, argument count, scope, name),
 * laid out as on the wire and built at compile time by SPOP_VAR(), so that
 * an answer writes each variable with one bounds check and one copy: every
 * decision writes a dozen of them. spop_put_var_*() write the same bytes as
 * spop_put_set_var() with an INT64, STR or BOOL value, and like it set
 * w->err when the action does not fit. */
#define SPOP_VAR_NAME_MAX 32
#define SPOP_VAR_HEAD_FIXED 4
struct spop_var {
	uint8_t action;   /* SPOP_ACT_SET_VAR */
	uint8_t nargs;    /* 3 */
	uint8_t scope;
	uint8_t name_len; /* the name's varint length: one byte */
	char name[SPOP_VAR_NAME_MAX];
};
/* A name over SPOP_VAR_NAME_MAX bytes does not compile: the check is an
 * array of size -1, since an initializer too long is only a warning. */
#define SPOP_VAR_NAME_FITS(lit) (0 * sizeof(char[sizeof(lit) <= SPOP_VAR_NAME_MAX + 1 ? 1 : -1]))
#define SPOP_VAR(scope, lit) \
	{ SPOP_ACT_SET_VAR, 3, (scope), sizeof(lit) - 1 + SPOP_VAR_NAME_FITS(lit), lit }

/* The writers are inline: with a head that is a constant of the caller (a
 * static SPOP_VAR()), its copy compiles to a few moves.
 *
 * spop_var_*_at() write one action at p without any check and return its
 * end: for a caller that made sure of the room first, once for all its
 * actions, from the most each can take (SPOP_VAR_*_MAX). An answer writes
 * a dozen of them. spop_put_var_*() are the same with the check. */
#define SPOP_VAR_HEAD_MAX (SPOP_VAR_HEAD_FIXED + SPOP_VAR_NAME_MAX)
#define SPOP_VAR_INT64_MAX (SPOP_VAR_HEAD_MAX + 1 + SPOP_VARINT_MAX)
#define SPOP_VAR_BOOL_MAX (SPOP_VAR_HEAD_MAX + 1)
#define SPOP_VAR_STR_MAX(len) (SPOP_VAR_HEAD_MAX + 1 + SPOP_VARINT_MAX + (len))

static inline __attribute__((always_inline)) uint8_t *
spop_var_head_at(uint8_t *p, const struct spop_var *var)
{
	size_t head = SPOP_VAR_HEAD_FIXED + var->name_len;

	memcpy(p, var, head);
	return p + head;
}

static inline __attribute__((always_inline)) uint8_t *
spop_var_int64_at(uint8_t *p, const struct spop_var *var, int64_t v)
{
	p = spop_var_head_at(p, var);
	*p++ = SPOP_T_INT64;
	return spop_varint_at(p, (uint64_t)v);
}

/* memcpy() of a few bytes, inline: a call to the library costs more than
 * the copy of an answer's strings (the rule, its policy, the RateLimit
 * value) or of the parts of an identity key. Two copies of a fixed size
 * that overlap cover every byte, and none reads past s + n or writes past
 * p + n. */
static inline __attribute__((always_inline)) void spop_copy_short(uint8_t *p, const char *s,
								  size_t n)
{
	if (n > 32) {
		memcpy(p, s, n);
	} else if (n >= 16) {
		memcpy(p, s, 16);
		memcpy(p + n - 16, s + n - 16, 16);
	} else if (n >= 8) {
		memcpy(p, s, 8);
		memcpy(p + n - 8, s + n - 8, 8);
	} else if (n >= 4) {
		memcpy(p, s, 4);
		memcpy(p + n - 4, s + n - 4, 4);
	} else if (n >= 2) {
		memcpy(p, s, 2);
		memcpy(p + n - 2, s + n - 2, 2);
	} else if (n) {
		p[0] = (uint8_t)s[0];
	}
}

static inline __attribute__((always_inline)) uint8_t *
spop_var_str_at(uint8_t *p, const struct spop_var *var, const char *s, size_t len)
{
	p = spop_var_head_at(p, var);
	*p++ = SPOP_T_STR;
	p = spop_varint_at(p, len);
	spop_copy_short(p, s, len);
	return p + len;
}

static inline __attribute__((always_inline)) uint8_t *
spop_var_bool_at(uint8_t *p, const struct spop_var *var, int v)
{
	p = spop_var_head_at(p, var);
	*p++ = SPOP_T_BOOL | (v ? SPOP_BOOL_TRUE_FLAG : 0);
	return p;
}

static inline uint8_t *spop_var_room(struct spop_wbuf *w, const struct spop_var *var,
				     size_t value)
{
	size_t head = SPOP_VAR_HEAD_FIXED + var->name_len;
	uint8_t *p;

	if (w->err || head > w->cap - w->len || value > w->cap - w->len - head) {
		w->err = 1;
		return NULL;
	}
	p = w->buf + w->len;
	memcpy(p, var, head);
	w->len += head + value;
	return p + head;
}

/* The exact writer, for a buffer that may not hold the longest varint. */
void spop_put_var_int64_exact(struct spop_wbuf *w, const struct spop_var *var, int64_t v);

static inline void spop_put_var_int64(struct spop_wbuf *w, const struct spop_var *var,
				      int64_t v)
{
	/* With room for the longest varint (nearly always), the value is
	 * written without being measured first. */
	if (w->err || SPOP_VAR_HEAD_FIXED + (size_t)var->name_len + 1 + SPOP_VARINT_MAX >
			      w->cap - w->len) {
		spop_put_var_int64_exact(w, var, v);
		return;
	}
	w->len = (size_t)(spop_var_int64_at(w->buf + w->len, var, v) - w->buf);
}

static inline void spop_put_var_str(struct spop_wbuf *w, const struct spop_var *var,
				    const char *s, size_t len)
{
	size_t n = spop_varint_len(len);
	uint8_t *p;

	if (len > SIZE_MAX - 1 - SPOP_VARINT_MAX) {
		w->err = 1;
		return;
	}
	p = spop_var_room(w, var, 1 + n + len);
	if (!p)
		return;
	p[0] = SPOP_T_STR;
	spop_varint_put(len, p + 1);
	if (len)
		memcpy(p + 1 + n, s, len);
}

static inline void spop_put_var_bool(struct spop_wbuf *w, const struct spop_var *var, int v)
{
	uint8_t *p = spop_var_room(w, var, 1);

	if (p)
		p[0] = SPOP_T_BOOL | (v ? SPOP_BOOL_TRUE_FLAG : 0);
}

/* Whole frames. Each returns 0, or -1 when it does not fit. */
int spop_encode_agent_hello(struct spop_wbuf *w, uint32_t max_frame_size,
			    const char *capabilities, uint32_t frame_limit);
int spop_encode_agent_disconnect(struct spop_wbuf *w, uint32_t status,
				 const char *message, uint32_t frame_limit);
/* The HAProxy side, for the load generator and tests. */
int spop_encode_haproxy_hello(struct spop_wbuf *w, uint32_t max_frame_size,
			      const char *capabilities, int healthcheck,
			      const char *engine_id);
int spop_encode_haproxy_disconnect(struct spop_wbuf *w, uint32_t status,
				   const char *message);

/* Convenience constructors for typed data. */
struct spop_data spop_null(void);
struct spop_data spop_bool(int v);
struct spop_data spop_int64(int64_t v);
struct spop_data spop_uint32(uint32_t v);
struct spop_data spop_strn(const char *s, size_t len);
struct spop_data spop_cstr(const char *s);

/* Human-readable name of a DISCONNECT status, for logs and DISCONNECT
 * messages. Never NULL. */
const char *spop_status_str(int status);

/* An integer argument as int64 (UINT64 saturated). False for other types. */
static inline bool spop_data_int(const struct spop_data *d, int64_t *out)
{
	if (!d)
		return false;
	switch ((enum spop_type)d->type) {
	case SPOP_T_INT32:
		*out = d->u.i32;
		return true;
	case SPOP_T_UINT32:
		*out = d->u.u32;
		return true;
	case SPOP_T_INT64:
		*out = d->u.i64;
		return true;
	case SPOP_T_UINT64:
		*out = d->u.u64 > INT64_MAX ? INT64_MAX : (int64_t)d->u.u64;
		return true;
	case SPOP_T_NULL:
	case SPOP_T_BOOL:
	case SPOP_T_IPV4:
	case SPOP_T_IPV6:
	case SPOP_T_STR:
	case SPOP_T_BIN:
		break;
	}
	return false;
}

#endif
