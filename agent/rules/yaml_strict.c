/* SPDX-License-Identifier: Apache-2.0 */
/* yaml_strict.c: strict readers over a libyaml document (see
 * yaml_strict.h).
 *
 * libyaml's document API turns the whole file into a node tree; the
 * readers here only look at nodes a caller asks for. Messages are written
 * once, at the first error, into the caller's buffer.
 */
#include "yaml_strict.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "limit.h"

/* ---- messages ------------------------------------------------------------ */

int ys_fail(struct ys *y, yaml_mark_t mark, const char *where, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(y->err, y->errlen, "%s:%zu:%zu: %s%s", y->name, mark.line + 1,
		     mark.column + 1, where, where[0] ? ": " : "");
	if (n < 0 || (size_t)n >= y->errlen)
		return -1;
	va_start(ap, fmt);
	vsnprintf(y->err + n, y->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

int ys_fail_oom(struct ys *y)
{
	snprintf(y->err, y->errlen, "%s: out of memory", y->name);
	return -1;
}

const char *ys_quote(char *out, size_t cap, const char *s, size_t len)
{
	size_t o = 0, i;

	if (cap < 8) {
		if (cap)
			out[0] = '\0';
		return out;
	}
	out[o++] = '"';
	for (i = 0; i < len && i < 48; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (o + 8 > cap)
			break;
		if (ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\')
			o += (size_t)snprintf(out + o, cap - o, "\\x%02x", ch);
		else
			out[o++] = (char)ch;
	}
	if (i < len && o + 5 <= cap) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o++] = '"';
	out[o] = '\0';
	return out;
}

/* Joins a, sep and b into out (YS_PATH_MAX bytes). Callers build paths of
 * bounded parts (the rules file: names of at most 31 bytes, a depth of at
 * most five), so they fit; were one longer, it would only be cut short. */
static void path_join(char *out, const char *a, const char *sep, const char *b)
{
	const char *parts[3] = {a, sep, b};
	size_t o = 0;

	for (size_t i = 0; i < 3; i++)
		for (const char *p = parts[i]; *p && o < YS_PATH_MAX - 1; p++)
			out[o++] = *p;
	out[o] = '\0';
}

void ys_path_key(char *out, const char *parent, const char *key)
{
	path_join(out, parent, parent[0] ? "." : "", key);
}

void ys_path_index(char *out, const char *parent, size_t i)
{
	char idx[24];

	snprintf(idx, sizeof(idx), "[%zu]", i);
	path_join(out, parent, "", idx);
}

/* ---- nodes --------------------------------------------------------------- */

yaml_node_t *ys_node(struct ys *y, int index)
{
	return yaml_document_get_node(&y->doc, index);
}

yaml_node_t *ys_seq_item(struct ys *y, const yaml_node_t *seq, size_t i)
{
	return ys_node(y, seq->data.sequence.items.start[i]);
}

bool ys_is_null(const yaml_node_t *n)
{
	const char *s;

	if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	s = (const char *)n->data.scalar.value;
	return n->data.scalar.length == 0 || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 ||
	       strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0;
}

/* What a node is, for "expected X, got Y". */
static const char *node_desc(const yaml_node_t *n, char *buf, size_t cap)
{
	switch (n->type) {
	case YAML_MAPPING_NODE:
		return "a mapping";
	case YAML_SEQUENCE_NODE:
		return "a list";
	case YAML_SCALAR_NODE:
		if (ys_is_null(n))
			return "nothing";
		return ys_quote(buf, cap, (const char *)n->data.scalar.value,
				n->data.scalar.length);
	case YAML_NO_NODE:
		break;
	}
	return "nothing";
}

int ys_fail_type(struct ys *y, const yaml_node_t *n, const char *where, const char *expected)
{
	char q[YS_PATH_MAX];

	return ys_fail(y, n->start_mark, where, "expected %s, got %s", expected,
		       node_desc(n, q, sizeof(q)));
}

bool ys_is(const yaml_node_t *k, const char *name)
{
	size_t len = strlen(name);

	return k->type == YAML_SCALAR_NODE && k->data.scalar.length == len &&
	       memcmp(k->data.scalar.value, name, len) == 0;
}

size_t ys_seq_len(const yaml_node_t *n)
{
	return (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
}

size_t ys_map_len(const yaml_node_t *n)
{
	return (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
}

int ys_expect_mapping(struct ys *y, const yaml_node_t *n, const char *where)
{
	if (n->type != YAML_MAPPING_NODE)
		return ys_fail_type(y, n, where, "a mapping");
	return 0;
}

int ys_check_key(struct ys *y, const yaml_node_t *k, const char *where)
{
	if (k->type != YAML_SCALAR_NODE || ys_is_null(k))
		return ys_fail(y, k->start_mark, where, "keys must be strings");
	return 0;
}

int ys_map_fields(struct ys *y, yaml_node_t *map, const char *where, const char *const *known,
		  size_t nknown, yaml_node_t **keys, yaml_node_t **vals)
{
	yaml_node_pair_t *p;

	for (size_t i = 0; i < nknown; i++)
		keys[i] = vals[i] = NULL;
	if (ys_expect_mapping(y, map, where) < 0)
		return -1;
	for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = ys_node(y, p->key), *v = ys_node(y, p->value);
		size_t i;

		if (ys_check_key(y, k, where) < 0)
			return -1;
		for (i = 0; i < nknown; i++)
			if (ys_is(k, known[i]))
				break;
		if (i == nknown) {
			char q[YS_PATH_MAX], list[512];
			size_t o = 0;

			list[0] = '\0';
			for (size_t j = 0; j < nknown && o < sizeof(list); j++)
				o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s",
						      j ? ", " : "", known[j]);
			return ys_fail(y, k->start_mark, where,
				       "unknown key %s (expected one of: %s)",
				       ys_quote(q, sizeof(q), (const char *)k->data.scalar.value,
						k->data.scalar.length),
				       list);
		}
		if (vals[i])
			return ys_fail(y, k->start_mark, where,
				       "duplicate key \"%s\" (first at %zu:%zu)",
				       known[i], keys[i]->start_mark.line + 1,
				       keys[i]->start_mark.column + 1);
		keys[i] = k;
		vals[i] = v;
	}
	return 0;
}

int ys_fail_missing(struct ys *y, const yaml_node_t *map, const char *where, const char *key,
		    const char *hint)
{
	return ys_fail(y, map->start_mark, where, "missing key \"%s\"%s", key, hint);
}

/* ---- scalars ------------------------------------------------------------- */

int ys_text(struct ys *y, yaml_node_t *n, const char *where, const char **s, size_t *len)
{
	if (n->type != YAML_SCALAR_NODE || ys_is_null(n))
		return ys_fail_type(y, n, where, "a string");
	*s = (const char *)n->data.scalar.value;
	*len = n->data.scalar.length;
	if (memchr(*s, '\0', *len))
		return ys_fail(y, n->start_mark, where, "contains a NUL byte");
	return 0;
}

int ys_cstr(struct ys *y, yaml_node_t *n, const char *where, char *out, size_t cap)
{
	const char *s;
	size_t len;

	if (ys_text(y, n, where, &s, &len) < 0)
		return -1;
	if (len >= cap)
		return ys_fail(y, n->start_mark, where, "longer than %zu bytes", cap - 1);
	memcpy(out, s, len);
	out[len] = '\0';
	return 0;
}

static bool name_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '_' || ch == '.' || ch == '-';
}

static bool valid_name(const char *s, size_t len, size_t cap)
{
	if (len == 0 || len >= cap)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!name_char(s[i]))
			return false;
	return true;
}

int ys_name(struct ys *y, yaml_node_t *n, const char *where, char *out, size_t cap)
{
	const char *s;
	size_t len;
	char q[YS_PATH_MAX];

	if (n->type != YAML_SCALAR_NODE || ys_is_null(n))
		return ys_fail_type(y, n, where, "a name");
	s = (const char *)n->data.scalar.value;
	len = n->data.scalar.length;
	if (!valid_name(s, len, cap))
		return ys_fail(y, n->start_mark, where,
			       "%s: names are 1 to %zu characters among A-Z a-z 0-9 _ . -",
			       ys_quote(q, sizeof(q), s, len), cap - 1);
	memcpy(out, s, len);
	out[len] = '\0';
	return 0;
}

int ys_int(struct ys *y, yaml_node_t *n, const char *where, long long min, long long max,
	   long long *out)
{
	const char *s;
	size_t len, i = 0;
	bool neg = false;
	unsigned long long v = 0;
	char q[YS_PATH_MAX];

	if (n->type != YAML_SCALAR_NODE || ys_is_null(n))
		goto bad;
	s = (const char *)n->data.scalar.value;
	len = n->data.scalar.length;
	if (i < len && (s[i] == '-' || s[i] == '+'))
		neg = s[i++] == '-';
	if (i == len)
		goto bad;
	for (; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			goto bad;
		if (v > 100000000000000000ULL)
			goto bad; /* far out of every range, and no overflow */
		v = v * 10 + (unsigned long long)(s[i] - '0');
	}
	*out = neg ? -(long long)v : (long long)v;
	if (*out < min || *out > max)
		goto bad;
	return 0;
bad:
	return ys_fail(y, n->start_mark, where, "expected an integer from %lld to %lld, got %s", min,
		       max, node_desc(n, q, sizeof(q)));
}

int ys_bool(struct ys *y, yaml_node_t *n, const char *where, bool *out)
{
	static const char *const yes[] = {"true", "True", "TRUE"};
	static const char *const no[] = {"false", "False", "FALSE"};

	if (n->type == YAML_SCALAR_NODE) {
		for (size_t i = 0; i < 3; i++) {
			if (ys_is(n, yes[i])) {
				*out = true;
				return 0;
			}
			if (ys_is(n, no[i])) {
				*out = false;
				return 0;
			}
		}
	}
	return ys_fail_type(y, n, where, "true or false");
}

int ys_duration(struct ys *y, yaml_node_t *n, const char *where, int64_t min_us, int64_t max_us,
		const char *range, int64_t *out)
{
	char q[YS_PATH_MAX];
	int64_t us;

	if (n->type != YAML_SCALAR_NODE || ys_is_null(n) ||
	    memchr(n->data.scalar.value, '\0', n->data.scalar.length) ||
	    limit_parse_duration((const char *)n->data.scalar.value, &us) < 0 || us < min_us ||
	    us > max_us)
		return ys_fail(y, n->start_mark, where, "expected a duration from %s, got %s", range,
			       node_desc(n, q, sizeof(q)));
	*out = us;
	return 0;
}

int ys_percent(struct ys *y, yaml_node_t *n, const char *where, int min_bp, int max_bp,
	       bool allow_off, int *out)
{
	const char *s;
	size_t len, i = 0;
	long v = 0;
	int decimals = 0;
	char q[YS_PATH_MAX];

	if (n->type != YAML_SCALAR_NODE || ys_is_null(n))
		goto bad;
	s = (const char *)n->data.scalar.value;
	len = n->data.scalar.length;
	if (allow_off && ys_is(n, "off")) {
		*out = YS_OFF;
		return 0;
	}
	for (; i < len && s[i] >= '0' && s[i] <= '9' && i < 4; i++)
		v = v * 10 + (s[i] - '0');
	if (i == 0)
		goto bad;
	if (i < len && s[i] == '.') {
		i++;
		for (; i < len && s[i] >= '0' && s[i] <= '9' && decimals < 2; i++, decimals++)
			v = v * 10 + (s[i] - '0');
		if (decimals == 0)
			goto bad;
	}
	for (; decimals < 2; decimals++)
		v *= 10;
	if (i + 1 != len || s[i] != '%' || v < min_bp || v > max_bp)
		goto bad;
	*out = (int)v;
	return 0;
bad:
	return ys_fail(y, n->start_mark, where,
		       "expected a percentage from %d%% to %d%%%s such as 80%%, got %s", min_bp / 100,
		       max_bp / 100, allow_off ? " (or off)" : "", node_desc(n, q, sizeof(q)));
}

int ys_word(struct ys *y, yaml_node_t *n, const char *where, const char *const *words,
	    size_t nwords, const char *expect, int *out)
{
	if (n->type == YAML_SCALAR_NODE) {
		for (size_t i = 0; i < nwords; i++) {
			if (ys_is(n, words[i])) {
				*out = (int)i;
				return 0;
			}
		}
	}
	return ys_fail_type(y, n, where, expect);
}

/* ---- lists --------------------------------------------------------------- */

int ys_string_or_list(struct ys *y, yaml_node_t *n, const char *where, size_t max,
		      const char *what, ys_item_fn each, void *arg)
{
	char item[YS_PATH_MAX];
	size_t count;

	if (n->type == YAML_SCALAR_NODE)
		return each(y, n, where, 0, arg);
	if (n->type != YAML_SEQUENCE_NODE)
		return ys_fail_type(y, n, where, "a string or a list");
	count = ys_seq_len(n);
	if (count == 0)
		return ys_fail(y, n->start_mark, where, "empty list");
	if (count > max)
		return ys_fail(y, n->start_mark, where, "more than %zu %s", max, what);
	for (size_t i = 0; i < count; i++) {
		ys_path_index(item, where, i);
		if (each(y, ys_seq_item(y, n, i), item, i, arg) < 0)
			return -1;
	}
	return 0;
}

size_t ys_list_count(const yaml_node_t *n, size_t max)
{
	size_t count;

	if (n->type != YAML_SEQUENCE_NODE)
		return 1;
	count = ys_seq_len(n);
	return count > max ? max : count;
}

/* ---- the document -------------------------------------------------------- */

/* Line and column (from 1) of a byte offset, for reader errors, which
 * libyaml reports as an offset. */
static void offset_mark(const char *buf, size_t len, size_t off, size_t *line, size_t *col)
{
	size_t l = 1, start = 0;

	if (off > len)
		off = len;
	for (size_t i = 0; i < off; i++) {
		if (buf[i] == '\n') {
			l++;
			start = i + 1;
		}
	}
	*line = l;
	*col = off - start + 1;
}

/* True when line `line` (from 0) of buf is indented with a tab, which
 * YAML forbids and which libyaml reports in terms of tokens. */
static bool tab_indented(const char *buf, size_t len, size_t line)
{
	size_t i = 0;

	for (size_t l = 0; l < line && i < len; i++)
		if (buf[i] == '\n')
			l++;
	for (; i < len && (buf[i] == ' ' || buf[i] == '\t'); i++)
		if (buf[i] == '\t')
			return true;
	return false;
}

/* Writes libyaml's error as "NAME:LINE:COL: YAML: problem". */
static void yaml_failure(const yaml_parser_t *p, const char *buf, size_t len, const char *name,
			 char *err, size_t errlen)
{
	const char *hint = "";
	size_t line, col;

	switch (p->error) {
	case YAML_MEMORY_ERROR:
		snprintf(err, errlen, "%s: out of memory", name);
		return;
	case YAML_READER_ERROR:
		offset_mark(buf, len, p->problem_offset, &line, &col);
		if (p->problem_value != -1)
			snprintf(err, errlen, "%s:%zu:%zu: YAML: %s (byte 0x%02x)", name, line, col,
				 p->problem ? p->problem : "unreadable input",
				 (unsigned)p->problem_value & 0xffu);
		else
			snprintf(err, errlen, "%s:%zu:%zu: YAML: %s", name, line, col,
				 p->problem ? p->problem : "unreadable input");
		return;
	case YAML_SCANNER_ERROR:
	case YAML_PARSER_ERROR:
	case YAML_COMPOSER_ERROR:
		if (tab_indented(buf, len, p->problem_mark.line))
			hint = "; indent with spaces, not tabs";
		if (p->context)
			snprintf(err, errlen, "%s:%zu:%zu: YAML: %s (%s at %zu:%zu%s)", name,
				 p->problem_mark.line + 1, p->problem_mark.column + 1,
				 p->problem ? p->problem : "syntax error", p->context,
				 p->context_mark.line + 1, p->context_mark.column + 1, hint);
		else
			snprintf(err, errlen, "%s:%zu:%zu: YAML: %s%s%s%s", name,
				 p->problem_mark.line + 1, p->problem_mark.column + 1,
				 p->problem ? p->problem : "syntax error", hint[0] ? " (" : "",
				 hint[0] ? hint + 2 : "", hint[0] ? ")" : "");
		return;
	case YAML_NO_ERROR:
	case YAML_WRITER_ERROR:
	case YAML_EMITTER_ERROR:
		break;
	}
	snprintf(err, errlen, "%s: YAML: cannot parse", name);
}

/* A first pass over the parser's events, in constant memory, before
 * libyaml's loader builds the document. It refuses what would make that
 * slow: libyaml's scanner spends time proportional to the depth on every
 * token (a 2 MB file of "[" would take hours), its loader compares every
 * anchor with all earlier ones and looks each alias up linearly, and a
 * document costs about 150 bytes per node. Syntax errors are reported
 * here, with the same messages as the loader's. Returns 0, or -1 with err
 * set. */
static int prescan(const char *buf, size_t len, const char *name, char *err, size_t errlen)
{
	yaml_parser_t p;
	yaml_event_t ev;
	int depth = 0, rc = 0;
	size_t nodes = 0, anchors = 0, aliases = 0;
	bool done = false;

	if (!yaml_parser_initialize(&p)) {
		snprintf(err, errlen, "%s: out of memory", name);
		return -1;
	}
	yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
	while (!done && rc == 0) {
		const char *too_many = NULL;
		const yaml_char_t *anchor = NULL;
		size_t limit = 0;

		if (!yaml_parser_parse(&p, &ev)) {
			yaml_failure(&p, buf, len, name, err, errlen);
			rc = -1;
			break;
		}
		switch (ev.type) {
		case YAML_SEQUENCE_START_EVENT:
			anchor = ev.data.sequence_start.anchor;
			depth++;
			nodes++;
			break;
		case YAML_MAPPING_START_EVENT:
			anchor = ev.data.mapping_start.anchor;
			depth++;
			nodes++;
			break;
		case YAML_SCALAR_EVENT:
			anchor = ev.data.scalar.anchor;
			nodes++;
			break;
		case YAML_ALIAS_EVENT:
			if (++aliases > YS_ALIASES_MAX) {
				too_many = "aliases (*name)";
				limit = YS_ALIASES_MAX;
			}
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			depth--;
			break;
		case YAML_STREAM_END_EVENT:
			done = true;
			break;
		case YAML_NO_EVENT:
		case YAML_STREAM_START_EVENT:
		case YAML_DOCUMENT_START_EVENT:
		case YAML_DOCUMENT_END_EVENT:
			break;
		}
		if (anchor && ++anchors > YS_ANCHORS_MAX) {
			too_many = "anchors (&name)";
			limit = YS_ANCHORS_MAX;
		}
		if (nodes > YS_NODES_MAX) {
			too_many = "values";
			limit = YS_NODES_MAX;
		}
		if (depth > YS_DEPTH_MAX) {
			snprintf(err, errlen, "%s:%zu:%zu: nested deeper than %d levels", name,
				 ev.start_mark.line + 1, ev.start_mark.column + 1, YS_DEPTH_MAX);
			rc = -1;
		} else if (too_many) {
			snprintf(err, errlen, "%s:%zu:%zu: more than %zu %s", name,
				 ev.start_mark.line + 1, ev.start_mark.column + 1, limit, too_many);
			rc = -1;
		}
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&p);
	return rc;
}


int ys_open(struct ys *y, const char *buf, size_t len, const char *name, char *err,
	    size_t errlen, yaml_node_t **root)
{
	yaml_parser_t parser;
	yaml_document_t extra;
	int rc = -1;

	memset(y, 0, sizeof(*y));
	y->name = name;
	y->err = err;
	y->errlen = errlen;
	*root = NULL;
	if (prescan(buf, len, name, err, errlen) < 0)
		return -1;
	if (!yaml_parser_initialize(&parser))
		return ys_fail_oom(y);
	yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
	if (!yaml_parser_load(&parser, &y->doc)) {
		yaml_failure(&parser, buf, len, name, err, errlen);
		goto out;
	}
	y->loaded = true;
	*root = yaml_document_get_root_node(&y->doc);
	if (!*root) {
		rc = 0;
		goto out;
	}
	/* One document only: a second one would be silently ignored. */
	if (!yaml_parser_load(&parser, &extra)) {
		yaml_failure(&parser, buf, len, name, err, errlen);
		goto out;
	}
	if (yaml_document_get_root_node(&extra))
		snprintf(err, errlen, "%s:%zu:%zu: a second YAML document (one document per file)",
			 name, extra.start_mark.line + 1, extra.start_mark.column + 1);
	else
		rc = 0;
	yaml_document_delete(&extra);
out:
	yaml_parser_delete(&parser);
	if (rc < 0)
		*root = NULL;
	return rc;
}

void ys_close(struct ys *y)
{
	if (y->loaded)
		yaml_document_delete(&y->doc);
	y->loaded = false;
}
