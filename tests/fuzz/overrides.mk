FUZZERS += overrides
fuzz_overrides_SRCS := tests/fuzz/fuzz_overrides.c agent/policy/overrides.c agent/policy/limit.c \
	agent/alloc.c
