# SPDX-License-Identifier: Apache-2.0
FUZZERS += query
# rules_classify.c for rules_args_add: no loader, no YAML.
fuzz_query_SRCS := tests/fuzz/fuzz_query.c agent/ops/query.c agent/rules/rules_classify.c agent/rules/urlpath.c \
	agent/protocol/spop.c agent/policy/identity.c agent/base/alloc.c
