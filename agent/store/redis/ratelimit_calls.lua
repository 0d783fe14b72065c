--[[ ratelimit_calls.lua: the second part of the decision library (the
first is ratelimit.lua, whose header describes the functions, their
arguments and replies): reading the call, deciding its requests in turn
with the evaluations of the first part, writing what they took, and the
refund. The build and the tests load the two parts as one text, this one
after the first, so it uses the first part's locals. ]]

local function now_us()
	local t = rcall('TIME')
	return t[1] * 1000000 + t[2]
end

-- Arrays kept from call to call, so that a call makes no table of its own
-- (a table that grows to a batch's size costs Redis more than deciding
-- the batch): entries past what a call uses are ignored, and the entries
-- of key positions are valid when their generation is the call's.
local gen = 0
local rbuf, out, valv, oldv, oldn, parts = {}, {}, {}, {}, {}, {}
local sv = {}            -- by key position: its value, false when absent
local wgen, wneed, wbefore, wnum, wlim, wpos = {}, {}, {}, {}, {}, {}
local rgen, rhere, rname, rpos = {}, {}, {}, {} -- Cluster: see read_client()
local kmap = {}          -- by position: its key's index (with a keymap)
-- Packed buckets, by position: the call that read it, its set and its
-- member (see "Packed buckets").
local pgen, phash, pfield = {}, {}, {}
local last_u, last_us = -1, '' -- the last expiry written, and its digits
local last_v, last_vs = -1, '' -- the last new value written as text, and its digits
-- the last reply of a request of one limit, and what it says (see run())
local rep, rep1, rep2, rep3, rep_all = '', nil, nil, nil, nil
local mset = {}          -- MSET's arguments: name, value, ...

-- Reads keys 1 .. nk (arguments k0 + 1 ..) into sv, one MGET per MGET_MAX.
local function read_all(args, k0, nk)
	if nk <= MGET_MAX then
		sv = rcall('MGET', unpack(args, k0 + 1, k0 + nk))
		return
	end
	for a = 1, nk, MGET_MAX do
		local b = a + MGET_MAX - 1
		if b > nk then
			b = nk
		end
		local v = rcall('MGET', unpack(args, k0 + a, k0 + b))
		for i = a, b do
			sv[i] = v[i - a + 1]
		end
	end
end

-- One key's value (false when absent), or a packed bucket's with its set's
-- name and its member; nil when it cannot be read: on one server an error
-- is raised; in a Cluster it is taken for a key this node no longer serves
-- (moved), which has nothing to give back.
local function get_here(name, cluster, member)
	local v
	if member then
		v = rpcall('ZSCORE', name, member)
	else
		v = rpcall('GET', name)
	end
	if type(v) == 'table' and v.err then
		if not cluster then
			error(v)
		end
		return nil
	end
	return v
end

-- Reads the keys rname[a .. b], of one slot, into sv at positions
-- rpos[a .. b], and marks them read in this call; not read, and not here,
-- when their slot is not this node's. Any other error is raised.
local function read_slot(rname, rpos, a, b, g0)
	local v = rpcall('MGET', unpack(rname, a, b))
	local e = v.err
	local here = true
	if e then
		if not (find(e, 'non local key', 1, true) or
		    find(e, 'not stored on this node', 1, true) or
		    find(e, 'cluster is down', 1, true)) then
			error(v)
		end
		here = false
	end
	for i = a, b do
		local p = rpos[i]
		rgen[p], rhere[p] = g0, here
		if here then
			sv[p] = v[i - a + 1]
		end
	end
end

-- A Cluster request's keys a .. b, of the limits of rule: true when all of
-- them are this node's (each read into sv on its first use in the call,
-- so that a value this call has changed is never read again), false when
-- any is not (its slot is served elsewhere, moving, or the cluster is
-- down: then it is neither read nor written here). A packed bucket is
-- asked for by its set's name, the key that exists (or has moved), and
-- read by read_packed(). Any other error is raised as Redis gave it.
local function read_client(args, k0, a, b, g0, mapped, rule)
	local n = 0
	for x = a, b do
		local p = x
		if mapped then
			p = kmap[x]
		end
		if rgen[p] ~= g0 then
			-- (a key named twice in the request: read once)
			rgen[p], rhere[p] = g0, false
			n = n + 1
			rname[n], rpos[n] = args[k0 + p], p
			if rule[x - a + 1][14] then
				rname[n] = sub(rname[n], 1, -PACKED_MEMBER_LEN - 1)
			end
		end
	end
	if n > 0 and not mapped then
		-- (the agent names a client's keys together: they share a slot)
		read_slot(rname, rpos, 1, n, g0)
	elseif n > 0 then
		-- a request's keys of several clients: one MGET per slot (its
		-- hash tag), as Redis reads no command across slots
		local a = 1
		while a <= n do
			local tag = match(rname[a], '^{[^}]*}')
			local b = a
			for i = a + 1, n do
				if tag and sub(rname[i], 1, #tag) == tag then
					b = b + 1
					rname[b], rname[i] = rname[i], rname[b]
					rpos[b], rpos[i] = rpos[i], rpos[b]
				end
			end
			read_slot(rname, rpos, a, b, g0)
			a = b + 1
		end
	end
	for x = a, b do
		local p = x
		if mapped then
			p = kmap[x]
		end
		if not rhere[p] then
			return false
		end
	end
	return true
end

-- A packed bucket's name as its set's name and its member.
local function packed_parts(name)
	return sub(name, 1, -PACKED_MEMBER_LEN - 1), sub(name, -PACKED_MEMBER_LEN)
end

-- Reads the packed bucket at position p, named `name`, into sv[p] (its
-- score as Redis prints it, false when absent). On a Cluster the node
-- serves its slot (read_client() has asked for its set). False when the
-- name is not a packed bucket's.
local function read_packed(name, p, g0)
	local len = #name
	if len < PACKED_NAME_MIN or len > PACKED_NAME_MAX then
		return false
	end
	-- (packed_parts(), inline: a Lua call per bucket read costs Redis more
	-- than the line it saves)
	local h, f = sub(name, 1, len - PACKED_MEMBER_LEN), sub(name, len - PACKED_MEMBER_LEN + 1)
	pgen[p], phash[p], pfield[p] = g0, h, f
	sv[p] = rcall('ZSCORE', h, f)
	return true
end

-- The expiry, in milliseconds, of a key needed until need_us whose limit
-- has grid g (see "Expiry"): the need rounded up to the millisecond, then
-- to a multiple of g, which is the need rounded up to a multiple of g's
-- microseconds at once (nested ceilings of integer divisions).
local function expiry_ms(need, g)
	local gu = g * 1000
	local r = need % gu
	if r > 0 then
		need = need + gu - r
	end
	return need / 1000
end

-- Writes x, the integer state of the packed bucket at position p of limit
-- l, whose value before the call was needed until `before` (0: none of
-- its shape), and keeps its set's expiry past every member's need on the
-- limit's grid (see "Packed buckets"): moved on (GT) when this bucket's
-- need passes the grid's step of the value it replaces; for a new member,
-- set when the set has none or an earlier one, and the members whose
-- bucket is full are removed.
local function write_packed(p, x, l, now, before)
	local h, n, g = phash[p], l[8], l[14]
	-- TAT = EPOCH + x / n: its need, and the expiry that covers it
	local q, r = divmod(x, n)
	local e = expiry_ms(EPOCH + q + (r > 0 and 1 or 0), g)
	local added = rcall('ZADD', h, fmt('%d', x), pfield[p])
	if before > 0 then
		-- (the set has an expiry at or past the value's before)
		if e > expiry_ms(before, g) then
			rcall('PEXPIREAT', h, fmt('%d', e), 'GT')
		end
		return
	end
	if added > 0 then
		rcall('ZREMRANGEBYSCORE', h, '-inf', fmt('%d', (now - EPOCH) * n))
	end
	if rcall('PEXPIRETIME', h) < e then
		rcall('PEXPIREAT', h, fmt('%d', e))
	end
end

local function fail(msg)
	return error_reply('ERR rl decide: ' .. msg)
end

-- The error of request i, whose packed bucket's name has another length.
local function bad_packed_name(i)
	return fail(fmt('request %d: a packed bucket\'s key must be %d or %d bytes', i,
	    PACKED_NAME_MIN, PACKED_NAME_MAX))
end

-- The reply is msgpack made with struct.pack, one string per request: its
-- numbers as float64 (0xcb and 8 bytes, exact below 2^53), the rest
-- fixints and array headers. One C call per request costs Redis less than
-- choosing each integer's shortest form in Lua.
local fmts = {} -- fmts[nl]: the format of a request of nl limits
local pa = {}   -- the values of one request, for unpack()

local function request_format(nl)
	local f = fmts[nl]
	if not f then
		f = nl < 16 and '>BBBB' or '>BBBBH'
		for _ = 1, nl do
			f = f .. 'BBdBdBd'
		end
		fmts[nl] = f
	end
	return f
end

-- One request's reply, [allowed, decider, [[remaining, retry_after_us,
-- reset_us], ...]], from vals (out: 3 per limit), or zeros without vals.
local function request_reply(allowed, best, nl, vals)
	if nl == 1 and vals then
		-- (fewer, wider items: 0x93 allowed decider 0x91 as one integer,
		-- then 0x93 0xcb)
		return spack('>I4HdBdBd', 2466250897 + allowed * 65536 + best * 256, 37835, vals[1],
		    0xcb, vals[2], 0xcb, vals[3])
	end
	local n = 4
	pa[1], pa[2], pa[3] = 0x93, allowed, best
	if nl < 16 then
		pa[4] = 0x90 + nl
	else
		pa[4], pa[5], n = 0xdc, nl, 5
	end
	for j = 1, nl do
		local x, y, z = 0, 0, 0
		if vals then
			x, y, z = vals[3 * j - 2], vals[3 * j - 1], vals[3 * j]
		end
		pa[n + 1], pa[n + 2], pa[n + 3], pa[n + 4] = 0x93, 0xcb, x, 0xcb
		pa[n + 5], pa[n + 6], pa[n + 7] = y, 0xcb, z
		n = n + 7
	end
	return spack(request_format(nl), unpack(pa, 1, n))
end

-- The reply of a decided request of one limit (its decider is 1), from
-- its numbers and whether it was allowed: request_reply()'s first case,
-- or the last such reply again when it says the same (the clients of a
-- limit whose bucket was full answer alike within a call: made once for
-- them).
local function reply_one(o1, o2, o3, all)
	if o1 ~= rep1 or o2 ~= rep2 or o3 ~= rep3 or all ~= rep_all then
		rep1, rep2, rep3, rep_all = o1, o2, o3, all
		rep = spack('>I4HdBdBd', all and 2466316689 or 2466251153, 37835, o1, 0xcb, o2,
		    0xcb, o3)
	end
	return rep
end

-- The requests of args (from argument a0 + 1 on) and their rules (in
-- rbuf), and the keymap (in kmap): the requests' bytes, their count, the
-- number of rules, the index k0 of the argument before the first key, the
-- number of key positions, whether they are mapped, the ids and the size
-- of a request's record (14 with leases, else 10); or nil and a message.
-- Leases are taken only where `leases` allows them. The requests
-- themselves are checked as they are decided.
local function parse(args, a0, leases)
	local req = args[a0 + 1]
	local len = req and #req
	local h, l = 0, 0
	if len and len >= 2 then
		h, l = byte(req, 1, 2)
	end
	local mapped = h >= 128
	if mapped then
		h = h - 128
	end
	local with_ids = h >= 64
	if with_ids then
		h = h - 64
	end
	local rs = 10
	if h >= 32 then
		if not leases then
			return nil, 'requests: leases are taken only by a decide'
		end
		h, rs = h - 32, 14
	end
	if not len or len < 2 + rs or len > 2 + rs * MAX_REQS or len % rs ~= 2 then
		return nil, fmt('requests: need 2 + %d * n bytes, 1 <= n <= %d', rs, MAX_REQS)
	end
	local m = (len - 2) / rs
	local nr = h * 256 + l
	local k0 = a0 + 1 + nr
	if mapped then
		k0 = k0 + 1
	end
	local ids
	if with_ids then
		k0 = k0 + 1
		ids = args[k0]
		if not ids or #ids ~= 8 * m then
			return nil, 'ids: need 8 bytes per request'
		end
	end
	if nr < 1 or nr > MAX_RULES or #args < k0 then
		return nil, fmt('requests: nrules must be in 1..%d with a rule for each', MAX_RULES)
	end
	for r = 1, nr do
		local rule, e = rule_of(args[a0 + 1 + r])
		if not rule then
			return nil, fmt('rule %d: %s', r, e)
		end
		rbuf[r] = rule
	end
	local nk = #args - k0
	if not mapped then
		return req, m, nr, k0, nk, false, ids, rs
	end
	local map = args[a0 + 2 + nr]
	local np = #map / 4
	if np < 1 or np % 1 ~= 0 or np > MAX_REQS * MAX_LIMITS then
		return nil, 'keymap: need 4 bytes per key position'
	end
	for p = 1, np do
		local b1, b2, b3, b4 = byte(map, 4 * p - 3, 4 * p)
		local ki = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
		if ki < 1 or ki > nk then
			return nil, fmt('keymap: position %d must name a key in 1..%d', p, nk)
		end
		kmap[p] = ki
	end
	return req, m, nr, k0, np, true, ids, rs
end

-- Request i of req (records of rs bytes): its first key position, cost
-- and rule; or nil and what is wrong with it.
local function request_at(req, i, nr, nk, rs)
	local o = rs * (i - 1)
	local k1, k2, k3, k4, c1, c2, c3, c4, r1, r2 = byte(req, o + 3, o + 12)
	local ki = ((k1 * 256 + k2) * 256 + k3) * 256 + k4
	local cost = ((c1 * 256 + c2) * 256 + c3) * 256 + c4
	local ri = r1 * 256 + r2
	-- (rbuf holds rules of earlier calls past nr)
	local rule = rbuf[ri]
	if not rule or ri > nr or cost < 1 or ki < 1 or ki + #rule - 1 > nk then
		if not rule or ri > nr then
			return nil, fmt('request %d: rule must be in 1..%d', i, nr)
		elseif cost < 1 then
			return nil, fmt('request %d: cost must be at least 1', i)
		end
		return nil, fmt('request %d: first_key must leave a key per limit among the %d keys',
		    i, nk)
	end
	return ki, cost, rule
end

-- A lease's values: by limit of the request being decided, its value at
-- cost + extra and until when that value is needed (see lease_take()).
local lval, lneed, lp = {}, {}, {}

-- The extra tokens that a request allowed at `cost` (its results in out)
-- takes for a lease of at most k (see "Leases"): 0 when a limit of its
-- rule is not a token bucket or a window, or none is left; else the
-- extra, with the values of its limits evaluated at cost + extra (from
-- the values in sv, those the evaluation at cost read) in lval and their
-- needs in lneed.
local function lease_take(rule, nl, k, cost, now, k1, mapped)
	local extra = k
	for j = 1, nl do
		if rule[j][1] > 2 then
			return 0
		end
		local left = out[3 * j - 2]
		if left < extra then
			extra = left
		end
	end
	if extra <= 0 then
		return 0
	end
	local c = cost + extra
	local _
	for j = 1, nl do
		local l = rule[j]
		local p = k1 + j
		if mapped then
			p = kmap[p]
		end
		local algo, v = l[1], sv[p]
		local ok, reset, val
		if algo == 0 then
			ok, _, _, reset, val = eval_token(v, now, c, l)
		elseif algo == 1 then
			ok, _, _, reset, val = eval_sliding(v, now, c, l[2], l[3])
		else
			ok, _, _, reset, val = eval_fixed(v, now, c, l[2], l[3])
		end
		-- (every limit has that many left: this cannot refuse)
		if not ok or l[14] and type(val) ~= 'number' then
			return 0
		end
		lval[j], lneed[j] = val, now + reset
	end
	return extra
end

-- The reply r of a request that asked for a lease, with its fourth element
-- [extra, v_1 .. v_nl]: v_j what this request left in limit j's key when
-- it took an extra and the limit is a token bucket, as GET reads it (an
-- integer as its digits), else nil.
local function lease_reply(r, extra, rule, nl)
	lp[1], lp[2] = '\148', sub(r, 2)
	if nl < 15 then
		lp[3] = spack('>BBd', 0x91 + nl, 0xcb, extra)
	else
		lp[3] = spack('>BHBd', 0xdc, nl + 1, 0xcb, extra)
	end
	for j = 1, nl do
		local v = extra > 0 and rule[j][1] == 0 and lval[j]
		if not v then
			lp[3 + j] = '\192'
		else
			if type(v) == 'number' then
				v = fmt('%d', v)
			end
			-- (fixstr below 32 bytes, else str 8: a value is at most 33)
			if #v < 32 then
				lp[3 + j] = spack('>B', 0xa0 + #v) .. v
			else
				lp[3 + j] = spack('>BB', 0xd9, #v) .. v
			end
		end
	end
	return concat(lp, '', 1, 3 + nl)
end

-- Decides every request of args in order and writes what they took.
local function run(args, cluster)
	local req, m, nr, k0, nk, mapped, ids, rs = parse(args, 0, true)
	if not req then
		return fail(m)
	end
	local now = now_us()
	gen = gen + 1
	local g0 = gen
	local plain = false
	for r = 1, nr do
		if rbuf[r].plain then
			plain = true
		end
	end
	if not cluster and nk > 0 and plain then
		-- (mapped: every key, each once, whatever the positions; a packed
		-- bucket's name reads as absent, and it is read on its first use)
		read_all(args, k0, mapped and #args - k0 or nk)
	end
	if m < 16 then
		parts[1] = spack('>BBdB', 0x92, 0xcb, now, 0x90 + m)
	else
		parts[1] = spack('>BBdBH', 0x92, 0xcb, now, 0xdc, m)
	end
	local nw = 0
	local ok
	for i = 1, m do
		-- (request_at(), inline: a Lua call per request costs Redis more
		-- than the lines it saves)
		local o = rs * (i - 1)
		local k1, k2, k3, k4, c1, c2, c3, c4, r1, r2 = byte(req, o + 3, o + 12)
		local ki = ((k1 * 256 + k2) * 256 + k3) * 256 + k4
		local cost = ((c1 * 256 + c2) * 256 + c3) * 256 + c4
		local ri = r1 * 256 + r2
		local rule = rbuf[ri]
		if not rule or ri > nr or cost < 1 or ki < 1 or ki + #rule - 1 > nk then
			-- nothing is written before the last request is checked
			local _, e = request_at(req, i, nr, nk, rs)
			return fail(e)
		end
		local lease, extra = 0, 0
		if rs == 14 then
			local e1, e2, e3, e4 = byte(req, o + 13, o + 16)
			lease = ((e1 * 256 + e2) * 256 + e3) * 256 + e4
		end
		local nl = #rule
		local here = true
		if cluster then
			here = read_client(args, k0, ki, ki + nl - 1, g0, mapped, rule)
		end
		if not here then
			-- not this node's keys: nothing taken, nothing computed
			parts[i + 1] = request_reply(2, 0, nl, nil)
		elseif lease == 0 and rule.one_bucket then
			-- The common request, of one token bucket kept in a key and
			-- no lease: what the general case below does for it, without
			-- its arrays (a table's slot costs Redis more than a local).
			local l, p = rule[1], ki
			if mapped then
				p = kmap[p]
			end
			-- (val: the new value, or a refusal's of a bucket whose clock
			-- stepped back, see "Clock steps")
			local ok, o1, o2, o3, val, old, x = eval_token(sv[p], now, cost, l)
			if val then
				if wgen[p] ~= g0 then
					wgen[p] = g0
					nw = nw + 1
					wpos[nw] = p
					wbefore[p], wnum[p], wlim[p] = old, x, l
				end
				sv[p] = val
				wneed[p] = now + o3
			end
			parts[i + 1] = reply_one(o1, o2, o3, ok)
		else
			local all = true
			local k = ki - 1
			for j = 1, nl do
				local l = rule[j]
				local p = k + j
				if mapped then
					p = kmap[p]
				end
				if l[14] and pgen[p] ~= g0 and not read_packed(args[k0 + p], p, g0) then
					return bad_packed_name(i)
				end
				local algo, v = l[1], sv[p]
				local at = 3 * j
				local val
				if algo == 0 then
					ok, out[at - 2], out[at - 1], out[at], val, oldv[j], oldn[j] =
					    eval_token(v, now, cost, l)
				elseif algo == 1 then
					ok, out[at - 2], out[at - 1], out[at], val, oldv[j] =
					    eval_sliding(v, now, cost, l[2], l[3])
				elseif algo == 3 then
					ok, out[at - 2], out[at - 1], out[at], val, oldv[j] =
					    eval_log(v, now, cost, l[2], l[3])
				elseif algo == 5 then
					ok, out[at - 2], out[at - 1], out[at], val = eval_ban(v, now, l[3])
					oldv[j] = 0
				elseif algo == 4 then
					local rid = ids and sub(ids, 8 * i - 7, 8 * i)
					if rid == NO_ID then
						rid = nil
					end
					ok, out[at - 2], out[at - 1], out[at], val, oldv[j] =
					    eval_concurrency(v, now, rid, l[2], l[3])
				else
					ok, out[at - 2], out[at - 1], out[at], val, oldv[j] =
					    eval_fixed(v, now, cost, l[2], l[3])
				end
				if algo ~= 0 then
					oldn[j] = nil
				end
				if l[14] and val and type(val) ~= 'number' then
					return fail('a packed bucket\'s state must be an integer below 2^53')
				end
				-- (a limit that allows has a new value; one that refuses
				-- none, unless its clock stepped back: see "Clock steps")
				valv[j] = val
				if not ok then
					all = false
				end
			end
			local best = 1
			if all then
				if lease > 0 then
					-- (before the writes below: from the values read)
					extra = lease_take(rule, nl, lease, cost, now, k, mapped)
				end
				local low = out[1]
				for j = 1, nl do
					local p = k + j
					if mapped then
						p = kmap[p]
					end
					-- (a ban that allows has nothing to write)
					if valv[j] ~= NOWRITE and wgen[p] ~= g0 then
						wgen[p] = g0
						nw = nw + 1
						wpos[nw] = p
						wbefore[p], wnum[p], wlim[p] = oldv[j], oldn[j], rule[j]
					end
					if valv[j] ~= NOWRITE then
						sv[p] = valv[j]
						wneed[p] = now + out[3 * j]
					end
					if out[3 * j - 2] < low then
						best, low = j, out[3 * j - 2]
					end
				end
			else
				-- (a refusing limit's retry is positive, an allowing one's
				-- never is)
				local most = 0
				for j = 1, nl do
					local r = out[3 * j - 1]
					if r > 0 then
						if r > most then
							best, most = j, r
						end
						if valv[j] then
							-- a refusing limit whose key is written as it
							-- read (see "Clock steps")
							local p = k + j
							if mapped then
								p = kmap[p]
							end
							if wgen[p] ~= g0 then
								wgen[p] = g0
								nw = nw + 1
								wpos[nw] = p
								wbefore[p], wnum[p], wlim[p] = oldv[j], oldn[j], rule[j]
							end
							sv[p] = valv[j]
							wneed[p] = now + out[3 * j]
						end
					end
				end
			end
			if nl == 1 then
				parts[i + 1] = reply_one(out[1], out[2], out[3], all)
			else
				parts[i + 1] = request_reply(all and 1 or 0, best, nl, out)
			end
		end
		if lease > 0 then
			if extra > 0 then
				-- the keys keep the lease's values (the reply is the
				-- request's own, see "Leases")
				local k = ki - 1
				for j = 1, nl do
					local p = k + j
					if mapped then
						p = kmap[p]
					end
					sv[p], wneed[p] = lval[j], lneed[j]
				end
			end
			parts[i + 1] = lease_reply(parts[i + 1], extra, rule, nl)
		end
	end
	-- Expiry: each key written once, with its last value. It expires at
	-- its need rounded up to the millisecond, then up to a multiple of its
	-- limit's grid; when that is the expiry it already has (the value it
	-- held, read as its shape says, gives it), the key keeps it (KEEPTTL
	-- costs Redis half of setting an expiry). On one server, the keys
	-- without an expiry go in one MSET at the end (see "Cost").
	local nm = 0
	for w = 1, nw do
		local p = wpos[w]
		local l = wlim[p]
		if l[14] then
			write_packed(p, sv[p], l, now, wbefore[p])
		elseif l[15] and not cluster then
			local val = sv[p]
			if type(val) == 'number' then
				-- (clients with a full bucket, of one limit and cost,
				-- share their new value within a call)
				if val ~= last_v then
					last_v, last_vs = val, fmt('%d', val)
				end
				val = last_vs
			end
			mset[nm + 1], mset[nm + 2] = args[k0 + p], val
			nm = nm + 2
		else
			-- The key's expiry: o, the one it has, and u, the one its new
			-- value needs; a key without one (see "Keys without an
			-- expiry") is written as one whose expiry stays.
			local o, u = 0, 0
			if not l[15] then
				-- (expiry_ms(), inline, twice, and compared in
				-- microseconds: the limit's record keeps g * 1000)
				local g = l[16]
				u = wneed[p]
				local r = u % g
				if r > 0 then
					u = u + g - r
				end
				o = wbefore[p]
				r = o % g
				if r > 0 then
					o = o + g - r
				end
			end
			local val, name = sv[p], args[k0 + p]
			local num = type(val) == 'number'
			-- Numbers go to Redis as text made here: given a number, Redis
			-- prints it with "%.17g", which costs it several times more.
			if o ~= u then
				-- (a whole number of milliseconds below 10^14 converts to
				-- its digits exactly; keys of a call often share one)
				u = u / 1000
				if u ~= last_u then
					last_u, last_us = u, fmt('%d', u)
				end
				if num then
					if val ~= last_v then
						last_v, last_vs = val, fmt('%d', val)
					end
					val = last_vs
				end
				rcall('SET', name, val, 'PXAT', last_us)
			else
				-- An integer state over an integer state: INCRBY keeps the
				-- expiry, costs Redis less than SET and needs no text. Its
				-- reply is the new value, unless the old one was not an
				-- integer as Redis reads them ("1e3", " 7": an error) or the
				-- sum is not exact: then SET.
				local d = num and wnum[p] and val - wnum[p]
				if not d or d >= 1e14 or rpcall('INCRBY', name, fmt('%d', d)) ~= val then
					rcall('SET', name, num and fmt('%d', val) or val, 'KEEPTTL')
				end
			end
		end
	end
	for a = 1, nm, MGET_MAX do
		local b = a + MGET_MAX - 1
		if b > nm then
			b = nm
		end
		rcall('MSET', unpack(mset, a, b))
	end
	return concat(parts, '', 1, m + 1)
end

-- The value of the packed bucket named `name` (false when absent), its
-- hash and field kept at position p; nil as get_here() gives it.
local function get_packed(name, p, cluster)
	local h, f = packed_parts(name)
	phash[p], pfield[p] = h, f
	return get_here(h, cluster, f)
end

-- A log's value v without `cost` of its entry at time `take` (see
-- "Refund"): the value left ('' for none), or nil when v has no entry
-- there of that weight.
local function log_without(v, take, cost)
	local n = (#v - 9) / 8
	if n < 1 or n % 1 ~= 0 then
		return nil
	end
	local b, z = sunpack('>I7I2', v)
	local o = take - b
	-- the entry at offset o, by bisection (times in order)
	local lo, hi = 1, n
	while lo < hi do
		local mid = floor((lo + hi) / 2)
		if sunpack('>I6', v, 2 + 8 * mid) < o then
			lo = mid + 1
		else
			hi = mid
		end
	end
	local t, c = sunpack('>I6I2', v, 2 + 8 * lo)
	local before = z
	if lo > 1 then
		local _
		_, before = sunpack('>I6I2', v, 2 + 8 * (lo - 1))
	end
	local w = (c - before) % TWO16
	if t ~= o or w < cost then
		return nil
	end
	-- the entry, lighter or gone; the running totals after it, each less
	-- cost (mod 2^16, as they are kept)
	local t1 = { sub(v, 1, 9 + 8 * (lo - 1)) }
	if w > cost then
		t1[2] = spack('>I6I2', t, (c - cost) % TWO16)
	end
	for i = lo + 1, n do
		local ti, ci = sunpack('>I6I2', v, 2 + 8 * i)
		t1[#t1 + 1] = spack('>I6I2', ti, (ci - cost) % TWO16)
	end
	local left = concat(t1)
	if #left == 9 then
		return ''
	end
	return left
end

-- Gives back `cost` to the key `name` of limit l, holding v, that a
-- request took at `take` (see "Refund"); a packed bucket's at position pos
-- (see get_packed()). A token bucket gets cost * T less what `owed`
-- holds, {q, r}: q + r/n microseconds of the time since the take yet to
-- be deducted from what goes back to this key in this call (nil: nothing,
-- the key is known untouched since), and owed keeps what is left of it.
-- A log loses the request's entry, a limit of requests in flight the
-- place of request id (nil: none) that the take made. Returns 1 when it
-- changed the key, else 0.
local function refund_key(name, v, l, cost, take, now, pos, owed, id)
	local algo, period = l[1], l[3]
	if algo >= 3 then
		local left
		if algo == 3 then
			left = log_without(v, take, cost)
		elseif algo == 4 and id then
			-- the place the take made: its id, ending period after the take
			local gone
			left, gone = concurrency_without(v, id .. spack('>d', take + period))
			if not gone then
				left = nil
			end
		end
		if not left then
			return 0
		elseif left == '' then
			rcall('DEL', name)
		else
			rcall('SET', name, left, 'KEEPTTL')
		end
		return 1
	end
	if algo == 0 then
		local p, n = l[7], l[8]
		local a, r
		local x = tonumber(v)
		if x then
			if x >= 0 and x < TWO53 and x % 1 == 0 then
				local q
				q, r = divmod(x, n)
				a = EPOCH + q
			end
		else
			local plus = find(v, '+', 1, true)
			if plus then
				a, r = tonumber(sub(v, 1, plus - 1)), tonumber(sub(v, plus + 1))
			end
		end
		if not (a and r and a < TWO54 and a % 1 == 0 and r >= 0 and r < n and r % 1 == 0) then
			return 0
		end
		local iq, ir = muldiv(cost, p, n)
		if owed then
			-- less what time may have absorbed of the take's reservation
			-- (see "Refund"), once per key and call
			iq, ir = iq - owed[1], ir - owed[2]
			if ir < 0 then
				iq, ir = iq - 1, ir + n
			end
			if iq < 0 then
				owed[1], owed[2] = -iq - (ir > 0 and 1 or 0), ir > 0 and n - ir or 0
				return 0
			end
			owed[1], owed[2] = 0, 0
			if iq == 0 and ir == 0 then
				return 0
			end
		end
		a, r = a - iq, r - ir
		if r < 0 then
			a, r = a - 1, r + n
		end
		local packed = l[14]
		if a < now or (a == now and r == 0) then
			-- full: as good as absent
			if packed then
				rcall('ZREM', phash[pos], pfield[pos])
			else
				rcall('DEL', name)
			end
			return 1
		end
		local t0 = a - EPOCH
		local val
		if t0 >= 0 and t0 * n + r < TWO53 then
			val = fmt('%d', t0 * n + r)
		elseif packed then
			return 0
		else
			val = fmt('%d+%d', a, r)
		end
		if packed then
			-- (an earlier TAT: the hash's expiry still covers it)
			rcall('ZADD', phash[pos], val, pfield[pos])
		elseif l[15] then
			rcall('SET', name, val, 'KEEPTTL')
		else
			rcall('SET', name, val, 'PXAT', expiry_ms(a + (r > 0 and 1 or 0), l[5]))
		end
		return 1
	end
	-- the window the take counted the request in
	local e = take % period
	local ws = take - e
	if algo == 1 then
		local u, c, pv = match(v, '^(%d+):(%d+):(%d+)$')
		if not u then
			return 0
		end
		u, c, pv = u + 0, c + 0, pv + 0
		if u == ws + 2 * period then
			c = c - cost
		elseif u == ws + 3 * period then
			pv = pv - cost
		else
			return 0
		end
		rcall('SET', name, fmt('%d:%d:%d', u, c > 0 and c or 0, pv > 0 and pv or 0), 'KEEPTTL')
		return 1
	end
	local u, c = match(v, '^(%d+):(%d+)$')
	if not u or u + 0 ~= ws + period then
		return 0
	end
	c = c - cost
	rcall('SET', name, fmt('%d:%d', u + 0, c > 0 and c or 0), 'KEEPTTL')
	return 1
end

-- The number of entries of the msgpack array whose bytes are s, from its
-- header; nil when s does not start as an array.
local function array_count(s)
	local b, x1, x2, x3, x4 = byte(s, 1, 5)
	if not b then
		return nil
	elseif b >= 0x90 and b <= 0x9f then
		return b - 0x90
	elseif b == 0xdc and x2 then
		return x1 * 256 + x2
	elseif b == 0xdd and x4 then
		return ((x1 * 256 + x2) * 256 + x3) * 256 + x4
	end
	return nil
end

-- Gives back what the requests of args took (see "Refund"), or, with
-- cas, a lease's unspent tokens (see "Return"): then a token bucket's key
-- only when it holds the value expected at its position, as the grant
-- left it.
local function give(args, cluster, cas)
	local take = tonumber(args[1])
	if not take or take < 0 or take >= TWO53 or take % 1 ~= 0 then
		return fail('take_us must be an integer in 0..2^53')
	end
	local req, m, nr, k0, np, mapped, ids = parse(args, cas and 2 or 1, false)
	if not req then
		return fail(m)
	end
	local want
	if cas then
		local ex = args[2]
		-- (one value and nothing after it: the next offset is -1)
		local ok, next
		ok, next, want = pcall(mp_unpack_one, ex)
		if not ok or next ~= -1 or type(want) ~= 'table' or array_count(ex) ~= np then
			return fail(fmt('expect: need a msgpack array of %d entries, one per key position',
			    np))
		end
		for x = 1, np do
			local w = want[x]
			if w ~= nil and type(w) ~= 'string' then
				return fail(fmt('expect: entry %d must be nil or a string', x))
			end
		end
	end
	for i = 1, m do
		local ki, e, rule = request_at(req, i, nr, np, 10)
		if not ki then
			return fail(e)
		end
		for j = 1, #rule do
			local p = ki + j - 1
			if mapped then
				p = kmap[p]
			end
			local len = #args[k0 + p]
			if rule[j][14] and (len < PACKED_NAME_MIN or len > PACKED_NAME_MAX) then
				return bad_packed_name(i)
			end
		end
	end
	local now = now_us()
	-- (never below 0: a take read from another clock, after a failover,
	-- must not give back more than was taken)
	local since = now > take and now - take or 0
	local owe = {}
	local changed = 0
	for i = 1, m do
		local ki, cost, rule = request_at(req, i, nr, np, 10)
		local rid = ids and sub(ids, 8 * i - 7, 8 * i)
		if rid == NO_ID then
			rid = nil
		end
		for j = 1, #rule do
			local x = ki + j - 1
			local p = x
			if mapped then
				p = kmap[x]
			end
			local name, l = args[k0 + p], rule[j]
			local v
			if l[14] then
				v = get_packed(name, p, cluster)
			else
				v = get_here(name, cluster)
			end
			-- (a window's count is given back in the window of the take
			-- whatever touched it since; a lease's bucket only when
			-- untouched, and then whole; a lease takes nothing else)
			local a = l[1]
			if v and (not cas or a == 1 or a == 2 or a == 0 and v == want[x]) then
				local owed
				if not cas then
					owed = owe[name]
					if not owed then
						owed = {since, 0}
						owe[name] = owed
					end
				end
				changed = changed + refund_key(name, v, l, cost, take, now, p, owed, rid)
			end
		end
	end
	return changed
end

local function refund(args, cluster)
	return give(args, cluster, false)
end

local function give_back(args, cluster)
	return give(args, cluster, true)
end

-- Gives back the places of requests (see "Concurrency"): ids holds 8
-- bytes per key, the request whose place key i holds.
local function release(args, cluster)
	local ids = args[1]
	local n = #args - 1
	if not ids or n < 1 or #ids ~= 8 * n then
		return fail('release: need 8 bytes of ids per key')
	end
	local freed = 0
	for i = 1, n do
		local name = args[1 + i]
		local v = get_here(name, cluster)
		if v then
			local left, gone = concurrency_without(v, sub(ids, 8 * i - 7, 8 * i))
			if gone then
				freed = freed + 1
				if left == '' then
					rcall('DEL', name)
				else
					rcall('SET', name, left, 'KEEPTTL')
				end
			end
		end
	end
	return freed
end

-- Counts one event of a penalty (see "Penalties"): args are the count's
-- rule (one sliding window), the ban's length in microseconds, the
-- count's key and the ban's key (one client's: one slot). Replies 1 when
-- the event put the client in the box, else 0.
local function penalize(args, cluster)
	local rule, e = rule_of(args[1] or '')
	local ban = tonumber(args[2])
	if not rule or #rule ~= 1 or rule[1][1] ~= 1 then
		return fail('penalize: need a rule of one sliding window' ..
		    (e and (': ' .. e) or ''))
	end
	if not ban or ban < 1 or ban > MAX_VALUE or ban % 1 ~= 0 or #args ~= 4 then
		return fail('penalize: need <rule> <ban_us> <count key> <ban key>')
	end
	local l = rule[1]
	local v = get_here(args[3], cluster)
	if v == nil then
		return 0 -- not this node's client
	end
	local now = now_us()
	local ok, left, _, reset, val = eval_sliding(v, now, 1, l[2], l[3])
	if ok then
		rcall('SET', args[3], val, 'PXAT', expiry_ms(now + reset, l[5]))
	end
	if ok and left > 0 then
		return 0
	end
	local till = now + ban
	rcall('SET', args[4], fmt('%d', till), 'PXAT', expiry_ms(till, 1))
	return 1
end

-- The admin's look at and reset of a client's keys, named as the agent
-- names them (see "Admin"): true for a packed bucket's name.
local function packed_name(k)
	local t = #k - 19 -- the tag's closing brace: "{TT}~" or "{TTT}~"
	return (t == 4 or t == 5) and byte(k, t) == 125 and byte(k, t + 1) == 126
end

-- cmd on the key k, or zcmd on its set and member when k names a packed
-- bucket: Redis's reply.
local function on_key(k, cmd, zcmd)
	if packed_name(k) then
		local h, f = packed_parts(k)
		return rcall(zcmd, h, f)
	end
	return rcall(cmd, k)
end

-- The value of each key (a packed bucket's score), false for none.
local function peek(keys)
	local v = {}
	for i = 1, #keys do
		v[i] = on_key(keys[i], 'GET', 'ZSCORE')
	end
	return v
end

-- Deletes each key (a packed bucket's member); the number deleted.
local function forget(keys)
	local n = 0
	for i = 1, #keys do
		n = n + on_key(keys[i], 'DEL', 'ZREM')
	end
	return n
end

local function register(name, fn, cluster)
	local f = {
		function_name = name,
		callback = function(keys, args)
			if not rcall then
				bind()
			end
			if cluster == nil then
				return fn(keys)
			end
			return fn(args, cluster)
		end,
	}
	if cluster then
		f.flags = { 'allow-cross-slot-keys' }
	end
	redis.register_function(f)
end

register('rl7_decide', run, false)
register('rl7_decide_cluster', run, true)
register('rl7_refund', refund, false)
register('rl7_refund_cluster', refund, true)
register('rl7_return', give_back, false)
register('rl7_return_cluster', give_back, true)
register('rl7_penalize', penalize, false)
register('rl7_penalize_cluster', penalize, true)
register('rl7_release', release, false)
register('rl7_release_cluster', release, true)
-- (keys declared: the admin's are one client's, in one slot)
register('rl7_peek', peek, nil)
register('rl7_forget', forget, nil)
