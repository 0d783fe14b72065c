/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: what comes back from HAProxy to settle a charge
 * (decide/charge.h): a place, and the response's cost argument. For any
 * bytes, the parsers read nothing past them; a charge place read is
 * written again as the same bytes; a cost read is the digits' value, at
 * most 2^40. Any broken invariant calls abort(). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "charge.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond))                                                   \
			abort();                                               \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* exactly as long as the input: a sanitizer sees a byte read past it */
	char *in = malloc(size ? size : 1), again[DECIDE_PLACE_MAX + 64];
	char hex[IDENTITY_HEX_LEN + 1];
	struct charge_place cp;
	struct spop_data d;
	uint64_t cost;
	int rc, n;

	CHECK(in);
	memcpy(in, data, size);
	rc = charge_parse_place(in, size, &cp);
	CHECK(rc >= -1 && rc <= 1);
	if (rc == 1) {
		identity_hex(cp.key, hex);
		n = snprintf(again, sizeof(again), "%s/%s/%u/%lld/%016llx", cp.rule, hex,
			     (unsigned)cp.estimate, (long long)cp.take_us,
			     (unsigned long long)cp.limits);
		/* (digits with leading zeros read as the same number) */
		CHECK(n > 0 && (size_t)n <= size);
		CHECK(cp.estimate >= 1 && cp.take_us >= 0);
	}
	d.type = SPOP_T_STR;
	d.u.str.ptr = in;
	d.u.str.len = size;
	if (charge_parse_cost(&d, &cost) == 0) {
		CHECK(size >= 1 && size <= 20 && cost <= LIMIT_QUOTA_MAX);
		for (size_t i = 0; i < size; i++)
			CHECK(in[i] >= '0' && in[i] <= '9');
	}
	free(in);
	return 0;
}
