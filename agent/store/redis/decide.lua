--[[ decide.lua: rate-limit decisions for a batch of requests, in one atomic
call. Arguments and reply are msgpack (cmsgpack is built into Redis's Lua).

KEYS: one key per distinct client of the batch, "rl:{<32 hex digits>}". In
a Cluster, the keys come instead as ARGV[2..] with no KEYS (the script is
loaded there with the flag allow-cross-slot-keys): one call then decides
the clients of every slot its node serves, and each key is checked as it is
read; a key the node does not serve is not touched, and its requests are
answered allowed = 2 ("not decided here").

ARGV[1]: msgpack array of two elements, [rules, requests]:
  rules     array of 1 .. 4096 rules; a rule is an array of 1 .. 64 limits,
            each [lid, algo, quota, period_us, burst], its lids distinct
    lid        1 .. 64 bytes, unique per limit (it names the hash field)
    algo       0 token bucket (GCRA), 1 sliding window counter, 2 fixed window
    quota      N requests per period, 1 .. 2^47
    period_us  P in microseconds, 1 .. 2^47
    burst      token bucket capacity, 0 means quota, 0 .. 2^47, with
               burst * period_us / quota <= 2^52 (windows ignore it:
               their capacity is the quota)
  requests  flat array of 3 integers per request, 1 .. 4096 requests:
    key_index   1-based index into KEYS
    cost        weight of the request, 1 .. 2^32-1
    rule_index  1-based index into rules: the limits the request is checked
                against
  Requests are decided in order: a later request of the same client sees
  what an earlier one took. Limits with the same lid are the same limit,
  whichever rule names them. Every rule is checked, used or not. (Flat
  requests and rules sent once keep the decoding cheap: cmsgpack makes a
  Lua table per array, and a batch's requests mostly share a few rules.)

Reply: msgpack [now_us, results], results[i] = [allowed, decider, per_limit]
  allowed    1 or 0; a request is all or nothing: when any of its limits
             refuses, none of its limits is charged. 2: not decided, its
             key lives on another Cluster node (decider and per_limit 0)
  decider    1-based index of the limit that decides: when refused, the
             refusing limit with the longest retry_after; when allowed, the
             limit with the fewest remaining; ties go to the lowest index
  per_limit  [remaining, retry_after_us, reset_us] per limit of the request's
             rule, in the rule's order, each limit
             evaluated on its own (a limit that would allow reports what it
             would leave, even when another limit refuses the request)
    remaining       whole requests of cost 1 left after this one, 0 if refused
    retry_after_us  0 when this limit allows; else the exact time until this
                    request would pass (a request heavier than the capacity
                    never passes: it gets one period)
    reset_us        time until this limit is full again

Bad arguments give an error reply ("ERR rl decide: ...") and write nothing:
everything is validated before the first write.

The core below is shared, line for line, with decide_plain.lua.
]]

local cmsgpack = cmsgpack

-- ==== BEGIN CORE (identical in decide.lua and decide_plain.lua) ====
--[[
Time is Redis's clock, read once per call (TIME), in integer microseconds.
Every quantity is an integer below 2^53, so Lua's doubles hold it exactly
(and string.format's %d, a C long here, prints it exactly); products that
could exceed that go through muldiv().

Storage: one hash per client, one field per limit named by its lid. Each
value starts with the absolute time (us) until which it is needed:
  token bucket    "A" or "A+R": the theoretical arrival time TAT = A + R/n,
                  where T = p/n is the emission interval period/quota in
                  lowest terms and 0 < R < n; needed until ceil(TAT)
  sliding window  "U:C:V": window start U - 2P, C requests in it, V in the
                  window before; needed until U (the end of the next window,
                  where C still weighs as the previous count)
  fixed window    "U:C": window start U - P, C requests in it; needed until U
A field past its need, or whose value does not have its limit's shape, is
equivalent to an absent one (a fresh client with a full bucket). Every call
that writes a key deletes its stale and unreadable fields and sets PEXPIREAT
to the latest need of the fields left (rounded up to the millisecond),
computed from the values themselves: no separate expiry per field is kept,
fields written by other calls for other limits are accounted for, and the
key never outlives the moment all of its state is fresh again.

Cost, per call: each key is read once (HGETALL) and its fields kept, so
later requests of the batch see what earlier ones wrote, and each key that
changed is written once at the end (one HSET of the fields written, one
PEXPIREAT). Arguments are checked on the way (decide()), cheaply, and only
bad ones go through the slower validate() that says what is wrong. A token
bucket's constants (its interval as a reduced fraction, its capacity) are
computed once per call. Inside Redis's Lua, a C call, a table and a new
string each cost as much as dozens of plain operations: the hot path makes
few of them (no type() where a comparison would fail anyway, s + 0 rather
than tonumber(s) for digits, x % d rather than math.floor).
]]

local floor = math.floor
local find, sub, byte, match, fmt = string.find, string.sub, string.byte, string.match, string.format
local type, tonumber, unpack, maxn = type, tonumber, unpack, table.maxn
local rcall, rpcall = redis.call, redis.pcall

local MAX_REQS = 4096
local MAX_RULES = 4096
local MAX_LIMITS = 64
local MAX_LID = 64
local MAX_COST = 4294967295
local MAX_VALUE = 140737488355328 -- 2^47: quota, burst, period, stored counts
local TWO52 = 4503599627370496
local TWO54 = 18014398509481984

-- floor(a / d) and a mod d for integers 0 <= a < 2^53, 1 <= d: the
-- division is rounded, so the quotient is corrected by one when needed.
local function divmod(a, d)
	local q = floor(a / d)
	local r = a - q * d
	if r < 0 then
		q = q - 1
		r = r + d
	elseif r >= d then
		q = q + 1
		r = r - d
	end
	return q, r
end

-- floor(a * b / d) and a * b mod d, exact for integers a, b >= 0 and
-- 1 <= d < 2^52 whose quotient is below 2^53, even when a * b is not:
-- then it multiplies by doubling over the bits of a, highest first.
local function muldiv(a, b, d)
	local p = a * b
	if p < TWO52 then
		-- x % d is x - floor(x / d) * d: exact when x + d < 2^53, and
		-- d too much when the division rounded up to the next integer
		local r = p % d
		if r < 0 then
			r = r + d
		end
		return (p - r) / d, r
	end
	local bq, br = divmod(b, d)
	local h = 1
	while h * 2 <= a do
		h = h * 2
	end
	local q, r = 0, 0
	while h >= 1 do
		q = q * 2
		r = r * 2
		if r >= d then
			q = q + 1
			r = r - d
		end
		if a >= h then
			a = a - h
			q = q + bq
			r = r + br
			if r >= d then
				q = q + 1
				r = r - d
			end
		end
		h = h / 2
	end
	return q, r
end

-- A token bucket's constants by period, for this call: quota, burst (the
-- key, checked), capacity, p and n (T = p/n in lowest terms), capacity * T
-- as tq + tr/n, and T itself as q1 + r1/n (the cost of a request of 1).
local tb_memo = {}

local function tb_consts(quota, period, burst)
	local cap = quota
	if burst > 0 then
		cap = burst
	end
	local g, r = period, quota
	while r > 0 do
		local _, x = divmod(g, r)
		g, r = r, x
	end
	local p, n = period / g, quota / g
	local tq, tr = muldiv(cap, p, n)
	local q1, r1 = divmod(p, n)
	local m = { quota, burst, cap, p, n, tq, tr, q1, r1 }
	tb_memo[period] = m
	return m
end

-- Each evaluation returns allowed, remaining, retry_after_us, reset_us and,
-- when allowed, the field's new value. A new value is needed until
-- now + reset_us.

-- GCRA with the emission interval T = p/n kept exact: TAT is A + R/n.
local function eval_token(v, now, cost, quota, period, burst)
	local m = tb_memo[period]
	if not m or m[1] ~= quota or m[2] ~= burst then
		m = tb_consts(quota, period, burst)
	end
	local cap, p, n = m[3], m[4], m[5]
	-- d = max(TAT - now, 0) = dq + dr/n: the part of the capacity in use
	local dq, dr = 0, 0
	if v then
		local a, r
		local plus = find(v, '+', 1, true)
		if plus then
			a, r = tonumber(sub(v, 1, plus - 1)), tonumber(sub(v, plus + 1))
		else
			a, r = tonumber(v), 0
		end
		-- a remainder that does not fit this limit's n is not its state
		if a and r and a >= now and a < TWO54 and a % 1 == 0
		    and r >= 0 and r < n and r % 1 == 0 then
			dq, dr = a - now, r
		end
	end
	local used = dq
	if dr > 0 then
		used = dq + 1
	end
	if cost > cap then
		return false, 0, period, used
	end
	-- the request is allowed when d + cost*T <= cap*T
	local iq, ir
	if cost == 1 then
		iq, ir = m[8], m[9]
	else
		iq, ir = muldiv(cost, p, n)
	end
	local nq, nr = dq + iq, dr + ir
	if nr >= n then
		nq = nq + 1
		nr = nr - n
	end
	local tq, tr = m[6], m[7]
	if nq < tq or (nq == tq and nr <= tr) then
		local xq, xr = tq - nq, tr - nr
		if xr < 0 then
			xq = xq - 1
			xr = xr + n
		end
		-- remaining = floor((cap*T - new d) / T) = floor((xq*n + xr) / p)
		local left
		local x = xq * n + xr
		if x < TWO52 then
			local r = x % p
			if r < 0 then
				r = r + p
			end
			left = (x - r) / p
		else
			local q1, r1 = muldiv(xq, n, p)
			left = q1 + (divmod(r1 + xr, p))
		end
		if nr > 0 then
			return true, left, 0, nq + 1, fmt('%d+%d', now + nq, nr)
		end
		return true, left, 0, nq, fmt('%d', now + nq)
	end
	-- it passes once d has shrunk by (d + cost*T) - cap*T
	local yq, yr = nq - tq, nr - tr
	if yr < 0 then
		yq = yq - 1
		yr = yr + n
	end
	if yr > 0 then
		yq = yq + 1
	end
	return false, 0, yq, used
end

-- Sliding window counter over aligned windows [k*P, (k+1)*P): the estimate
-- is prev * (P - elapsed) / P + cur; allowed when estimate + cost <= quota.
local function eval_sliding(v, now, cost, quota, period)
	-- (now % period: exact, as now + period < 2^53, see muldiv)
	local e = now % period
	if e < 0 then
		e = e + period
	end
	local ws = now - e
	local cur, prev = 0, 0
	if v then
		local u, c, pv = match(v, '^(%d+):(%d+):(%d+)$')
		-- digits convert (to inf when too many): s + 0, not the slower
		-- tonumber(s)
		if u then
			u, c, pv = u + 0, c + 0, pv + 0
		end
		if u and u < TWO54 and c <= MAX_VALUE and pv <= MAX_VALUE then
			local s = u - 2 * period
			if s >= ws then
				-- s > ws only when the clock stepped back: keep the counts
				cur, prev = c, pv
			elseif s == ws - period then
				prev = c
			end
		end
	end
	local reset = 0
	if cur > 0 then
		reset = ws + 2 * period - now
	elseif prev > 0 then
		reset = ws + period - now
	end
	if cost > quota then
		return false, 0, period, reset
	end
	local rest = period - e
	local room = quota - cur - cost
	local wq, wr = 0, 0
	if prev > 0 then
		wq, wr = muldiv(prev, rest, period)
	end
	if room >= 0 and (wq < room or (wq == room and wr == 0)) then
		local left = room - wq
		if wr > 0 then
			left = left - 1
		end
		return true, left, 0, ws + 2 * period - now,
		    fmt('%d:%d:%d', ws + 2 * period, cur + cost, prev)
	end
	local retry
	if room >= 0 then
		-- within this window, once prev * (rest - t) <= room * P
		retry = rest - (muldiv(room, period, prev))
	else
		-- in the next window, where cur weighs as the previous count
		retry = rest + period - (muldiv(quota - cost, period, cur))
	end
	return false, 0, retry, reset
end

-- Fixed window over aligned windows [k*P, (k+1)*P).
local function eval_fixed(v, now, cost, quota, period)
	local e = now % period
	if e < 0 then
		e = e + period
	end
	local ws = now - e
	local left = period - e
	local cnt = 0
	if v then
		local u, c = match(v, '^(%d+):(%d+)$')
		if u then
			u, c = u + 0, c + 0
		end
		-- u - P > ws only when the clock stepped back: keep the count
		if u and u < TWO54 and c <= MAX_VALUE and u - period >= ws then
			cnt = c
		end
	end
	if cnt + cost <= quota then
		return true, quota - cnt - cost, 0, left,
		    fmt('%d:%d', ws + period, cnt + cost)
	end
	local reset = 0
	if cnt > 0 then
		reset = left
	end
	if cost > quota then
		return false, 0, period, reset
	end
	return false, 0, left, reset
end

-- The time until which a stored value is needed (its leading digits, plus
-- one after "A+"), or nil if it is not ours.
local function need_until(v)
	local _, e = find(v, '^%d+')
	if not e then
		return nil
	end
	local num = sub(v, 1, e) + 0
	if byte(v, e + 1) == 43 then -- '+'
		return num + 1
	end
	return num
end

-- Returns nil when l is a valid limit, else what is wrong with it.
local function limit_error(l)
	if type(l) ~= 'table' or l[5] == nil or l[6] ~= nil then
		return 'need [lid, algo, quota, period_us, burst]'
	end
	local lid, algo, quota, period, burst = l[1], l[2], l[3], l[4], l[5]
	if type(lid) ~= 'string' or #lid < 1 or #lid > MAX_LID then
		return fmt('lid must be a string of 1 to %d bytes', MAX_LID)
	end
	if algo ~= 0 and algo ~= 1 and algo ~= 2 then
		return 'algo must be 0, 1 or 2'
	end
	-- x % 1 ~= 0 for fractions, and for NaN and infinities too
	if type(quota) ~= 'number' or quota < 1 or quota > MAX_VALUE or quota % 1 ~= 0 then
		return 'quota must be an integer in 1..2^47'
	end
	if type(period) ~= 'number' or period < 1 or period > MAX_VALUE or period % 1 ~= 0 then
		return 'period_us must be an integer in 1..2^47'
	end
	if type(burst) ~= 'number' or burst < 0 or burst > MAX_VALUE or burst % 1 ~= 0 then
		return 'burst must be an integer in 0..2^47'
	end
	-- the bucket's depth in time, burst * period / quota, must stay below
	-- 2^53 once added to the clock
	if algo == 0 and burst > quota and burst / quota * period > TWO52 then
		return 'burst * period_us / quota exceeds 2^52'
	end
	return nil
end

-- Returns nil when keys, rules and requests are valid, else a message.
-- Values are read by position, as run() reads them: an array must have no
-- holes and no element past its end (table.maxn); other keys are never read.
local function validate(keys, rules, reqs)
	local nkeys = #keys
	for i = 1, nkeys do
		local k = keys[i]
		if type(k) ~= 'string' or #k ~= 37 or not find(k, '^rl:{%x+}$') then
			return fmt('key %d: must be rl:{<32 hex digits>}', i)
		end
	end
	local nrules = type(rules) == 'table' and #rules
	if not nrules or nrules < 1 or nrules > MAX_RULES or maxn(rules) ~= nrules then
		return fmt('rules: need an array of 1 to %d rules', MAX_RULES)
	end
	for r = 1, nrules do
		local ls = rules[r]
		local nl = type(ls) == 'table' and #ls
		if not nl or nl < 1 or nl > MAX_LIMITS or maxn(ls) ~= nl then
			return fmt('rule %d: need an array of 1 to %d limits', r, MAX_LIMITS)
		end
		for j = 1, nl do
			local e = limit_error(ls[j])
			if e then
				return fmt('rule %d limit %d: %s', r, j, e)
			end
			for x = 1, j - 1 do
				if ls[x][1] == ls[j][1] then
					return fmt('rule %d limit %d: duplicate lid', r, j)
				end
			end
		end
	end
	local n3 = type(reqs) == 'table' and #reqs
	if not n3 or n3 < 3 or n3 > 3 * MAX_REQS or n3 % 3 ~= 0 or maxn(reqs) ~= n3 then
		return fmt('requests: need an array of 3 to %d integers, 3 per request', 3 * MAX_REQS)
	end
	for i = 1, n3 / 3 do
		local ki, cost, ri = reqs[3 * i - 2], reqs[3 * i - 1], reqs[3 * i]
		if type(ki) ~= 'number' or ki < 1 or ki > nkeys or ki % 1 ~= 0 then
			return fmt('request %d: key_index must be an integer in 1..%d', i, nkeys)
		end
		if type(cost) ~= 'number' or cost < 1 or cost > MAX_COST or cost % 1 ~= 0 then
			return fmt('request %d: cost must be an integer in 1..%.0f', i, MAX_COST)
		end
		if type(ri) ~= 'number' or ri < 1 or ri > nrules or ri % 1 ~= 0 then
			return fmt('request %d: rule_index must be an integer in 1..%d', i, nrules)
		end
	end
	return nil
end

-- A client's fields as HGETALL gives them, or false when the key belongs to
-- another node of a Cluster (its slot is served elsewhere, moving, or the
-- cluster is down): such a key is neither read nor written here, and its
-- requests are answered "not decided" (allowed = 2) for the agent to send
-- them where the key lives. Any other error is raised as Redis gave it.
local function read_key(name)
	local h = rpcall('HGETALL', name)
	local e = h.err
	if e then
		if find(e, 'non local key', 1, true) or find(e, 'not stored on this node', 1, true) or
		    find(e, 'cluster is down', 1, true) then
			return false
		end
		error(h)
	end
	return h
end

local function now_us()
	local t = rcall('TIME')
	return t[1] * 1000000 + t[2]
end

-- Decides every request in order at time now, without writing: each key
-- is read once and its fields kept as HGETALL gives them, {lid, value, ...}
-- (a few fields: a scan beats a table), updated as requests take tokens.
-- Checks the arguments on the way, as validate() does but faster: each
-- rule once, and no type() where a bad type makes the comparison itself
-- raise an error (the caller runs this in pcall). Returns nil when
-- something is wrong (then validate() says what); else the results as one
-- flat array (now, then per request allowed (1 or 0) and decider, then
-- remaining, retry_after_us and reset_us per limit), the fields by key
-- name, the names of the keys written (written[1..nw]) and the need of
-- each value written.
local function decide(keys, rules, reqs, now)
	for i = 1, #keys do
		local k = keys[i]
		if #k ~= 37 or not find(k, '^rl:{%x+}$') then
			return nil
		end
	end
	local nrules = #rules
	if nrules < 1 or nrules > MAX_RULES or maxn(rules) ~= nrules then
		return nil
	end
	for r = 1, nrules do
		local ls = rules[r]
		local nl = #ls
		if nl < 1 or nl > MAX_LIMITS or maxn(ls) ~= nl then
			return nil
		end
		for j = 1, nl do
			if limit_error(ls[j]) then
				return nil
			end
			local lid = ls[j][1]
			for x = 1, j - 1 do
				if ls[x][1] == lid then
					return nil
				end
			end
		end
	end
	local n3 = #reqs
	if n3 < 3 or n3 > 3 * MAX_REQS or n3 % 3 ~= 0 or maxn(reqs) ~= n3 then
		return nil
	end
	local hash, written, nw, need = {}, {}, 0, {}
	local out, no = { now }, 1
	local valv, posv = {}, {}
	local _
	for b = 3, n3, 3 do
		-- KEYS and rules are arrays: keys[x] is a key exactly when x is in
		-- 1..#keys, rules[x] a rule exactly when x is in 1..#rules
		local name, cost, ls = keys[reqs[b - 2]], reqs[b - 1], rules[reqs[b]]
		if name == nil or ls == nil or cost < 1 or cost > MAX_COST or cost % 1 ~= 0 then
			return nil
		end
		local nl = #ls
		local h = hash[name]
		if h == nil then
			h = read_key(name)
			hash[name] = h
		end
		if not h then
			-- not this node's key: nothing taken, nothing computed
			out[no + 1], out[no + 2] = 2, 0
			for k = no + 3, no + 2 + 3 * nl do
				out[k] = 0
			end
			no = no + 2 + 3 * nl
		else
			local all = true
			-- out[at + 3j - 2 .. at + 3j]: limit j's remaining, retry, reset
			local at = no + 2
			local k = at
			for j = 1, nl do
				local l = ls[j]
				local lid, algo, quota, period = l[1], l[2], l[3], l[4]
				local p = 1
				while h[p] and h[p] ~= lid do
					p = p + 2
				end
				local val
				if algo == 0 then
					_, out[k + 1], out[k + 2], out[k + 3], val = eval_token(h[p + 1], now, cost, quota, period, l[5])
				elseif algo == 1 then
					_, out[k + 1], out[k + 2], out[k + 3], val = eval_sliding(h[p + 1], now, cost, quota, period)
				else
					_, out[k + 1], out[k + 2], out[k + 3], val = eval_fixed(h[p + 1], now, cost, quota, period)
				end
				-- (a limit that allows, and only such a limit, has a new value)
				k = k + 3
				valv[j], posv[j] = val, p
				if not val then
					all = false
				end
			end
			local best = 0
			if all then
				if not written[name] then
					written[name] = true
					nw = nw + 1
					written[nw] = name
				end
				best = 1
				local low = out[at + 1]
				for j = 1, nl do
					local p, val, m = posv[j], valv[j], at + 3 * j
					-- a field new to the key goes at its end (where p points,
					-- unless another new field of this request took it)
					local lid = ls[j][1]
					if h[p] == nil then
						h[p] = lid
					elseif h[p] ~= lid then
						p = #h + 1
						h[p] = lid
					end
					h[p + 1] = val
					-- (the need is a function of the value: need_until(val))
					need[val] = now + out[m]
					if out[m - 2] < low then
						best, low = j, out[m - 2]
					end
				end
				out[no + 1] = 1
			else
				local most = -1
				for j = 1, nl do
					if not valv[j] and out[at + 3 * j - 1] > most then
						best, most = j, out[at + 3 * j - 1]
					end
				end
				out[no + 1] = 0
			end
			out[no + 2] = best
			no = k
		end
	end
	return out, hash, written, nw, need
end

-- Writes each key decide() changed, once: the fields it wrote (one HSET),
-- its stale and unreadable fields deleted, PEXPIREAT the latest need.
local function flush(now, hash, written, nw, need)
	local set, del = {}, {}
	-- keys whose latest need is a window's end share it: one string for a
	-- run of equal expiries
	local ms, text
	for w = 1, nw do
		local name = written[w]
		local h = hash[name]
		local ns, ndel, last = 0, 0, 0
		for p = 1, #h, 2 do
			local fld, val = h[p], h[p + 1]
			local u = need[val]
			if u then
				-- written (or equal to a value written: the same need)
				set[ns + 1] = fld
				set[ns + 2] = val
				ns = ns + 2
			else
				u = need_until(val)
				if not u or u <= now then
					ndel = ndel + 1
					del[ndel] = fld
					u = 0
				end
			end
			if u > last then
				last = u
			end
		end
		if ndel > 0 then
			rcall('HDEL', name, unpack(del, 1, ndel))
		end
		rcall('HSET', name, unpack(set, 1, ns))
		-- in whole milliseconds, rounded up
		local r = last % 1000
		last = (last - r) / 1000 + (r > 0 and 1 or 0)
		if last ~= ms then
			ms, text = last, fmt('%d', last)
		end
		rcall('PEXPIREAT', name, text)
	end
end

-- Decides every request in order at time now and writes the keys. Returns
-- decide()'s flat array of results, or nil and a message when the
-- arguments are bad (then nothing is written).
local function run(keys, rules, reqs, now)
	local ok, out, hash, written, nw, need = pcall(decide, keys, rules, reqs, now)
	if not (ok and out) then
		local err = validate(keys, rules, reqs)
		if err then
			return nil, err
		end
		-- valid after all: an error of Redis (a key of the wrong type)
		-- then stops the script here, before anything is written
		out, hash, written, nw, need = decide(keys, rules, reqs, now)
		if not out then
			return nil, 'arguments refused'
		end
	end
	flush(now, hash, written, nw, need)
	return out
end
-- ==== END CORE ====

local function unpack_one(ok, ...)
	if not ok then
		return nil, 'ARGV[1]: bad msgpack (' .. tostring((...)) .. ')'
	end
	if select('#', ...) ~= 1 then
		return nil, 'ARGV[1]: need exactly one msgpack value'
	end
	return (...)
end

local keys = KEYS
if #KEYS == 0 and #ARGV > 1 then
	-- a Cluster call: the keys follow the msgpack argument
	keys = {}
	for i = 2, #ARGV do
		keys[i - 1] = ARGV[i]
	end
elseif #ARGV ~= 1 then
	return redis.error_reply('ERR rl decide: need exactly one argument (msgpack [rules, requests])')
end
local arg, err = unpack_one(pcall(cmsgpack.unpack, ARGV[1]))
if err == nil and (type(arg) ~= 'table' or arg[1] == nil or arg[2] == nil or maxn(arg) ~= 2) then
	err = 'ARGV[1]: need [rules, requests]'
end
local rules, reqs, out
if err == nil then
	rules, reqs = arg[1], arg[2]
	out, err = run(keys, rules, reqs, now_us())
end
if err then
	return redis.error_reply('ERR rl decide: ' .. err)
end

-- The reply: the bytes cmsgpack.pack({ now, results }) would make (the
-- shortest encoding of each integer and length), made from pieces, a head
-- per result and a pack() per limit's triple: tables per result cost more
-- to make and then to pack. ('\146' and '\147' are arrays of 2 and 3.)
local pack, char, concat = cmsgpack.pack, string.char, table.concat

-- an array header: fixarray up to 15 elements, else array 16
local function header(n)
	if n < 16 then
		return char(0x90 + n)
	end
	return char(0xdc, floor(n / 256), n % 256)
end

local nr = #reqs / 3
local parts, np = { '\146' .. pack(out[1]) .. header(nr) }, 1
local k = 1
for i = 1, nr do
	local nl = #rules[reqs[3 * i]]
	-- allowed (0 or 1) and decider (1..64) are positive fixints
	if nl < 16 then
		parts[np + 1] = char(0x93, out[k + 1], out[k + 2], 0x90 + nl)
	else
		parts[np + 1] = char(0x93, out[k + 1], out[k + 2], 0xdc, 0, nl)
	end
	np = np + 1
	k = k + 2
	for _ = 1, nl do
		parts[np + 1] = '\147'
		parts[np + 2] = pack(out[k + 1], out[k + 2], out[k + 3])
		np = np + 2
		k = k + 3
	end
end
return concat(parts, '', 1, np)
