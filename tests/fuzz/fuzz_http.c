/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: HTTP request heads (http_head.c), the bytes anyone who
 * reaches the metrics port can send. Checks that every span lies inside the
 * head, that the outcome is the same for the head alone, that a prefix of
 * an unfinished head is unfinished too, and that no suffix repairs an
 * error. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_head.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_span(struct http_span sp, size_t head_len)
{
	if (sp.off > head_len || sp.len > head_len - sp.off)
		abort();
}

/* The span must be followed, inside the head, by one of `after`. */
static void check_end(const char *buf, struct http_span sp, size_t head_len, const char *after)
{
	check_span(sp, head_len);
	if (sp.off + sp.len >= head_len || !strchr(after, buf[sp.off + sp.len]) ||
	    buf[sp.off + sp.len] == '\0')
		abort();
}

static void check_done(const char *buf, size_t size, const struct http_head *h)
{
	struct http_head again;

	if (h->len == 0 || h->len > size || h->method.off != 0 || h->method.len == 0 ||
	    h->method.len > HTTP_HEAD_METHOD_MAX || h->nheaders > HTTP_HEAD_HEADERS_MAX ||
	    (h->minor != 0 && h->minor != 1))
		abort();
	check_end(buf, h->method, h->len, " ");
	check_span(h->target, h->len);
	if (h->target.len == 0 || buf[h->target.off] != '/' || h->path.off != h->target.off ||
	    h->path.len > h->target.len)
		abort();
	check_end(buf, h->path, h->len, "? ");
	if (h->query.len) {
		if (h->query.off != h->path.off + h->path.len + 1 ||
		    h->query.off + h->query.len != h->target.off + h->target.len)
			abort();
		check_end(buf, h->query, h->len, " ");
	}
	for (size_t i = 0; i < h->nheaders; i++) {
		check_span(h->header[i].name, h->len);
		if (h->header[i].name.len == 0)
			abort();
		check_end(buf, h->header[i].value, h->len, " \t\r\n");
	}
	/* the head alone parses the same; one byte short it is unfinished */
	if (http_head_parse(buf, h->len, &again) != HTTP_HEAD_DONE || again.len != h->len ||
	    again.nheaders != h->nheaders)
		abort();
	if (http_head_parse(buf, h->len - 1, &again) != HTTP_HEAD_MORE)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	struct http_head h;
	char *longer;

	switch (http_head_parse(buf, size, &h)) {
	case HTTP_HEAD_DONE:
		check_done(buf, size, &h);
		break;
	case HTTP_HEAD_MORE:
		if (size > 0 && http_head_parse(buf, size - 1, &h) != HTTP_HEAD_MORE)
			abort();
		break;
	case HTTP_HEAD_ERROR:
		longer = malloc(size + 4);
		if (!longer)
			return 0;
		if (size)
			memcpy(longer, data, size);
		memcpy(longer + size, "\r\n\r\n", 4);
		if (http_head_parse(longer, size + 4, &h) != HTTP_HEAD_ERROR)
			abort();
		free(longer);
		break;
	default:
		abort();
	}
	return 0;
}
