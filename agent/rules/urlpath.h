/* SPDX-License-Identifier: Apache-2.0 */
/* urlpath.h: the path rules match, from the path a request spelt.
 *
 * A client can spell one resource many ways (/LOGIN, /%6cogin, //login,
 * /./login, /x/../login, /login;jsessionid=1, /login%2f); an application
 * reads them all as /login. Matched as sent, each spelling would leave a
 * rule on /login for the catch-all. The normal form is what the
 * application reads:
 *
 *   - %XX escapes are decoded, once (a decoded '%' starts no escape), and
 *     the decoded bytes are read as if they had been sent so: %2F
 *     separates segments, %2E is a dot, %3B starts parameters. Three kinds
 *     stay escaped (in lower case), so that the normal form is its own
 *     normal form: %25 ('%'), %3F ('?', which would end the path), and a
 *     hex digit that would make an escape with a '%' just before it
 *     ("%%34%31" is "%%341": "%41" would be "a" the second time). A '%'
 *     that starts no escape (not followed by two hex digits) stays as it
 *     is;
 *   - ASCII letters in lower case;
 *   - each segment's ";params" dropped (/login;jsessionid=1 is /login);
 *   - empty segments dropped (// is /);
 *   - "." segments removed and ".." segments resolved, as RFC 3986's
 *     remove_dot_segments does; a ".." above the root is dropped. A path
 *     whose last segment was "." or ".." or empty ends with "/";
 *   - a '?' (sent as such, not %3F) ends the path: the query after it is
 *     kept as it is.
 *
 * A path that starts with '/' (sent or decoded) keeps it; one that does
 * not ("*", "") gets none.
 *
 * Guarantees, for any bytes: the normal form is never longer than the
 * input; normalising it again gives it unchanged; the work is linear in
 * the input's length, whatever it holds (nested dot segments included);
 * nothing is allocated, and nothing is read past in + len nor written
 * past out + cap.
 */
#ifndef RL_URLPATH_H
#define RL_URLPATH_H

#include <stdbool.h>
#include <stddef.h>

/* Writes the first bytes of the normal form of in[0..len) to out, at most
 * cap of them, and returns how many: the normal form's length when it is
 * shorter than cap, cap otherwise. With cap >= len it is always whole.
 * A shorter cap is exact as far as it goes (a ".." anywhere after is
 * resolved): a caller that compares prefixes of up to cap - 1 bytes, and
 * the byte after them, needs no more. in and out must not overlap. */
size_t urlpath_normalise(const char *in, size_t len, char *out, size_t cap);

/* Whether in[0..len) is its own normal form, as most paths are
 * ("/api/items"): a quick look that urlpath_normalise() need not take.
 * False only means "maybe not": a '.' that starts a segment, any '%' or
 * ';' or upper-case letter before the query, or "//", answer false. */
bool urlpath_plain(const char *in, size_t len);

#endif
