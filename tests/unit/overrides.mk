# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += overrides
test_overrides_SRCS := tests/unit/test_overrides.c agent/decide/overrides.c agent/policy/limit.c agent/policy/identity.c agent/protocol/spop.c \
	agent/base/alloc.c
