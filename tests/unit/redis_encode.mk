UNIT_TESTS += redis_encode
test_redis_encode_SRCS := tests/unit/test_redis_encode.c agent/store/redis_encode.c agent/store/store.c \
	agent/store/store_memory.c agent/store/memstore.c agent/store/inflight.c \
	agent/policy/decide.c agent/policy/overrides.c agent/protocol/spop.c agent/policy/identity.c \
	$(RULES_SRCS) agent/out.c agent/log.c agent/alloc.c
