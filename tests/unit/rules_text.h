/* SPDX-License-Identifier: Apache-2.0 */
/* rules_text.h: rules loaded from YAML text, for unit tests. Include it
 * after <cmocka.h>: a text that does not load fails the test. */
#ifndef RL_TEST_RULES_TEXT_H
#define RL_TEST_RULES_TEXT_H

#include <string.h>

#include "rules.h"

static inline struct rules *rules_from_text(const char *yaml)
{
	char err[512];
	struct rules *r = rules_load_buffer(yaml, strlen(yaml), "test", err, sizeof(err));

	if (!r)
		fail_msg("rules: %s", err);
	return r;
}

#endif
