# SPDX-License-Identifier: Apache-2.0
UNIT_TESTS += settings
# yaml_strict.c reads the documents, limit.c parses the durations.
test_settings_SRCS := tests/unit/test_settings.c agent/rules/settings.c agent/base/addr.c \
	agent/rules/yaml_strict.c agent/policy/limit.c
