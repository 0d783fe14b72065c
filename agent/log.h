/* log.h: one-line logs to stderr, safe from any thread. */
#ifndef RL_LOG_H
#define RL_LOG_H

enum log_level { LOG_ERR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

void log_set_level(int level);
int log_get_level(void);
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) do { if (log_get_level() >= LOG_DEBUG) log_msg(LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
