# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += lease
test_lease_SRCS := tests/unit/test_lease.c agent/store/lease.c agent/policy/limit.c agent/base/alloc.c
