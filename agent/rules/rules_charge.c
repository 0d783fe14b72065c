/* SPDX-License-Identifier: Apache-2.0 */
/* rules_charge.c: `charge: response` on a tier or an endpoint. A request
 * of the rule is admitted at its estimate (its cost, or cost_argument),
 * and the response message's cost argument settles it: more is taken,
 * less given back (limit_settle, store/charge.h). Part of the loader
 * (rules_load.h); docs/rules.md is the reference. */
#include "rules_load.h"

#include <string.h>

int rules_parse_charge(struct ctx *c, const char *where, yaml_node_t *n, yaml_node_t *vstack,
		       yaml_node_t *vlease, struct rule *rule)
{
	static const char *const words[] = {"response"};
	struct ys *y = &c->y;
	char at[YS_PATH_MAX];
	bool rates = false;
	int i;

	ys_path_key(at, where, "charge");
	if (ys_word(y, n, at, words, 1, "response", &i) < 0)
		return -1;
	/* the place a response names carries the client's key under the
	 * rule: a layer's clients are not in it */
	if (vstack)
		return ys_fail(y, n->start_mark, at,
			       "a rule with layers (stack) cannot charge: the response names "
			       "the rule's client only");
	if (vlease)
		return ys_fail(y, n->start_mark, at,
			       "a rule that charges takes no lease: its requests are settled "
			       "one by one");
	for (size_t j = 0; j < rule->nlimits; j++) {
		enum limit_algo a = rule->limits[j].algo;

		if (a == LIMIT_LOG)
			return ys_fail(y, n->start_mark, at,
				       "a log limit cannot be charged (it keeps each request "
				       "as admitted): use token, sliding or fixed");
		rates |= a == LIMIT_TOKEN_BUCKET || a == LIMIT_SLIDING_WINDOW ||
			 a == LIMIT_FIXED_WINDOW;
	}
	if (!rates)
		return ys_fail(y, n->start_mark, at,
			       "nothing to charge: the rule needs a token, sliding or fixed limit");
	rule->charge = true;
	rule->lease_us = -1;
	return 0;
}
