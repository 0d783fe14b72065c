#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define LINE_MAX_BYTES 1024

static int cur_level = LOG_INFO;

/* Guards the list of sites with lines suppressed and each site's `last`
 * and `level`: taken to copy a line that is written (at most LOG_BURST per
 * site and window) and by reports, never for a suppressed line. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct log_site *listed_sites;

void log_set_level(int level) { cur_level = level; }
int log_get_level(void) { return cur_level; }

int64_t log_now_ms(void)
{
	return clock_now_us() / 1000;
}

/* Writes "<time> <level>: " into line; returns its length. */
static int line_prefix(char *line, size_t cap, int level)
{
	static const char *names[] = { "error", "warning", "info", "debug" };
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	return snprintf(line, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s: ",
			tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			tm.tm_sec, ts.tv_nsec / 1000000,
			names[level < 0 ? 0 : level > 3 ? 3 : level]);
}

/* Ends the line with a newline and writes it with one write(2), so that
 * lines of different threads never interleave. */
static void line_write(char *line, int n)
{
	if (n < 0)
		n = 0;
	if ((size_t)n > LINE_MAX_BYTES - 2)
		n = LINE_MAX_BYTES - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* nowhere left to report it */
	}
}

/* Formats a whole line; returns its length, and in *msg where the message
 * starts. */
static int line_format(char *line, int level, size_t *msg, const char *fmt, va_list ap)
{
	int n = line_prefix(line, LINE_MAX_BYTES, level);
	int m;

	*msg = (size_t)n;
	m = vsnprintf(line + n, LINE_MAX_BYTES - (size_t)n - 1, fmt, ap);
	if (m < 0)
		m = 0;
	return n + m;
}

void log_msg(int level, const char *fmt, ...)
{
	char line[LINE_MAX_BYTES];
	size_t msg;
	va_list ap;
	int n;

	if (level > cur_level)
		return;
	va_start(ap, fmt);
	n = line_format(line, level, &msg, fmt, ap);
	va_end(ap);
	line_write(line, n);
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
	char line[LINE_MAX_BYTES];
	int len = line_prefix(line, sizeof(line), s->level);

	len += snprintf(line + len, sizeof(line) - (size_t)len - 1,
			"%llu more like \"%s\" in the last %lld s", (unsigned long long)n,
			s->last, (long long)(secs < 1 ? 1 : secs));
	line_write(line, len);
}

void log_site_msg(struct log_site *s, int level, const char *fmt, ...)
{
	char line[LINE_MAX_BYTES];
	uint64_t report;
	size_t msg, keep;
	va_list ap;
	int n;

	if (!log_site_admit(s, log_now_ms(), &report))
		return;
	va_start(ap, fmt);
	n = line_format(line, level, &msg, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&lock);
	if (report)
		report_locked(s, report, LOG_WINDOW_MS / 1000);
	keep = (size_t)n - msg < sizeof(s->last) - 1 ? (size_t)n - msg : sizeof(s->last) - 1;
	memcpy(s->last, line + msg, keep);
	s->last[keep] = '\0';
	s->level = level;
	pthread_mutex_unlock(&lock);
	line_write(line, n);
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
