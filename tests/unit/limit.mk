UNIT_TESTS += limit
test_limit_SRCS := tests/unit/test_limit.c agent/limit.c agent/alloc.c
