# SPDX-License-Identifier: Apache-2.0
FUZZERS += redis_reply
fuzz_redis_reply_SRCS := tests/fuzz/fuzz_redis_reply.c agent/store/redis/redis_reply.c agent/base/alloc.c
