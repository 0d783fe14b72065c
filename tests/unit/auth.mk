# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += auth
test_auth_SRCS := tests/unit/test_auth.c agent/ops/auth.c agent/ops/secret.c agent/policy/identity.c
