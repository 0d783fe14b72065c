# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += rules_reader
# The test stands in for rules_load() and rules_release(): a file that
# answers, one that is invalid, one on a mount that never answers.
test_rules_reader_SRCS := tests/unit/test_rules_reader.c agent/rules/rules_reader.c agent/base/alloc.c
