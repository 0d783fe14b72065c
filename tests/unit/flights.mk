# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += flights
test_flights_SRCS := tests/unit/test_flights.c agent/worker/flights.c agent/policy/adaptive.c agent/base/alloc.c
