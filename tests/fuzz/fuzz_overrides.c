/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the fleet's overrides as Redis holds them (overrides.c):
 * a field and a value read back from arbitrary bytes (the input split at
 * its first NUL), then a snapshot of what was read. What reads must write
 * back to a value that reads to the same entry, and be found. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "overrides.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond))                                                   \
			abort();                                               \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	size_t flen = nul ? (size_t)(nul - data) : size;
	const char *value = nul ? (const char *)nul + 1 : "";
	size_t vlen = nul ? size - flen - 1 : 0;
	struct override_entry e, back;
	char field[2 * IDENTITY_KEY_LEN + 1], text[OVERRIDE_VALUE_MAX];
	struct overrides *o;
	size_t n;

	if (overrides_read((const char *)data, flen, value, vlen, &e) < 0)
		return 0;
	CHECK(e.spec.quota >= 1 && e.spec.quota <= LIMIT_QUOTA_MAX);
	CHECK(e.spec.period_us >= LIMIT_PERIOD_MIN_US && e.spec.period_us <= LIMIT_PERIOD_MAX_US);
	CHECK(e.expires_ms >= 0);
	overrides_field(e.key, field);
	n = overrides_value(&e, text);
	CHECK(n > 0 && n < sizeof(text));
	CHECK(overrides_read(field, strlen(field), text, n, &back) == 0);
	CHECK(memcmp(back.key, e.key, IDENTITY_KEY_LEN) == 0);
	CHECK(back.spec.quota == e.spec.quota && back.spec.period_us == e.spec.period_us);
	CHECK(back.expires_ms == e.expires_ms);
	o = overrides_new(&e, 1);
	if (o) {
		CHECK(overrides_count(o) == 1);
		CHECK(overrides_find(o, e.key, 0) == overrides_at(o, 0));
		overrides_release(o);
	}
	return 0;
}
