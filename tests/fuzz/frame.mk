# SPDX-License-Identifier: Apache-2.0
FUZZERS += frame
fuzz_frame_SRCS := tests/fuzz/fuzz_frame.c agent/protocol/spop.c agent/base/alloc.c
