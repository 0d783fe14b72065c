/* SPDX-License-Identifier: Apache-2.0 */
/* logtext.h: text a request chose (a client's identity, a query), made
 * safe to put in a log line.
 *
 * Guarantee: the output holds only printable ASCII (0x20 to 0x7e). Control
 * bytes (a line feed above all, which would start a forged line), DEL,
 * bytes outside ASCII and the backslash itself are written \xNN, so the
 * original bytes can be read back and no escape is ambiguous. */
#ifndef RL_LOGTEXT_H
#define RL_LOGTEXT_H

#include <stddef.h>

/* Writes the escape of s[0..n) into dst[0..cap), NUL-terminated; when it
 * does not fit, as many whole escapes as fit followed by "...". Returns
 * dst. */
const char *logtext(char *dst, size_t cap, const char *s, size_t n);

#endif
