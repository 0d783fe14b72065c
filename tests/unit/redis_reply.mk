# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += redis_reply
test_redis_reply_SRCS := tests/unit/test_redis_reply.c agent/store/redis/redis_reply.c
