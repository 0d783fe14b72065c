#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int cur_level = LOG_INFO;

void log_set_level(int level) { cur_level = level; }
int log_get_level(void) { return cur_level; }

/* Formats the whole line first and writes it with one write(2), so lines of
 * different threads never interleave. */
void log_msg(int level, const char *fmt, ...)
{
	static const char *names[] = { "error", "warning", "info", "debug" };
	char line[1024];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n, m;

	if (level > cur_level)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s: ",
		     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
		     tm.tm_sec, ts.tv_nsec / 1000000, names[level < 0 ? 0 : level > 3 ? 3 : level]);
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	n += m;
	if ((size_t)n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* nowhere left to report it */
	}
}
