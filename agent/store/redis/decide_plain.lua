--[[ decide_plain.lua: the same decisions as decide.lua, with plain Redis
arguments instead of msgpack (kept to compare the two encodings' cost).

KEYS: as decide.lua, one "rl:{<32 hex digits>}" per distinct client.

ARGV, a flat list:
  nrules
  then per rule: nlimits,
    then per limit: lid, algo, quota, period_us, burst
  then per request, to the end: key_index, cost, rule_index
with the meanings and bounds of decide.lua.

Reply: a flat array of integers: now_us, then per request: allowed, decider,
then remaining, retry_after_us, reset_us per limit of its rule, as in
decide.lua.

Bad arguments give an error reply ("ERR rl decide: ...") and write nothing.

The core below is shared, line for line, with decide.lua.
]]

-- ==== CORE ====
-- The build puts here the core of decide.lua, the lines from its
-- "BEGIN CORE" line to its "END CORE" line: one copy of the decision math.

-- Turns the flat ARGV into decide.lua's rules and requests, or returns
-- nil and a message. A value that is not a number becomes false here, and
-- validate() names it.
local function parse_plain(argv)
	local na = #argv
	local nrules = tonumber(argv[1])
	if type(nrules) ~= 'number' or nrules < 1 or nrules > MAX_RULES or nrules % 1 ~= 0 then
		return nil, fmt('ARGV[1]: nrules must be an integer in 1..%d', MAX_RULES)
	end
	local rules, pos = {}, 2
	for r = 1, nrules do
		local nl = tonumber(argv[pos])
		if type(nl) ~= 'number' or nl < 1 or nl > MAX_LIMITS or nl % 1 ~= 0 then
			return nil, fmt('rule %d: nlimits must be an integer in 1..%d', r, MAX_LIMITS)
		end
		local k = pos + 1
		if k + 5 * nl - 1 > na then
			return nil, fmt('rule %d: arguments missing', r)
		end
		local ls = {}
		for j = 1, nl do
			ls[j] = { argv[k], tonumber(argv[k + 1]) or false, tonumber(argv[k + 2]) or false,
			    tonumber(argv[k + 3]) or false, tonumber(argv[k + 4]) or false }
			k = k + 5
		end
		rules[r] = ls
		pos = k
	end
	local n3 = na - pos + 1
	if n3 < 3 or n3 % 3 ~= 0 then
		return nil, 'requests: need 3 arguments per request, at least one request'
	end
	local reqs = {}
	for i = 1, n3 do
		reqs[i] = tonumber(argv[pos + i - 1]) or false
	end
	return rules, reqs
end

-- parse_plain() for arguments that are all well formed, faster: s + 0
-- converts a number's text as tonumber(s) does (but -0 to 0, the same to
-- every check), and raises an error where tonumber would return nil (the
-- caller runs this in pcall). Returns nil when anything is amiss:
-- parse_plain() then says what.
local function parse_plain_fast(argv)
	local na = #argv
	local nrules = argv[1] + 0
	if nrules < 1 or nrules > MAX_RULES or nrules % 1 ~= 0 then
		return nil
	end
	local rules, pos = {}, 2
	for r = 1, nrules do
		local nl = argv[pos] + 0
		local k = pos + 1
		if nl < 1 or nl > MAX_LIMITS or nl % 1 ~= 0 or k + 5 * nl - 1 > na then
			return nil
		end
		local ls = {}
		for j = 1, nl do
			ls[j] = { argv[k], argv[k + 1] + 0, argv[k + 2] + 0, argv[k + 3] + 0, argv[k + 4] + 0 }
			k = k + 5
		end
		rules[r] = ls
		pos = k
	end
	local n3 = na - pos + 1
	if n3 < 3 or n3 % 3 ~= 0 then
		return nil
	end
	local reqs = {}
	for i = 1, n3 do
		reqs[i] = argv[pos + i - 1] + 0
	end
	return rules, reqs
end

local ok, rules, reqs = pcall(parse_plain_fast, ARGV)
local err
if not (ok and rules) then
	rules, reqs = parse_plain(ARGV)
	if not rules then
		err = reqs
	end
end
local out
if not err then
	out, err = run(KEYS, rules, reqs, now_us())
end
if err then
	return redis.error_reply('ERR rl decide: ' .. err)
end
return out
