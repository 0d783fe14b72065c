UNIT_TESTS += decide
test_decide_SRCS := tests/unit/test_decide.c agent/policy/decide.c agent/policy/overrides.c agent/protocol/spop.c agent/policy/identity.c \
	$(RULES_SRCS) agent/alloc.c
