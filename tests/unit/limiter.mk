UNIT_TESTS += limiter
test_limiter_SRCS := tests/unit/test_limiter.c agent/limiter.c agent/alloc.c
