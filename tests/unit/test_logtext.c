/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the escape of request text for log lines: what the bytes
 * become, and the cut when the room runs out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "logtext.h"

static const char *esc(const char *s, size_t n, size_t cap)
{
	static char buf[256];

	assert_true(cap <= sizeof(buf));
	memset(buf, 'Z', sizeof(buf));
	return logtext(buf, cap, s, n);
}

static void test_bytes(void **unused)
{
	assert_string_equal(esc("k1", 2, 64), "k1");
	assert_string_equal(esc("", 0, 64), "");
	/* a line feed cannot start a line of its own */
	assert_string_equal(esc("k1\n2026-01-01T00:00:00.000Z error: x", 36, 128),
			    "k1\\x0a2026-01-01T00:00:00.000Z error: x");
	assert_string_equal(esc("a\rb\tc\x1b[0m", 9, 64), "a\\x0db\\x09c\\x1b[0m");
	assert_string_equal(esc("\0\x7f\x80\xff", 4, 64), "\\x00\\x7f\\x80\\xff");
	/* UTF-8 is not ASCII */
	assert_string_equal(esc("caf\xc3\xa9", 5, 64), "caf\\xc3\\xa9");
	/* the backslash is escaped too: "\x0a" as typed stays distinct */
	assert_string_equal(esc("\\x0a", 4, 64), "\\x5cx0a");
	assert_string_equal(esc(" ~", 2, 64), " ~");
}

static void test_every_byte_is_printable(void **unused)
{
	char in[256], out[4 * 256 + 1];

	for (int i = 0; i < 256; i++)
		in[i] = (char)i;
	logtext(out, sizeof(out), in, sizeof(in));
	assert_int_equal(strlen(out), 95 - 1 + 4 * (256 - 95 + 1));
	for (size_t i = 0; out[i]; i++)
		assert_true(out[i] >= 0x20 && out[i] < 0x7f);
}

static void test_cut(void **unused)
{
	/* exactly fits: no cut */
	assert_string_equal(esc("abcd", 4, 5), "abcd");
	assert_string_equal(esc("a\n", 2, 6), "a\\x0a");
	/* one byte short: as much as fits with "..." */
	assert_string_equal(esc("abcde", 5, 5), "a...");
	/* an escape is never cut in the middle */
	assert_string_equal(esc("ab\ncd", 5, 8), "ab...");
	assert_string_equal(esc("\n\n\n", 3, 12), "\\x0a\\x0a...");
	/* less room than "..." */
	assert_string_equal(esc("abcdef", 6, 3), "..");
	assert_string_equal(esc("abcdef", 6, 1), "");
	/* no room at all: nothing written */
	assert_string_equal(logtext((char[]){ "Q" }, 0, "ab", 2), "Q");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bytes),
		cmocka_unit_test(test_every_byte_is_printable),
		cmocka_unit_test(test_cut),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
