/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of redis_encode.c's RESP: a call's bytes exact, and the same
 * as hiredis's own formatting (redisFormatCommandArgv) for arguments of
 * every length class, binary bytes included. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis.h>

#include "redis_encode.h"

static void test_call_bytes(void **unused)
{
	const char *argv[] = { "FCALL", "rl8_decide", "0", "" };
	const size_t len[] = { 5, 10, 1, 0 };
	static const char want[] = "*4\r\n$5\r\nFCALL\r\n$10\r\nrl8_decide\r\n$1\r\n0\r\n$0\r\n\r\n";
	char out[64];

	assert_int_equal(redis_resp_len(4, len), sizeof(want) - 1);
	assert_int_equal(redis_resp_put(out, 4, argv, len), sizeof(want) - 1);
	assert_memory_equal(out, want, sizeof(want) - 1);
}

/* argc arguments of the given lengths, each byte of them from a counter
 * (NUL, CR and LF among them), against hiredis's bytes */
static void same_as_hiredis(size_t argc, const size_t *len)
{
	const char **argv = calloc(argc, sizeof(*argv));
	char *bytes, *ours, *theirs = NULL;
	size_t total = 0, n;
	long long m;

	assert_non_null(argv);
	for (size_t i = 0; i < argc; i++)
		total += len[i];
	bytes = malloc(total + 1);
	assert_non_null(bytes);
	for (size_t i = 0; i < total; i++)
		bytes[i] = (char)(i * 7 + 3);
	total = 0;
	for (size_t i = 0; i < argc; i++) {
		argv[i] = bytes + total;
		total += len[i];
	}
	m = redisFormatCommandArgv(&theirs, (int)argc, argv, len);
	assert_true(m > 0);
	n = redis_resp_len(argc, len);
	assert_int_equal(n, (size_t)m);
	ours = malloc(n);
	assert_non_null(ours);
	assert_int_equal(redis_resp_put(ours, argc, argv, len), n);
	assert_memory_equal(ours, theirs, n);
	free(ours);
	redisFreeCommand(theirs);
	free(bytes);
	free(argv);
}

static void test_lengths_as_hiredis(void **unused)
{
	static const size_t lens[] = { 0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 9999, 10000, 65537 };
	size_t nl = sizeof(lens) / sizeof(lens[0]);

	for (size_t i = 0; i < nl; i++)
		same_as_hiredis(1, &lens[i]);
	same_as_hiredis(nl, lens);
}

/* 9, 10, 99, 100 and 1000 arguments: the array's count in 1 to 4 digits */
static void test_counts_as_hiredis(void **unused)
{
	static const size_t counts[] = { 9, 10, 99, 100, 1000 };
	size_t *len = calloc(1000, sizeof(*len));

	assert_non_null(len);
	for (size_t i = 0; i < 1000; i++)
		len[i] = 14 + i % 3;
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
		same_as_hiredis(counts[i], len);
	free(len);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_call_bytes),
		cmocka_unit_test(test_lengths_as_hiredis),
		cmocka_unit_test(test_counts_as_hiredis),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
