/* SPDX-License-Identifier: Apache-2.0 */
/* charge.h: the place of a request whose rule charges what the response
 * says (`charge: response`), and the response's cost argument.
 *
 * A request of such a rule is admitted at its estimate (its cost). Its
 * place (txn.rl.place) says what the settlement needs:
 *     "<rule>/<client key in hex>/<estimate>/<take_us>/<limits>"
 * take_us the store's clock when it took the estimate (Redis's for a
 * Redis store), limits a hash of the rule's limits' identities (a reload
 * that changed them, or an override, settles nothing). The response
 * message's cost argument then settles it (store/store_charge.c).
 *
 * Both come back from HAProxy: the parsers here take any bytes, read
 * nothing past len and have three outcomes. No I/O, no clock.
 */
#ifndef RL_CHARGE_H
#define RL_CHARGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decide.h"
#include "spop.h"

struct charge_place {
	char rule[RULES_NAME_MAX];
	uint8_t key[IDENTITY_KEY_LEN];
	uint32_t estimate;
	int64_t take_us;
	uint64_t limits;
};

/* The hash of rule's own limits' identities (lidh) a charge place names. */
uint64_t charge_limits_id(const struct rule *rule);

/* Writes into d->place the charge place of q, admitted at its cost by a
 * store whose clock read take_us (>= 0). */
void charge_put_place(const struct decide_query *q, int64_t take_us, struct decide_decision *d);

/* Reads a place (len bytes at p). Returns 1 for a charge place (into
 * *out), 0 for a place without the charge's fields ("<rule>/<key>"), -1
 * for anything else. */
int charge_parse_place(const char *p, size_t len, struct charge_place *out);

/* The response's cost argument: an integer, or a string of decimal
 * digits (a header's value), at most 2^40. Returns 0 with *out, or -1
 * (missing, negative, not a number, too large). */
int charge_parse_cost(const struct spop_data *d, uint64_t *out);

#endif
