/* SPDX-License-Identifier: Apache-2.0 */
/* out.h: text built with printf into a buffer, for HTTP bodies. A fixed
 * buffer fails once full; a growing one reallocates. Either way the first
 * failure sticks (err) and later writes do nothing. */
#ifndef RL_OUT_H
#define RL_OUT_H

#include <stddef.h>

struct out {
	char *buf;
	size_t cap, len;
	int err;
	int grow;   /* 1: buf is from xmalloc and may be reallocated */
};

void outf(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A JSON string of s[0..len): quotes, backslashes, control bytes and
 * bytes outside ASCII escaped (\u00XX), so any bytes give valid JSON. */
void out_json_str(struct out *o, const char *s, size_t len);

#endif
