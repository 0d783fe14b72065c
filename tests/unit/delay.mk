# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += delay
test_delay_SRCS := tests/unit/test_delay.c agent/store/delay.c agent/base/alloc.c
