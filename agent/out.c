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
		n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
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
