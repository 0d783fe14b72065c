/* SPDX-License-Identifier: Apache-2.0 */
/* spop.c: the SPOP 2.0 codec. See spop.h for the contracts and the
 * guarantees over untrusted input. Every read is bounded by `end`; every
 * write by the spop_wbuf capacity. */
#include "spop.h"

#include <endian.h>
#include <stddef.h>
#include <string.h>

/* ---- primitives ------------------------------------------------------- */

/* The encoding is additive: the first byte carries 4 bits above 240, each
 * following byte adds itself (continuation bit included) shifted by 4, 11,
 * 18... So the bytes are summed, never masked. Requires s <= end. */
struct spop_varint spop_varint_read(const uint8_t *s, const uint8_t *end)
{
	struct spop_varint r = { 0, 0, SPOP_NEED_MORE };
	size_t avail = (size_t)(end - s);
	unsigned shift;
	uint64_t v, b;
	size_t i;

	if (avail == 0)
		return r;
	v = s[0];
	if (v < 240)
		return (struct spop_varint){ v, 1, SPOP_OK };
	/* Two and three bytes, the loop's first two turns written out: a
	 * stream id takes three bytes once HAProxy has made 2288 streams. */
	if (avail < 2)
		return r;
	b = s[1];
	v += b << 4;
	if (b < 128)
		return (struct spop_varint){ v, 2, SPOP_OK };
	if (avail < 3)
		return r;
	b = s[2];
	v += b << 11;
	if (b < 128)
		return (struct spop_varint){ v, 3, SPOP_OK };
	/* Nine bytes sum to less than 2^62: no overflow before the tenth. */
	for (i = 3, shift = 18; i < SPOP_VARINT_MAX - 1; i++, shift += 7) {
		if (i >= avail)
			return r;
		b = s[i];
		v += b << shift;
		if (b < 128)
			return (struct spop_varint){ v, (uint32_t)(i + 1), SPOP_OK };
	}
	if (i >= avail)
		return r;
	/* The tenth byte (shift 60): check before shifting and before adding
	 * so that no bit is silently lost; it must end the varint. */
	b = s[i];
	if (b < 128 && b <= (UINT64_MAX >> shift) && (b << shift) <= UINT64_MAX - v)
		return (struct spop_varint){ v + (b << shift), SPOP_VARINT_MAX, SPOP_OK };
	r.rc = SPOP_ERR;
	return r;
}

int spop_varint_decode(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
	struct spop_varint r = spop_varint_read(*p, end);

	if (r.rc == SPOP_OK) {
		*out = r.v;
		*p += r.len;
	}
	return r.rc;
}

size_t spop_varint_encode(uint64_t v, uint8_t *out)
{
	return spop_varint_put(v, out);
}

int spop_name_decode(const uint8_t **p, const uint8_t *end, struct spop_str *out)
{
	return spop_str_get(p, end, out);
}

int spop_data_decode(const uint8_t **p, const uint8_t *end, struct spop_data *out)
{
	return spop_data_get(p, end, out, NULL);
}

static uint32_t get_u32be(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
	       (uint32_t)p[3];
}

int spop_frame_peek(const uint8_t *buf, size_t avail, uint32_t max_frame,
		    struct spop_frame *f, int *status)
{
	const uint8_t *p, *end;
	uint32_t len;
	int st = SPOP_ST_NORMAL, rc = SPOP_OK;

	memset(f, 0, sizeof(*f));
	if (avail < 4) {
		rc = SPOP_NEED_MORE;
		goto out;
	}
	len = get_u32be(buf);
	/* The length is judged before anything else, so the caller never
	 * waits for (or buffers) more than it agreed to. */
	if (len > max_frame) {
		st = SPOP_ST_TOO_BIG;
		rc = SPOP_ERR;
		goto out;
	}
	if (len < SPOP_FRAME_HDR_MIN) {
		st = SPOP_ST_INVALID;
		rc = SPOP_ERR;
		goto out;
	}
	f->len = len; /* tells the caller how much to wait for */
	if (len > avail - 4) {
		rc = SPOP_NEED_MORE;
		goto out;
	}
	p = buf + 4;
	end = p + len;
	f->type = p[0];
	f->flags = get_u32be(p + 1);
	p += 5;
	/* The frame is complete: a varint cut by its end is broken. */
	if (spop_varint_get(&p, end, &f->stream_id) != SPOP_OK ||
	    spop_varint_get(&p, end, &f->frame_id) != SPOP_OK) {
		memset(f, 0, sizeof(*f));
		st = SPOP_ST_INVALID;
		rc = SPOP_ERR;
		goto out;
	}
	f->payload = p;
	f->payload_len = (size_t)(end - p);
out:
	if (status)
		*status = st;
	return rc;
}

/* ---- lists inside a complete payload ------------------------------------ */

int spop_kv_next(struct spop_cursor *c, struct spop_str *name, struct spop_data *val)
{
	return spop_kv_get(c, name, val);
}

int spop_kv_skip(struct spop_cursor *c, unsigned n)
{
	const uint8_t *p = c->p;
	struct spop_str k;

	for (unsigned i = 0; i < n; i++)
		if (spop_str_get(&p, c->end, &k) != SPOP_OK ||
		    spop_data_get(&p, c->end, NULL, NULL) != SPOP_OK)
			return -1;
	c->p = p;
	return 0;
}

int spop_msg_next(struct spop_cursor *c, struct spop_str *name, unsigned *nargs,
		  struct spop_cursor *args)
{
	struct spop_cursor kv = *c;
	const uint8_t *first;
	int rc = spop_msg_head(&kv, name, nargs);

	if (rc != 1)
		return rc;
	/* Walk the arguments now so the caller's later spop_kv_next() calls
	 * cannot fail halfway through a message. */
	first = kv.p;
	if (spop_kv_skip(&kv, *nargs) < 0)
		return -1;
	args->p = first;
	args->end = kv.p;
	*c = kv;
	return 1;
}

static int key_is(struct spop_str k, const char *lit)
{
	size_t n = strlen(lit);

	return k.len == n && memcmp(k.ptr, lit, n) == 0;
}

/* Judges a max-frame-size value from its decoded type and raw varint:
 * any integer type is accepted when its value fits [MIN_FRAME_SIZE,
 * UINT32_MAX]. Returns 0 and sets *out, or -1. */
static int frame_size_value(const struct spop_data *d, uint64_t raw, uint32_t *out)
{
	switch ((enum spop_type)d->type) {
	case SPOP_T_INT32:
	case SPOP_T_INT64:
		if ((int64_t)raw < 0)
			return -1;
		break;
	case SPOP_T_UINT32:
	case SPOP_T_UINT64:
		break;
	case SPOP_T_NULL:
	case SPOP_T_BOOL:
	case SPOP_T_IPV4:
	case SPOP_T_IPV6:
	case SPOP_T_STR:
	case SPOP_T_BIN:
	default:
		return -1;
	}
	if (raw > UINT32_MAX || raw < SPOP_MIN_FRAME_SIZE)
		return -1;
	*out = (uint32_t)raw;
	return 0;
}

/* A key with the wrong type counts as present but unusable: the version
 * gives BAD_VERSION, max-frame-size BAD_FRAME_SIZE, capabilities INVALID.
 * Optional keys (healthcheck, engine-id) of the wrong type are ignored.
 * When a key repeats, the last one wins. */
int spop_hello_parse(const uint8_t *payload, size_t len, struct spop_hello *h, int *status)
{
	struct spop_str k;
	struct spop_data v;
	const uint8_t *p = payload, *end = len ? payload + len : payload;
	int bad_version = 0, bad_frame_size = 0, bad_caps = 0;
	int st = SPOP_ST_NORMAL;
	uint64_t raw;

	memset(h, 0, sizeof(*h));
	while (p != end) {
		raw = 0;
		if (spop_str_get(&p, end, &k) != SPOP_OK ||
		    spop_data_get(&p, end, &v, &raw) != SPOP_OK) {
			st = SPOP_ST_INVALID;
			goto out;
		}
		if (key_is(k, "supported-versions")) {
			h->has_version = 1;
			bad_version = v.type != SPOP_T_STR;
			if (!bad_version)
				h->supported_versions = v.u.str;
		} else if (key_is(k, "max-frame-size")) {
			h->has_max_frame_size = 1;
			bad_frame_size = frame_size_value(&v, raw, &h->max_frame_size) != 0;
		} else if (key_is(k, "capabilities")) {
			h->has_capabilities = 1;
			bad_caps = v.type != SPOP_T_STR;
			if (!bad_caps)
				h->capabilities = v.u.str;
		} else if (key_is(k, "healthcheck")) {
			if (v.type == SPOP_T_BOOL)
				h->healthcheck = v.u.boolean;
		} else if (key_is(k, "engine-id")) {
			if (v.type == SPOP_T_STR)
				h->engine_id = v.u.str;
		}
	}
	if (!h->has_version)
		st = SPOP_ST_NO_VERSION;
	else if (!h->has_max_frame_size)
		st = SPOP_ST_NO_FRAME_SIZE;
	else if (!h->has_capabilities)
		st = SPOP_ST_NO_CAPABILITIES;
	else if (bad_version || !spop_version_supported(h->supported_versions))
		st = SPOP_ST_BAD_VERSION;
	else if (bad_frame_size)
		st = SPOP_ST_BAD_FRAME_SIZE;
	else if (bad_caps)
		st = SPOP_ST_INVALID;
out:
	if (status)
		*status = st;
	return st == SPOP_ST_NORMAL ? 0 : -1;
}

static int is_space(char c)
{
	return c == ' ' || c == '\t';
}

int spop_version_supported(struct spop_str versions)
{
	const char *p = versions.ptr, *end;

	if (!p)
		return 0;
	end = p + versions.len;
	while (p != end) {
		const char *item, *item_end;

		while (p != end && is_space(*p))
			p++;
		item = p;
		while (p != end && *p != ',')
			p++;
		item_end = p;
		while (item_end != item && is_space(item_end[-1]))
			item_end--;
		if (item_end - item == 3 && memcmp(item, "2.0", 3) == 0)
			return 1;
		if (p != end)
			p++; /* the comma */
	}
	return 0;
}

/* ---- encoders ----------------------------------------------------------- */

void spop_wbuf_init(struct spop_wbuf *w, uint8_t *buf, size_t cap)
{
	w->buf = buf;
	w->cap = buf ? cap : 0;
	w->len = 0;
	w->err = 0;
}

void spop_put_bytes(struct spop_wbuf *w, const void *p, size_t n)
{
	if (w->err)
		return;
	if (n > w->cap - w->len) {
		w->err = 1;
		return;
	}
	if (n) {
		memcpy(w->buf + w->len, p, n);
		w->len += n;
	}
}

/* Reserves n bytes for the caller to write; NULL (and w->err set) when they
 * do not fit. The encoders below check their whole item once through it. */
static uint8_t *wbuf_room(struct spop_wbuf *w, size_t n)
{
	uint8_t *p;

	if (w->err)
		return NULL;
	if (n > w->cap - w->len) {
		w->err = 1;
		return NULL;
	}
	p = w->buf + w->len;
	w->len += n;
	return p;
}

void spop_put_u8(struct spop_wbuf *w, uint8_t v)
{
	uint8_t *p = wbuf_room(w, 1);

	if (p)
		*p = v;
}

/* One byte swap and one store: GCC leaves four byte stores as shifts and
 * merges, some fifteen instructions, and every answer's header has two. */
static void set_u32be(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, sizeof(v));
}

void spop_put_u32be(struct spop_wbuf *w, uint32_t v)
{
	uint8_t *p = wbuf_room(w, 4);

	if (p)
		set_u32be(p, v);
}

void spop_put_varint(struct spop_wbuf *w, uint64_t v)
{
	uint8_t *p = wbuf_room(w, spop_varint_len(v));

	if (p)
		spop_varint_encode(v, p);
}

void spop_put_name(struct spop_wbuf *w, const char *name, size_t len)
{
	spop_put_varint(w, len);
	spop_put_bytes(w, name, len);
}

/* An unknown type cannot be written faithfully: it poisons the buffer. */
void spop_put_data(struct spop_wbuf *w, const struct spop_data *d)
{
	switch ((enum spop_type)d->type) {
	case SPOP_T_NULL:
		spop_put_u8(w, SPOP_T_NULL);
		break;
	case SPOP_T_BOOL:
		spop_put_u8(w, SPOP_T_BOOL | (d->u.boolean ? SPOP_BOOL_TRUE_FLAG : 0));
		break;
	case SPOP_T_INT32:
		spop_put_u8(w, SPOP_T_INT32);
		spop_put_varint(w, (uint64_t)(int64_t)d->u.i32);
		break;
	case SPOP_T_UINT32:
		spop_put_u8(w, SPOP_T_UINT32);
		spop_put_varint(w, d->u.u32);
		break;
	case SPOP_T_INT64:
		spop_put_u8(w, SPOP_T_INT64);
		spop_put_varint(w, (uint64_t)d->u.i64);
		break;
	case SPOP_T_UINT64:
		spop_put_u8(w, SPOP_T_UINT64);
		spop_put_varint(w, d->u.u64);
		break;
	case SPOP_T_IPV4:
		spop_put_u8(w, SPOP_T_IPV4);
		spop_put_bytes(w, d->u.ipv4, 4);
		break;
	case SPOP_T_IPV6:
		spop_put_u8(w, SPOP_T_IPV6);
		spop_put_bytes(w, d->u.ipv6, 16);
		break;
	case SPOP_T_STR:
	case SPOP_T_BIN:
		spop_put_u8(w, d->type);
		spop_put_name(w, d->u.str.ptr, d->u.str.len);
		break;
	default:
		w->err = 1;
		break;
	}
}

/* The header in one piece: every answer starts with one. With room for
 * the longest ids (nearly always), they are encoded without being
 * measured first. */
size_t spop_frame_begin(struct spop_wbuf *w, uint8_t type, uint32_t flags,
			uint64_t stream_id, uint64_t frame_id)
{
	size_t start = w->len, n;
	uint8_t *p;

	if (!w->err && 9 + 2 * SPOP_VARINT_MAX <= w->cap - w->len) {
		p = w->buf + w->len;
		w->len += (size_t)(spop_varint_at(spop_varint_at(p + 9, stream_id), frame_id) - p);
	} else {
		n = spop_varint_len(stream_id);
		p = wbuf_room(w, 9 + n + spop_varint_len(frame_id));
		if (!p)
			return start;
		spop_varint_put(stream_id, p + 9);
		spop_varint_put(frame_id, p + 9 + n);
	}
	set_u32be(p, 0); /* patched by spop_frame_end() */
	p[4] = type;
	set_u32be(p + 5, flags);
	return start;
}

/* An oversized frame also sets w->err, so the buffer cannot be sent by
 * mistake after the -1 is ignored. */
int spop_frame_end(struct spop_wbuf *w, size_t start, uint32_t max_frame)
{
	size_t len;

	if (w->err)
		return -1;
	if (start > w->len || 4 > w->len - start) {
		w->err = 1;
		return -1;
	}
	len = w->len - start - 4;
	if (len > max_frame) {
		w->err = 1;
		return -1;
	}
	set_u32be(w->buf + start, (uint32_t)len);
	return 0;
}

void spop_put_set_var(struct spop_wbuf *w, uint8_t scope, const char *name,
		      size_t name_len, const struct spop_data *val)
{
	spop_put_u8(w, SPOP_ACT_SET_VAR);
	spop_put_u8(w, 3);
	spop_put_u8(w, scope);
	spop_put_name(w, name, name_len);
	spop_put_data(w, val);
}

/* The head as on the wire: the name's varint length is the one byte
 * name_len (SPOP_VAR_NAME_MAX < 240). */
_Static_assert(offsetof(struct spop_var, name) == SPOP_VAR_HEAD_FIXED,
	       "struct spop_var must have the SET-VAR head's wire layout");
_Static_assert(SPOP_VAR_NAME_MAX < 240, "a variable's name length is one varint byte");

void spop_put_var_int64_exact(struct spop_wbuf *w, const struct spop_var *var, int64_t v)
{
	uint8_t *p = spop_var_room(w, var, 1 + spop_varint_len((uint64_t)v));

	if (!p)
		return;
	p[0] = SPOP_T_INT64;
	spop_varint_put((uint64_t)v, p + 1);
}

void spop_put_unset_var(struct spop_wbuf *w, uint8_t scope, const char *name,
			size_t name_len)
{
	spop_put_u8(w, SPOP_ACT_UNSET_VAR);
	spop_put_u8(w, 2);
	spop_put_u8(w, scope);
	spop_put_name(w, name, name_len);
}

/* Writes one KV item whose key is a C string literal. */
static void put_kv(struct spop_wbuf *w, const char *key, struct spop_data v)
{
	spop_put_name(w, key, strlen(key));
	spop_put_data(w, &v);
}

int spop_encode_agent_hello(struct spop_wbuf *w, uint32_t max_frame_size,
			    const char *capabilities, uint32_t frame_limit)
{
	size_t start = spop_frame_begin(w, SPOP_FRAME_AGENT_HELLO, SPOP_FLAG_FIN, 0, 0);

	put_kv(w, "version", spop_cstr("2.0"));
	put_kv(w, "max-frame-size", spop_uint32(max_frame_size));
	put_kv(w, "capabilities", spop_cstr(capabilities));
	return spop_frame_end(w, start, frame_limit);
}

/* A NULL message sends the status's own text. */
static int encode_disconnect(struct spop_wbuf *w, uint8_t type, uint32_t status,
			     const char *message, uint32_t frame_limit)
{
	size_t start = spop_frame_begin(w, type, SPOP_FLAG_FIN, 0, 0);

	put_kv(w, "status-code", spop_uint32(status));
	put_kv(w, "message", spop_cstr(message ? message : spop_status_str((int)status)));
	return spop_frame_end(w, start, frame_limit);
}

int spop_encode_agent_disconnect(struct spop_wbuf *w, uint32_t status,
				 const char *message, uint32_t frame_limit)
{
	return encode_disconnect(w, SPOP_FRAME_AGENT_DISCONNECT, status, message,
				 frame_limit);
}

/* The HAProxy side announces its own limit, so only the buffer bounds the
 * frame (a test may announce a size too small to hold the HELLO itself). */
int spop_encode_haproxy_hello(struct spop_wbuf *w, uint32_t max_frame_size,
			      const char *capabilities, int healthcheck,
			      const char *engine_id)
{
	size_t start = spop_frame_begin(w, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);

	put_kv(w, "supported-versions", spop_cstr("2.0"));
	put_kv(w, "max-frame-size", spop_uint32(max_frame_size));
	put_kv(w, "capabilities", spop_cstr(capabilities));
	if (healthcheck)
		put_kv(w, "healthcheck", spop_bool(1));
	if (engine_id)
		put_kv(w, "engine-id", spop_cstr(engine_id));
	return spop_frame_end(w, start, UINT32_MAX);
}

int spop_encode_haproxy_disconnect(struct spop_wbuf *w, uint32_t status,
				   const char *message)
{
	return encode_disconnect(w, SPOP_FRAME_HAPROXY_DISCONNECT, status, message,
				 UINT32_MAX);
}

struct spop_data spop_null(void)
{
	struct spop_data d;

	memset(&d, 0, sizeof(d));
	d.type = SPOP_T_NULL;
	return d;
}

struct spop_data spop_bool(int v)
{
	struct spop_data d = spop_null();

	d.type = SPOP_T_BOOL;
	d.u.boolean = v ? 1 : 0;
	return d;
}

struct spop_data spop_int64(int64_t v)
{
	struct spop_data d = spop_null();

	d.type = SPOP_T_INT64;
	d.u.i64 = v;
	return d;
}

struct spop_data spop_uint32(uint32_t v)
{
	struct spop_data d = spop_null();

	d.type = SPOP_T_UINT32;
	d.u.u32 = v;
	return d;
}

struct spop_data spop_strn(const char *s, size_t len)
{
	struct spop_data d = spop_null();

	d.type = SPOP_T_STR;
	d.u.str.ptr = s;
	d.u.str.len = len;
	return d;
}

/* NULL is taken as the empty string. */
struct spop_data spop_cstr(const char *s)
{
	return s ? spop_strn(s, strlen(s)) : spop_strn("", 0);
}

const char *spop_status_str(int status)
{
	switch (status) {
	case SPOP_ST_NORMAL: return "normal";
	case SPOP_ST_IO: return "I/O error";
	case SPOP_ST_TIMEOUT: return "a timeout occurred";
	case SPOP_ST_TOO_BIG: return "frame is too big";
	case SPOP_ST_INVALID: return "invalid frame received";
	case SPOP_ST_NO_VERSION: return "version value not found";
	case SPOP_ST_NO_FRAME_SIZE: return "max-frame-size value not found";
	case SPOP_ST_NO_CAPABILITIES: return "capabilities value not found";
	case SPOP_ST_BAD_VERSION: return "unsupported version";
	case SPOP_ST_BAD_FRAME_SIZE: return "max-frame-size too big or too small";
	case SPOP_ST_NO_FRAGMENTATION: return "payload fragmentation is not supported";
	case SPOP_ST_INTERLACED: return "invalid interlaced frames";
	case SPOP_ST_NO_FRAME_ID: return "frame-id not found";
	case SPOP_ST_RESOURCE: return "resource allocation error";
	default: return "an unknown error occurred";
	}
}
