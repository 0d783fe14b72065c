# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += redis_info
# The connection, its transport and AUTH are the test's (see there).
test_redis_info_SRCS := tests/unit/test_redis_info.c agent/store/redis/redis_info.c \
	agent/base/addr.c agent/base/log.c agent/base/alloc.c
test_redis_info_LDFLAGS := -Wl,--wrap=clock_gettime
