/* SPDX-License-Identifier: Apache-2.0 */
#include "secret.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "identity.h"

long secret_file(const char *path, char *buf, size_t cap, unsigned *mode, char *err,
		 size_t errlen)
{
	struct stat st;
	ssize_t n;
	size_t len = 0;
	/* O_NONBLOCK: a FIFO must not hold the start until a writer comes;
	 * the file's kind is judged before it is read. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

	if (fd < 0) {
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		close(fd);
		return -1;
	}
	*mode = (unsigned)st.st_mode & 07777;
	fcntl(fd, F_SETFL, 0);
	/* one byte more than fits tells a file that is too long */
	while (len < cap && (n = read(fd, buf + len, cap - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
			close(fd);
			return -1;
		}
		len += (size_t)n;
	}
	close(fd);
	if (len >= cap)
		return -2;
	buf[len] = '\0';
	return (long)len;
}

/* The file's bytes in buf (their count), whether group or others may read
 * it (*loose); -1 with the reason in err. */
static long secret_bytes(const char *path, char *buf, size_t cap, bool *loose, char *err,
			 size_t errlen)
{
	unsigned mode = 0;
	long n = secret_file(path, buf, cap, &mode, err, errlen);

	*loose = (mode & (S_IRWXG | S_IRWXO)) != 0;
	if (n == -2)
		snprintf(err, errlen, "%s: longer than %zu bytes", path, cap - 1);
	return n < 0 ? -1 : n;
}

long secret_read(const char *path, char *buf, size_t cap, bool *loose, char *err, size_t errlen)
{
	long n = secret_bytes(path, buf, cap, loose, err, errlen);
	size_t len;

	if (n < 0)
		return -1;
	len = (size_t)n;
	while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' ' ||
			   buf[len - 1] == '\t'))
		len--;
	buf[len] = '\0';
	if (len < SECRET_MIN) {
		snprintf(err, errlen, "%s: shorter than %d bytes (make one with: head -c 32 "
			 "/dev/urandom | base64 > %s)", path, SECRET_MIN, path);
		return -1;
	}
	return (long)len;
}

long secret_read_password(const char *path, char *buf, size_t cap, bool *loose, char *err,
			  size_t errlen)
{
	long n = secret_bytes(path, buf, cap, loose, err, errlen);
	size_t len;

	if (n < 0)
		return -1;
	len = (size_t)n;
	if (len > 0 && buf[len - 1] == '\n')
		len--;
	if (len > 0 && buf[len - 1] == '\r')
		len--;
	buf[len] = '\0';
	if (len == 0 || strlen(buf) != len || memchr(buf, '\n', len)) {
		snprintf(err, errlen, "%s: %s", path,
			 len == 0 ? "empty" : "holds more than one line (or a NUL byte)");
		memset(buf, 0, cap);
		return -1;
	}
	return (long)len;
}

void secret_hash_key(const char *secret, size_t len, uint8_t key[16])
{
	/* A fixed key here only separates this use of SipHash from others:
	 * the secret is the file's content. */
	static const uint8_t domain[16] = "spoa-rl hash key";

	identity_siphash128(domain, secret, len, key);
}

int secret_random_key(uint8_t key[16])
{
	size_t got = 0;

	while (got < 16) {
		ssize_t n = getrandom(key + got, 16 - got, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return 0;
}
