# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += refusals
test_refusals_SRCS := tests/unit/test_refusals.c agent/store/refusals.c agent/policy/limit.c agent/base/alloc.c
