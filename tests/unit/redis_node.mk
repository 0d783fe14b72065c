# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += redis_node
test_redis_node_SRCS := tests/unit/test_redis_node.c agent/store/redis/redis_node.c agent/store/redis/redis_deadline.c agent/store/redis/redis_breaker.c \
	agent/store/redis/redis_conn.c agent/store/redis/redis_batch.c agent/store/redis/redis_guard.c \
	agent/store/redis/redis_reply.c agent/store/redis/redis_encode.c agent/store/redis/redis_cluster.c \
	agent/store/redis/redis_slots.c agent/store/redis/redis_keys.c \
	agent/store/redis/redis_health.c agent/store/redis/redis_eviction.c agent/store/redis/redis_auth.c \
	agent/store/store.c agent/store/store_charge.c agent/decide/charge.c agent/store/delay.c agent/store/store_memory.c agent/store/memstore.c agent/store/inflight.c \
	agent/decide/decide.c agent/decide/overrides.c agent/protocol/spop.c agent/policy/identity.c \
	$(RULES_SRCS) agent/base/out.c agent/base/log.c agent/base/alloc.c
# the loop's watchers and the monotonic clock are the test's (see there)
test_redis_node_LDFLAGS := -Wl,--wrap=clock_gettime -Wl,--wrap=ev_io_start -Wl,--wrap=ev_io_stop \
	-Wl,--wrap=ev_timer_start -Wl,--wrap=ev_timer_stop -Wl,--wrap=ev_timer_again \
	-Wl,--wrap=ev_prepare_start -Wl,--wrap=ev_prepare_stop -Wl,--wrap=ev_feed_event \
	-Wl,--wrap=ev_idle_start -Wl,--wrap=ev_idle_stop
