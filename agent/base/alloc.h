/* SPDX-License-Identifier: Apache-2.0 */
/* alloc.h: every allocation of the project goes through these wrappers so
 * that tests and fuzzers can inject failures (xalloc_fail_after). They
 * return NULL on failure like the libc calls they wrap; callers handle it. */
#ifndef RL_ALLOC_H
#define RL_ALLOC_H

#include <stddef.h>

void *xmalloc(size_t n);
void *xcalloc(size_t nmemb, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
void xfree(void *p);

/* Test hook: make the allocation after `n` more successful ones fail
 * (n < 0 disables injection). For tests: with several threads
 * allocating, which call fails is not defined. */
void xalloc_fail_after(long n);

/* Allocations made and not yet freed, for tests that check a path frees
 * everything it took. */
long xalloc_live(void);

#endif
