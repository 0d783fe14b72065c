UNIT_TESTS += spop
test_spop_SRCS := tests/unit/test_spop.c agent/protocol/spop.c agent/base/alloc.c
