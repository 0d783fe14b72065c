# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += logtext
test_logtext_SRCS := tests/unit/test_logtext.c agent/ops/logtext.c
