#include "alloc.h"

#include <stdlib.h>
#include <string.h>

static long fail_after = -1;

/* Returns 1 when the injected failure fires for this call. */
static int inject(void)
{
	if (fail_after < 0)
		return 0;
	if (fail_after == 0)
		return 1;
	fail_after--;
	return 0;
}

void xalloc_fail_after(long n) { fail_after = n; }

void *xmalloc(size_t n) { return inject() ? NULL : malloc(n ? n : 1); }

void *xcalloc(size_t nmemb, size_t size)
{
	return inject() ? NULL : calloc(nmemb ? nmemb : 1, size ? size : 1);
}

void *xrealloc(void *p, size_t n) { return inject() ? NULL : realloc(p, n ? n : 1); }

char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = xmalloc(n);

	if (d)
		memcpy(d, s, n);
	return d;
}

void xfree(void *p) { free(p); }
