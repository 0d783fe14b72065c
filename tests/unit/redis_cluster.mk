UNIT_TESTS += redis_cluster
test_redis_cluster_SRCS := tests/unit/test_redis_cluster.c agent/store/redis_cluster.c agent/alloc.c
