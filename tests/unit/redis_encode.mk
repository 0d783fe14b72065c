# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += redis_encode
test_redis_encode_SRCS := tests/unit/test_redis_encode.c agent/store/redis/redis_encode.c agent/store/redis/redis_keys.c agent/store/store.c agent/store/store_charge.c agent/decide/charge.c agent/store/delay.c \
	agent/store/store_memory.c agent/store/memstore.c agent/store/inflight.c \
	agent/decide/decide.c agent/decide/overrides.c agent/protocol/spop.c agent/policy/identity.c \
	$(RULES_SRCS) agent/base/out.c agent/base/log.c agent/base/alloc.c
