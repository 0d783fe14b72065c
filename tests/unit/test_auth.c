/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the admin's token: reading the file (what it may hold,
 * whether others can read it), the Authorization header against it, and
 * which listen hosts count as loopback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "auth.h"

#define TOKEN "0123456789abcdef0123456789abcdef"

static char path[64];

/* A file holding n bytes of s with the given mode. */
static const char *file(const char *s, size_t n, mode_t mode)
{
	int fd;

	snprintf(path, sizeof(path), "/tmp/rl-auth-XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, s, n), (ssize_t)n);
	close(fd);
	assert_int_equal(chmod(path, mode), 0);
	return path;
}

static int load(const char *s, mode_t mode, struct auth_token *t, bool *shared, char *err)
{
	int rc = auth_token_load(file(s, strlen(s), mode), t, shared, err, 256);

	unlink(path);
	return rc;
}

static void test_load(void **unused)
{
	struct auth_token t;
	bool shared = true;
	char err[256];

	assert_int_equal(load(TOKEN "\n", 0600, &t, &shared, err), 0);
	assert_string_equal(t.tok, TOKEN);
	assert_int_equal(t.len, strlen(TOKEN));
	assert_false(shared);
	/* blanks and line ends around it are not part of it */
	assert_int_equal(load("  " TOKEN "\r\n\n", 0400, &t, &shared, err), 0);
	assert_string_equal(t.tok, TOKEN);
	assert_int_equal(load(TOKEN, 0600, &t, &shared, err), 0);
	assert_string_equal(t.tok, TOKEN);
	/* others may read it: loaded, and said */
	assert_int_equal(load(TOKEN, 0644, &t, &shared, err), 0);
	assert_true(shared);
	assert_int_equal(load(TOKEN, 0640, &t, &shared, err), 0);
	assert_true(shared);
	assert_int_equal(load(TOKEN, 0602, &t, &shared, err), 0);
	assert_true(shared);
}

static void test_load_refused(void **unused)
{
	struct auth_token t;
	bool shared;
	char err[256], big[AUTH_TOKEN_MAX + 2];

	assert_int_equal(load("", 0600, &t, &shared, err), -1);
	assert_non_null(strstr(err, "the token has 0 bytes"));
	assert_int_equal(load("\n\n", 0600, &t, &shared, err), -1);
	assert_int_equal(load("short\n", 0600, &t, &shared, err), -1);
	assert_non_null(strstr(err, "the token has 5 bytes; it needs 16 to 1024"));
	/* one token, not two words or two lines */
	assert_int_equal(load(TOKEN " " TOKEN, 0600, &t, &shared, err), -1);
	assert_non_null(strstr(err, "one word of printable ASCII (byte 33 is 0x20)"));
	assert_int_equal(load(TOKEN "\n" TOKEN "\n", 0600, &t, &shared, err), -1);
	assert_int_equal(load(TOKEN "\xc3\xa9", 0600, &t, &shared, err), -1);
	/* the longest, and one byte more */
	memset(big, 'a', sizeof(big));
	big[AUTH_TOKEN_MAX] = '\0';
	assert_int_equal(load(big, 0600, &t, &shared, err), 0);
	assert_int_equal(t.len, AUTH_TOKEN_MAX);
	big[AUTH_TOKEN_MAX] = 'a';
	big[AUTH_TOKEN_MAX + 1] = '\0';
	assert_int_equal(load(big, 0600, &t, &shared, err), -1);
	/* a file far too long is not read whole */
	{
		size_t n = 1 << 20;
		char *huge = malloc(n + 1);

		memset(huge, 'a', n);
		huge[n] = '\0';
		assert_int_equal(load(huge, 0600, &t, &shared, err), -1);
		assert_non_null(strstr(err, "longer than a token of 1024 bytes"));
		free(huge);
	}
	assert_int_equal(auth_token_load("/nonexistent/token", &t, &shared, err, sizeof(err)), -1);
	assert_string_equal(err, "/nonexistent/token: cannot open: No such file or directory");
	assert_int_equal(auth_token_load("/tmp", &t, &shared, err, sizeof(err)), -1);
	assert_string_equal(err, "/tmp: not a regular file");
}

static void test_bearer(void **unused)
{
	struct auth_token t = { TOKEN, strlen(TOKEN) };

	assert_true(auth_bearer_ok(&t, "Bearer " TOKEN));
	assert_true(auth_bearer_ok(&t, "bearer " TOKEN));
	assert_true(auth_bearer_ok(&t, "BEARER  " TOKEN));
	assert_false(auth_bearer_ok(&t, NULL));
	assert_false(auth_bearer_ok(&t, ""));
	assert_false(auth_bearer_ok(&t, TOKEN));
	assert_false(auth_bearer_ok(&t, "Basic " TOKEN));
	assert_false(auth_bearer_ok(&t, "Bearer"));
	assert_false(auth_bearer_ok(&t, "Bearer "));
	assert_false(auth_bearer_ok(&t, "Bearer" TOKEN));
	/* a prefix, one more byte, one byte changed at either end */
	assert_false(auth_bearer_ok(&t, "Bearer 0123456789abcdef0123456789abcde"));
	assert_false(auth_bearer_ok(&t, "Bearer " TOKEN "0"));
	assert_false(auth_bearer_ok(&t, "Bearer 1123456789abcdef0123456789abcdef"));
	assert_false(auth_bearer_ok(&t, "Bearer 0123456789abcdef0123456789abcdee"));
	/* the same bytes in another case are another token */
	assert_false(auth_bearer_ok(&t, "Bearer 0123456789ABCDEF0123456789ABCDEF"));
}

static void test_loopback(void **unused)
{
	static const char *const yes[] = { "127.0.0.1", "127.0.0.2", "127.255.255.254",
					   "localhost", "LocalHost", "::1",
					   "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1" };
	static const char *const no[] = { "0.0.0.0", "::", "10.0.0.1", "128.0.0.1",
					  "126.255.255.255", "192.168.1.1", "::2",
					  "::ffff:10.0.0.1", "localhost.example.com",
					  "example.com", "", "127.0.0.1.nip.io" };

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		assert_true(auth_host_is_loopback(yes[i]));
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		assert_false(auth_host_is_loopback(no[i]));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_load),
		cmocka_unit_test(test_load_refused),
		cmocka_unit_test(test_bearer),
		cmocka_unit_test(test_loopback),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
