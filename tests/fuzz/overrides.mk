# SPDX-License-Identifier: Apache-2.0
FUZZERS += overrides
fuzz_overrides_SRCS := tests/fuzz/fuzz_overrides.c agent/decide/overrides.c agent/policy/limit.c agent/policy/identity.c agent/protocol/spop.c \
	agent/base/alloc.c
