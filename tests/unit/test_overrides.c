/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of overrides.c: a snapshot's lookups and expiries, and the
 * text form Redis keeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "overrides.h"

static struct override_entry entry(uint8_t k, uint64_t quota, int64_t period_s, int64_t exp)
{
	struct override_entry e;

	memset(&e, 0, sizeof(e));
	memset(e.key, k, sizeof(e.key));
	e.spec.quota = quota;
	e.spec.period_us = period_s * LIMIT_US_PER_S;
	e.expires_ms = exp;
	return e;
}

static void test_snapshot(void **unused)
{
	struct override_entry e[4] = { entry(1, 10, 60, 0), entry(2, 20, 60, 5000),
				       entry(3, 30, 60, 0), entry(1, 11, 60, 0) };
	struct overrides *o = overrides_new(e, 4);
	uint8_t k[IDENTITY_KEY_LEN];

	(void)unused;
	assert_non_null(o);
	/* a key twice: the last */
	assert_int_equal(overrides_count(o), 3);
	memset(k, 1, sizeof(k));
	assert_int_equal(overrides_find(o, k, 0)->spec.quota, 11);
	memset(k, 2, sizeof(k));
	assert_non_null(overrides_find(o, k, 4999));
	assert_null(overrides_find(o, k, 5000)); /* expired */
	memset(k, 9, sizeof(k));
	assert_null(overrides_find(o, k, 0));
	assert_null(overrides_find(NULL, k, 0));
	overrides_acquire(o);
	overrides_release(o);
	overrides_release(o);
	o = overrides_new(NULL, 0);
	assert_int_equal(overrides_count(o), 0);
	assert_null(overrides_find(o, k, 0));
	overrides_release(o);
	assert_null(overrides_new(e, OVERRIDES_MAX + 1));
}

static void test_text(void **unused)
{
	struct override_entry e = entry(0xab, 5000, 60, 1796154794187), back;
	char field[2 * IDENTITY_KEY_LEN + 1], value[OVERRIDE_VALUE_MAX];
	size_t n;

	(void)unused;
	overrides_field(e.key, field);
	assert_string_equal(field, "abababababababababababababababab");
	n = overrides_value(&e, value);
	assert_string_equal(value, "5000/1m 1796154794187");
	assert_int_equal(overrides_read(field, 32, value, n, &back), 0);
	assert_memory_equal(back.key, e.key, IDENTITY_KEY_LEN);
	assert_int_equal(back.spec.quota, 5000);
	assert_int_equal(back.spec.period_us, 60 * LIMIT_US_PER_S);
	assert_int_equal(back.expires_ms, 1796154794187);
	/* malformed: the field, the limit, the expiry */
	assert_int_equal(overrides_read(field, 31, value, n, &back), -1);
	assert_int_equal(overrides_read("ABABABABABABABABABABABABABABABAB", 32, value, n, &back), -1);
	assert_int_equal(overrides_read(field, 32, "5000/1m", 7, &back), -1);
	assert_int_equal(overrides_read(field, 32, "5000/1x 0", 9, &back), -1);
	assert_int_equal(overrides_read(field, 32, "5000/1m -1", 10, &back), -1);
	assert_int_equal(overrides_read(field, 32, "5000/1m 12x", 11, &back), -1);
	assert_int_equal(overrides_read(field, 32, "5000/1m ", 8, &back), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_snapshot),
		cmocka_unit_test(test_text),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
