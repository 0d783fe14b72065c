# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += rlheader
test_rlheader_SRCS := tests/unit/test_rlheader.c agent/policy/rlheader.c agent/policy/limit.c agent/base/alloc.c
