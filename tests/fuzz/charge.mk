# SPDX-License-Identifier: Apache-2.0
FUZZERS += charge
# identity.c for the key's hex (its hashing is not called here).
fuzz_charge_SRCS := tests/fuzz/fuzz_charge.c agent/decide/charge.c agent/policy/identity.c \
	agent/base/alloc.c
