# SPDX-License-Identifier: Apache-2.0
# spop-bench: the SPOP load generator behind `make bench` (bench/run.py).
TOOLS += spop-bench
spop-bench_SRCS := tools/spop-bench.c agent/protocol/spop.c agent/base/alloc.c
