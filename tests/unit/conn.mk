# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += conn
# The connection alone: no worker, rule or store.
test_conn_SRCS := tests/unit/test_conn.c agent/protocol/conn.c agent/protocol/conn_set.c agent/protocol/conn_tls.c agent/protocol/spop.c \
	agent/base/log.c agent/base/alloc.c
