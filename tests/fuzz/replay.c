/* SPDX-License-Identifier: Apache-2.0 */
/* replay.c: a main() for fuzz targets when libFuzzer is not linked. Each
 * argument is a file or a directory of files (replayed in name order); every
 * input goes through LLVMFuzzerTestOneInput() in a buffer of exactly its
 * size, so a sanitizer sees any read past its end. Exits non-zero when a
 * path is missing or holds no input, so a lost corpus cannot pass. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional in a target; NULL when it does not define one. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

/* Reads a whole regular file into a buffer of its exact size. Returns 0,
 * or -1 with a message on stderr. */
static int read_file(const char *path, uint8_t **out, size_t *size)
{
	FILE *fp = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0, n;

	if (!fp) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	for (;;) {
		if (len == cap) {
			size_t ncap = cap ? cap * 2 : 4096;
			uint8_t *nbuf = xrealloc(buf, ncap);

			if (!nbuf)
				goto fail;
			buf = nbuf;
			cap = ncap;
		}
		n = fread(buf + len, 1, cap - len, fp);
		len += n;
		if (n == 0)
			break;
	}
	if (ferror(fp))
		goto fail;
	fclose(fp);
	/* Trim to the exact size so an over-read is caught. */
	*out = xmalloc(len);
	if (!*out) {
		xfree(buf);
		fprintf(stderr, "replay: %s: out of memory\n", path);
		return -1;
	}
	if (len)
		memcpy(*out, buf, len);
	xfree(buf);
	*size = len;
	return 0;
fail:
	fprintf(stderr, "replay: %s: read failed\n", path);
	xfree(buf);
	fclose(fp);
	return -1;
}

static int run_file(const char *path)
{
	uint8_t *data;
	size_t size;

	if (read_file(path, &data, &size) != 0)
		return -1;
	LLVMFuzzerTestOneInput(data, size);
	xfree(data);
	return 0;
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays every regular file of dir in name order. Returns how many, or -1. */
static long run_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t n = 0, cap = 0, i;
	long count = 0;

	if (!d) {
		fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			char **nn = xrealloc(names, ncap * sizeof(*names));

			if (!nn)
				goto oom;
			names = nn;
			cap = ncap;
		}
		names[n] = xmalloc(strlen(dir) + strlen(e->d_name) + 2);
		if (!names[n])
			goto oom;
		sprintf(names[n], "%s/%s", dir, e->d_name);
		n++;
	}
	closedir(d);
	d = NULL;
	if (n)
		qsort(names, n, sizeof(*names), cmp_names);
	for (i = 0; i < n; i++) {
		struct stat st;

		if (count >= 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
			if (run_file(names[i]) != 0)
				count = -1;
			else
				count++;
		}
		xfree(names[i]);
	}
	xfree(names);
	return count;
oom:
	fprintf(stderr, "replay: %s: out of memory\n", dir);
	for (i = 0; i < n; i++)
		xfree(names[i]);
	xfree(names);
	if (d)
		closedir(d);
	return -1;
}

int main(int argc, char **argv)
{
	int i, rc = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
		return 2;
	}
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	for (i = 1; i < argc; i++) {
		struct stat st;
		long n;

		if (stat(argv[i], &st) != 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			rc = 1;
			continue;
		}
		if (S_ISDIR(st.st_mode))
			n = run_dir(argv[i]);
		else
			n = run_file(argv[i]) == 0 ? 1 : -1;
		if (n <= 0) {
			if (n == 0)
				fprintf(stderr, "replay: %s: no inputs\n", argv[i]);
			rc = 1;
			continue;
		}
		printf("replayed %ld inputs from %s\n", n, argv[i]);
	}
	return rc;
}
