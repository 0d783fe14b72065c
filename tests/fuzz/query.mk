FUZZERS += query
fuzz_query_SRCS := tests/fuzz/fuzz_query.c agent/query.c agent/rules.c agent/settings.c agent/addr.c agent/yaml_strict.c agent/limiter.c \
	agent/shed.c agent/spop.c agent/identity.c agent/alloc.c
