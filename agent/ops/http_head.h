/* SPDX-License-Identifier: Apache-2.0 */
/* http_head.h: the head of an HTTP/1.x request (request line and header
 * fields) parsed from untrusted bytes, with no I/O and no allocation.
 *
 * Strict where the agent needs nothing more: a method of at most
 * HTTP_HEAD_METHOD_MAX token characters, an origin-form target ("/...",
 * visible ASCII, no '#'), HTTP/1.0 or HTTP/1.1, header fields "name:
 * value" with token names, no obsolete line folding, at most
 * HTTP_HEAD_HEADERS_MAX of them. Lines end in CRLF or a bare LF (RFC 9112
 * section 2.2 lets a server accept it, and `printf ... | nc` sends it).
 *
 * Guarantees: the parser reads buf[0..len) and nothing else, and every
 * span it returns lies inside the head it accepted. It has no size limit
 * of its own: the caller caps len. */
#ifndef RL_HTTP_HEAD_H
#define RL_HTTP_HEAD_H

#include <stddef.h>

#define HTTP_HEAD_METHOD_MAX 16
#define HTTP_HEAD_HEADERS_MAX 32

enum http_head_status {
	HTTP_HEAD_DONE,   /* a whole head */
	HTTP_HEAD_MORE,   /* no error so far, the head has not ended */
	HTTP_HEAD_ERROR,  /* not a head this parser accepts; more bytes cannot help */
};

/* The bytes buf[off, off + len) of the buffer that was parsed. */
struct http_span {
	size_t off, len;
};

struct http_head {
	size_t len;               /* bytes of the head, its blank line included */
	struct http_span method;
	struct http_span target;  /* path and query */
	struct http_span path;    /* the target up to '?' */
	struct http_span query;   /* after '?'; len 0 without one */
	int minor;                /* HTTP/1.minor: 0 or 1 */
	size_t nheaders;
	struct {
		struct http_span name;
		struct http_span value;  /* without surrounding spaces and tabs */
	} header[HTTP_HEAD_HEADERS_MAX];
};

/* Parses buf[0..len). HTTP_HEAD_DONE: *h describes the head, which ends at
 * h->len <= len (bytes after it, a body, are not looked at). The byte that
 * follows the method, the path, the query and each header value lies inside
 * the head and belongs to none of them (a space, '?', tab, CR or LF), so a
 * caller may overwrite it with a NUL. HTTP_HEAD_MORE: every byte so far is
 * valid, and the head's blank line has not come. HTTP_HEAD_ERROR: the bytes
 * can begin no head. *h is unspecified unless HTTP_HEAD_DONE. */
enum http_head_status http_head_parse(const char *buf, size_t len, struct http_head *h);

/* The index in h->header of the first field named `name` (in any case),
 * or -1. */
int http_head_find(const char *buf, const struct http_head *h, const char *name);

#endif
