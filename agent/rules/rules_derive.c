/* SPDX-License-Identifier: Apache-2.0 */
/* rules_derive.c: what every answer needs of loaded rules, computed once
 * when they load (and the hash states again when the process sets its
 * hashing key): each rule's RateLimit-Policy value and policy names, its
 * limits' names and hashes in the shared store, its share of each limit for the local failure
 * mode; the table that finds the arguments the rules use; the identity
 * hash prefixes. Private to the rules module (rules_int.h). */
#include "rules_int.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "rlheader.h"

/* FNV-1a, 64 bits, of the store's space (rules_set_limit_space) and a
 * limit's name. */
static uint64_t lid_hash(const char *space, const char *lid)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (const char *p = space; *p; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ULL;
	for (const char *p = lid; *p; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ULL;
	return h;
}

/* Policy names: the rule's name when it has one limit, else the rule's name
 * and the limit's period ("free-1m"); the loader keeps periods distinct
 * within a rule, so names are unique within the field. */
static void derive_rule(struct rule *r, int agents, const char *space)
{
	/* by enum limit_algo: the algorithm is part of a limit's name, so a
	 * limit that changes algorithm starts fresh */
	static const char algo[] = { 't', 's', 'f', 'l', 'c', 'b' };
	char period[32];
	/* the rate limits, named after the rule alone when there is one */
	size_t nrate = r->nlimits - (r->conc ? 1 : 0) - (r->penalty.ban ? 1 : 0);

	r->policy[0] = '\0';
	r->nown = r->nlimits;
	for (size_t i = 0; i < r->nlimits; i++) {
		struct limit_spec *l = &r->local[i];

		if (r->limits[i].algo == LIMIT_CONCURRENCY) {
			/* no rate: not in RateLimit-Policy */
			snprintf(r->pname[i], sizeof(r->pname[i]), "%s-concurrency", r->name);
		} else if (r->limits[i].algo == LIMIT_BAN) {
			snprintf(r->pname[i], sizeof(r->pname[i]), "%s-ban", r->name);
		} else if (nrate == 1) {
			snprintf(r->pname[i], sizeof(r->pname[i]), "%s", r->name);
		} else {
			limit_format_period(r->limits[i].period_us, period, sizeof(period));
			snprintf(r->pname[i], sizeof(r->pname[i]), "%s-%s", r->name, period);
		}
		_Static_assert(RULES_PNAME_SF_MAX >= RLHEADER_NAME_MAX(RULES_PNAME_MAX - 1) &&
			       RULES_PNAME_SF_MAX <= UINT8_MAX + 1, "a quoted policy name fits");
		r->pname_sf_len[i] = (uint8_t)rlheader_name(r->pname_sf[i], sizeof(r->pname_sf[i]),
							    r->pname[i]);
		if (r->limits[i].algo != LIMIT_CONCURRENCY && r->limits[i].algo != LIMIT_BAN &&
		    rlheader_policy_append(r->policy, sizeof(r->policy), r->pname[i],
					   r->limits[i].quota,
					   limit_ceil_s(r->limits[i].period_us)) < 0) {
			/* keeps the items that fit */
		}
		snprintf(r->lid[i], sizeof(r->lid[i]), "%c%llu/%lld/%llu",
			 algo[r->limits[i].algo <= LIMIT_BAN ? r->limits[i].algo : 0],
			 (unsigned long long)r->limits[i].quota, (long long)r->limits[i].period_us,
			 (unsigned long long)r->limits[i].burst);
		r->lidh[i] = lid_hash(space, r->lid[i]);
		/* The local failure mode shares the limit among the agents; each
		 * keeps at least one request per period. */
		*l = r->limits[i];
		l->quota = r->limits[i].quota / (uint64_t)agents;
		if (l->quota == 0)
			l->quota = 1;
		if (l->burst) {
			l->burst /= (uint64_t)agents;
			if (l->burst == 0)
				l->burst = 1;
		}
	}
}

/* The match conditions of the file: every endpoint's, then every class's. */
static const struct rules_match *match_at(const struct rules *r, size_t i)
{
	return i < r->neps ? &r->ep[i] : &r->classes[i - r->neps].m;
}

/* The names classification reads (enum arg_position), each once in a hash
 * chain. Method, path and host are read only when some condition names
 * them; the cost argument only when there is one. */
static void derive_lookup(struct rules *r)
{
	const char *names[POS_N] = { NULL };
	uint8_t n = 0;

	for (size_t i = 0; i < r->neps + r->nclasses; i++) {
		const struct rules_match *m = match_at(r, i);

		if (m->method.n)
			names[POS_METHOD] = "method";
		if (m->path.n)
			names[POS_PATH] = "path";
		if (m->host.n)
			names[POS_HOST] = "host";
		if (m->nargs)
			r->match_args = true;
	}
	for (size_t i = 0; i < r->nrules; i++) {
		if (r->rule[i].conc)
			names[POS_REQUEST_ID] = RULES_REQUEST_ID;
		if (r->rule[i].has_max_override && r->override_arg[0])
			names[POS_OVERRIDE] = r->override_arg;
	}
	if (r->adaptive.set) {
		names[POS_REQUEST_ID] = RULES_REQUEST_ID;
		names[POS_BACKEND] = r->adaptive.backend_arg;
	}
	names[POS_TIER] = r->tier_arg;
	names[POS_COST] = r->cost_arg[0] ? r->cost_arg : NULL;
	names[POS_IN_USE] = r->shed.in_use_arg;
	names[POS_FREE] = r->shed.free_arg;
	for (size_t k = 0; k < r->idnames.n; k++)
		names[POS_IDENTITY + k] = r->idnames.name[k];
	for (unsigned s = 0; s < POS_N; s++) {
		size_t len;
		unsigned b, j;

		if (!names[s])
			continue;
		len = strlen(names[s]);
		b = arg_bucket(names[s], len);
		for (j = r->bucket[b]; j; j = r->lookup[j - 1].next)
			if (r->lookup[j - 1].len == len && memcmp(r->lookup[j - 1].name, names[s], len) == 0)
				break;
		if (j) {
			r->lookup[j - 1].also |= (uint32_t)(1u << s);
			continue;
		}
		r->lookup[n].name = names[s];
		r->lookup[n].len = (uint8_t)len;
		r->lookup[n].next = r->bucket[b];
		r->lookup[n].position = (uint8_t)s;
		r->lookup[n].also = 0;
		r->bucket[b] = ++n;
	}
}

/* The hash states rules_identity_prefix() hands out, under the secret. */
static void derive_prefixes(struct rules *r)
{
	for (size_t k = 0; k < r->idnames.n; k++)
		identity_prefix_init(&r->id_prefix[k], r->secret, r->idnames.name[k],
				     strlen(r->idnames.name[k]));
	identity_prefix_init(&r->id_prefix[RULES_IDENTITY_MAX], r->secret, IDENTITY_ANONYMOUS,
			     strlen(IDENTITY_ANONYMOUS));
	identity_prefix_init(&r->id_prefix[RULES_IDENTITY_MAX + 1], r->secret, IDENTITY_GLOBAL,
			     strlen(IDENTITY_GLOBAL));
}

/* A rule's layers after its own limits (rules.h): what the store and the
 * answers read of each limit, and the policy of them all. The loader
 * checked that they fit (LIMIT_SET_MAX, RULES_POLICY_MAX is the sum's
 * bound too: an item that would not fit is left out, as for a rule). */
static void derive_stack(struct rule *r)
{
	size_t n = r->nown, len = strlen(r->policy);

	for (size_t p = 0; p < r->nown; p++)
		r->part_of[p] = 0;
	for (size_t p = 0; p < r->nstack; p++) {
		const struct rule *l = r->stack[p];
		size_t plen = strlen(l->policy);

		for (size_t j = 0; j < l->nown && n < LIMIT_SET_MAX; j++, n++) {
			r->limits[n] = l->limits[j];
			r->local[n] = l->local[j];
			r->lidh[n] = l->lidh[j];
			memcpy(r->lid[n], l->lid[j], sizeof(r->lid[n]));
			memcpy(r->pname[n], l->pname[j], sizeof(r->pname[n]));
			memcpy(r->pname_sf[n], l->pname_sf[j], sizeof(r->pname_sf[n]));
			r->pname_sf_len[n] = l->pname_sf_len[j];
			r->part_of[n] = (uint8_t)(p + 1);
		}
		if (plen && len + 2 + plen < sizeof(r->policy)) {
			if (len) {
				memcpy(r->policy + len, ", ", 2);
				len += 2;
			}
			memcpy(r->policy + len, l->policy, plen + 1);
			len += plen;
		}
	}
	r->nlimits = n;
}

/* A penalty's counter: its keys' name. (Counted only when the store
 * decides: a decision made without it counts nothing.) */
static void derive_penalty(struct rule *r, const char *space)
{
	struct rule_penalty *p = &r->penalty;
	char lid[RULES_LID_MAX];

	if (!p->kind)
		return;
	snprintf(lid, sizeof(lid), "p%llu/%lld", (unsigned long long)p->count.quota,
		 (long long)p->count.period_us);
	p->count_lidh = lid_hash(space, lid);
}

void rules_derive(struct rules *r)
{
	int agents = r->settings.has_agents && r->settings.agents > 0 ? r->settings.agents : 1;

	for (size_t i = 0; i < r->nrules; i++) {
		derive_rule(&r->rule[i], agents, r->limit_space);
		derive_penalty(&r->rule[i], r->limit_space);
	}
	for (size_t i = 0; i < r->nrules; i++) {
		struct rule *x = &r->rule[i];

		derive_stack(x);
		x->extras = x->conc || x->penalty.kind || x->has_max_override || x->delay_us ||
			    x->charge;
		x->simple = !x->nstack && !x->conc;
	}
	derive_lookup(r);
	derive_prefixes(r);
	rules_derive_checked(r);
}

int rules_override_spec(const struct rule *rule, const char *s, size_t len,
			struct limit_spec *out)
{
	char buf[64], err[128];

	if (!rule->has_max_override || len >= sizeof(buf))
		return -1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (limit_parse(buf, out, err, sizeof(err)) < 0)
		return -1;
	return rules_override_clamp(rule, out, out);
}

int rules_override_clamp(const struct rule *rule, const struct limit_spec *in,
			 struct limit_spec *out)
{
	const struct limit_spec *m = &rule->max_override;

	if (!rule->has_max_override)
		return -1;
	*out = *in;
	/* above the max in rate (quota / period) or in burst: the max */
	if (out->quota > m->quota ||
	    (unsigned __int128)out->quota * (uint64_t)m->period_us >
		    (unsigned __int128)m->quota * (uint64_t)out->period_us)
		*out = *m;
	out->algo = LIMIT_TOKEN_BUCKET;
	out->burst = 0;
	return 0;
}

/* A derived rule and the holds on it (rules_override). The rule comes
 * first: what rules_override() hands out is the block's address. */
struct derived {
	struct rule rule;
	atomic_uint holds;
};

static struct derived *derived_of(const struct rule *rule)
{
	return (struct derived *)(uintptr_t)rule;
}

/* overrides this process could not apply, whatever the rules */
static atomic_uint_fast64_t ov_refused;

static unsigned ov_hash(unsigned index, const struct limit_spec *l)
{
	uint64_t h = (index + 1) * 0x9e3779b97f4a7c15ULL ^ l->quota * 0xbf58476d1ce4e5b9ULL ^
		     (uint64_t)l->period_us * 0x94d049bb133111ebULL;

	return (unsigned)((h ^ (h >> 31)) & (2 * RULES_OVERRIDES_MAX - 1));
}

static bool ov_same(const struct rule *c, unsigned index, const struct limit_spec *l)
{
	return c->index == index && c->limits[0].quota == l->quota &&
	       c->limits[0].period_us == l->period_us;
}

/* The cell of (index, l): where it is, or the empty cell where it
 * would go. */
static unsigned ov_find(const struct rules *r, unsigned index, const struct limit_spec *l)
{
	unsigned i;

	for (i = ov_hash(index, l); r->ov_cell[i]; i = (i + 1) & (2 * RULES_OVERRIDES_MAX - 1))
		if (ov_same(r->ov[r->ov_cell[i] - 1], index, l))
			break;
	return i;
}

/* Under the lock, the table full: frees the derived rules nothing holds
 * (a hold is taken under the lock, or by a holder of one already, so
 * none can come back) and indexes the others again. Returns how many
 * went. */
static size_t ov_reclaim(struct rules *r)
{
	size_t kept = 0, n = r->nov;

	for (size_t i = 0; i < n; i++) {
		struct derived *d = derived_of(r->ov[i]);

		if (atomic_load_explicit(&d->holds, memory_order_acquire) == 0)
			xfree(d);
		else
			r->ov[kept++] = &d->rule;
	}
	if (kept == n)
		return 0;
	/* before any freed address can be handed out again */
	atomic_fetch_add_explicit(&r->ov_epoch, 1, memory_order_release);
	r->nov = kept;
	memset(r->ov_cell, 0, sizeof(r->ov_cell));
	for (size_t i = 0; i < kept; i++)
		r->ov_cell[ov_find(r, r->ov[i]->index, &r->ov[i]->limits[0])] = (uint16_t)(i + 1);
	return n - kept;
}

const struct rule *rules_override(struct rules *r, const struct rule *base,
				  const struct limit_spec *ov)
{
	int agents = r->settings.has_agents && r->settings.agents > 0 ? r->settings.agents : 1;
	struct derived *d = NULL;
	struct rule *c = NULL;
	unsigned i;
	size_t n = 0;

	pthread_mutex_lock(&r->ov_lock);
	i = ov_find(r, base->index, ov);
	if (r->ov_cell[i]) {
		c = r->ov[r->ov_cell[i] - 1];
		atomic_fetch_add_explicit(&derived_of(c)->holds, 1, memory_order_relaxed);
		goto out;
	}
	if (r->nov == RULES_OVERRIDES_MAX) {
		if (!ov_reclaim(r))
			goto out;
		i = ov_find(r, base->index, ov);
	}
	if (!(d = xmalloc(sizeof(*d))))
		goto out;
	c = &d->rule;
	atomic_init(&d->holds, 1);
	*c = *base;
	c->derived = true;
	/* the override, then the rule's own limits that are not rates (a
	 * ban, then a concurrency limit, in their order), then the layers */
	c->limits[n++] = *ov;
	c->conc = 0;
	c->penalty.ban = 0;
	for (size_t j = 0; j < base->nown; j++) {
		if (base->limits[j].algo < LIMIT_CONCURRENCY)
			continue;
		c->limits[n++] = base->limits[j];
		if (base->limits[j].algo == LIMIT_CONCURRENCY)
			c->conc = (uint8_t)n;
		else
			c->penalty.ban = (uint8_t)n;
	}
	c->nlimits = n;
	derive_rule(c, agents, r->limit_space);
	derive_penalty(c, r->limit_space);
	derive_stack(c);
	c->simple = !c->nstack && !c->conc;
	c->policy_len = (uint16_t)strlen(c->policy);
	r->ov[r->nov++] = c;
	r->ov_cell[i] = (uint16_t)r->nov;
out:
	pthread_mutex_unlock(&r->ov_lock);
	if (!c)
		atomic_fetch_add_explicit(&ov_refused, 1, memory_order_relaxed);
	return c;
}

void rules_rule_hold(const struct rule *rule)
{
	if (rule && rule->derived)
		atomic_fetch_add_explicit(&derived_of(rule)->holds, 1, memory_order_relaxed);
}

void rules_rule_unhold(const struct rule *rule)
{
	/* release: what the holder did with the rule happens before its
	 * free (ov_reclaim reads the count with acquire) */
	if (rule && rule->derived)
		atomic_fetch_sub_explicit(&derived_of(rule)->holds, 1, memory_order_release);
}

uint64_t rules_override_epoch(const struct rules *r)
{
	return atomic_load_explicit(&r->ov_epoch, memory_order_acquire);
}

uint64_t rules_override_refused(void)
{
	return atomic_load_explicit(&ov_refused, memory_order_relaxed);
}

void rules_derived_free(struct rules *r)
{
	for (size_t i = 0; i < r->nov; i++)
		xfree(derived_of(r->ov[i]));
	r->nov = 0;
}

void rules_set_secret(struct rules *r, const uint8_t key[16])
{
	memcpy(r->secret, key, 16);
	derive_prefixes(r);
}

void rules_set_limit_space(struct rules *r, const char *space)
{
	snprintf(r->limit_space, sizeof(r->limit_space), "%s", space);
	/* every limit, stacked ones too, keeps its name (lid) */
	for (size_t i = 0; i < r->nrules; i++) {
		struct rule *x = &r->rule[i];

		for (size_t j = 0; j < x->nlimits; j++)
			x->lidh[j] = lid_hash(r->limit_space, x->lid[j]);
		derive_penalty(x, r->limit_space);
	}
}
