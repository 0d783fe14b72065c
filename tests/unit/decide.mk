UNIT_TESTS += decide
test_decide_SRCS := tests/unit/test_decide.c agent/decide.c agent/spop.c agent/identity.c \
	agent/rlheader.c agent/limiter.c agent/rules_load.c agent/rules_classify.c \
	agent/settings.c agent/addr.c agent/yaml_strict.c agent/shed.c agent/memstore.c \
	agent/alloc.c
