/* SPDX-License-Identifier: Apache-2.0 */
/* query.h: an HTTP query string ("a=1&b=x%20y") as message arguments, for
 * the admin endpoints. Pure: decodes in place, allocates nothing, and
 * never reads past the string's NUL. */
#ifndef RL_QUERY_H
#define RL_QUERY_H

#include <stddef.h>

#include "rules.h"

/* Decodes %XX and '+' in s[0..len) in place; returns the new length. A '%'
 * not followed by two hex digits stays as it is. */
size_t query_url_decode(char *s, size_t len);

/* Splits a NUL-terminated query (modified in place; it must outlive args)
 * into name=value arguments of string type. Items without '=' or with an
 * empty name are skipped; past RULES_ARGS_MAX the rest is ignored. */
void query_parse(char *query, struct rules_args *args);

#endif
