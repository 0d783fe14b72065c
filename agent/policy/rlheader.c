/* SPDX-License-Identifier: Apache-2.0 */
/* rlheader.c: RateLimit-Policy and RateLimit field values (see rlheader.h).
 *
 * Syntax of draft-ietf-httpapi-ratelimit-headers-10: both fields are
 * Structured Field Lists (RFC 9651) of Items whose value is an sf-string
 * naming the policy.
 *   RateLimit-Policy item parameters: q (quota, required), w (window in
 *   whole seconds, optional, non-zero).
 *   RateLimit item parameters: r (remaining, required), t (seconds until
 *   more quota is available, optional).
 * So w is left out when window_s <= 0 and t when more_s < 0. Under -10, t
 * is no longer the time until the quota resets (-09 and before) but until
 * the policy makes more quota available: limit.h says what that is for
 * each algorithm. sf-integers
 * have at most 15 digits: larger figures are capped at 999999999999999 so
 * the field stays valid. List members are joined with ", " as RFC 9651
 * serializes them.
 */
#include "rlheader.h"

#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define SF_INT_MAX 999999999999999ULL

/* A fixed buffer for one header value. */
struct sfbuf {
	char *buf;
	size_t cap;
	size_t len;
	int err; /* sticky: once something did not fit, nothing more is written */
};

/* Keeps one byte for the terminating NUL. */
static void put(struct sfbuf *o, const char *s, size_t n)
{
	if (o->err)
		return;
	if (n >= o->cap - o->len) {
		o->err = 1;
		return;
	}
	memcpy(o->buf + o->len, s, n);
	o->len += n;
}

static void put_char(struct sfbuf *o, char c)
{
	if (o->err)
		return;
	if (1 >= o->cap - o->len) {
		o->err = 1;
		return;
	}
	o->buf[o->len++] = c;
}

/* Bytes an sf-string keeps as they are: printable ASCII but `"` and `\`. */
static bool sf_plain(unsigned char c)
{
	return c >= 0x20 && c <= 0x7e && c != '"' && c != '\\';
}

/* An sf-string: printable ASCII only, `"` and `\` escaped, others dropped
 * (a name cannot smuggle a field separator or a control byte). Runs of
 * plain bytes (a whole policy name, as a rule) are copied at once. */
static void put_sf_string(struct sfbuf *o, const char *s)
{
	put_char(o, '"');
	while (s && *s) {
		unsigned char c = (unsigned char)*s;
		size_t n = 0;

		while (sf_plain((unsigned char)s[n]))
			n++;
		if (n) {
			put(o, s, n);
			s += n;
			continue;
		}
		if (c == '"' || c == '\\') {
			put_char(o, '\\');
			put_char(o, (char)c);
		}
		s++;
	}
	put_char(o, '"');
}

/* The most ";<name>=<decimal>" takes: 3 + 15 digits. */
#define PARAM_MAX 18

/* The decimal digits of v (v <= SF_INT_MAX), from its bit length:
 * log10(2) ~ 1233 / 4096, corrected by one comparison. (v | 1 has as many
 * digits as v, and at least one.) */
static unsigned digits(uint64_t v)
{
	static const uint64_t pow10[] = {
		1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL,
		100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL,
		1000000000000ULL, 10000000000000ULL, 100000000000000ULL, 1000000000000000ULL,
	};
	unsigned t;

	v |= 1;
	t = (unsigned)(64 - __builtin_clzll(v)) * 1233 >> 12;
	return t + (v >= pow10[t]);
}

/* Writes ";<name>=<decimal>" at p (PARAM_MAX bytes of room), digits without
 * printf, two per division from a table of "00".."99": this runs for every
 * decision. Returns the end. */
static char *param_at(char *p, char name, uint64_t v)
{
	static const char pairs[] =
		"0001020304050607080910111213141516171819"
		"2021222324252627282930313233343536373839"
		"4041424344454647484950515253545556575859"
		"6061626364656667686970717273747576777879"
		"8081828384858687888990919293949596979899";
	char *end;

	p[0] = ';';
	p[1] = name;
	p[2] = '=';
	/* One digit, without measuring it: the seconds until more quota
	 * (t) of a decision that is not limited are 0. */
	if (v < 10) {
		p[3] = (char)('0' + v);
		return p + 4;
	}
	if (v > SF_INT_MAX)
		v = SF_INT_MAX;
	end = p + 3 + digits(v);
	/* four digits per division, then split in two pairs (r / 100 as a
	 * multiplication, exact for r < 10000) */
	for (p = end; v >= 10000; v /= 10000) {
		uint32_t r = (uint32_t)(v % 10000), hi = r * 5243 >> 19;

		p -= 4;
		memcpy(p, pairs + 2 * hi, 2);
		memcpy(p + 2, pairs + 2 * (r - 100 * hi), 2);
	}
	if (v >= 100) {
		p -= 2;
		memcpy(p, pairs + 2 * (v % 100), 2);
		v /= 100;
	}
	if (v >= 10)
		memcpy(p - 2, pairs + 2 * v, 2);
	else
		p[-1] = (char)('0' + v);
	return end;
}

static void put_param(struct sfbuf *o, char name, uint64_t v)
{
	char num[PARAM_MAX];

	put(o, num, (size_t)(param_at(num, name, v) - num));
}

/* Terminates the value; on overflow leaves buf[0..keep) and returns -1. */
static int finish(struct sfbuf *o, size_t keep)
{
	if (o->err || o->len > INT_MAX) {
		o->buf[keep] = '\0';
		return -1;
	}
	o->buf[o->len] = '\0';
	return (int)o->len;
}

static void policy_item(struct sfbuf *o, const char *name, uint64_t quota, int64_t window_s)
{
	put_sf_string(o, name);
	put_param(o, 'q', quota);
	if (window_s > 0)
		put_param(o, 'w', (uint64_t)window_s);
}

int rlheader_policy(char *buf, size_t cap, const char *name, uint64_t quota,
		    int64_t window_s)
{
	struct sfbuf o = {buf, cap, 0, 0};

	if (!buf || cap == 0)
		return -1;
	policy_item(&o, name, quota, window_s);
	return finish(&o, 0);
}

static void ratelimit_params(struct sfbuf *o, uint64_t remaining, int64_t more_s)
{
	put_param(o, 'r', remaining);
	if (more_s >= 0)
		put_param(o, 't', (uint64_t)more_s);
}

int rlheader_ratelimit(char *buf, size_t cap, const char *name, uint64_t remaining,
		       int64_t more_s)
{
	struct sfbuf o = {buf, cap, 0, 0};

	if (!buf || cap == 0)
		return -1;
	put_sf_string(&o, name);
	ratelimit_params(&o, remaining, more_s);
	return finish(&o, 0);
}

int rlheader_name(char *buf, size_t cap, const char *name)
{
	struct sfbuf o = {buf, cap, 0, 0};

	if (!buf || cap == 0)
		return -1;
	put_sf_string(&o, name);
	return finish(&o, 0);
}

int rlheader_ratelimit_named(char *buf, size_t cap, const char *sf_name, size_t name_len,
			     uint64_t remaining, int64_t more_s)
{
	struct sfbuf o = {buf, cap, 0, 0};
	char *p;

	if (!buf || cap == 0)
		return -1;
	if (name_len + 2 * PARAM_MAX < cap) {
		/* Room for the longest value and its NUL (as a rule): written
		 * without a check per piece. */
		memcpy(buf, sf_name, name_len);
		p = param_at(buf + name_len, 'r', remaining);
		if (more_s >= 0)
			p = param_at(p, 't', (uint64_t)more_s);
		*p = '\0';
		return (int)(p - buf);
	}
	put(&o, sf_name, name_len);
	ratelimit_params(&o, remaining, more_s);
	return finish(&o, 0);
}

/* When the new item does not fit, the list keeps the items it had, so a
 * caller adding policies in a loop sends those that fit. */
int rlheader_policy_append(char *buf, size_t cap, const char *name, uint64_t quota,
			   int64_t window_s)
{
	struct sfbuf o = {buf, cap, 0, 0};
	size_t old;

	if (!buf || cap == 0)
		return -1;
	old = strnlen(buf, cap);
	if (old == cap) {
		/* Not a string: nothing to keep. */
		buf[0] = '\0';
		return -1;
	}
	o.len = old;
	if (old > 0)
		put(&o, ", ", 2);
	policy_item(&o, name, quota, window_s);
	return finish(&o, old);
}
