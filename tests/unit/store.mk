UNIT_TESTS += store
test_store_SRCS := tests/unit/test_store.c agent/store.c agent/store_memory.c agent/memstore.c \
	agent/decide.c agent/spop.c agent/identity.c $(RULES_SRCS) \
	agent/out.c agent/log.c agent/alloc.c
