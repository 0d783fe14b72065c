# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += inflight
test_inflight_SRCS := tests/unit/test_inflight.c agent/store/inflight.c agent/base/alloc.c
