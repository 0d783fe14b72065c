# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += http
# test_http.c includes agent/ops/http.c, to shorten its timeout.
test_http_SRCS := tests/unit/test_http.c agent/ops/http_head.c agent/base/addr.c agent/base/alloc.c agent/base/log.c
