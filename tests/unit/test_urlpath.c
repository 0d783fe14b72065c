/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the path rules match (urlpath.c): the spellings of one
 * path that an application reads alike, the edges (empty, root, dot
 * segments above it, broken escapes), the query, and the guarantees:
 * never longer, the same again when normalised again, a short buffer
 * exact as far as it goes, linear work on long inputs; and the quick
 * look that most paths need no work. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "urlpath.h"

/* The normal form of s (NUL-terminated here only for the comparison),
 * with a guard after the output that must stay untouched; checks that
 * normalising it again changes nothing. */
static const char *norm(const char *s)
{
	static char buf[4096], again[4096];
	size_t len = strlen(s), n, m;

	assert_true(len + 2 < sizeof(buf));
	memset(buf, 'Z', sizeof(buf));
	n = urlpath_normalise(s, len, buf, len);
	assert_true(n <= len);
	assert_int_equal(buf[len], 'Z');
	m = urlpath_normalise(buf, n, again, n);
	assert_int_equal(m, n);
	assert_memory_equal(again, buf, n);
	buf[n] = '\0';
	return buf;
}

static void test_spellings_of_login(void **unused)
{
	static const char *const spellings[] = {
		"/login", "/%6cogin", "/%6Cogin", "//login", "/./login", "/x/../login",
		"/login;jsessionid=1", "/LOGIN", "/LoGiN", "/%4c%4f%47%49%4e", "///./x/./../login",
		"/%2e/login", "/%2E%2E/login", "/x/%2e%2e/login", "/x/..%2flogin", "/x/..;/login",
		"/login%3bx=1", "/x;a=1/..;b=2/login", "/%2flogin", "/a/b/../../login",
		"/a/b/../c/../../login", "/a/../../b/../login", "/../login", "/../../login",
		"/%zz/../login", "/x%2f..%2flogin",
	};

	for (size_t i = 0; i < sizeof(spellings) / sizeof(spellings[0]); i++) {
		const char *got = norm(spellings[i]);

		if (strcmp(got, "/login") != 0)
			fail_msg("%s gives %s, not /login", spellings[i], got);
	}
	/* an encoded or a real slash after it: the directory, still below /login */
	assert_string_equal(norm("/login%2f"), "/login/");
	assert_string_equal(norm("/login%2F"), "/login/");
	assert_string_equal(norm("/login/"), "/login/");
}

static void test_edges(void **unused)
{
	assert_string_equal(norm(""), "");
	assert_string_equal(norm("/"), "/");
	assert_string_equal(norm("//"), "/");
	assert_string_equal(norm("/."), "/");
	assert_string_equal(norm("/.."), "/");
	assert_string_equal(norm("/../../a"), "/a");
	assert_string_equal(norm("/a/."), "/a/");
	assert_string_equal(norm("/a/.."), "/");
	assert_string_equal(norm("/a/b/.."), "/a/");
	assert_string_equal(norm("/a/./b/./../c"), "/a/c");
	assert_string_equal(norm("/a//b///c"), "/a/b/c");
	/* dots that are not a dot segment are a name */
	assert_string_equal(norm("/a/.../b"), "/a/.../b");
	assert_string_equal(norm("/a/..b/../c"), "/a/c");
	assert_string_equal(norm("/a/.b"), "/a/.b");
	assert_string_equal(norm("/a/b."), "/a/b.");
	/* ";" in the first segment, and a segment of parameters only */
	assert_string_equal(norm("/;x/login"), "/login");
	assert_string_equal(norm("/;"), "/");
	assert_string_equal(norm("/a/;x"), "/a/");
	assert_string_equal(norm(";x"), "");
	assert_string_equal(norm("/a;b;c/d;e"), "/a/d");
	/* broken escapes stay as they are */
	assert_string_equal(norm("%"), "%");
	assert_string_equal(norm("%2"), "%2");
	assert_string_equal(norm("%zz"), "%zz");
	assert_string_equal(norm("/a%"), "/a%");
	assert_string_equal(norm("/a%4"), "/a%4");
	assert_string_equal(norm("/a%4g"), "/a%4g");
	assert_string_equal(norm("/a%G1"), "/a%g1");
	/* decoded once: a decoded '%' starts no escape */
	assert_string_equal(norm("/%252e%252e/login"), "/%252e%252e/login");
	assert_string_equal(norm("/%2541"), "/%2541");
	/* decoded escapes are read as sent */
	assert_string_equal(norm("%2e%2e"), "");
	assert_string_equal(norm("/%2e%2e"), "/");
	assert_string_equal(norm("%2F"), "/");
	assert_string_equal(norm("/a%2Fb"), "/a/b");
	assert_string_equal(norm("/a%2f%2fb"), "/a/b");
	assert_string_equal(norm("/a%3Bb/c"), "/a/c");
	assert_string_equal(norm("/%41%5a%61"), "/aza");
	assert_string_equal(norm("/a%20b"), "/a b");
	/* a relative path has no '/' of its own */
	assert_string_equal(norm("*"), "*");
	assert_string_equal(norm("a/../b"), "b");
	assert_string_equal(norm("a/../../b/"), "b/");
	assert_string_equal(norm("./a"), "a");
	assert_string_equal(norm("../a"), "a");
	/* lower case is ASCII only */
	assert_string_equal(norm("/\xc3\x89T\xc3\xa9"), "/\xc3\x89t\xc3\xa9");
	assert_string_equal(norm("/%C3%89"), "/\xc3\x89");
}

static void test_norm_nul(void **unused)
{
	/* (norm() compares C strings: a decoded NUL checked by length) */
	char out[8];

	assert_int_equal(urlpath_normalise("/a%00B", 6, out, 6), 4);
	assert_memory_equal(out, "/a\0b", 4);
}

static void test_escapes_that_stay(void **unused)
{
	/* '%' and '?' would be read differently again: kept, in lower case */
	assert_string_equal(norm("/a%3Fb"), "/a%3fb");
	assert_string_equal(norm("/a%3fb/../c"), "/c");
	assert_string_equal(norm("/.%3f"), "/.%3f");
	assert_string_equal(norm("/a/..%3F"), "/a/..%3f");
	assert_string_equal(norm("/%25"), "/%25");
	/* a hex digit that would make an escape with a '%' before it */
	assert_string_equal(norm("/%%34%31"), "/%%341");
	assert_string_equal(norm("/%%341"), "/%%341");
	assert_string_equal(norm("/%4%31"), "/%4%31");
	assert_string_equal(norm("/%A%31"), "/%a%31");
	assert_string_equal(norm("/%%47"), "/%g");
	assert_string_equal(norm("/%%2e"), "/%.");
	/* elsewhere they are decoded */
	assert_string_equal(norm("/%61pi"), "/api");
	assert_string_equal(norm("/%%/%31"), "/%%/1");
}

static void test_query(void **unused)
{
	assert_string_equal(norm("/login?next=/x"), "/login?next=/x");
	assert_string_equal(norm("/LOGIN/../A?B=%41/../C"), "/a?B=%41/../C");
	assert_string_equal(norm("/a/..?x"), "/?x");
	assert_string_equal(norm("/a/b/.?"), "/a/b/?");
	assert_string_equal(norm("?x"), "?x");
	assert_string_equal(norm("/a%?x"), "/a%?x");
	assert_string_equal(norm("/a%3?x"), "/a%3?x");
	assert_string_equal(norm("/%3f?%3f"), "/%3f?%3f");
}

/* A buffer shorter than the normal form: the same first bytes, and the
 * length cut at cap. */
static void check_caps(const char *s)
{
	char whole[4096], part[4096];
	size_t len = strlen(s), n;

	assert_true(len < sizeof(whole));
	n = urlpath_normalise(s, len, whole, len);
	for (size_t cap = 0; cap <= len + 1; cap++) {
		size_t m;

		memset(part, 'Z', sizeof(part));
		m = urlpath_normalise(s, len, part, cap);
		if (m != (n < cap ? n : cap))
			fail_msg("%s with cap %zu: %zu bytes, not %zu", s, cap, m, n < cap ? n : cap);
		assert_memory_equal(part, whole, m);
		assert_int_equal(part[cap], 'Z');
	}
}

static void test_short_buffer(void **unused)
{
	check_caps("/login");
	check_caps("/aaaaaaaa/bbbbbbbb/../../login");
	check_caps("/aaaaaaaa/bbbbbbbb/cccc/../x/../../login/y/z/../..");
	check_caps("/a/b/c/d/e/f/g/h/../../../../../../../../i");
	check_caps("a/bb/ccc/../../dddd/.././e");
	check_caps("/abc/..?q=/x/..");
	check_caps("/x/./y/.././/z/;p/..;q/%41%42/%%31%32/.");
}

/* "/login" then n times `step`, then `tail`, in a fresh buffer. */
static char *repeat(const char *head, const char *step, size_t n, const char *tail, size_t *len)
{
	size_t hl = strlen(head), sl = strlen(step), tl = strlen(tail);
	char *s = malloc(hl + sl * n + tl + 1);

	assert_non_null(s);
	memcpy(s, head, hl);
	for (size_t i = 0; i < n; i++)
		memcpy(s + hl + i * sl, step, sl);
	memcpy(s + hl + sl * n, tail, tl + 1);
	*len = hl + sl * n + tl;
	return s;
}

/* The normal form of s with buffers of every kind: whole, and the short
 * one classification uses; both must say `want`. */
static void check_long(const char *s, size_t len, const char *want)
{
	char *whole = malloc(len ? len : 1), part[64];
	size_t n, wl = strlen(want);

	assert_non_null(whole);
	n = urlpath_normalise(s, len, whole, len);
	assert_int_equal(n, wl);
	assert_memory_equal(whole, want, wl);
	n = urlpath_normalise(s, len, part, sizeof(part));
	assert_int_equal(n, wl < sizeof(part) ? wl : sizeof(part));
	assert_memory_equal(part, want, n);
	free(whole);
}

static void test_long_inputs(void **unused)
{
	size_t len;
	char *s;

	/* dot segments after the path: none is lost, none pushes it out */
	s = repeat("/login", "/.", 10000, "", &len);
	check_long(s, len, "/login/");
	free(s);
	s = repeat("/x", "/.", 10000, "/../login", &len);
	check_long(s, len, "/login");
	free(s);
	s = repeat("", "//", 50000, "login", &len);
	check_long(s, len, "/login");
	free(s);
	/* nested as deep as one likes */
	{
		size_t n = 20000, i;
		char *t = malloc(n * 5 + 16);

		assert_non_null(t);
		for (i = 0; i < n; i++)
			memcpy(t + 2 * i, "/a", 2);
		for (i = 0; i < n; i++)
			memcpy(t + 2 * n + 3 * i, "/..", 3);
		memcpy(t + 5 * n, "/login", 7);
		check_long(t, 5 * n + 6, "/login");
		/* one pop short: /a/login */
		memcpy(t + 5 * n - 3, "/login", 7);
		check_long(t, 5 * n + 3, "/a/login");
		free(t);
	}
	/* a long segment taken off: its bytes past the short buffer too */
	s = repeat("/", "x", 100000, "/../login", &len);
	check_long(s, len, "/login");
	free(s);
	s = repeat("/", "%41", 30000, "/..;x/%4c%4f%47%49%4e", &len);
	check_long(s, len, "/login");
	free(s);
	/* linear: 4 MB of "/a/.." in well under a second */
	{
		clock_t t0 = clock();

		s = repeat("", "/a/..", 800000, "/login", &len);
		check_long(s, len, "/login");
		free(s);
		assert_true((double)(clock() - t0) / CLOCKS_PER_SEC < 2.0);
	}
}

/* Every string of up to four bytes over an alphabet of the bytes that
 * mean something: never longer, the same when normalised again, and a
 * short buffer exact. */
static void test_small_inputs_exhaustively(void **unused)
{
	static const char alpha[] = "/.%;?2e5fA3a";
	const size_t k = sizeof(alpha) - 1;
	char s[8], out[8], again[8], part[8];

	for (size_t len = 0; len <= 5; len++) {
		size_t total = 1;

		for (size_t i = 0; i < len; i++)
			total *= k;
		for (size_t x = 0; x < total; x++) {
			size_t y = x, n, m;

			for (size_t i = 0; i < len; i++, y /= k)
				s[i] = alpha[y % k];
			n = urlpath_normalise(s, len, out, len);
			assert_true(n <= len);
			if (urlpath_plain(s, len) && (n != len || memcmp(out, s, len) != 0))
				fail_msg("%.*s is said plain, and gives %.*s", (int)len, s, (int)n, out);
			m = urlpath_normalise(out, n, again, n);
			if (m != n || memcmp(out, again, n) != 0)
				fail_msg("%.*s: %.*s, then %.*s", (int)len, s, (int)n, out, (int)m, again);
			for (size_t cap = 0; cap < n; cap++) {
				assert_int_equal(urlpath_normalise(s, len, part, cap), cap);
				assert_memory_equal(part, out, cap);
			}
		}
	}
}

static void test_plain(void **unused)
{
	static const char *const plain[] = {
		"", "/", "/api/items", "/a/b/", "/a.b/c..d/", "/x?Q=%41/../B", "?", "a/b", "*",
		"/caf\xc3\xa9", "/a-b_c~d!$&'()*+,=:@",
	};
	static const char *const maybe[] = {
		"/API", "/a%41", "/a;b", "//a", "/./a", "/a/..", "/.well-known", ".", "/a/%",
		"/a%3f",
	};

	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		if (!urlpath_plain(plain[i], strlen(plain[i])))
			fail_msg("%s is not said plain", plain[i]);
		assert_string_equal(norm(plain[i]), plain[i]);
	}
	for (size_t i = 0; i < sizeof(maybe) / sizeof(maybe[0]); i++)
		if (urlpath_plain(maybe[i], strlen(maybe[i])))
			fail_msg("%s is said plain", maybe[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spellings_of_login),
		cmocka_unit_test(test_edges),
		cmocka_unit_test(test_norm_nul),
		cmocka_unit_test(test_escapes_that_stay),
		cmocka_unit_test(test_query),
		cmocka_unit_test(test_short_buffer),
		cmocka_unit_test(test_long_inputs),
		cmocka_unit_test(test_small_inputs_exhaustively),
		cmocka_unit_test(test_plain),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
