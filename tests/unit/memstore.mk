UNIT_TESTS += memstore
test_memstore_SRCS := tests/unit/test_memstore.c agent/memstore.c agent/limit.c agent/alloc.c
