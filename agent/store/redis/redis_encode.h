/* SPDX-License-Identifier: Apache-2.0 */
/* redis_encode.h: the bytes the decision library takes
 * (agent/store/redis/ratelimit.lua): big-endian integers and rules as
 * msgpack; and a command's RESP. Pure. */
#ifndef RL_REDIS_ENCODE_H
#define RL_REDIS_ENCODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "limit.h"
#include "redis_keys.h"

/* v in n bytes, most significant first. */
void redis_put_be(uint8_t *p, uint64_t v, int n);

/* v in msgpack's shortest form for a non-negative integer; returns the
 * length (at most 9). */
size_t redis_mp_uint(uint8_t *p, uint64_t v);

/* A rule as the library takes it: msgpack [[algo, quota, period_us,
 * burst], ...], a limit with a fifth element, kept, when its keys are
 * packed (redis_key_packed(): 1) or have no expiry (redis_key_unexpiring()
 * on a server whose keys go without one, as dropped says: 2); at most
 * RULE_BYTES_MAX bytes. The same limits always
 * make the same bytes (the library keeps each rule by its bytes). */
#define RULE_BYTES_MAX (3 + LIMIT_SET_MAX * (1 + 4 * 9 + 1))
size_t redis_limits_bytes(const struct redis_keys *k, const struct limit_spec *limits, size_t nl,
			  bool dropped, uint8_t *p);

/* The RESP of a command (an array of bulk strings, as hiredis's
 * redisFormatCommandArgv makes it): redis_resp_len() bytes, written by
 * redis_resp_put() at out, which returns their number. */
size_t redis_resp_len(size_t argc, const size_t *argvlen);
size_t redis_resp_put(char *out, size_t argc, const char *const *argv, const size_t *argvlen);

#endif
