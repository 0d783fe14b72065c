/* SPDX-License-Identifier: Apache-2.0 */
/* log.h: one-line logs to stderr, safe from any thread.
 *
 * Errors, warnings and info lines are limited per call site, so that a
 * peer repeating the same mistake (thousands of bad connections a second)
 * cannot flood the log: a site writes at most LOG_BURST lines in
 * LOG_WINDOW_MS; the lines past that are counted, never formatted, and
 * reported in one line at the window's end: `N more like "<the site's last
 * line>" in the last 10 s`. Reports come from log_report_suppressed(),
 * which the main thread calls every second and once more at exit, or from
 * the site's next line, whichever is first; each suppressed line is counted
 * in exactly one report. Debug lines (-v -v) are not limited: asking for
 * them is asking for every one. */
#ifndef RL_LOG_H
#define RL_LOG_H

#include <stdatomic.h>
#include <stdint.h>

enum log_level { LOG_ERR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/* How a line looks (--log-format):
 *   text  "<time> <level>: <message>"; on the journal (stderr is the
 *         stream $JOURNAL_STREAM names) "<N><level>: <message>" instead,
 *         N the syslog priority (3 error, 4 warning, 6 info, 7 debug) that
 *         journald files the line under, and no time (the journal has it);
 *   json  one object a line: {"time": ..., "level": ..., "msg": ..., and
 *         the line's fields}, after the "<N>" on the journal.
 * A line's fields (log_*_kv) are its subjects by name: node, rule,
 * client, file...; text lines say them in the message already. */
enum log_format { LOG_FORMAT_TEXT = 0, LOG_FORMAT_JSON = 1 };

/* Fields of a line: names and values, then NULL; a NULL value leaves its
 * field out. LOG_KV("node", name, "worker", "3") */
#define LOG_KV(...) ((const char *const[]){ __VA_ARGS__, NULL })

#define LOG_BURST 10
#define LOG_WINDOW_MS 10000
#define LOG_LAST_MAX 200   /* bytes of a site's last line quoted in a report */

/* One call site's window. Zeroed static storage is a valid site: the
 * macros below declare one per call. */
struct log_site {
	_Atomic int64_t start_ms;   /* the current window began */
	atomic_uint written;        /* lines written in it */
	atomic_uint_fast64_t suppressed; /* counted, not yet reported */
	atomic_int listed;          /* on the list that reports walk */
	struct log_site *next;      /* that list; under the log's lock */
	int level;                  /* of the last line; under the lock */
	char last[LOG_LAST_MAX];    /* the last line written; under the lock */
};

void log_set_level(int level);
int log_get_level(void);
void log_set_format(enum log_format f);

/* Whether stderr is the journal: $JOURNAL_STREAM ("DEV:INODE") names the
 * stream stderr is. Called once at start; the lines take the "<N>" prefix
 * from then on. Returns 1 when it is. */
int log_detect_journal(void);

/* Writes one line, unlimited. */
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Writes one line of `site` unless the site has used up its window. */
void log_site_msg(struct log_site *site, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The same with fields (LOG_KV), or kv NULL. */
void log_site_kv(struct log_site *site, int level, const char *const *kv, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* The limiter itself, on the caller's clock (milliseconds, monotonic):
 * returns 1 when a line of `site` at now_ms is to be written, 0 when it is
 * counted as suppressed. When the call starts a new window, *report gets
 * the count left over from the previous one (the caller reports it), else
 * 0. Lock-free. */
int log_site_admit(struct log_site *site, int64_t now_ms, uint64_t *report);

/* Writes the report of every site whose window ended by now_ms with lines
 * suppressed, or of every site with lines suppressed when `all` (at exit).
 * Returns how many reports it wrote. */
int log_report_suppressed(int64_t now_ms, int all);

/* The clock log_site_msg() and the reports use. */
int64_t log_now_ms(void);

#define LOG_LIMITED(level, ...)                                               \
	do {                                                                  \
		static struct log_site log_site_;                             \
		if ((level) <= log_get_level())                               \
			log_site_msg(&log_site_, (level), __VA_ARGS__);       \
	} while (0)

#define LOG_LIMITED_KV(level, kv, ...)                                        \
	do {                                                                  \
		static struct log_site log_site_;                             \
		if ((level) <= log_get_level())                               \
			log_site_kv(&log_site_, (level), (kv), __VA_ARGS__);  \
	} while (0)

#define log_err_kv(kv, ...) LOG_LIMITED_KV(LOG_ERR, kv, __VA_ARGS__)
#define log_warn_kv(kv, ...) LOG_LIMITED_KV(LOG_WARN, kv, __VA_ARGS__)
#define log_info_kv(kv, ...) LOG_LIMITED_KV(LOG_INFO, kv, __VA_ARGS__)

#define log_err(...) LOG_LIMITED(LOG_ERR, __VA_ARGS__)
#define log_warn(...) LOG_LIMITED(LOG_WARN, __VA_ARGS__)
#define log_info(...) LOG_LIMITED(LOG_INFO, __VA_ARGS__)
#define log_debug(...) do { if (log_get_level() >= LOG_DEBUG) log_msg(LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
