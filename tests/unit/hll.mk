# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += hll
test_hll_SRCS := tests/unit/test_hll.c agent/policy/hll.c
