UNIT_TESTS += server
test_server_SRCS := tests/unit/test_server.c agent/server.c agent/rulestats.c agent/protocol/conn.c agent/store/store.c \
	agent/store/store_memory.c agent/store/memstore.c agent/store/inflight.c agent/policy/decide.c agent/policy/overrides.c agent/protocol/spop.c agent/policy/identity.c \
	$(RULES_SRCS) agent/out.c agent/log.c \
	agent/alloc.c
test_server_LDFLAGS := -Wl,--wrap=ev_loop_new -Wl,--wrap=pthread_create
