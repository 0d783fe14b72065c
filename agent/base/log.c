/* SPDX-License-Identifier: Apache-2.0 */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define LINE_MAX_BYTES 1024   /* of a message */
/* of a line: a JSON one escapes its message and carries fields */
#define LINE_CAP (4 * LINE_MAX_BYTES)

static int cur_level = LOG_INFO;
static enum log_format cur_format = LOG_FORMAT_TEXT;
static int journal;   /* stderr is the journal: "<N>" prefixes */

/* Guards the list of sites with lines suppressed and each site's `last`
 * and `level`: taken to copy a line that is written (at most LOG_BURST per
 * site and window) and by reports, never for a suppressed line. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct log_site *listed_sites;

void log_set_level(int level) { cur_level = level; }
void log_set_format(enum log_format f) { cur_format = f; }

int log_detect_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	char rest;

	journal = js && sscanf(js, "%llu:%llu%c", &dev, &ino, &rest) == 2 &&
		  fstat(STDERR_FILENO, &st) == 0 && (unsigned long long)st.st_dev == dev &&
		  (unsigned long long)st.st_ino == ino;
	return journal;
}
int log_get_level(void) { return cur_level; }

int64_t log_now_ms(void)
{
	return clock_now_us() / 1000;
}

/* Writes the time now, "2026-01-02T03:04:05.678Z", into buf[0..cap). */
static void time_text(char *buf, size_t cap)
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 ts.tv_nsec / 1000000);
}

/* Appends s to line[n..cap) as the inside of a JSON string, leaving
 * `reserve` bytes free at the end; bytes outside printable ASCII are
 * escaped, so the line is valid JSON whatever a message quotes. Returns
 * the new length. */
static size_t json_str(char *line, size_t cap, size_t n, const char *s, size_t reserve)
{
	for (; *s && n + 6 + reserve < cap; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\') {
			line[n++] = '\\';
			line[n++] = (char)c;
		} else if (c < 0x20 || c >= 0x7f) {
			n += (size_t)snprintf(line + n, cap - n, "\\u%04x", c);
		} else {
			line[n++] = (char)c;
		}
	}
	return n;
}

/* Appends printf-like text to line[n..cap) (truncated); returns the new
 * length. */
static size_t append(char *line, size_t cap, size_t n, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static size_t append(char *line, size_t cap, size_t n, const char *fmt, ...)
{
	va_list ap;
	int m;

	if (n >= cap)
		return n;
	va_start(ap, fmt);
	m = vsnprintf(line + n, cap - n, fmt, ap);
	va_end(ap);
	return m < 0 ? n : n + (size_t)m >= cap ? cap - 1 : n + (size_t)m;
}

/* The whole line of `msg` at `level` with fields kv (or NULL), in the
 * format in force, into line[0..LINE_CAP), without its newline. Returns
 * its length. */
static size_t line_compose(char *line, int level, const char *msg, const char *const *kv)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };
	static const int priorities[] = { 3, 4, 6, 7 };  /* syslog's, sd-daemon(3) */
	int lv = level < 0 ? 0 : level > 3 ? 3 : level;
	char now[64];
	size_t n = 0;

	if (journal)
		n = append(line, LINE_CAP, n, "<%d>", priorities[lv]);
	if (cur_format == LOG_FORMAT_TEXT) {
		if (!journal) {
			time_text(now, sizeof(now));
			n = append(line, LINE_CAP, n, "%s ", now);
		}
		return append(line, LINE_CAP, n, "%s: %s", names[lv], msg);
	}
	time_text(now, sizeof(now));
	n = append(line, LINE_CAP, n, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":\"", now,
		   names[lv]);
	/* room is kept for the fields and the closing brace */
	n = json_str(line, LINE_CAP, n, msg, 512);
	n = append(line, LINE_CAP, n, "\"");
	for (size_t i = 0; kv && kv[i]; i += 2) {
		if (!kv[i + 1])
			continue;  /* a field this line has not */
		n = append(line, LINE_CAP, n, ",\"%s\":\"", kv[i]);
		n = json_str(line, LINE_CAP, n, kv[i + 1], 3);
		n = append(line, LINE_CAP, n, "\"");
	}
	return append(line, LINE_CAP, n, "}");
}

/* Ends the line with a newline and writes it with one write(2), so that
 * lines of different threads never interleave. */
static void line_write(char *line, size_t n)
{
	if (n > LINE_CAP - 1)
		n = LINE_CAP - 1;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0) {
		/* nowhere left to report it */
	}
}

void log_msg(int level, const char *fmt, ...)
{
	char msg[LINE_MAX_BYTES], line[LINE_CAP];
	va_list ap;

	if (level > cur_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	line_write(line, line_compose(line, level, msg, NULL));
}

int log_site_admit(struct log_site *s, int64_t now_ms, uint64_t *report)
{
	int64_t start = atomic_load_explicit(&s->start_ms, memory_order_acquire);

	*report = 0;
	if (now_ms - start >= LOG_WINDOW_MS &&
	    atomic_compare_exchange_strong_explicit(&s->start_ms, &start, now_ms,
						    memory_order_acq_rel, memory_order_acquire)) {
		/* This thread opened the window: it resets the count and
		 * reports what the last window suppressed. Lines counted by
		 * other threads in between are a few lines more, not lost. */
		atomic_store_explicit(&s->written, 0, memory_order_relaxed);
		*report = atomic_exchange_explicit(&s->suppressed, 0, memory_order_relaxed);
	}
	if (atomic_fetch_add_explicit(&s->written, 1, memory_order_relaxed) < LOG_BURST)
		return 1;
	atomic_fetch_add_explicit(&s->suppressed, 1, memory_order_relaxed);
	/* Once per site in the process's life: on the list that reports walk. */
	if (!atomic_load_explicit(&s->listed, memory_order_relaxed) &&
	    !atomic_exchange_explicit(&s->listed, 1, memory_order_acq_rel)) {
		pthread_mutex_lock(&lock);
		s->next = listed_sites;
		listed_sites = s;
		pthread_mutex_unlock(&lock);
	}
	return 0;
}

/* Writes the report of n lines of s suppressed in the last secs seconds.
 * The lock is held. */
static void report_locked(struct log_site *s, uint64_t n, int64_t secs)
{
	char msg[LINE_MAX_BYTES + 64], line[LINE_CAP];

	snprintf(msg, sizeof(msg), "%llu more like \"%s\" in the last %lld s",
		 (unsigned long long)n, s->last, (long long)(secs < 1 ? 1 : secs));
	line_write(line, line_compose(line, s->level, msg, NULL));
}

static void site_write(struct log_site *s, int level, const char *const *kv,
		       const char *fmt, va_list ap)
{
	char msg[LINE_MAX_BYTES], line[LINE_CAP];
	uint64_t report;
	size_t keep;

	if (!log_site_admit(s, log_now_ms(), &report))
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	pthread_mutex_lock(&lock);
	if (report)
		report_locked(s, report, LOG_WINDOW_MS / 1000);
	keep = strnlen(msg, sizeof(s->last) - 1);
	memcpy(s->last, msg, keep);
	s->last[keep] = '\0';
	s->level = level;
	pthread_mutex_unlock(&lock);
	line_write(line, line_compose(line, level, msg, kv));
}

void log_site_msg(struct log_site *s, int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	site_write(s, level, NULL, fmt, ap);
	va_end(ap);
}

void log_site_kv(struct log_site *s, int level, const char *const *kv, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	site_write(s, level, kv, fmt, ap);
	va_end(ap);
}

int log_report_suppressed(int64_t now_ms, int all)
{
	int reports = 0;

	pthread_mutex_lock(&lock);
	for (struct log_site *s = listed_sites; s; s = s->next) {
		int64_t start = atomic_load_explicit(&s->start_ms, memory_order_acquire);
		int64_t age = now_ms - start;
		uint64_t n;

		if (!all && age < LOG_WINDOW_MS)
			continue;
		n = atomic_exchange_explicit(&s->suppressed, 0, memory_order_relaxed);
		if (!n)
			continue;
		if (age > LOG_WINDOW_MS)
			age = LOG_WINDOW_MS;
		report_locked(s, n, (age + 999) / 1000);
		reports++;
	}
	pthread_mutex_unlock(&lock);
	return reports;
}
