UNIT_TESTS += decide
test_decide_SRCS := tests/unit/test_decide.c agent/decide.c agent/spop.c agent/identity.c \
	$(RULES_SRCS) agent/alloc.c
