/* SPDX-License-Identifier: Apache-2.0 */
#include "query.h"

#include <string.h>

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

size_t query_url_decode(char *s, size_t len)
{
	size_t i = 0, j = 0;

	while (i < len) {
		if (s[i] == '%' && len - i > 2 && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
			s[j++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
			i += 3;
		} else if (s[i] == '+') {
			s[j++] = ' ';
			i++;
		} else {
			s[j++] = s[i++];
		}
	}
	return j;
}

void query_parse(char *query, struct rules_args *args)
{
	char *p = query;

	args->n = 0;
	while (p && *p) {
		char *amp = strchr(p, '&');
		char *eq;

		if (amp)
			*amp = '\0';
		eq = strchr(p, '=');
		if (eq && eq != p) {
			struct spop_str name;
			struct spop_data val;

			*eq = '\0';
			name.ptr = p;
			name.len = query_url_decode(p, strlen(p));
			val.type = SPOP_T_STR;
			val.u.str.ptr = eq + 1;
			val.u.str.len = query_url_decode(eq + 1, strlen(eq + 1));
			rules_args_add(args, name, &val);
		}
		p = amp ? amp + 1 : NULL;
	}
}
