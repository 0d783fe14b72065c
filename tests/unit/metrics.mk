# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += metrics
# The stores' stats getters are stubbed in the test.
test_metrics_SRCS := tests/unit/test_metrics.c agent/ops/metrics.c agent/ops/metrics_adaptive.c agent/worker/flights.c agent/store/redis/redis_health.c agent/base/log.c agent/worker/rulestats.c agent/policy/hll.c agent/base/out.c agent/base/alloc.c \
	$(RULES_SRCS) agent/protocol/spop.c agent/policy/identity.c
