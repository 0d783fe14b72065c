/* SPDX-License-Identifier: Apache-2.0 */
#include "alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_long fail_after = -1;
static atomic_long live;

/* Returns 1 when the injected failure fires for this call. */
static int inject(void)
{
	long n = atomic_load_explicit(&fail_after, memory_order_relaxed);

	if (n < 0)
		return 0;
	if (n == 0)
		return 1;
	atomic_store_explicit(&fail_after, n - 1, memory_order_relaxed);
	return 0;
}

static void *counted(void *p)
{
	if (p)
		atomic_fetch_add_explicit(&live, 1, memory_order_relaxed);
	return p;
}

void xalloc_fail_after(long n) { atomic_store(&fail_after, n); }

long xalloc_live(void) { return atomic_load(&live); }

void *xmalloc(size_t n) { return inject() ? NULL : counted(malloc(n ? n : 1)); }

void *xcalloc(size_t nmemb, size_t size)
{
	return inject() ? NULL : counted(calloc(nmemb ? nmemb : 1, size ? size : 1));
}

void *xrealloc(void *p, size_t n)
{
	if (inject())
		return NULL;
	if (!p)
		return counted(realloc(NULL, n ? n : 1));
	return realloc(p, n ? n : 1);
}

char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = xmalloc(n);

	if (d)
		memcpy(d, s, n);
	return d;
}

void xfree(void *p)
{
	if (p)
		atomic_fetch_sub_explicit(&live, 1, memory_order_relaxed);
	free(p);
}
