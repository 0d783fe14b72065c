# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += memstore
test_memstore_SRCS := tests/unit/test_memstore.c agent/store/memstore.c agent/policy/limit.c agent/base/alloc.c
