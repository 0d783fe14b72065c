# SPDX-License-Identifier: Apache-2.0
FUZZERS += redis_cluster
# alloc.c for the replay main.
fuzz_redis_cluster_SRCS := tests/fuzz/fuzz_redis_cluster.c agent/store/redis/redis_cluster.c agent/base/alloc.c
