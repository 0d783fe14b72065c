# SPDX-License-Identifier: Apache-2.0
FUZZERS += urlpath
fuzz_urlpath_SRCS := tests/fuzz/fuzz_urlpath.c agent/rules/urlpath.c agent/base/alloc.c
