# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += identity
# spop.h is needed only for struct spop_data: spop.c is not linked.
test_identity_SRCS := tests/unit/test_identity.c agent/policy/identity.c agent/base/alloc.c
