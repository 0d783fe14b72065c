UNIT_TESTS += memstore
test_memstore_SRCS := tests/unit/test_memstore.c agent/memstore.c agent/limiter.c agent/alloc.c
