# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += adaptive
test_adaptive_SRCS := tests/unit/test_adaptive.c agent/policy/adaptive.c
