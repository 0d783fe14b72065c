/* SPDX-License-Identifier: Apache-2.0 */
#include "out.h"

#include <stdarg.h>
#include <stdio.h>

#include "alloc.h"

void outf(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		if (o->err)
			return;
		va_start(ap, fmt);
		n = vsnprintf(o->buf ? o->buf + o->len : NULL, o->cap - o->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			o->err = 1;
			return;
		}
		if ((size_t)n < o->cap - o->len) {
			o->len += (size_t)n;
			return;
		}
		if (!o->grow) {
			o->err = 1;
			return;
		}
		char *nb = xrealloc(o->buf, o->cap * 2 + (size_t)n);
		if (!nb) {
			o->err = 1;
			return;
		}
		o->buf = nb;
		o->cap = o->cap * 2 + (size_t)n;
	}
}

void out_json_str(struct out *o, const char *s, size_t len)
{
	outf(o, "\"");
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			outf(o, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			outf(o, "\\u%04x", c);
		else
			outf(o, "%c", c);
	}
	outf(o, "\"");
}
