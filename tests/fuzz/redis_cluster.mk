FUZZERS += redis_cluster
# alloc.c for the replay main.
fuzz_redis_cluster_SRCS := tests/fuzz/fuzz_redis_cluster.c agent/store/redis_cluster.c agent/alloc.c
