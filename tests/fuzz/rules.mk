FUZZERS += rules
# spop.c for the typed-data constructors and rules_args_from_kv.
fuzz_rules_SRCS := tests/fuzz/fuzz_rules.c $(RULES_SRCS) \
	agent/spop.c agent/identity.c agent/alloc.c
