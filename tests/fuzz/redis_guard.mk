# SPDX-License-Identifier: Apache-2.0
FUZZERS += redis_guard
fuzz_redis_guard_SRCS := tests/fuzz/fuzz_redis_guard.c agent/store/redis/redis_guard.c agent/base/alloc.c
