# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += urlpath
test_urlpath_SRCS := tests/unit/test_urlpath.c agent/rules/urlpath.c
