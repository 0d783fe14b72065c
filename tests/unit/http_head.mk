# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += http_head
test_http_head_SRCS := tests/unit/test_http_head.c agent/ops/http_head.c
