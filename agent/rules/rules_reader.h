/* SPDX-License-Identifier: Apache-2.0 */
/* rules_reader.h: a rules file loaded on a short-lived thread of its own,
 * so that a file that never answers cannot stop the thread that asked.
 *
 * rules_load() opens without blocking and refuses anything but a regular
 * file before it reads, so a FIFO, a device or a socket fails at once. What
 * no flag can bound is a regular file on a mount that does not answer (a
 * stale NFS server): open() and read() then wait in the kernel. The load
 * runs on a thread made for it; the caller waits for it as long as it
 * chooses and then gives up. A thread given up on goes on until the kernel
 * lets it go (a stale hard NFS mount: until the server answers, or the
 * process exits), then frees what it loaded; at most
 * RULES_READER_HUNG_MAX such threads exist at once, and past that a new
 * load fails at once. Every function here is for one thread (the one that
 * loads rules), except the `done` callback, which runs on the reader's. */
#ifndef RL_RULES_READER_H
#define RL_RULES_READER_H

#include <stddef.h>

#define RULES_READER_TIMEOUT 10.0 /* seconds the agent waits for a rules file */
#define RULES_READER_HUNG_MAX 4   /* loads given up on and still running */

struct rules;
struct rules_reader;

/* Starts loading `path` (rules_load) on a new thread, every signal
 * blocked there. Once the result is ready, done(arg) is called on that
 * thread, unless rules_reader_abandon() came first; NULL done: no call.
 * Returns the load, or NULL with the reason in err: no thread, no memory,
 * or RULES_READER_HUNG_MAX loads given up on still running. */
struct rules_reader *rules_reader_start(const char *path, void (*done)(void *), void *arg,
					char *err, size_t errlen);

/* Waits at most `timeout` seconds (0: not at all) for the result: 1 when
 * it is ready, 0 when it is not yet. */
int rules_reader_wait(struct rules_reader *rr, double timeout);

/* The result of a load that is ready (rules_reader_wait said 1): the rules,
 * or NULL with rules_load()'s message in err. Frees rr. */
struct rules *rules_reader_finish(struct rules_reader *rr, char *err, size_t errlen);

/* Gives up on a load, ready or not: no done() call from then on; its
 * thread frees the result whenever it ends. */
void rules_reader_abandon(struct rules_reader *rr);

/* rules_load() that waits at most `timeout` seconds: on time out, NULL
 * with "PATH: not read after N s" in err, and the load given up on. */
struct rules *rules_reader_load(const char *path, double timeout, char *err, size_t errlen);

#endif
