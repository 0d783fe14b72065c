# SPDX-License-Identifier: Apache-2.0
FUZZERS += http
# alloc.c for the replay main.
fuzz_http_SRCS := tests/fuzz/fuzz_http.c agent/ops/http_head.c agent/base/alloc.c
