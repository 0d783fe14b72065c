# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += shed
test_shed_SRCS := tests/unit/test_shed.c agent/policy/shed.c
