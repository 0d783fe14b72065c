FUZZERS += rules
# spop.c for the typed-data constructors and rules_args_from_kv.
fuzz_rules_SRCS := tests/fuzz/fuzz_rules.c agent/rules_load.c agent/rules_classify.c \
	agent/settings.c agent/addr.c agent/yaml_strict.c agent/shed.c agent/limiter.c \
	agent/spop.c agent/identity.c agent/alloc.c
