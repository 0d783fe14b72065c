UNIT_TESTS += rules
# spop.c for spop_kv_next (rules_args_from_kv), identity.c for argument text.
test_rules_SRCS := tests/unit/test_rules.c agent/rules.c agent/settings.c agent/addr.c agent/yaml_strict.c agent/shed.c agent/limiter.c agent/spop.c agent/identity.c agent/alloc.c
