/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the path rules match (urlpath.c). For any bytes, the
 * normal form is never longer than the input, normalising it again
 * changes nothing, a shorter buffer holds its first bytes exactly, and
 * a path urlpath_plain() passes is its own normal form.
 * Any broken invariant calls abort(). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "urlpath.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond))                                                   \
			abort();                                               \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data;
	/* exactly as long as each output may be: a sanitizer sees a byte
	 * written past it */
	char *out = malloc(size ? size : 1), *again = malloc(size ? size : 1);
	size_t n, m, caps[4] = {0, 1, 7, 64};

	CHECK(out && again);
	n = urlpath_normalise(in, size, out, size);
	CHECK(n <= size);
	m = urlpath_normalise(out, n, again, n);
	CHECK(m == n && memcmp(out, again, n) == 0);
	/* a path said plain is its own normal form */
	CHECK(!urlpath_plain(in, size) || (n == size && memcmp(out, in, n) == 0));
	/* the short buffers classification uses: the same first bytes */
	caps[3] = size > 2 ? (size_t)data[0] % size : 64;
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		size_t cap = caps[i];
		char *part = malloc(cap ? cap : 1);

		CHECK(part);
		m = urlpath_normalise(in, size, part, cap);
		CHECK(m == (n < cap ? n : cap) && memcmp(part, out, m) == 0);
		free(part);
	}
	free(again);
	free(out);
	return 0;
}
