--[[ decide.lua: rate-limit decisions for a batch of requests, in one atomic
call. Arguments and reply are msgpack (cmsgpack is built into Redis's Lua).

KEYS: one key per distinct client of the batch, "rl:{<32 hex digits>}". The
braces are a Cluster hash tag: in Cluster, every key of one call must share
a slot, so a batch there holds the clients of a single slot.

ARGV[1]: msgpack array of requests, in order:
  request = [key_index, cost, limits]
    key_index  1-based index into KEYS
    cost       weight of the request, 1 .. 2^32-1
    limits     array of 1 .. 64 limits, each [lid, algo, quota, period_us, burst]
      lid        1 .. 64 bytes, unique per limit (it names the hash field)
      algo       0 token bucket (GCRA), 1 sliding window counter, 2 fixed window
      quota      N requests per period, 1 .. 2^47
      period_us  P in microseconds, 1 .. 2^47
      burst      token bucket capacity, 0 means quota, 0 .. 2^47, with
                 burst * period_us / quota <= 2^52 (windows ignore it:
                 their capacity is the quota)
  Requests are decided in order: a later request of the same client sees
  what an earlier one took. Limits with the same lid are the same limit,
  whichever request names them.

Reply: msgpack [now_us, results], results[i] = [allowed, decider, per_limit]
  allowed    1 or 0; a request is all or nothing: when any of its limits
             refuses, none of its limits is charged
  decider    1-based index of the limit that decides: when refused, the
             refusing limit with the longest retry_after; when allowed, the
             limit with the fewest remaining; ties go to the lowest index
  per_limit  [remaining, retry_after_us, reset_us] per limit, each limit
             evaluated on its own (a limit that would allow reports what it
             would leave, even when another limit refuses the request)
    remaining       whole requests of cost 1 left after this one, 0 if refused
    retry_after_us  0 when this limit allows; else the exact time until this
                    request would pass (a request heavier than the capacity
                    never passes: it gets one period)
    reset_us        time until this limit is full again

Bad arguments give an error reply ("ERR rl decide: ...") and write nothing:
everything is validated before the first read or write.

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
]]

local floor = math.floor
local find, sub, match, fmt = string.find, string.sub, string.match, string.format
local type, tonumber, pairs, unpack = type, tonumber, pairs, unpack

local MAX_REQS = 4096
local MAX_LIMITS = 64
local MAX_LID = 64
local MAX_COST = 4294967295
local MAX_VALUE = 140737488355328 -- 2^47: quota, burst, period, stored counts
local TWO52 = 4503599627370496
local KEY_PATTERN = '^rl:{' .. ('%x'):rep(32) .. '}$'

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
-- then it multiplies by doubling over the bits of a.
local function muldiv(a, b, d)
	local p = a * b
	if p < TWO52 then
		return divmod(p, d)
	end
	local bq, br = divmod(b, d)
	local bits, nb = {}, 0
	while a > 0 do
		local h = floor(a / 2)
		nb = nb + 1
		bits[nb] = a - 2 * h
		a = h
	end
	local q, r = 0, 0
	for i = nb, 1, -1 do
		q = q * 2
		r = r * 2
		if r >= d then
			q = q + 1
			r = r - d
		end
		if bits[i] == 1 then
			q = q + bq
			r = r + br
			if r >= d then
				q = q + 1
				r = r - d
			end
		end
	end
	return q, r
end

local function gcd(a, b)
	while b > 0 do
		local _, r = divmod(a, b)
		a, b = b, r
	end
	return a
end

-- Each evaluation returns allowed, remaining, retry_after_us, reset_us and,
-- when allowed, the field's new value.

-- GCRA with the emission interval T = p/n kept exact: TAT is A + R/n.
local function eval_token(v, now, cost, quota, period, burst)
	local cap = quota
	if burst > 0 then
		cap = burst
	end
	local g = gcd(period, quota)
	local p, n = period / g, quota / g
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
		if a and r and a >= now and a < 2 * TWO52 and floor(a) == a
		    and r >= 0 and r < n and floor(r) == r then
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
	local iq, ir = muldiv(cost, p, n)
	local nq, nr = dq + iq, dr + ir
	if nr >= n then
		nq = nq + 1
		nr = nr - n
	end
	local tq, tr = muldiv(cap, p, n)
	if nq < tq or (nq == tq and nr <= tr) then
		local xq, xr = tq - nq, tr - nr
		if xr < 0 then
			xq = xq - 1
			xr = xr + n
		end
		-- remaining = floor((cap*T - new d) / T) = floor((xq*n + xr) / p)
		local q1, r1 = muldiv(xq, n, p)
		local q2 = divmod(r1 + xr, p)
		local reset, val = nq, fmt('%d', now + nq)
		if nr > 0 then
			reset = nq + 1
			val = fmt('%d+%d', now + nq, nr)
		end
		return true, q1 + q2, 0, reset, val
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
	local _, e = divmod(now, period)
	local ws = now - e
	local cur, prev = 0, 0
	if v then
		local u, c, pv = match(v, '^(%d+):(%d+):(%d+)$')
		u, c, pv = tonumber(u), tonumber(c), tonumber(pv)
		if u and u < 2 * TWO52 and c and c <= MAX_VALUE and pv and pv <= MAX_VALUE then
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
	local wq, wr = muldiv(prev, rest, period)
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
	local _, e = divmod(now, period)
	local ws = now - e
	local left = period - e
	local cnt = 0
	if v then
		local u, c = match(v, '^(%d+):(%d+)$')
		u, c = tonumber(u), tonumber(c)
		-- u - P > ws only when the clock stepped back: keep the count
		if u and u < 2 * TWO52 and c and c <= MAX_VALUE and u - period >= ws then
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

-- The time until which a stored value is needed, or nil if it is not ours.
local function need_until(v)
	local num, sep = match(v, '^(%d+)(.?)')
	num = tonumber(num)
	if num and sep == '+' then
		return num + 1
	end
	return num
end

local function is_int(x, lo, hi)
	return type(x) == 'number' and x >= lo and x <= hi and floor(x) == x
end

-- The length of t when t is an array 1..n without holes or other keys.
local function array_len(t)
	if type(t) ~= 'table' then
		return nil
	end
	local n, c = #t, 0
	for _ in pairs(t) do
		c = c + 1
	end
	if c ~= n then
		return nil
	end
	return n
end

-- Returns nil when keys and requests are valid, else a message.
local function validate(keys, reqs)
	local nkeys = #keys
	for i = 1, nkeys do
		if type(keys[i]) ~= 'string' or not match(keys[i], KEY_PATTERN) then
			return fmt('key %d: must be rl:{<32 hex digits>}', i)
		end
	end
	local nr = array_len(reqs)
	if not nr or nr < 1 or nr > MAX_REQS then
		return fmt('requests: need an array of 1 to %d requests', MAX_REQS)
	end
	for i = 1, nr do
		local q = reqs[i]
		if array_len(q) ~= 3 then
			return fmt('request %d: need [key_index, cost, limits]', i)
		end
		if not is_int(q[1], 1, nkeys) then
			return fmt('request %d: key_index must be an integer in 1..%d', i, nkeys)
		end
		if not is_int(q[2], 1, MAX_COST) then
			return fmt('request %d: cost must be an integer in 1..%.0f', i, MAX_COST)
		end
		local ls = q[3]
		local nl = array_len(ls)
		if not nl or nl < 1 or nl > MAX_LIMITS then
			return fmt('request %d: limits must be an array of 1 to %d limits', i, MAX_LIMITS)
		end
		local seen = nl > 1 and {} or nil
		for j = 1, nl do
			local l = ls[j]
			if array_len(l) ~= 5 then
				return fmt('request %d limit %d: need [lid, algo, quota, period_us, burst]', i, j)
			end
			local lid, algo, quota, period, burst = l[1], l[2], l[3], l[4], l[5]
			if type(lid) ~= 'string' or #lid < 1 or #lid > MAX_LID then
				return fmt('request %d limit %d: lid must be a string of 1 to %d bytes', i, j, MAX_LID)
			end
			if seen then
				if seen[lid] then
					return fmt('request %d limit %d: duplicate lid', i, j)
				end
				seen[lid] = true
			end
			if not is_int(algo, 0, 2) then
				return fmt('request %d limit %d: algo must be 0, 1 or 2', i, j)
			end
			if not is_int(quota, 1, MAX_VALUE) then
				return fmt('request %d limit %d: quota must be an integer in 1..2^47', i, j)
			end
			if not is_int(period, 1, MAX_VALUE) then
				return fmt('request %d limit %d: period_us must be an integer in 1..2^47', i, j)
			end
			if not is_int(burst, 0, MAX_VALUE) then
				return fmt('request %d limit %d: burst must be an integer in 0..2^47', i, j)
			end
			-- the bucket's depth in time, burst * period / quota, must stay
			-- below 2^53 once added to the clock
			if algo == 0 and burst > quota and burst / quota * period > TWO52 then
				return fmt('request %d limit %d: burst * period_us / quota exceeds 2^52', i, j)
			end
		end
	end
	return nil
end

local function now_us()
	local t = redis.call('TIME')
	return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Decides every request in order at time now. Returns an array of
-- {allowed, decider, {{remaining, retry_after_us, reset_us}, ...}}, and
-- writes the keys once at the end (stale fields deleted, expiry reset).
local function run(keys, reqs, now)
	local cache = {}
	local out = {}
	local okv, remv, retv, resv, valv = {}, {}, {}, {}, {}
	for i = 1, #reqs do
		local q = reqs[i]
		local name = keys[q[1]]
		local ent = cache[name]
		if not ent then
			local flat = redis.call('HGETALL', name)
			local f = {}
			for j = 1, #flat, 2 do
				f[flat[j]] = flat[j + 1]
			end
			ent = { f = f, dirty = false }
			cache[name] = ent
		end
		local fields = ent.f
		local cost, ls = q[2], q[3]
		local nl = #ls
		local all = true
		for j = 1, nl do
			local l = ls[j]
			local algo, ok, rem, ret, res, val = l[2]
			if algo == 0 then
				ok, rem, ret, res, val = eval_token(fields[l[1]], now, cost, l[3], l[4], l[5])
			elseif algo == 1 then
				ok, rem, ret, res, val = eval_sliding(fields[l[1]], now, cost, l[3], l[4])
			else
				ok, rem, ret, res, val = eval_fixed(fields[l[1]], now, cost, l[3], l[4])
			end
			okv[j], remv[j], retv[j], resv[j], valv[j] = ok, rem, ret, res, val
			if not ok then
				all = false
			end
		end
		local best = 0
		if all then
			best = 1
			for j = 1, nl do
				fields[ls[j][1]] = valv[j]
				if remv[j] < remv[best] then
					best = j
				end
			end
			if not ent.dirty then
				ent.dirty = {}
			end
			for j = 1, nl do
				ent.dirty[ls[j][1]] = true
			end
		else
			for j = 1, nl do
				if not okv[j] and (best == 0 or retv[j] > retv[best]) then
					best = j
				end
			end
		end
		local per = {}
		for j = 1, nl do
			per[j] = { remv[j], retv[j], resv[j] }
		end
		out[i] = { all and 1 or 0, best, per }
	end
	for name, ent in pairs(cache) do
		if ent.dirty then
			local set, ns, del, nd, last = {}, 0, {}, 0, 0
			for fld, val in pairs(ent.f) do
				local u = need_until(val)
				if not u or u <= now then
					nd = nd + 1
					del[nd] = fld
				else
					if u > last then
						last = u
					end
					if ent.dirty[fld] then
						set[ns + 1] = fld
						set[ns + 2] = val
						ns = ns + 2
					end
				end
			end
			if nd > 0 then
				redis.call('HDEL', name, unpack(del))
			end
			redis.call('HSET', name, unpack(set))
			local ms, r = divmod(last, 1000)
			if r > 0 then
				ms = ms + 1
			end
			redis.call('PEXPIREAT', name, ms)
		end
	end
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

if #ARGV ~= 1 then
	return redis.error_reply('ERR rl decide: need exactly one argument (msgpack requests)')
end
local reqs, err = unpack_one(pcall(cmsgpack.unpack, ARGV[1]))
if err == nil then
	err = validate(KEYS, reqs)
end
if err then
	return redis.error_reply('ERR rl decide: ' .. err)
end
local now = now_us()
return cmsgpack.pack({ now, run(KEYS, reqs, now) })
