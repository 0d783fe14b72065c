/* SPDX-License-Identifier: Apache-2.0 */
/* options.h: the command line. Each option is declared once, in the
 * table of options.c (name, short name, argument, help text, setter):
 * getopt_long's table and --help are made from it, and the tests that
 * check the man page and docs/operations.md against the options read
 * --help. Settings of the rules file (settings.h) apply where the command
 * line says nothing (main.c). */
#ifndef RL_OPTIONS_H
#define RL_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>

#include "addr.h"
#include "auth.h"
#include "conn_tls.h"
#include "limit.h"
#include "log.h"
#include "server.h"
#include "store.h"
#include "store_redis.h"

/* What the command line said. */
struct options {
	struct server_config server;
	struct conn_tls_files listen_tls; /* --listen-tls-*: cert NULL, none */
	bool admin;                  /* --admin */
	struct redis_config redis;
	bool use_redis;
	int log_level;
	/* the rules of the command line, without a rules file */
	const char *rules_path;
	char limits[LIMIT_RULE_MAX][64];
	const char *algos[LIMIT_RULE_MAX];
	int nlimits;
	long long burst;
	const char *identity;
	const char *cost_arg;
	const char *answer;          /* --answer: the rules' `answer` (settings.h) */
	/* what the command line set, the rules file's settings yielding */
	int listen_set, threads_set, redis_set, timeout_set, user_set, password_set;
	int master_set, sentinel_password_set;
	int tls_set;                 /* a --redis-tls* option: the rules' store.tls yields */
	const char *hash_key_file;
	bool check;
	/* --explain: the request its operands ARG=VALUE describe */
	bool explain;
	char **explain_argv;
	int explain_argc;
	bool use_metrics;
	struct addr metrics;
	const char *admin_token_file;
	struct auth_token admin_token;  /* read from it */
	bool admin_token_shared;        /* it can be read by group or others */
	/* options that may do nothing, warned about once the rules are read */
	const char *redis_only;         /* the first Redis option given */
	int sentinel_password_arg;      /* --redis-sentinel-password(-file) given */
	int password_arg;               /* --redis-password given */
	/* secrets from files (systemd credentials), read at start and reload */
	const char *password_file;           /* --redis-password-file */
	const char *sentinel_password_file;  /* --redis-sentinel-password-file */
	enum log_format log_format;          /* --log-format */
};

/* The defaults, with the passwords the environment gives
 * (RL_REDIS_PASSWORD, RL_REDIS_SENTINEL_PASSWORD). */
void options_defaults(struct options *o);

enum options_outcome {
	OPTIONS_RUN,   /* go on */
	OPTIONS_DONE,  /* --help or --version printed: exit 0 */
	OPTIONS_BAD,   /* err says why (or getopt did, and the usage was
	                * printed): exit 2 */
};

/* Reads argv into *o and checks the options together (--admin needs
 * --metrics, ...; the admin token is read). err is empty when the message
 * went to stderr already. */
enum options_outcome options_parse(struct options *o, int argc, char **argv, char *err,
				   size_t errlen);

/* --help: made from the table. */
void options_usage(FILE *out);

/* What --version prints (main.c's RL_VERSION). */
void options_version(const char *v);

#endif
