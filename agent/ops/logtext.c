/* SPDX-License-Identifier: Apache-2.0 */
#include "logtext.h"

#include <string.h>

static size_t width(unsigned char c)
{
	return c >= 0x20 && c < 0x7f && c != '\\' ? 1 : 4;
}

const char *logtext(char *dst, size_t cap, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t need = 0, room, limit, o = 0;

	if (cap == 0)
		return dst;
	for (size_t i = 0; i < n; i++)
		need += width((unsigned char)s[i]);
	room = cap - 1;
	/* cut short: leave room for "..." */
	limit = need <= room ? room : room >= 3 ? room - 3 : 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (width(c) > limit - o)
			break;
		if (width(c) == 1) {
			dst[o++] = (char)c;
			continue;
		}
		dst[o++] = '\\';
		dst[o++] = 'x';
		dst[o++] = hex[c >> 4];
		dst[o++] = hex[c & 15];
	}
	if (need > room) {
		size_t dots = room - o < 3 ? room - o : 3;

		memcpy(dst + o, "...", dots);
		o += dots;
	}
	dst[o] = '\0';
	return dst;
}
