/* SPDX-License-Identifier: Apache-2.0 */
/* redis_auth.c: the passwords in force (see redis_auth.h). */
#include "redis_auth.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "store_redis.h"

struct redis_secrets {
	pthread_mutex_t lock;
	char password[sizeof(((struct redis_config *)0)->password)];
	char sentinel_password[sizeof(((struct redis_config *)0)->sentinel_password)];
};

struct redis_secrets *redis_secrets_new(const struct redis_config *cfg)
{
	struct redis_secrets *s = xcalloc(1, sizeof(*s));

	if (!s)
		return NULL;
	pthread_mutex_init(&s->lock, NULL);
	redis_secrets_set(s, cfg->password, cfg->sentinel_password);
	return s;
}

void redis_secrets_free(struct redis_secrets *s)
{
	if (!s)
		return;
	pthread_mutex_destroy(&s->lock);
	memset(s, 0, sizeof(*s));
	xfree(s);
}

void redis_secrets_set(struct redis_secrets *s, const char *password,
		       const char *sentinel_password)
{
	pthread_mutex_lock(&s->lock);
	if (password)
		snprintf(s->password, sizeof(s->password), "%s", password);
	if (sentinel_password)
		snprintf(s->sentinel_password, sizeof(s->sentinel_password), "%s",
			 sentinel_password);
	pthread_mutex_unlock(&s->lock);
}

static void copy(const struct redis_config *cfg, bool sentinel, char *out, size_t cap)
{
	struct redis_secrets *s = cfg->secrets;

	if (!s) {
		snprintf(out, cap, "%s", sentinel ? cfg->sentinel_password : cfg->password);
		return;
	}
	pthread_mutex_lock(&s->lock);
	snprintf(out, cap, "%s", sentinel ? s->sentinel_password : s->password);
	pthread_mutex_unlock(&s->lock);
}

void redis_auth_password(const struct redis_config *cfg, char *out, size_t cap)
{
	copy(cfg, false, out, cap);
}

void redis_auth_sentinel_password(const struct redis_config *cfg, char *out, size_t cap)
{
	copy(cfg, true, out, cap);
}

/* The password in force (a reload may change it) is copied for the
 * calling thread: argv points at the copy until the thread's next call,
 * and every caller sends the command at once. */
int redis_node_auth_argv(const struct redis_config *cfg, const char *argv[3], size_t argvlen[3])
{
	static _Thread_local char password[sizeof(cfg->password)];
	int n = 0;

	redis_auth_password(cfg, password, sizeof(password));
	if (!password[0])
		return 0;
	argv[n] = "AUTH";
	argvlen[n++] = 4;
	if (cfg->user[0]) {
		argv[n] = cfg->user;
		argvlen[n++] = strlen(cfg->user);
	}
	argv[n] = password;
	argvlen[n++] = strlen(password);
	return n;
}
