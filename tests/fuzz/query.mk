FUZZERS += query
# rules_classify.c for rules_args_add: no loader, no YAML.
fuzz_query_SRCS := tests/fuzz/fuzz_query.c agent/query.c agent/rules_classify.c \
	agent/spop.c agent/identity.c agent/alloc.c
