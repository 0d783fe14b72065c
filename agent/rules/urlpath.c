/* SPDX-License-Identifier: Apache-2.0 */
/* urlpath.c: the normal form of a request's path (see urlpath.h).
 *
 * One pass over the input. A decoder turns it into bytes as the
 * application reads them (escapes decoded, letters in lower case); the
 * segments of that stream go to the output as a stack: a segment is
 * written once it is known not to be "", "." or ".." (those are at most
 * two dots, held back), and a ".." takes the last segment off again. Every
 * byte is written at most once and taken off at most once, so the work is
 * linear in the input.
 *
 * The output may be shorter than the normal form (cap): bytes past cap
 * are not kept, only counted. A segment taken off past cap needs no bytes
 * to be found (its '/' was past cap: deep counts those), and one that
 * starts before cap is found in the bytes kept. So a short buffer gives
 * the same first bytes as a whole one.
 */
#include "urlpath.h"

#include <stdbool.h>
#include <stdint.h>

struct out {
	char *buf;
	size_t cap;
	size_t w;      /* bytes written: the length, or cap when it is longer */
	size_t segs;   /* segments on the stack */
	size_t deep;   /* of them, the last ones, whose '/' is at cap or after */
	bool abs;      /* the path starts with '/' */
};

static inline void put(struct out *o, char ch)
{
	if (o->w < o->cap)
		o->buf[o->w++] = ch;
}

/* A new segment: its '/' (the first of a relative path has none). */
static void seg_open(struct out *o)
{
	if (o->abs || o->segs > 0) {
		if (o->w >= o->cap)
			o->deep++;
		put(o, '/');
	}
	o->segs++;
}

/* ".." takes the last segment off, '/' included; none above the root. */
static void seg_pop(struct out *o)
{
	if (o->segs == 0)
		return;
	o->segs--;
	if (o->deep > 0) {
		/* Its '/' was past cap, and what remains still reaches cap:
		 * the segment before it ends where it started. */
		o->deep--;
		return;
	}
	while (o->w > 0 && o->buf[o->w - 1] != '/')
		o->w--;
	if (o->w > 0)
		o->w--;
}

/* The segment being read: ".", ".." and "" are known only at its end. */
struct seg {
	uint8_t dots;  /* leading dots held back, while not open */
	bool open;     /* written: not a dot segment, not empty */
	bool params;   /* after ';': dropped up to the next '/' */
};

/* One byte of the segment as decoded (never '/'). */
static void seg_byte(struct out *o, struct seg *s, char ch)
{
	if (s->params)
		return;
	if (ch == ';') {
		s->params = true;
		return;
	}
	if (!s->open) {
		if (ch == '.' && s->dots < 2) {
			s->dots++;
			return;
		}
		seg_open(o);
		for (unsigned i = 0; i < s->dots; i++)
			put(o, '.');
		s->open = true;
	}
	put(o, ch);
}

/* An escape kept as it is (three bytes, in lower case). */
static void seg_escape(struct out *o, struct seg *s, char h1, char h2)
{
	if (s->params)
		return;
	seg_byte(o, s, '%');
	put(o, h1);
	put(o, h2);
}

/* The end of a segment; returns whether it was an ordinary one. */
static bool seg_end(struct out *o, struct seg *s)
{
	bool ordinary = s->open;

	if (!s->open && s->dots == 2)
		seg_pop(o);
	s->dots = 0;
	s->open = false;
	s->params = false;
	return ordinary;
}

static inline int hexval(unsigned char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	ch |= 0x20;
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	return -1;
}

static inline char lower(unsigned char ch)
{
	return (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
}

/* What each byte of a path may take: 0 nothing (most of them). */
enum { P_SLASH = 1, P_DOT, P_QUERY, P_UPPER, P_WORK };
#define UPPER(c) [c] = P_UPPER
static const uint8_t plain_class[256] = {
	['/'] = P_SLASH, ['.'] = P_DOT, ['?'] = P_QUERY, ['%'] = P_WORK, [';'] = P_WORK,
	UPPER('A'), UPPER('B'), UPPER('C'), UPPER('D'), UPPER('E'), UPPER('F'), UPPER('G'),
	UPPER('H'), UPPER('I'), UPPER('J'), UPPER('K'), UPPER('L'), UPPER('M'), UPPER('N'),
	UPPER('O'), UPPER('P'), UPPER('Q'), UPPER('R'), UPPER('S'), UPPER('T'), UPPER('U'),
	UPPER('V'), UPPER('W'), UPPER('X'), UPPER('Y'), UPPER('Z'),
};
#undef UPPER

size_t urlpath_normalise(const char *in, size_t len, char *out, size_t cap)
{
	struct out o = {out, cap, 0, 0, 0, false};
	struct seg s = {0, false, false};
	bool first = true, ordinary = false;
	/* 1 after a '%' that starts no escape, 2 after it and a hex digit:
	 * a decoded hex digit then stays escaped (urlpath.h). */
	int lit = 0;
	size_t i = 0;

	while (i < len) {
		unsigned char ch;
		int hi, lo;

		if (s.open && !s.params && !lit) {
			/* the bytes of a segment that need nothing, straight on */
			for (; i < len; i++) {
				unsigned k = plain_class[(unsigned char)in[i]];

				if (k == 0 || k == P_DOT)
					put(&o, in[i]);
				else if (k == P_UPPER)
					put(&o, (char)(in[i] + 32));
				else
					break;
			}
			if (i == len)
				break;
		}
		ch = (unsigned char)in[i];
		if (ch == '?')
			break;

		if (ch == '%' && len - i >= 3 && (hi = hexval((unsigned char)in[i + 1])) >= 0 &&
		    (lo = hexval((unsigned char)in[i + 2])) >= 0) {
			unsigned char v = (unsigned char)(hi << 4 | lo);

			if (v == '%' || v == '?' || (lit && hexval(v) >= 0)) {
				first = false;
				seg_escape(&o, &s, lower((unsigned char)in[i + 1]),
					   lower((unsigned char)in[i + 2]));
				lit = 0;
				i += 3;
				continue;
			}
			ch = v;
			i += 3;
			lit = 0;
		} else {
			i++;
			if (ch == '%')
				lit = 1;
			else
				lit = lit == 1 && hexval(ch) >= 0 ? 2 : 0;
		}
		if (ch == '/') {
			if (first)
				o.abs = true;
			else
				seg_end(&o, &s);
		} else {
			seg_byte(&o, &s, lower(ch));
		}
		first = false;
	}
	ordinary = seg_end(&o, &s);
	/* "/a/", "/a/.", "/a/b/..", "/": the path ends with a '/' */
	if (!ordinary && (o.abs || o.segs > 0))
		put(&o, '/');
	for (; i < len; i++)
		put(&o, in[i]);
	return o.w;
}


bool urlpath_plain(const char *in, size_t len)
{
	const unsigned char *p = (const unsigned char *)in, *end = p + len;
	bool start = true; /* at the start of a segment */

	if (p < end && *p == '/')
		p++; /* the root's */
	for (; p < end; p++) {
		unsigned k = plain_class[*p];

		if (__builtin_expect(k == 0, 1)) {
			start = false;
			continue;
		}
		switch (k) {
		case P_SLASH:
			if (start)
				return false; /* "//" */
			start = true;
			break;
		case P_DOT:
			if (start)
				return false; /* ".", ".." (and ".x", to be quick) */
			break;
		case P_QUERY:
			return true; /* the query is kept as it is */
		default:
			return false; /* '%', ';', upper case */
		}
	}
	return true;
}
