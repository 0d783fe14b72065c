UNIT_TESTS += server
test_server_SRCS := tests/unit/test_server.c agent/server.c agent/conn.c agent/store.c \
	agent/store_memory.c agent/memstore.c agent/decide.c agent/spop.c agent/identity.c \
	$(RULES_SRCS) agent/out.c agent/log.c \
	agent/alloc.c
test_server_LDFLAGS := -Wl,--wrap=ev_loop_new -Wl,--wrap=pthread_create
