# SPDX-License-Identifier: Apache-2.0
FUZZERS += rules
# spop.c for the typed-data constructors and rules_args_from_kv.
fuzz_rules_SRCS := tests/fuzz/fuzz_rules.c $(RULES_SRCS) \
	agent/protocol/spop.c agent/policy/identity.c agent/base/alloc.c
