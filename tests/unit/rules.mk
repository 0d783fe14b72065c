# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += rules
# The tests load rules from YAML, then classify requests against them.
# spop.c for spop_kv_next (rules_args_from_kv), identity.c for argument text.
test_rules_SRCS := tests/unit/test_rules.c $(RULES_SRCS) \
	agent/protocol/spop.c agent/policy/identity.c agent/base/alloc.c
