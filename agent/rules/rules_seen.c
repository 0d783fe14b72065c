/* SPDX-License-Identifier: Apache-2.0 */
/* rules_seen.c: the rules as others see them: the argument names the rules
 * read, to be checked against the names HAProxy sends (rules.h:
 * rules_checked_name, rules_args_seen), and the views of the matches.
 *
 * A name the file wrote (an identity argument, the tier's once there are
 * tiers, the shedding figures once there is a `shedding` section, the
 * cost, override and request_id arguments, every argument a match
 * condition names) is checked; a name the file only took from the
 * defaults is not: the default identity lists `user`, which most
 * configurations never send, and that is no mistake. */
#include <string.h>

#include "rules_int.h"

/* Adds name to the checked ones, once. */
static void add(struct rules *r, const char *name)
{
	if (!name || !name[0] || r->nchecked >= RULES_CHECKED_MAX)
		return;
	for (size_t i = 0; i < r->nchecked; i++)
		if (strcmp(r->checked[i], name) == 0)
			return;
	r->checked[r->nchecked++] = name;
}

static void add_match(struct rules *r, const struct rules_match *m)
{
	if (m->method.n)
		add(r, "method");
	if (m->path.n)
		add(r, "path");
	if (m->host.n)
		add(r, "host");
	for (size_t k = 0; k < m->nargs; k++)
		add(r, m->args[k].name);
}

void rules_derive_checked(struct rules *r)
{
	r->nchecked = 0;
	for (size_t k = r->identity_set ? 0 : r->identity.n; k < r->idnames.n; k++)
		add(r, r->idnames.name[k]);
	if (r->tiers_set)
		add(r, r->tier_arg);
	add(r, r->cost_arg);
	if (r->shedding_set) {
		add(r, r->shed.in_use_arg);
		add(r, r->shed.free_arg);
	}
	if (r->adaptive.set) {
		add(r, r->adaptive.backend_arg);
		add(r, RULES_REQUEST_ID);
	}
	for (size_t i = 0; i < r->nrules; i++) {
		if (r->rule[i].conc)
			add(r, RULES_REQUEST_ID);
		if (r->rule[i].has_max_override)
			add(r, r->override_arg);
	}
	for (size_t i = 0; i < r->neps; i++)
		add_match(r, &r->ep[i]);
	for (size_t i = 0; i < r->nclasses; i++)
		add_match(r, &r->classes[i].m);
}

size_t rules_checked_count(const struct rules *r) { return r->nchecked; }

const char *rules_checked_name(const struct rules *r, size_t i)
{
	return i < r->nchecked ? r->checked[i] : NULL;
}

uint64_t rules_args_seen(const struct rules *r, struct spop_cursor kv, unsigned nargs)
{
	uint64_t seen = 0;

	for (unsigned a = 0; a < nargs; a++) {
		struct spop_str name;

		if (spop_str_get(&kv.p, kv.end, &name) != SPOP_OK ||
		    spop_data_get(&kv.p, kv.end, NULL, NULL) != SPOP_OK)
			break;
		for (size_t i = 0; i < r->nchecked; i++)
			if (strlen(r->checked[i]) == name.len &&
			    memcmp(r->checked[i], name.ptr, name.len) == 0)
				seen |= (uint64_t)1 << i;
	}
	return seen;
}

size_t rules_endpoint_count(const struct rules *r) { return r->neps; }
size_t rules_endpoint_first(const struct rules *r) { return r->ntiers; }

const struct rules_match *rules_endpoint_match(const struct rules *r, size_t i)
{
	return i < r->neps ? &r->ep[i] : NULL;
}

size_t rules_class_count(const struct rules *r) { return r->nclasses; }

const struct rules_match *rules_class_match(const struct rules *r, size_t i, int *priority)
{
	if (i >= r->nclasses)
		return NULL;
	*priority = r->classes[i].priority;
	return &r->classes[i].m;
}

const char *rules_override_argument(const struct rules *r) { return r->override_arg; }

int rules_agents(const struct rules *r)
{
	return r->settings.has_agents && r->settings.agents > 0 ? r->settings.agents : 1;
}
