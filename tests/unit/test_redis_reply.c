/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of redis_reply.c: the library's msgpack reply decoded from
 * exact bytes, every integer width msgpack has (positive and negative
 * fixints, uint and int of 8 to 64 bits, whole float64s as Lua's numbers
 * may come), arrays of 16 and 32-bit counts, leases, and what it refuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "redis_reply.h"

#define DECODE(bytes, n, out) \
	redis_reply_msgpack((const char *)(bytes), sizeof(bytes), (n), (out))

/* [now, [[1, 1, [[rem, retry, reset] x 3]]]] with each of the nine values
 * in another width; now a uint64. */
static void test_every_integer_width(void **unused)
{
	static const uint8_t reply[] = {
		0x92,
		0xcf, 0x00, 0x06, 0x1e, 0x2f, 0x3a, 0x4b, 0x5c, 0x6d,     /* now: uint 64 */
		0x91,
		0x93, 0x01, 0xd0, 0x03,                                  /* 1, int 8: 3 */
		0x93,
		0x93, 0xcc, 0xc8,                                        /* uint 8: 200 */
		      0xcd, 0x12, 0x34,                                  /* uint 16 */
		      0xce, 0x89, 0xab, 0xcd, 0xef,                      /* uint 32 */
		0x93, 0xff,                                              /* fixint: -1 */
		      0xd1, 0xff, 0x38,                                  /* int 16: -200 */
		      0xd2, 0x80, 0x00, 0x00, 0x00,                      /* int 32: -2^31 */
		0x93, 0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, /* int 64: -2 */
		      0xcb, 0x43, 0x3f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* 2^53 - 1 */
		      0xcb, 0xc1, 0x2e, 0x84, 0x80, 0x00, 0x00, 0x00, 0x00, /* -1000000.0 */
	};
	static const int64_t vals[] = { 200,  0x1234, 0x89abcdef, -1, -200, INT32_MIN,
					-2, 9007199254740991, -1000000 };
	struct redis_decision out[1];

	assert_int_equal(DECODE(reply, 1, out), 0);
	assert_int_equal(out[0].now, 0x00061e2f3a4b5c6d);
	assert_true(out[0].ok);
	assert_int_equal(out[0].allowed, 1);
	assert_int_equal(out[0].decider, 3);
	assert_int_equal(out[0].nvals, 9);
	for (size_t i = 0; i < 9; i++)
		assert_int_equal(out[0].vals[i], vals[i]);
	assert_false(out[0].has_lease);
}

/* The list of parts with a 16-bit count, then a 32-bit one; a part of
 * another shape (a string) marked not ok, the others decoded. */
static void test_long_arrays_and_a_bad_part(void **unused)
{
	static const uint8_t reply16[] = {
		0x92, 0x07,
		0xdc, 0x00, 0x02,
		0xa1, 'x',
		0x93, 0x00, 0x01, 0xdd, 0x00, 0x00, 0x00, 0x01, 0x93, 0x05, 0x06, 0x07,
	};
	static const uint8_t reply32[] = {
		0x92, 0x07,
		0xdd, 0x00, 0x00, 0x00, 0x01,
		0x93, 0x01, 0x01, 0x90,
	};
	struct redis_decision out[2];

	assert_int_equal(DECODE(reply16, 2, out), 0);
	assert_false(out[0].ok);
	assert_true(out[1].ok);
	assert_int_equal(out[1].now, 7);
	assert_int_equal(out[1].allowed, 0);
	assert_int_equal(out[1].nvals, 3);
	assert_int_equal(out[1].vals[0], 5);
	assert_int_equal(out[1].vals[2], 7);
	assert_int_equal(DECODE(reply32, 1, out), 0);
	assert_true(out[0].ok);
	assert_int_equal(out[0].nvals, 0);
	/* a count that is not the batch's */
	assert_int_equal(DECODE(reply32, 2, out), -1);
}

/* A lease: [extra, v_1, v_2], a str 8 and a nil. */
static void test_lease(void **unused)
{
	static const uint8_t reply[] = {
		0x92, 0x01,
		0x91,
		0x94, 0x01, 0x01,
		0x92, 0x93, 0x01, 0x02, 0x03, 0x93, 0x04, 0x05, 0x06,
		0x93, 0xcd, 0x01, 0x00, 0xd9, 0x03, '1', '2', '3', 0xc0,
	};
	struct redis_decision out[1];

	assert_int_equal(DECODE(reply, 1, out), 0);
	assert_true(out[0].ok);
	assert_true(out[0].has_lease);
	assert_int_equal(out[0].lease_extra, 256);
	assert_int_equal(out[0].llen[0], 3);
	assert_memory_equal(out[0].lval[0], "123", 3);
	assert_null(out[0].lval[1]);
	assert_int_equal(out[0].nvals, 6);
	assert_int_equal(out[0].vals[5], 6);
}

/* Numbers an integer cannot hold: a uint 64 over INT64_MAX, a float with
 * a fraction, a float past 2^53: the part is not ok (or, for now, the
 * reply is refused). */
static void test_refused_numbers(void **unused)
{
	static const uint8_t big[] = {
		0x92, 0x01, 0x91,
		0x93, 0x01, 0xcf, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x90,
	};
	static const uint8_t half[] = {
		0x92, 0x01, 0x91,
		0x93, 0x01, 0xcb, 0x3f, 0xe0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x90,
	};
	static const uint8_t past[] = {
		0x92, 0x01, 0x91,
		0x93, 0x01, 0xcb, 0x43, 0x50, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x90,
	};
	static const uint8_t bad_now[] = {
		0x92, 0xcb, 0x3f, 0xe0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x91, 0x90,
	};
	struct redis_decision out[1];

	assert_int_equal(DECODE(big, 1, out), 0);
	assert_false(out[0].ok);
	assert_int_equal(DECODE(half, 1, out), 0);
	assert_false(out[0].ok);
	assert_int_equal(DECODE(past, 1, out), 0);
	assert_false(out[0].ok);
	assert_int_equal(DECODE(bad_now, 1, out), -1);
}

/* Every prefix of a good reply is refused without reading past it. */
static void test_truncated(void **unused)
{
	static const uint8_t reply[] = {
		0x92, 0xce, 0x00, 0x01, 0x00, 0x00, 0x91,
		0x93, 0x01, 0x01, 0x91, 0x93, 0xcd, 0x01, 0x02, 0x03, 0xd2, 0xff, 0xff, 0xff, 0xfe,
	};
	struct redis_decision out[1];

	assert_int_equal(redis_reply_msgpack((const char *)reply, sizeof(reply), 1, out), 0);
	assert_int_equal(out[0].vals[2], -2);
	for (size_t len = 0; len < sizeof(reply); len++)
		assert_int_equal(redis_reply_msgpack((const char *)reply, len, 1, out), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_integer_width),
		cmocka_unit_test(test_long_arrays_and_a_bad_part),
		cmocka_unit_test(test_lease),
		cmocka_unit_test(test_refused_numbers),
		cmocka_unit_test(test_truncated),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
