UNIT_TESTS += rules
# The tests load rules from YAML, then classify requests against them.
# spop.c for spop_kv_next (rules_args_from_kv), identity.c for argument text.
test_rules_SRCS := tests/unit/test_rules.c agent/rules_load.c agent/rules_classify.c \
	agent/settings.c agent/addr.c agent/yaml_strict.c agent/shed.c agent/limiter.c \
	agent/spop.c agent/identity.c agent/alloc.c
