/* SPDX-License-Identifier: Apache-2.0 */
/* yaml_strict.h: strict readers over a libyaml document, for files that a
 * typo must never pass silently (the rules file and its settings).
 *
 * The prefix is ys_ ("YAML, strict"): libyaml owns yaml_, and a longer
 * prefix would crowd every call of a schema walk.
 *
 * A file is read in two steps. ys_open() parses it into a node tree; a
 * caller then walks the tree with its own schema, reading each value with a
 * typed getter (an integer in a range, a boolean, a duration, a
 * percentage, one word of a list, a name, a string) and each mapping with
 * ys_map_fields(), which refuses unknown and duplicate keys. Nothing here
 * knows a schema: the caller names keys, ranges and words.
 *
 * Every reader returns 0, or -1 with one message already in the context:
 * "FILE:LINE:COL: where: problem" (lines and columns from 1), where `where`
 * is the caller's dotted path to the value ("store.timeout",
 * "endpoints[2].match"). libyaml's own errors are written the same way
 * ("FILE:LINE:COL: YAML: problem"), with a hint for tab indentation.
 * Values are quoted in messages with control and non-ASCII bytes escaped,
 * so a message never carries raw bytes of the file to a terminal or log.
 *
 * Bounds: before the tree is built, a constant-memory pass over the
 * parser's events refuses what would make libyaml slow or large (nesting
 * deeper than YS_DEPTH_MAX, more than YS_NODES_MAX values, YS_ANCHORS_MAX
 * anchors or YS_ALIASES_MAX aliases). Aliases stay shared nodes, possibly
 * cyclic: a walk that reads only the keys it knows, to a fixed depth, and
 * caps every list it visits cannot loop or blow up. The input needs no NUL
 * and is not read past its length; getters compare scalars by length, and
 * ys_text() refuses NUL bytes inside a value so that it can be used as a C
 * string.
 */
#ifndef RL_YAML_STRICT_H
#define RL_YAML_STRICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <yaml.h>

#define YS_PATH_MAX 192      /* bytes of a `where` path, NUL included */
#define YS_DEPTH_MAX 32      /* nesting of mappings and lists */
#define YS_NODES_MAX 200000  /* values of a file */
#define YS_ANCHORS_MAX 256
#define YS_ALIASES_MAX 4096
#define YS_OFF (-1)          /* ys_percent(): the value "off" */

/* A file being read: its document and where messages go. */
struct ys {
	yaml_document_t doc;
	bool loaded;             /* doc holds a document to delete */
	const char *name;        /* the file's name in messages */
	char *err;               /* err[0..errlen): the message, NUL-terminated */
	size_t errlen;
};

/* Parses buf[0..len) (no NUL needed) into y->doc, messages naming `name`
 * into err[0..errlen) (errlen >= 1). Returns 0 with *root the root node,
 * or NULL when the first document is empty (nothing but comments): what an
 * empty file means is the caller's to say. Returns -1 with the message set
 * on a syntax error, on more than one document, when a bound above is
 * passed, or when out of memory. ys_close() must follow in every case. */
int ys_open(struct ys *y, const char *buf, size_t len, const char *name, char *err,
	    size_t errlen, yaml_node_t **root);
void ys_close(struct ys *y);

/* ---- messages ------------------------------------------------------------ */

/* Writes "NAME:LINE:COL: WHERE: message" (WHERE omitted when empty) and
 * returns -1, so that readers can `return ys_fail(...)`. */
__attribute__((format(printf, 4, 5)))
int ys_fail(struct ys *y, yaml_mark_t mark, const char *where, const char *fmt, ...);

/* "NAME: out of memory"; returns -1. */
int ys_fail_oom(struct ys *y);

/* "expected EXPECTED, got <what n is>"; returns -1. */
int ys_fail_type(struct ys *y, const yaml_node_t *n, const char *where, const char *expected);

/* "missing key "KEY"HINT" at the mapping; returns -1. */
int ys_fail_missing(struct ys *y, const yaml_node_t *map, const char *where, const char *key,
		    const char *hint);

/* Renders bytes as a double-quoted string for a message: printable ASCII
 * as is, other bytes as \xNN, at most 48 bytes of input then "...".
 * Returns out (NUL-terminated, "" when cap < 8). */
const char *ys_quote(char *out, size_t cap, const char *s, size_t len);

/* Paths for messages: "parent.key" ("key" at the root) and "parent[i]".
 * out holds YS_PATH_MAX bytes; a longer path is cut short. */
void ys_path_key(char *out, const char *parent, const char *key);
void ys_path_index(char *out, const char *parent, size_t i);

/* ---- nodes --------------------------------------------------------------- */

yaml_node_t *ys_node(struct ys *y, int index);
/* Item i (< ys_seq_len) of a list. */
yaml_node_t *ys_seq_item(struct ys *y, const yaml_node_t *seq, size_t i);
size_t ys_seq_len(const yaml_node_t *seq);
size_t ys_map_len(const yaml_node_t *map);

/* A plain empty, "~" or "null" scalar (any case YAML allows). */
bool ys_is_null(const yaml_node_t *n);

/* A scalar equal to `s` exactly (same length, same bytes). */
bool ys_is(const yaml_node_t *n, const char *s);

int ys_expect_mapping(struct ys *y, const yaml_node_t *n, const char *where);

/* Keys must be non-null scalars. */
int ys_check_key(struct ys *y, const yaml_node_t *k, const char *where);

/* Reads a mapping whose keys are all known: vals[i] (and keys[i]) become
 * the nodes of key known[i], NULL when absent. Unknown keys (the message
 * lists the known ones) and duplicate keys are errors. */
int ys_map_fields(struct ys *y, yaml_node_t *map, const char *where, const char *const *known,
		  size_t nknown, yaml_node_t **keys, yaml_node_t **vals);

/* ---- values -------------------------------------------------------------- */

/* A non-null scalar without NUL bytes: *s and *len point into the
 * document (NUL-terminated there). */
int ys_text(struct ys *y, yaml_node_t *n, const char *where, const char **s, size_t *len);

/* The same, copied into out[0..cap) with its NUL; longer is an error. */
int ys_cstr(struct ys *y, yaml_node_t *n, const char *where, char *out, size_t cap);

/* A name: 1 to cap-1 of [A-Za-z0-9_.-], copied into out[0..cap). */
int ys_name(struct ys *y, yaml_node_t *n, const char *where, char *out, size_t cap);

/* A decimal integer, optionally signed, within [min, max]. */
int ys_int(struct ys *y, yaml_node_t *n, const char *where, long long min, long long max,
	   long long *out);

/* true / false (also True, TRUE, False, FALSE). */
int ys_bool(struct ys *y, yaml_node_t *n, const char *where, bool *out);

/* A duration as limit_parse_duration() reads it ("20ms", "1s"), within
 * [min_us, max_us]; `range` describes the bounds for the message ("1ms to
 * 60s such as 20ms"). */
int ys_duration(struct ys *y, yaml_node_t *n, const char *where, int64_t min_us, int64_t max_us,
		const char *range, int64_t *out);

/* A percentage with up to two decimals ("90%", "92.5%") in basis points
 * (1/100 of a percent) within [min_bp, max_bp]; with allow_off, the word
 * "off" gives YS_OFF. */
int ys_percent(struct ys *y, yaml_node_t *n, const char *where, int min_bp, int max_bp,
	       bool allow_off, int *out);

/* One of words[0..nwords) exactly; its index in *out. `expect` lists them
 * for the message ("memory or redis"). */
int ys_word(struct ys *y, yaml_node_t *n, const char *where, const char *const *words,
	    size_t nwords, const char *expect, int *out);

/* ---- lists --------------------------------------------------------------- */

/* Called for item i of a string-or-list value, `where` naming the item. */
typedef int (*ys_item_fn)(struct ys *y, yaml_node_t *n, const char *where, size_t i,
			  void *arg);

/* A scalar (one item) or a list of 1 to max items, each given to `each` in
 * order; `what` names the items in "more than MAX WHAT". */
int ys_string_or_list(struct ys *y, yaml_node_t *n, const char *where, size_t max,
		      const char *what, ys_item_fn each, void *arg);

/* How many items ys_string_or_list() hands over at most (1 for a scalar,
 * never more than max): sizes the arrays it fills before the walk. */
size_t ys_list_count(const yaml_node_t *n, size_t max);

#endif
