# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += redis_keys
test_redis_keys_SRCS := tests/unit/test_redis_keys.c agent/store/redis/redis_keys.c $(RULES_SRCS) \
	agent/protocol/spop.c agent/policy/identity.c agent/base/alloc.c
