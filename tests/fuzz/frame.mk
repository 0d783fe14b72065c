FUZZERS += frame
fuzz_frame_SRCS := tests/fuzz/fuzz_frame.c agent/spop.c agent/alloc.c
