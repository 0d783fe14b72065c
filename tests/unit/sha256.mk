# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += sha256
test_sha256_SRCS := tests/unit/test_sha256.c agent/base/sha256.c
