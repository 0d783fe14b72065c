# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += server
test_server_SRCS := tests/unit/test_server.c agent/worker/server.c agent/worker/rulestats.c agent/policy/hll.c agent/protocol/conn.c agent/protocol/conn_set.c agent/protocol/conn_tls.c agent/worker/worker.c agent/worker/adaptive_gate.c agent/worker/flights.c agent/store/store.c agent/store/store_charge.c agent/decide/charge.c agent/store/delay.c \
	agent/store/store_memory.c agent/store/memstore.c agent/store/inflight.c agent/decide/decide.c agent/decide/overrides.c agent/protocol/spop.c agent/policy/identity.c \
	$(RULES_SRCS) agent/base/out.c agent/base/log.c \
	agent/base/alloc.c
test_server_LDFLAGS := -Wl,--wrap=ev_loop_new -Wl,--wrap=pthread_create
