/* SPDX-License-Identifier: Apache-2.0 */
#include "http_head.h"

#include <string.h>
#include <strings.h>

/* RFC 9110 tchar: the characters of methods and field names. */
static int is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* Visible ASCII but '#': a fragment is never sent in a request. */
static int is_target(unsigned char c)
{
	return c > 0x20 && c < 0x7f && c != '#';
}

/* A field value's bytes: visible ASCII, space, tab, and obs-text. */
static int is_value(unsigned char c)
{
	return (c >= 0x20 && c != 0x7f) || c == '\t';
}

/* The end of a line at *i: CRLF or LF. On HTTP_HEAD_DONE *i is past it. */
static enum http_head_status eol(const unsigned char *p, size_t len, size_t *i)
{
	if (*i == len)
		return HTTP_HEAD_MORE;
	if (p[*i] == '\n') {
		*i += 1;
		return HTTP_HEAD_DONE;
	}
	if (p[*i] != '\r')
		return HTTP_HEAD_ERROR;
	if (*i + 1 == len)
		return HTTP_HEAD_MORE;
	if (p[*i + 1] != '\n')
		return HTTP_HEAD_ERROR;
	*i += 2;
	return HTTP_HEAD_DONE;
}

/* The request line; on HTTP_HEAD_DONE *i is at the first header line. */
static enum http_head_status request_line(const unsigned char *p, size_t len, size_t *i,
					  struct http_head *h)
{
	static const char version[] = "HTTP/1.";
	size_t n = 0, start;

	while (n < len && n <= HTTP_HEAD_METHOD_MAX && is_tchar(p[n]))
		n++;
	if (n > HTTP_HEAD_METHOD_MAX)
		return HTTP_HEAD_ERROR;
	if (n == len)
		return HTTP_HEAD_MORE;
	if (n == 0 || p[n] != ' ')
		return HTTP_HEAD_ERROR;
	h->method.len = n++;
	start = n;
	if (n == len)
		return HTTP_HEAD_MORE;
	if (p[n] != '/')
		return HTTP_HEAD_ERROR;
	while (n < len && is_target(p[n]))
		n++;
	if (n == len)
		return HTTP_HEAD_MORE;
	if (p[n] != ' ')
		return HTTP_HEAD_ERROR;
	h->target.off = h->path.off = start;
	h->target.len = h->path.len = n - start;
	for (size_t k = start; k < n; k++)
		if (p[k] == '?') {
			h->path.len = k - start;
			h->query.off = k + 1;
			h->query.len = n - k - 1;
			break;
		}
	n++;
	for (size_t k = 0; k < sizeof(version) - 1; k++, n++) {
		if (n == len)
			return HTTP_HEAD_MORE;
		if (p[n] != (unsigned char)version[k])
			return HTTP_HEAD_ERROR;
	}
	if (n == len)
		return HTTP_HEAD_MORE;
	if (p[n] != '0' && p[n] != '1')
		return HTTP_HEAD_ERROR;
	h->minor = p[n++] - '0';
	*i = n;
	return eol(p, len, i);
}

/* One "name: value" line at *i; on HTTP_HEAD_DONE *i is past its end. */
static enum http_head_status header_line(const unsigned char *p, size_t len, size_t *i,
					 struct http_head *h)
{
	size_t n = *i, start = n, vend;

	while (n < len && is_tchar(p[n]))
		n++;
	if (n == len)
		return HTTP_HEAD_MORE;
	if (n == start || p[n] != ':' || h->nheaders == HTTP_HEAD_HEADERS_MAX)
		return HTTP_HEAD_ERROR;
	h->header[h->nheaders].name.off = start;
	h->header[h->nheaders].name.len = n - start;
	n++;
	while (n < len && (p[n] == ' ' || p[n] == '\t'))
		n++;
	start = vend = n;
	while (n < len && is_value(p[n])) {
		n++;
		if (p[n - 1] != ' ' && p[n - 1] != '\t')
			vend = n;
	}
	h->header[h->nheaders].value.off = start;
	h->header[h->nheaders].value.len = vend - start;
	h->nheaders++;
	*i = n;
	return eol(p, len, i);
}

enum http_head_status http_head_parse(const char *buf, size_t len, struct http_head *h)
{
	const unsigned char *p = (const unsigned char *)buf;
	enum http_head_status st;
	size_t i = 0;

	memset(h, 0, sizeof(*h));
	st = request_line(p, len, &i, h);
	while (st == HTTP_HEAD_DONE) {
		if (i == len)
			return HTTP_HEAD_MORE;
		if (p[i] == '\r' || p[i] == '\n') {
			st = eol(p, len, &i);
			if (st == HTTP_HEAD_DONE)
				h->len = i;
			return st;
		}
		st = header_line(p, len, &i, h);
	}
	return st;
}

int http_head_find(const char *buf, const struct http_head *h, const char *name)
{
	size_t n = strlen(name);

	for (size_t k = 0; k < h->nheaders; k++)
		if (h->header[k].name.len == n &&
		    strncasecmp(buf + h->header[k].name.off, name, n) == 0)
			return (int)k;
	return -1;
}
