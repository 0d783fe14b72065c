/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the HTTP request head parser: the spans of a head, the
 * three outcomes on every prefix of a valid head, and heads it refuses as
 * soon as the byte that breaks them has come. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "http_head.h"

static enum http_head_status parse(const char *s, struct http_head *h)
{
	return http_head_parse(s, strlen(s), h);
}

static void assert_span(const char *buf, struct http_span sp, const char *want)
{
	assert_int_equal(sp.len, strlen(want));
	assert_memory_equal(buf + sp.off, want, sp.len);
}

static void test_spans(void **unused)
{
	static const char req[] = "POST /admin/reset?api_key=k1&x=%20 HTTP/1.1\r\n"
				  "Host: 127.0.0.1:9102\r\n"
				  "Authorization: \t Bearer abc  \r\n"
				  "X-Empty:\r\n"
				  "\r\n"
				  "body";
	struct http_head h;

	assert_int_equal(parse(req, &h), HTTP_HEAD_DONE);
	assert_int_equal(h.len, strlen(req) - 4);
	assert_span(req, h.method, "POST");
	assert_span(req, h.target, "/admin/reset?api_key=k1&x=%20");
	assert_span(req, h.path, "/admin/reset");
	assert_span(req, h.query, "api_key=k1&x=%20");
	assert_int_equal(h.minor, 1);
	assert_int_equal(h.nheaders, 3);
	assert_span(req, h.header[0].name, "Host");
	assert_span(req, h.header[0].value, "127.0.0.1:9102");
	assert_span(req, h.header[1].value, "Bearer abc");
	assert_span(req, h.header[2].value, "");
	/* the byte after each span is free for a NUL */
	assert_int_equal(req[h.method.off + h.method.len], ' ');
	assert_int_equal(req[h.path.off + h.path.len], '?');
	assert_int_equal(req[h.query.off + h.query.len], ' ');
	assert_true(strchr(" \t\r\n", req[h.header[1].value.off + h.header[1].value.len]));
	assert_int_equal(http_head_find(req, &h, "authorization"), 1);
	assert_int_equal(http_head_find(req, &h, "HOST"), 0);
	assert_int_equal(http_head_find(req, &h, "x-empty"), 2);
	assert_int_equal(http_head_find(req, &h, "Hos"), -1);
	assert_int_equal(http_head_find(req, &h, "Hostx"), -1);
}

static void test_no_query_and_bare_lf(void **unused)
{
	static const char req[] = "GET /metrics HTTP/1.0\n\n";
	struct http_head h;

	assert_int_equal(parse(req, &h), HTTP_HEAD_DONE);
	assert_int_equal(h.len, strlen(req));
	assert_span(req, h.path, "/metrics");
	assert_int_equal(h.query.len, 0);
	assert_int_equal(h.minor, 0);
	assert_int_equal(h.nheaders, 0);
	assert_int_equal(parse("GET /? HTTP/1.1\r\n\r\n", &h), HTTP_HEAD_DONE);
	assert_int_equal(h.path.len, 1);
	assert_int_equal(h.query.len, 0);
}

/* Every prefix of a valid head needs more; the whole head is done. */
static void test_prefixes(void **unused)
{
	static const char *const reqs[] = {
		"GET /healthz HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n",
		"GET /a?b HTTP/1.0\nA:\nB: c\n\n",
	};
	struct http_head h;

	for (size_t r = 0; r < sizeof(reqs) / sizeof(reqs[0]); r++)
		for (size_t n = 0; n < strlen(reqs[r]); n++) {
			if (http_head_parse(reqs[r], n, &h) != HTTP_HEAD_MORE)
				fail_msg("%zu bytes of %s: not MORE", n, reqs[r]);
		}
	assert_int_equal(parse(reqs[0], &h), HTTP_HEAD_DONE);
	assert_int_equal(parse(reqs[1], &h), HTTP_HEAD_DONE);
}

static void test_errors(void **unused)
{
	static const char *const bad[] = {
		" / HTTP/1.1\r\n\r\n",          /* no method */
		"GET  /x HTTP/1.1\r\n\r\n",     /* two spaces */
		"GET x HTTP/1.1\r\n\r\n",       /* not origin-form */
		"GET http://a/ HTTP/1.1\r\n\r\n",
		"GET /a#b HTTP/1.1\r\n\r\n",
		"GET /a\tb HTTP/1.1\r\n\r\n",
		"GET /a\x80 HTTP/1.1\r\n\r\n",
		"GET / HTTP/2.0\r\n\r\n",
		"GET / HTTP/1.2\r\n\r\n",
		"GET / HTTP/1.1 \r\n\r\n",
		"GET / http/1.1\r\n\r\n",
		"GET /\r\n\r\n",                /* HTTP/0.9 */
		"GET / HTTP/1.1\rX\n\r\n",      /* CR without LF */
		"GET / HTTP/1.1\r\nHost x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
		"GET / HTTP/1.1\r\n: x\r\n\r\n",
		"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", /* obsolete folding */
		"GET / HTTP/1.1\r\nA: b\x01\r\n\r\n",
		"GET / HTTP/1.1\r\nA: b\x7f\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\r\n",
		"GÉT / HTTP/1.1\r\n\r\n",
		"ABCDEFGHIJKLMNOPQ / HTTP/1.1\r\n\r\n", /* 17 bytes of method */
	};
	struct http_head h;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (parse(bad[i], &h) != HTTP_HEAD_ERROR)
			fail_msg("accepted %s", bad[i]);
	/* NUL inside a value */
	assert_int_equal(http_head_parse("GET / HTTP/1.1\r\nA: \0\r\n\r\n", 23, &h),
			 HTTP_HEAD_ERROR);
	assert_int_equal(parse("ABCDEFGHIJKLMNOP / HTTP/1.1\r\n\r\n", &h), HTTP_HEAD_DONE);
}

/* An error is an error as soon as its byte has come, whatever follows. */
static void test_errors_early(void **unused)
{
	struct http_head h;

	assert_int_equal(parse("GET  ", &h), HTTP_HEAD_ERROR);
	assert_int_equal(parse("GET x", &h), HTTP_HEAD_ERROR);
	assert_int_equal(parse("GET / HTTP/2", &h), HTTP_HEAD_ERROR);
	assert_int_equal(parse("GET / HTTP/1.1\r\nA", &h), HTTP_HEAD_MORE);
	assert_int_equal(parse("GET / HTTP/1.1\r\nA ", &h), HTTP_HEAD_ERROR);
	assert_int_equal(parse("ABCDEFGHIJKLMNOPQ", &h), HTTP_HEAD_ERROR);
	assert_int_equal(parse("ABCDEFGHIJKLMNOP", &h), HTTP_HEAD_MORE);
	assert_int_equal(parse("\x16\x03\x01", &h), HTTP_HEAD_ERROR); /* TLS */
}

static void test_header_count(void **unused)
{
	char req[2048];
	struct http_head h;
	size_t n = (size_t)snprintf(req, sizeof(req), "GET / HTTP/1.1\r\n");

	for (int i = 0; i < HTTP_HEAD_HEADERS_MAX; i++)
		n += (size_t)snprintf(req + n, sizeof(req) - n, "H%d: %d\r\n", i, i);
	snprintf(req + n, sizeof(req) - n, "\r\n");
	assert_int_equal(parse(req, &h), HTTP_HEAD_DONE);
	assert_int_equal(h.nheaders, HTTP_HEAD_HEADERS_MAX);
	assert_int_equal(http_head_find(req, &h, "h31"), 31);
	snprintf(req + n, sizeof(req) - n, "One: more\r\n\r\n");
	assert_int_equal(parse(req, &h), HTTP_HEAD_ERROR);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spans),
		cmocka_unit_test(test_no_query_and_bare_lf),
		cmocka_unit_test(test_prefixes),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_errors_early),
		cmocka_unit_test(test_header_count),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
