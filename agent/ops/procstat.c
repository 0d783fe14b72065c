/* SPDX-License-Identifier: Apache-2.0 */
#include "procstat.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "out.h"

static void series(struct out *o, const char *name, const char *type, const char *help,
		   double v)
{
	outf(o, "# HELP %s %s\n# TYPE %s %s\n%s %.15g\n", name, help, name, type, name, v);
}

/* Descriptors open now: entries of /proc/self/fd, less the one reading it. */
static long open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	long n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;
}

/* Resident pages (/proc/self/statm's second field), in bytes. */
static double resident_bytes(void)
{
	FILE *f = fopen("/proc/self/statm", "re");
	unsigned long size, res;
	int ok;

	if (!f)
		return -1;
	ok = fscanf(f, "%lu %lu", &size, &res) == 2;
	fclose(f);
	return ok ? (double)res * (double)sysconf(_SC_PAGESIZE) : -1;
}

/* The boot time (/proc/stat's btime) plus the process's start in clock
 * ticks since boot (/proc/self/stat's 22nd field, counted after the
 * command's closing parenthesis, which a command name cannot fake). */
static double start_time(void)
{
	char buf[1024], line[256], *p;
	unsigned long long ticks = 0, btime = 0;
	size_t n;
	FILE *f = fopen("/proc/self/stat", "re");

	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	/* fields 3.. follow ") "; starttime is the 20th of them */
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p + 1, "%llu", &ticks) != 1)
		return -1;
	f = fopen("/proc/stat", "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "btime %llu", &btime) == 1)
			break;
	fclose(f);
	if (!btime)
		return -1;
	return (double)btime + (double)ticks / (double)sysconf(_SC_CLK_TCK);
}

void procstat_series(struct out *o)
{
	struct rlimit rl;
	struct rusage ru;
	long fds = open_fds();
	double rss = resident_bytes(), start = start_time();

	if (fds >= 0)
		series(o, "process_open_fds", "gauge", "File descriptors the process holds open.",
		       (double)fds);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		series(o, "process_max_fds", "gauge", "The soft limit on the process's file descriptors.",
		       (double)rl.rlim_cur);
	if (rss >= 0)
		series(o, "process_resident_memory_bytes", "gauge", "Memory the process holds resident, in bytes.",
		       rss);
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		series(o, "process_cpu_seconds_total", "counter",
		       "CPU time the process has used, user and system, in seconds.",
		       (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
			       ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6);
	if (start >= 0)
		series(o, "process_start_time_seconds", "gauge",
		       "When the process started, in seconds since the Unix epoch.", start);
}
