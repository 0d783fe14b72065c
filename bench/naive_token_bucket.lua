-- SPDX-License-Identifier: Apache-2.0
--[[ naive_token_bucket.lua: the reference for what one decision costs Redis.

The token bucket as it is usually written for Redis: one hash per client
holding the tokens left and when they were counted, refilled by the time
elapsed on each call, one call per decision. It decides less than the
agent's library does (one limit, no weights, no Retry-After or reset,
tokens kept as floating point) and is measured only as a baseline:
`make bench` runs it with redis-benchmark, one EVALSHA per decision.

KEYS[1]  the client's hash
ARGV[1]  capacity (tokens)
ARGV[2]  refill rate (tokens per second)

Reply: 1 allowed, 0 refused.
]]

local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = t[1] + t[2] / 1000000
local h = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(h[1]) or capacity
local ts = tonumber(h[2]) or now
tokens = math.min(capacity, tokens + (now - ts) * rate)
local allowed = 0
if tokens >= 1 then
	tokens = tokens - 1
	allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(capacity / rate * 1000))
return allowed
