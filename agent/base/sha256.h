/* SPDX-License-Identifier: Apache-2.0 */
/* sha256.h: SHA-256 (FIPS 180-4) of a buffer in memory, for what the agent
 * shows of its rules file (spoa_rl_rules_info{sha256}, GET /admin/rules):
 * agents of a fleet that loaded the same bytes show the same digest. Not
 * used for any secret; no streaming interface, the file is read whole. */
#ifndef RL_SHA256_H
#define RL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32
#define SHA256_HEX_LEN (2 * SHA256_LEN + 1) /* NUL included */

/* The digest of len bytes at p into out. */
void sha256(const void *p, size_t len, uint8_t out[SHA256_LEN]);

/* A digest as lower-case hex with a NUL. */
void sha256_hex(const uint8_t d[SHA256_LEN], char out[SHA256_HEX_LEN]);

#endif
