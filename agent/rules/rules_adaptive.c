/* SPDX-License-Identifier: Apache-2.0 */
/* rules_adaptive.c: `shedding.adaptive`, a concurrency limit per backend
 * from its latency (policy/adaptive.h), as the rules file writes it, and
 * the arguments of a request it reads. */
#include <string.h>

#include "rules_int.h"
#include "rules_load.h"

int rules_parse_adaptive(struct ctx *c, yaml_node_t *map)
{
	struct ys *y = &c->y;
	enum { K_TARGET, K_MIN, K_MAX, K_INITIAL, K_TIMEOUT, K_BACKEND, K_N };
	static const char *const keys[K_N] = {"target", "min", "max", "initial", "timeout",
					      "backend"};
	struct adaptive_config *ac = &c->r->adaptive;
	yaml_node_t *k[K_N], *v[K_N];
	long long n;

	if (ys_map_fields(y, map, "shedding.adaptive", keys, K_N, k, v) < 0)
		return -1;
	if (!v[K_TARGET])
		return ys_fail_missing(y, map, "shedding.adaptive", "target",
				       " (the latency above which the limit falls, such as target: 50ms)");
	if (ys_duration(y, v[K_TARGET], "shedding.adaptive.target", 1000, 60 * LIMIT_US_PER_S,
			"1ms to 60s such as 50ms", &ac->target_us) < 0)
		return -1;
	if (v[K_MIN]) {
		if (ys_int(y, v[K_MIN], "shedding.adaptive.min", 1, ADAPTIVE_LIMIT_MAX, &n) < 0)
			return -1;
		ac->min = (uint32_t)n;
	}
	if (v[K_MAX]) {
		if (ys_int(y, v[K_MAX], "shedding.adaptive.max", 1, ADAPTIVE_LIMIT_MAX, &n) < 0)
			return -1;
		ac->max = (uint32_t)n;
	}
	if (ac->min > ac->max)
		return ys_fail(y, (v[K_MIN] ? v[K_MIN] : v[K_MAX])->start_mark, "shedding.adaptive",
			       "min (%u) is over max (%u)", ac->min, ac->max);
	ac->initial = ac->max;
	if (v[K_INITIAL]) {
		if (ys_int(y, v[K_INITIAL], "shedding.adaptive.initial", ac->min, ac->max, &n) < 0)
			return -1;
		ac->initial = (uint32_t)n;
	}
	if (v[K_TIMEOUT] &&
	    ys_duration(y, v[K_TIMEOUT], "shedding.adaptive.timeout", LIMIT_US_PER_S,
			3600 * LIMIT_US_PER_S, "1s to 1h such as 30s", &ac->timeout_us) < 0)
		return -1;
	if (ac->timeout_us <= ac->target_us)
		return ys_fail(y, (v[K_TIMEOUT] ? v[K_TIMEOUT] : v[K_TARGET])->start_mark,
			       "shedding.adaptive.timeout",
			       "the timeout must be longer than the target");
	if (v[K_BACKEND] &&
	    rules_get_name(y, v[K_BACKEND], "shedding.adaptive.backend", ac->backend_arg) < 0)
		return -1;
	ac->set = true;
	return 0;
}

const struct adaptive_config *rules_adaptive(const struct rules *r)
{
	return r->adaptive.set ? &r->adaptive : NULL;
}

bool rules_adaptive_args(const struct rules *r, const struct rules_request *req,
			 const struct spop_data **backend, const struct spop_data **request_id)
{
	const struct spop_data *b = req->position[POS_BACKEND];
	const struct spop_data *id = req->position[POS_REQUEST_ID];

	(void)r;
	if (!b || (b->type != SPOP_T_STR && b->type != SPOP_T_BIN) || b->u.str.len == 0)
		return false;
	*backend = b;
	*request_id = id && (id->type != SPOP_T_STR || id->u.str.len) ? id : NULL;
	return true;
}
