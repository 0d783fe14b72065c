/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the admin endpoints' query strings (query.c). Every
 * argument must lie inside the input and decode to no more than it was. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "query.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *q = malloc(size + 1);
	struct rules_args args;

	if (!q)
		return 0;
	memcpy(q, data, size);
	q[size] = '\0';
	query_parse(q, &args);
	for (size_t i = 0; i < args.n; i++) {
		const struct rules_arg *a = &args.a[i];

		if (a->name.ptr < q || a->name.ptr + a->name.len > q + size ||
		    a->val.u.str.ptr < q || a->val.u.str.ptr + a->val.u.str.len > q + size ||
		    a->name.len == 0)
			abort();
	}
	free(q);
	return 0;
}
