--[[ decide_plain.lua: the same decisions as decide.lua, with plain Redis
arguments instead of msgpack (kept to compare the two encodings' cost).

KEYS: as decide.lua, one "rl:{<32 hex digits>}" per distinct client.

ARGV, a flat list:
  nreq
  then per request: key_index, cost, nlimits,
    then per limit: lid, algo, quota, period_us, burst
with the meanings and bounds of decide.lua.

Reply: a flat array of integers: now_us, then per request: allowed, decider,
then remaining, retry_after_us, reset_us per limit, as in decide.lua.

Bad arguments give an error reply ("ERR rl decide: ...") and write nothing.

The core below is shared, line for line, with decide.lua.
]]

-- ==== CORE ====
-- The build puts here the core of decide.lua, the lines from its
-- "BEGIN CORE" line to its "END CORE" line: one copy of the decision math.

-- Turns the flat ARGV into decide.lua's request shape, or returns a message.
-- A value that is not a number becomes false here, and validate() names it.
local function parse_plain(argv)
	local na = #argv
	local nreq = tonumber(argv[1])
	if type(nreq) ~= 'number' or nreq < 1 or nreq > MAX_REQS or nreq % 1 ~= 0 then
		return nil, fmt('ARGV[1]: nreq must be an integer in 1..%d', MAX_REQS)
	end
	local reqs, pos = {}, 2
	for i = 1, nreq do
		if pos + 2 > na then
			return nil, fmt('request %d: arguments missing', i)
		end
		local nl = tonumber(argv[pos + 2])
		if type(nl) ~= 'number' or nl < 1 or nl > MAX_LIMITS or nl % 1 ~= 0 then
			return nil, fmt('request %d: nlimits must be an integer in 1..%d', i, MAX_LIMITS)
		end
		local k = pos + 3
		if k + 5 * nl - 1 > na then
			return nil, fmt('request %d: arguments missing', i)
		end
		local ls = {}
		for j = 1, nl do
			ls[j] = { argv[k], tonumber(argv[k + 1]) or false, tonumber(argv[k + 2]) or false,
			    tonumber(argv[k + 3]) or false, tonumber(argv[k + 4]) or false }
			k = k + 5
		end
		reqs[i] = { tonumber(argv[pos]) or false, tonumber(argv[pos + 1]) or false, ls }
		pos = k
	end
	if pos - 1 ~= na then
		return nil, fmt('%d trailing arguments', na - pos + 1)
	end
	return reqs
end

-- parse_plain() for arguments that are all well formed, faster: s + 0
-- converts a number's text as tonumber(s) does (but -0 to 0, the same to
-- every check), and raises an error where tonumber would return nil (the
-- caller runs this in pcall). Returns nil when anything is amiss:
-- parse_plain() then says what.
local function parse_plain_fast(argv)
	local na = #argv
	local nreq = argv[1] + 0
	if nreq < 1 or nreq > MAX_REQS or nreq % 1 ~= 0 then
		return nil
	end
	local reqs, pos = {}, 2
	for i = 1, nreq do
		local nl = argv[pos + 2] + 0
		local k = pos + 3
		if nl < 1 or nl > MAX_LIMITS or nl % 1 ~= 0 or k + 5 * nl - 1 > na then
			return nil
		end
		local ls = {}
		for j = 1, nl do
			ls[j] = { argv[k], argv[k + 1] + 0, argv[k + 2] + 0, argv[k + 3] + 0, argv[k + 4] + 0 }
			k = k + 5
		end
		reqs[i] = { argv[pos] + 0, argv[pos + 1] + 0, ls }
		pos = k
	end
	if pos - 1 ~= na then
		return nil
	end
	return reqs
end

local ok, reqs, err = pcall(parse_plain_fast, ARGV)
if not (ok and reqs) then
	reqs, err = parse_plain(ARGV)
end
local out
if reqs then
	out, err = run(KEYS, reqs, now_us())
end
if err then
	return redis.error_reply('ERR rl decide: ' .. err)
end
return out
