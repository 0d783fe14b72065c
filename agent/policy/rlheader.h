/* SPDX-License-Identifier: Apache-2.0 */
/* rlheader.h: the values of the RateLimit-Policy and RateLimit HTTP header
 * fields, in the syntax of draft-ietf-httpapi-ratelimit-headers-10
 * (Structured Field lists), for HAProxy to copy into responses.
 *
 *   RateLimit-Policy: "default";q=100;w=60
 *   RateLimit: "default";r=42;t=17
 *
 * Policy names are sf-strings: only printable ASCII is kept, `"` and `\`
 * are escaped. Pure formatting, no allocation. */
#ifndef RL_RLHEADER_H
#define RL_RLHEADER_H

#include <stddef.h>
#include <stdint.h>

/* Each returns the length written (NUL-terminated, never over cap - 1), or
 * -1 when it did not fit (buf then holds an empty string). The optional
 * parameters are left out when window_s <= 0 (w) or more_s < 0 (t: the
 * seconds until more quota becomes available, not until the limit is
 * full again);
 * figures over 999999999999999 (the sf-integer maximum) are capped. */
int rlheader_policy(char *buf, size_t cap, const char *name, uint64_t quota,
		    int64_t window_s);
int rlheader_ratelimit(char *buf, size_t cap, const char *name, uint64_t remaining,
		       int64_t more_s);

/* A name as both fields quote it: an sf-string, escaped (at most
 * RLHEADER_NAME_MAX(strlen(name)) bytes with its NUL). Rendered once, it
 * spares every answer scanning the name again: the rules render each
 * policy name at load. Returns its length as above, or -1. */
#define RLHEADER_NAME_MAX(len) (2 * (len) + 3)
int rlheader_name(char *buf, size_t cap, const char *name);

/* rlheader_ratelimit() for a name rendered by rlheader_name() (name_len
 * bytes): the same value, byte for byte. */
int rlheader_ratelimit_named(char *buf, size_t cap, const char *sf_name, size_t name_len,
			     uint64_t remaining, int64_t more_s);

/* Appends ", " plus an item formatted as above to a list in buf (for several
 * policies in one field; no separator when buf is empty). Returns the
 * length of the whole string, or -1 when the item did not fit: buf then
 * keeps the list it had (empty if buf held no NUL within cap). */
int rlheader_policy_append(char *buf, size_t cap, const char *name, uint64_t quota,
			   int64_t window_s);

#endif
