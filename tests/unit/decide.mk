# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += decide
test_decide_SRCS := tests/unit/test_decide.c agent/decide/decide.c agent/decide/overrides.c agent/protocol/spop.c agent/policy/identity.c \
	$(RULES_SRCS) agent/base/alloc.c
