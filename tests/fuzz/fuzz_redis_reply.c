/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the decision script's msgpack reply (redis_reply.c). The
 * first byte chooses how many requests the batch had; the rest is the
 * reply. Decoding must never read out of bounds, and a part it calls well
 * formed must have at most 3 values per limit. */
#include <stdint.h>
#include <stdlib.h>

#include "redis_reply.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct redis_decision out[64];
	size_t n;

	if (size < 1)
		return 0;
	n = data[0] % 64;
	if (redis_reply_msgpack((const char *)data + 1, size - 1, n, out) == 0) {
		for (size_t i = 0; i < n; i++)
			if (out[i].ok && (out[i].nvals > 3 * LIMIT_SET_MAX || out[i].nvals % 3))
				abort();
	}
	return 0;
}
