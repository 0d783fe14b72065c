# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += spop
test_spop_SRCS := tests/unit/test_spop.c agent/protocol/spop.c agent/base/alloc.c
