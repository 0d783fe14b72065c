/* SPDX-License-Identifier: Apache-2.0 */
/* secret.h: secrets the agent reads from files at start (the key client
 * keys are hashed under), so that they stay out of argv and the rules
 * file. */
#ifndef RL_SECRET_H
#define RL_SECRET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SECRET_MIN 16          /* bytes a secret needs at least */
#define SECRET_MAX 4096

/* Reads a small file that holds a secret into buf[0..cap): at most cap - 1
 * bytes, a NUL after them. Returns the length, -1 with a reason in err
 * (cannot open or read it, not a regular file), or -2 when it holds cap
 * bytes or more (err untouched: the caller names what was too long).
 * *mode is the file's permission bits. */
long secret_file(const char *path, char *buf, size_t cap, unsigned *mode, char *err,
		 size_t errlen);

/* Reads a secret from path into buf[0..cap): its bytes, trailing spaces
 * and newlines dropped. Returns the length, or -1 with a reason in err
 * (cannot read it, not a regular file, shorter than SECRET_MIN or longer
 * than cap - 1 bytes). *loose is set when group or others may read it. */
long secret_read(const char *path, char *buf, size_t cap, bool *loose, char *err, size_t errlen);

/* Reads a password from path into buf[0..cap): its bytes up to a final
 * newline (CRLF or LF), which is dropped. Returns the length, or -1 with a
 * reason in err (cannot read it, not a regular file, empty, longer than
 * cap - 1 bytes, a newline or NUL inside). *loose is set when group or
 * others may read it. */
long secret_read_password(const char *path, char *buf, size_t cap, bool *loose, char *err,
			  size_t errlen);

/* The 16-byte key client keys are hashed under, from a secret of any
 * length: the same secret gives the same key on every agent. */
void secret_hash_key(const char *secret, size_t len, uint8_t key[16]);

/* 16 random bytes (a key for this process alone). Returns 0 or -1. */
int secret_random_key(uint8_t key[16]);

#endif
