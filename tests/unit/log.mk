# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += log
test_log_SRCS := tests/unit/test_log.c agent/base/log.c
