# SPDX-License-Identifier: Apache-2.0
# http-open-loop: the open-loop HTTP generator behind the HAProxy latency rows
# of `make bench` (bench/haproxy_bench.py).
TOOLS += http-open-loop
http-open-loop_SRCS := tools/http-open-loop.c
