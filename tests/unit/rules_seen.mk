# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += rules_seen
# The argument names checked against traffic, and the views of the matches.
test_rules_seen_SRCS := tests/unit/test_rules_seen.c $(RULES_SRCS) \
	agent/protocol/spop.c agent/policy/identity.c agent/base/alloc.c
