# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += redis_cluster
test_redis_cluster_SRCS := tests/unit/test_redis_cluster.c agent/store/redis/redis_cluster.c agent/base/alloc.c
