/* SPDX-License-Identifier: Apache-2.0 */
/* rules_load.h: what the files of the rules loader share (rules_load.c,
 * rules_stack.c, rules_match.c, rules_extras.c); private to them. Nothing here is read once the rules are
 * loaded. */
#ifndef RL_RULES_LOAD_H
#define RL_RULES_LOAD_H

#include "rules_int.h"
#include "yaml_strict.h"

struct ctx {
	struct ys y;          /* the file, and where messages go */
	struct rules *r;
	yaml_mark_t *marks;   /* where each rule is named, for duplicate names */
	bool builtin;         /* rule[0] is the built-in default rule */
	/* Each tier's and endpoint's `stack` (by rule index), NULL when it
	 * has none: read once the layers are. */
	yaml_node_t *stack[RULES_TIERS_MAX + RULES_ENDPOINTS_MAX];
};

/* A rule or argument name: 1 to 31 of [A-Za-z0-9_.-]. */
int rules_get_name(struct ys *y, yaml_node_t *n, const char *where, char out[RULES_NAME_MAX]);

/* One name of an identity list (ys_string_or_list, arg a struct
 * rules_names). */
int rules_identity_item(struct ys *y, yaml_node_t *n, const char *where, size_t i, void *arg);

/* Names are unique among all rules; rule `i` is being named at `mark`. */
int rules_check_rule_name(struct ctx *c, size_t i, yaml_mark_t mark, const char *where);

/* n bytes of the rules' arena, aligned for any type (freed with the
 * rules), or NULL when out of memory. */
void *rules_arena_alloc(struct rules *r, size_t n);

/* The index of the tier a name names, or -1 with the message. */
int rules_find_tier(struct ctx *c, yaml_node_t *n, const char *where, size_t *out);

/* An endpoint's or a priority class's `match` (rules_match.c). */
int rules_parse_match(struct ctx *c, yaml_node_t *map, const char *where, struct rules_match *m);

/* A rule's `limits` list (rules_stack.c). */
int rules_parse_limits(struct ctx *c, yaml_node_t *seq, const char *where, struct rule *rule);

/* A tier's or endpoint's `concurrency` and `max_duration` (either may be
 * NULL), and its `penalty` (rules_extras.c). */
int rules_parse_concurrency(struct ctx *c, const char *where, yaml_node_t *vconc,
			    yaml_node_t *vmax, struct rule *rule);
int rules_parse_penalty(struct ctx *c, const char *where, yaml_node_t *map, struct rule *rule);
int rules_parse_max_override(struct ctx *c, const char *where, yaml_node_t *n, struct rule *rule);
/* `lease`: off, an interval, or { interval, share } (at `where`). */
int rules_parse_lease(struct ctx *c, const char *where, yaml_node_t *n, int64_t *us,
		      uint8_t *share);

/* `shedding.adaptive` (rules_adaptive.c). */
int rules_parse_adaptive(struct ctx *c, yaml_node_t *map);

/* `charge: response` (rules_charge.c), after the rule's limits; vstack
 * and vlease: its `stack` and `lease`, if any (neither goes with it). */
int rules_parse_charge(struct ctx *c, const char *where, yaml_node_t *n, yaml_node_t *vstack,
		       yaml_node_t *vlease, struct rule *rule);

/* The top-level `layers` mapping, after the tiers and endpoints. */
int rules_parse_layers(struct ctx *c, yaml_node_t *map);

/* Each tier's and endpoint's `stack`, or the top-level one (`deflt`, may
 * be NULL) for those without, once the layers are read. */
int rules_resolve_stacks(struct ctx *c, yaml_node_t *deflt);

#endif
