# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += limit
test_limit_SRCS := tests/unit/test_limit.c agent/policy/limit.c agent/base/alloc.c
