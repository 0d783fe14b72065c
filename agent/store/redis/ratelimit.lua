#!lua name=spoa_ratelimit_v8
-- SPDX-License-Identifier: Apache-2.0
--[[ ratelimit.lua: the Redis function library that decides rate limits, a
batch of requests per call, atomically (this file, whole: the functions'
contract, the state and the limits' math, then the calls: reading them,
deciding and writing). The agent loads it on every server it uses
(FUNCTION LOAD REPLACE) and calls

    FCALL rl8_decide 0 <requests> <rule 1> .. <rule R> [<keymap>] <key 1> .. <key K>

(rl8_decide_cluster on a Redis Cluster: the same, see "Cluster" below).
The library's name and its functions' carry the version of the layout of
their arguments (8); the values' layout has its own (3, as the agent's
key names say, "rl3:"). Agents of another layout on the same server load
and call their own library, and none replaces another's.

  requests  bytes, big-endian: 2 bytes, R (the number of rules, 1 .. 4096)
            plus its flags: 32768 when a keymap follows the rules; 16384
            when request ids follow the rules (and the keymap), 8 bytes
            per request, for limits of requests in flight; 8192 when the
            requests carry leases. Then 10 bytes per request (14 with
            leases; 1 .. 4096 requests):
    first_key  4 bytes: the 1-based position of the request's first key:
               limit j of its rule is kept under the key at position
               first_key + j - 1. Without a keymap, position i is key i;
               with one, the key the keymap names there
    cost       4 bytes: weight of the request, 1 .. 2^32-1
    rule       2 bytes: 1-based index of its rule among the R rules
    lease      4 bytes, only with leases: k, the most tokens the request
               takes beyond its cost for its agent to spend later, 0 .. 2^32-1
               (0: none), see "Leases"
  rule      msgpack array of 1 .. 64 limits, each [algo, quota, period_us,
            burst] or [algo, quota, period_us, burst, kept]
    algo       0 token bucket (GCRA), 1 sliding window counter, 2 fixed window,
               3 sliding log
    quota      N requests per period, 1 .. 2^47 (a log: 1 .. 65535, see
               "Storage"; the agent keeps it to 1000)
    period_us  P in microseconds, 1 .. 2^47
    burst      token bucket capacity, 0 means quota, 0 .. 2^47, with
               burst * period_us / quota <= 2^52 (windows ignore it:
               their capacity is the quota)
    kept       how its keys are kept: 0 (as without it) string keys with
               an expiry; 1 a token bucket (algo 0 only) packed, with
               the buckets of other clients, in a sorted set (see "Packed
               buckets"), its n (T = p/n below) at most 3; 2 string keys
               without an expiry (algo 0 to 3, see "Keys without an
               expiry")
  keymap    (only when R has 32768 added) 4 bytes per position, big-endian:
            the 1-based index of the key at that position. It lets requests
            whose limits are not all one client's (a rule with layers: a
            limit shared by every client, or counted per address) name a
            key they share once in a call, each at its own position.
  key       one string key per limit of a client: the agent names it
            "{<client>}<limit>" (14 bytes, the client's part a Cluster hash
            tag), so the keys of a client share a slot and a changed limit
            starts fresh instead of misreading old state. A key is one
            limit of one client: the agent names each key once in a call,
            and two requests of a client under one rule share their keys
            (the same first_key). A packed bucket's key is 23 or 24
            bytes: the name of its sorted set (13 or 14 bytes,
            "{TT}~IIIIIIII" or "{TTT}~IIIIIIII", a Cluster hash tag in
            it), then its member (10 bytes).

Requests are decided in order: a later request sees what an earlier one
took from any key they share. A rule's bytes are checked and its constants
computed once, then kept by the library (up to 256 distinct rules; the
agent sends each rule as the same bytes every time).

Reply: msgpack [now_us, results], results[i] = [allowed, decider, per_limit],
and [allowed, decider, per_limit, lease] for a request whose k > 0 (see
"Leases"), the numbers now_us, remaining, retry_after_us, reset_us and a
lease's extra as float64 (exact: all are integers below 2^53), allowed and
decider as fixints
  allowed    1 or 0; a request is all or nothing: when any of its limits
             refuses, none of its limits is charged. 2: not decided, its
             keys live on another Cluster node (decider and per_limit 0)
  decider    1-based index of the limit that decides: when refused, the
             refusing limit with the longest retry_after; when allowed, the
             limit with the fewest remaining; ties go to the lowest index
  per_limit  [remaining, retry_after_us, reset_us] per limit of the request's
             rule, in the rule's order, each limit evaluated on its own (a
             limit that would allow reports what it would leave, even when
             another limit refuses the request)
    remaining       whole requests of cost 1 left after this one, 0 if refused
    retry_after_us  0 when this limit allows; else the exact time until this
                    request would pass (a request heavier than the capacity
                    never passes: it gets one period)
    reset_us        time until this limit is full again
  A window (sliding or fixed) or a log also tells the time until more
  quota comes (the RateLimit field's t: until a request of cost
  remaining + 1 would pass, see window_more; for a log, until its oldest
  entry leaves), which the agent cannot work out from the rest, negated in
  the slot its result leaves unused: retry_after_us when it allows,
  remaining when it refuses. So such a limit's retry_after_us <= 0 and
  remaining <= 0 read as 0 (allowing; refused) and minus them is that time.
  A token bucket's slots hold only what they say: the agent derives its t
  from remaining and reset_us.
  lease      [extra, v_1 .. v_nl]: the tokens taken beyond the cost, and
             per limit of the rule, in its order, the value this request
             left in the limit's key when extra > 0 and the limit is a
             token bucket, as GET reads it (an integer as its digits, or
             the text "A+R", see "Storage"; a msgpack str: fixstr, or str 8
             from 32 bytes), else nil. The key holds it after the call
             unless a later request of the call changed it. A request with
             k = 0 has no lease element: its reply is the bytes of a call
             without leases.

Leases: an agent takes k more tokens for a busy client in the call that
decides one of its requests, spends them itself, and gives back those it
has not spent (rl8_return, below). A request allowed at its cost c takes
extra = min(k, the remaining of each of its limits after it): so many more
requests of cost 1 pass all of them. It takes none (extra 0) when refused,
when any limit of its rule is not a token bucket or a window (a log, a
limit of requests in flight or a penalty box: their state holds no
tokens to give back), or when a limit has nothing left. With extra > 0
every limit is evaluated again at c + extra from the value the
evaluation at c read, and it is that evaluation's value (and need, and
expiry) that is written; a later request of the call sees it. The reply's per_limit, decider and
'more' slots stay those of the evaluation at c: the extra tokens are the
client's own, and the agent reports what this request leaves to it.

Refund: rl8_refund (rl8_refund_cluster) gives back what requests took,
for the agent to undo a decision that another server refused (a rule
whose limits live on several servers):

    FCALL rl8_refund 0 <take_us> <requests> <rules...> [<keymap>] <keys...>

with take_us the `now_us` of the reply that took, and the requests as
taken (their ids too, after the rules, when they carried them). A token
bucket's TAT goes back by cost * T less the time since the
take (now - take_us), never below now (a bucket is never lifted above its
capacity: at full, the key is deleted); nothing when that is not
positive. Why less: a request decided between the take and the refund
may have found the bucket, as it would be without the take, full; then
time has absorbed a part of the reservation (it fills a bucket, it cannot
overfill it), and giving all of it back would lift the bucket over what
the limit allows. The take left the TAT at take_us + cost * T or later,
so by a moment t at most t - take_us of the reservation can have been
absorbed: what is given back is never more than the bucket still holds
of the take, and short of it by at most the refill of the time since the
take (about one round trip). A window's count goes down by cost in the window
the take counted it in, while that window still counts, never below 0
(counts absorb nothing). A log loses cost from its entry at take_us (the
take's, the entry gone when nothing is left of it; nothing when there is
no such entry, as when a clock step has moved the log since): the log
is then what it would be without the take, which lets through nothing
the limit would not. A limit of requests in flight loses the place the
take made, compared and set as rl8_return does a bucket: the request's
id ending take_us + period, the end the take gave it; a place the request
held before the take (its id sent again), or one changed since, stays. A
penalty box took nothing. Replies the number of keys it changed. Its
meaning does not change with leases: it undoes a decision split over
servers, and a lease's tokens go back through rl8_return.

Return: rl8_return (rl8_return_cluster) gives back a lease's unspent
tokens:

    FCALL rl8_return 0 <take_us> <expect> <requests> <rules...> [<keymap>] <keys...>

take_us the `now_us` of the reply that granted the lease, requests,
rules, keymap and keys as rl8_refund takes them (10 bytes per request, no
lease; cost: the tokens given back), and expect a msgpack array with one
entry per key position (1 .. K, or per position of the keymap): nil or
the string v_j of the grant's lease element. A token bucket's key is given
back only when its value is expect's exactly (nothing has written it since
the grant), and then whole: TAT back by cost * T, never below now (at
full, the key is deleted); untouched, it still holds all of the
reservation. Any other value is left as it is: between
the grant and the return another agent's request may have found the
bucket full and absorbed the lease's reservation (time fills a bucket, it
cannot overfill it), so a plain refund would lift the bucket over what
the limit allows; only an untouched key is known to still hold the
reservation. A window's count is given back as rl8_refund does (expect
ignored): the count of the window the grant counted the tokens in, while
that window counts, is exact to lower whatever else it has counted since. The keys are
compared one position at a time with their values then: a key named at
two positions is given back once. Replies the number of keys changed; on
a Cluster, a key of another node is skipped.

Charge: rl8_charge (rl8_charge_cluster) takes more from the keys of
requests whose response said they cost more than the estimate they were
admitted at:

    FCALL rl8_charge 0 <take_us> <requests> <rules...> [<keymap>] <keys...>

the arguments of rl8_refund, each request's cost the tokens beyond its
estimate (what cost less goes back through rl8_refund, whose rules keep
a limit from being lifted). A token bucket's TAT goes from max(TAT, now)
on by cost * T, at most to now + 2*cap*T: a bucket may owe a capacity
beyond empty, which later requests wait out (see "Clock steps": a
decision reads a TAT up to there as it is). A window's count in the
present window goes up by cost, at most to twice the quota (a window
counted earlier is carried over as a decision carries it); a packed
bucket's score likewise, its set's expiry moved on to cover it. Logs,
places in flight and bans are left as they are. The call is sent
once, never retried: a lost charge is counted by the agent. Replies the
number of keys written; on a Cluster, a key of another node is skipped.

Bad arguments give an error reply ("ERR rl decide: ...") and write nothing,
in every function: everything is checked before the first write.

Time is Redis's clock, read once per call (TIME), in integer microseconds.
Every quantity is an integer below 2^53, so Lua's doubles hold it exactly
(and string.format's %d, a C long here, prints it exactly); products that
could exceed that go through muldiv().

Clock steps: Redis's clock may step back (an NTP step, a failover to a
server whose clock is behind). A value then reads as written in the future,
which no write at the present makes, and would hold the client for the
whole step. Each limit owes at most what it holds over one period instead:
a token bucket whose TAT is past now + 2*cap*T is one a capacity in debt
(TAT = now + 2*cap*T, the most a charge leaves, see "Charge"); a window later than the present one has its counts in the
present one; a log's entries after now move back together, in order, the
newest to now; a place in flight ends at most period after now, a ban at
most its length after now. Each reading is the value's on the new clock
or a later one (the step is at least what the value is ahead), so none
lets through more than the limit allows. A request evaluates the value
so read, and writes it even when it is refused (the only write of a
refusal), so that the client's state runs on from the present instead of
staying in the future. The small skew of a failover is such a step too.

Storage: one string per key, and a key is needed until a moment its value
determines (its need), when its client is back to a full bucket or an empty
window:
  token bucket    the theoretical arrival time TAT = A + R/n, where T = p/n
                  is the emission interval period/quota in lowest terms and
                  0 <= R < n, as one integer, (A - EPOCH) * n + R (EPOCH is
                  2024-01-01): Redis keeps it in the key's object itself, a
                  call reads it with one conversion and writes it with
                  INCRBY. Where that integer would reach 2^53 (a large n, or
                  a clock before EPOCH) the text "A+R". Needed until
                  ceil(TAT)
  sliding window  "U:C:V": window start U - 2P, C requests in it, V in the
                  window before; needed until U (the end of the next window,
                  where C still weighs as the previous count)
  fixed window    "U:C": window start U - P, C requests in it; needed until U
  sliding log     the requests admitted in the last period, oldest first, in
                  binary: a header of 9 bytes, B (7 bytes: a time, the
                  log's base) and R0 (2 bytes), then 8 bytes per request,
                  its time as an offset from B (6 bytes) and the running
                  total of the costs up to it included (2 bytes), both
                  big-endian; totals are mod 2^16 and R0 is the total
                  before the first request, so the weight of any run of
                  requests is one subtraction (a log weighs at most its
                  quota, < 2^16). Requests of one microsecond are one
                  entry. B stays while the log has requests, unless an
                  offset would reach 2^48 (then B becomes the oldest's
                  time). Needed until its newest request leaves the window,
                  at its time + P. A log of k requests is 9 + 8k bytes, k
                  at most its quota; of its shape: k >= 1 whole, its
                  weight from k to the quota, its newest time below 2^53
A value past its need, or that does not have its limit's shape, is
equivalent to an absent one (a fresh client with a full bucket).

Expiry: a key expires at its need rounded up to the millisecond, then up
to a multiple of its limit's grid, 1/16 of its period (at least 1 ms, at
most 1 s): it outlives its need by less than a grid. The grid lets most
writes keep the expiry they find (the key's old value gives it, read as
its shape says), which costs Redis half of setting one. The agent's key
names carry the layout's version (see store_key_name): a layout whose
values or expiries mean something else must change them.

Packed buckets: a key of 116 bytes or so per client (Redis 7.0: the key
and its value, and an entry in each of the keyspace's and the expiries'
tables) is the most memory a client costs. A packed bucket is a member of
a sorted set that holds the buckets of all the clients of a tag under
one limit, its score the bucket's integer state (see "Storage", always an
integer: n <= 3 keeps it below 2^53 until 2119), some 20 bytes per client
in a small set. The set expires at or past the need of every member, on
a grid of the limit's step, an eighth of the bucket's depth in time (1 ms
to 60 s): a write whose need passes the step of the value it replaces
moves the set's expiry on (PEXPIREAT GT); a write that adds a member sets
the set's expiry when it has none or an earlier one, and removes the
members whose bucket is full (ZREMRANGEBYSCORE up to now). A set holds the
buckets in use and the few that filled up since its last new member, and
expires by itself once none is in use. Reading one costs a ZSCORE and
writing one a ZADD: a command more per decision than a key, which shares
the call's MGET. A refund or a return gives back to a packed bucket as to
a key (its score goes back, or the member leaves at full); the set's
expiry stays.

Keys without an expiry: a limit kept 2 writes its keys without one (how,
below), which saves Redis the entry of the expiries' table (42 bytes of
116 per key on Redis 7.0) and the work of setting it. A key's value says when its state is old (a
full bucket, a past window, a log's old entries): read as an absent key
is, whatever its age, so the decisions are the same. Redis must evict the
keys itself (maxmemory with an allkeys policy, see docs/redis.md). On one
server, a call writes all its keys kept 2 with one MSET, which removes
an expiry a key had; in a Cluster call each is written as one whose
expiry stays (INCRBY, SET KEEPTTL: an MSET there would have to name keys
of one slot only), and is written anew without one once it has expired;
a refund's write, on either, is one whose expiry stays (SET KEEPTTL).

Admin: the agent's look at and reset of a client's keys, when its rule
has a packed bucket (else MGET and DEL):

    FCALL rl8_peek <K> <key 1> .. <key K>     the value of each (a packed
                                              bucket's score), nil for none
    FCALL rl8_forget <K> <key 1> .. <key K>   deletes each (a packed
                                              bucket's member); the count

Cost, per call: the keys are read with one MGET (on a Cluster, one per
client, which may be another node's), each key written once at the end:
INCRBY when an integer state stays one and keeps its expiry (no text to
make, and Redis's cheapest write here), else SET with PXAT or KEEPTTL;
the keys without an expiry of a call on one server, with one MSET (a
command per call instead of one per key: 2,500 instructions per key
against some 6,000). The clients of one limit whose bucket was full
share their new value (now + the cost's interval): its digits are made
once for them.
A log reads a few of its entries (bisections: its oldest in the window,
and when it refuses, the moment enough have left) and writes its value
anew: string.sub and one struct.pack, copies in C of at most 8 bytes per
request of its quota.
A command called from Lua costs Redis some 6,000 instructions whatever it
does, a C call (tonumber, string.format) or a new table hundreds to
thousands: the hot path makes few of either, keeps its arrays from call
to call, and builds each request's reply with one struct.pack, or takes
the last one again when it says the same (a request of one limit: the
clients of a limit whose bucket was full answer alike within a call).
A request of one token bucket kept in a key, without a lease (the
common one), is decided in locals, without the general case's arrays.

Cluster: rl8_decide_cluster is registered with allow-cross-slot-keys, so
one call decides the clients of every slot its node serves. A client's
keys are read with redis.pcall; a client whose slot the node does not
serve (served elsewhere, moving, or the cluster down) is neither read nor
written, and its requests are answered allowed = 2 for the agent to send
them where the keys live. Any other error is raised as Redis gave it.
A packed bucket is asked for by its set's name: its own name is no key,
and in a slot being migrated only a key that exists (or has moved) says
where the bucket is.
]]

-- While the library loads, Redis offers it nothing but redis.register_function:
-- the libraries it uses are bound on the first call (bind()).
local floor, find, sub, match, fmt, byte, concat
local type, tonumber, unpack, maxn, pcall, error
local rcall, rpcall, mp_unpack, mp_unpack_one, spack, sunpack, error_reply

local function bind()
	floor = math.floor
	find, sub, match, fmt, byte = string.find, string.sub, string.match, string.format,
	    string.byte
	concat, maxn = table.concat, table.maxn
	-- (these names are the upvalues here: the globals come through _G)
	unpack, type, tonumber, pcall, error = _G.unpack, _G.type, _G.tonumber, _G.pcall, _G.error
	rcall, rpcall, error_reply = redis.call, redis.pcall, redis.error_reply
	mp_unpack, mp_unpack_one = cmsgpack.unpack, cmsgpack.unpack_one
	spack, sunpack = struct.pack, struct.unpack
end

local MAX_REQS = 4096
local MAX_RULES = 4096
local MAX_LIMITS = 64
local MAX_VALUE = 140737488355328 -- 2^47: quota, burst, period, stored counts
local TWO50 = 1125899906842624
local TWO52 = 4503599627370496
local TWO53 = 9007199254740992
local TWO54 = 18014398509481984
local TWO16 = 65536
local TWO48 = 281474976710656
-- a log's quota: its running totals are mod 2^16
local LOG_QUOTA_MAX = 65535
-- 2024-01-01T00:00:00Z in microseconds: a token bucket's state counts from it
local EPOCH = 1704067200000000
-- keys per MGET: unpack() puts them all on Lua's stack
local MGET_MAX = 4000
-- a packed bucket's n (T = p/n): its states are integers below 2^53
local PACKED_N_MAX = 3
-- a packed bucket's name: its set's name, then its member (this many
-- bytes); 23 or 24 bytes in all (a tag of 2 or 3 characters)
local PACKED_MEMBER_LEN = 10
local PACKED_NAME_MIN, PACKED_NAME_MAX = 23, 24

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

-- A limit as the library keeps it: { algo, quota, period, burst, grid }
-- and, for a token bucket, its constants: capacity, p and n (T = p/n in
-- lowest terms), capacity * T as tq + tr/n, and T itself as q1 + r1/n (the
-- cost of a request of 1). grid: its keys expire on multiples of this many
-- milliseconds (see "Expiry"), also kept in microseconds (l[16]).
local function limit_record(algo, quota, period, burst)
	local grid = floor(period / 16000)
	if grid < 1 then
		grid = 1
	elseif grid > 1000 then
		grid = 1000
	end
	local l = { algo, quota, period, burst, grid }
	if algo == 0 then
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
		l[6], l[7], l[8], l[9], l[10], l[11], l[12] = cap, p, n, tq, tr, q1, r1
		-- capacity * T in units of 1/n microsecond, for eval_token()'s
		-- common case: an integer, when below 2^52
		local cp = cap * p
		l[13] = cp < TWO50 and cp
		-- a capacity in debt beyond empty (see "Charge"): 2 * cap * T
		l[17], l[18] = muldiv(2 * cap, p, n)
	end
	l[16] = grid * 1000
	return l
end

-- Each evaluation returns allowed, remaining, retry_after_us, reset_us and,
-- when allowed, the key's new value, the need of the value it read (0
-- when it read none of its shape) and, for a token bucket, that value as a
-- number when it reads as one. A new value is needed until now + reset_us.
-- A token bucket's new value is a number (its integer form, see
-- "Storage"), or a string where that does not fit.

-- GCRA with the emission interval T = p/n kept exact: TAT is A + R/n.
local function eval_token(v, now, cost, l)
	local cap, p, n = l[6], l[7], l[8]
	local x = v and tonumber(v)
	-- The common case, counted in 1/n microseconds, where TAT's integer
	-- form x = (TAT - EPOCH) * n is the unit: with b = (now - EPOCH) * n,
	-- d = max(x - b, 0) is the part of the capacity in use, cost * T is
	-- cost * p and the capacity cp = l[13]; every quantity an integer below
	-- 2^53 (checked: else the general case below, which splits TAT into
	-- A + R/n). Its results are the general case's to the microsecond.
	local cp = l[13]
	if cp and cost <= cap and (not v or x and x >= 0 and x < TWO53 - n and x % 1 == 0) then
		local b = (now - EPOCH) * n
		if b >= 0 and b < TWO53 - cp then
			local d, old = 0, 0
			if x then
				if n == 1 then
					old = EPOCH + x
				else
					-- (x % n: exact, as x + n < 2^53, and n too much when
					-- the division rounded up, see muldiv())
					local r = x % n
					if r < 0 then
						r = r + n
					end
					old = EPOCH + (x - r) / n
					if r > 0 then
						old = old + 1
					end
				end
				if x > b then
					d = x - b
				end
			end
			-- (below 2^52, each % is exact and at least 0)
			if d <= 2 * cp then
				local e = d + cost * p
				if e <= cp then
					local y, reset = cp - e, e
					if n > 1 then
						local r = e % n
						reset = (e - r) / n
						if r > 0 then
							reset = reset + 1
						end
					end
					return true, (y - y % p) / p, 0, reset, b + e, old, x
				end
				local y, r = e - cp, d % n
				local used = (d - r) / n
				if r > 0 then
					used = used + 1
				end
				r = y % n
				return false, 0, (y - r) / n + (r > 0 and 1 or 0), used
			end
		end
	end
	-- d = max(TAT - now, 0) = dq + dr/n: the part of the capacity in use
	local dq, dr, old, whole = 0, 0, 0, nil
	if v then
		local a, r = nil, 0
		if x then
			-- (TAT - EPOCH) * n, a whole number below 2^53
			whole = x
			if x >= 0 and x < TWO53 and x % 1 == 0 then
				if n == 1 then
					a = EPOCH + x
				else
					local q
					q, r = divmod(x, n)
					a = EPOCH + q
				end
			end
		else
			local plus = find(v, '+', 1, true)
			if plus then
				a, r = tonumber(sub(v, 1, plus - 1)), tonumber(sub(v, plus + 1))
			end
		end
		if a and r then
			old = a
			if r ~= 0 then
				old = a + 1
			end
			-- a remainder that does not fit this limit's n is not its state
			if a >= now and a < TWO54 and a % 1 == 0 and r >= 0 and r < n and r % 1 == 0 then
				dq, dr = a - now, r
			end
		end
	end
	-- A bucket owes at most a capacity beyond empty (see "Clock steps"):
	-- a TAT past now + 2*cap*T reads as now + 2*cap*T, which a refusal
	-- writes too (fix).
	local tq, tr = l[9], l[10]
	local fix
	local dq2, dr2 = l[17], l[18]
	if dq > dq2 or (dq == dq2 and dr > dr2) then
		dq, dr = dq2, dr2
		local t0 = now - EPOCH + dq2
		local y = t0 * n + dr2
		if t0 >= 0 and y < TWO53 then
			fix = y
		else
			fix = fmt('%d+%d', now + dq2, dr2)
		end
	end
	local used = dq
	if dr > 0 then
		used = dq + 1
	end
	if cost > cap then
		return false, 0, l[3], used, fix, old, whole
	end
	-- the request is allowed when d + cost*T <= cap*T
	local iq, ir
	if cost == 1 then
		iq, ir = l[11], l[12]
	else
		iq, ir = muldiv(cost, p, n)
	end
	local nq, nr = dq + iq, dr + ir
	if nr >= n then
		nq = nq + 1
		nr = nr - n
	end
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
		-- the value: (TAT - EPOCH) * n + R, a number (see run()'s writes),
		-- or "A+R" where that would pass 2^53
		local t0 = now - EPOCH + nq
		local x = t0 * n + nr
		if t0 >= 0 and x < TWO53 then
			return true, left, 0, nq + (nr > 0 and 1 or 0), x, old, whole
		end
		return true, left, 0, nq + (nr > 0 and 1 or 0), fmt('%d+%d', now + nq, nr), old
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
	return false, 0, yq, used, fix, old, whole
end

-- A window's time until more quota (the RateLimit field's t): until a
-- request of cost k, one more than the remaining it reports, would pass,
-- with cur and prev the counts that stand once this request is decided,
-- rest = P - elapsed. 0 when such a request passes now, or never can (k
-- over the quota: nothing is counted). The agent cannot work it out from
-- the other numbers of a window's result, so it travels, negated, in the
-- slot that result leaves unused (see the reply above).
local function window_more(quota, period, rest, cur, prev, k)
	if k > quota then
		return 0
	end
	local room = quota - cur - k
	if room >= 0 then
		if prev == 0 then
			return 0
		end
		local wq, wr = muldiv(prev, rest, period)
		if wq < room or (wq == room and wr == 0) then
			return 0
		end
		-- within this window, once prev * (rest - t) <= room * P
		return rest - (muldiv(room, period, prev))
	end
	-- in the next window, where cur weighs as the previous count (cur > 0)
	return rest + period - (muldiv(quota - k, period, cur))
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
	local cur, prev, old, moved = 0, 0, 0, false
	if v then
		local u, c, pv = match(v, '^(%d+):(%d+):(%d+)$')
		-- digits convert (to inf when too many): s + 0, not the slower
		-- tonumber(s)
		if u then
			u, c, pv = u + 0, c + 0, pv + 0
			old = u
		end
		if u and u < TWO54 and c <= MAX_VALUE and pv <= MAX_VALUE then
			local s = u - 2 * period
			if s == ws then
				cur, prev = c, pv
			elseif s > ws then
				-- a later window: the clock stepped back (see "Clock
				-- steps"); its counts hold in this one, which a refusal
				-- writes too
				cur, prev, moved = c, pv, true
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
	local rest = period - e
	if cost > quota then
		return false, 0 - window_more(quota, period, rest, cur, prev, 1), period, reset,
		    moved and fmt('%d:%d:%d', ws + 2 * period, cur, prev) or nil, old
	end
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
		return true, left, 0 - window_more(quota, period, rest, cur + cost, prev, left + 1),
		    ws + 2 * period - now, fmt('%d:%d:%d', ws + 2 * period, cur + cost, prev), old
	end
	local retry
	if room >= 0 then
		-- within this window, once prev * (rest - t) <= room * P
		retry = rest - (muldiv(room, period, prev))
	else
		-- in the next window, where cur weighs as the previous count
		retry = rest + period - (muldiv(quota - cost, period, cur))
	end
	local more = retry
	if cost > 1 then
		more = window_more(quota, period, rest, cur, prev, 1)
	end
	return false, 0 - more, retry, reset,
	    moved and fmt('%d:%d:%d', ws + 2 * period, cur, prev) or nil, old
end

-- Fixed window over aligned windows [k*P, (k+1)*P).
local function eval_fixed(v, now, cost, quota, period)
	local e = now % period
	if e < 0 then
		e = e + period
	end
	local ws = now - e
	local left = period - e
	local cnt, old, moved = 0, 0, false
	if v then
		local u, c = match(v, '^(%d+):(%d+)$')
		if u then
			u, c = u + 0, c + 0
			old = u
		end
		if u and u < TWO54 and c <= MAX_VALUE then
			local s = u - period
			if s == ws then
				cnt = c
			elseif s > ws then
				-- a later window: the clock stepped back (see "Clock
				-- steps"); its count holds in this one, which a refusal
				-- writes too
				cnt, moved = c, c > 0
			end
		end
	end
	-- more quota (minus it in the unused slot, see window_more): only
	-- with the next window, or now for a request of cost 1 when a heavier
	-- one is refused
	if cnt + cost <= quota then
		return true, quota - cnt - cost, 0 - left, left,
		    fmt('%d:%d', ws + period, cnt + cost), old
	end
	local reset, more = 0, 0
	if cnt > 0 then
		reset = left
	end
	if cnt >= quota then
		more = left
	end
	local fix = moved and fmt('%d:%d', ws + period, cnt) or nil
	if cost > quota then
		return false, 0 - more, period, reset, fix, old
	end
	return false, 0 - more, left, reset, fix, old
end

-- Sliding log (see "Storage"): entry i (1-based) is at byte 2 + 8i of the
-- value. A request of cost c passes when the entries admitted less than P
-- ago weigh at most quota - c; each time it reports is when an entry
-- leaves, its time + P. Bisections read only a few entries.

-- The time until the entries lo .. k (hi = k) of the log v weigh at most
-- target, the oldest leaving first: the first entry whose leaving is
-- enough, found by bisection on the running totals (ck: the newest's).
local function log_wait(v, base, ck, lo, hi, target, period, now)
	while lo < hi do
		local mid = floor((lo + hi) / 2)
		local _, c = sunpack('>I6I2', v, 2 + 8 * mid)
		if (ck - c) % TWO16 <= target then
			hi = mid
		else
			lo = mid + 1
		end
	end
	return base + sunpack('>I6', v, 2 + 8 * lo) + period - now
end

-- Keeps entries f .. k of the log v (8 bytes each from byte 2 + 8f) as
-- offsets from nb rather than from base: the rare write whose offset
-- would reach 2^48. Returns them as a string.
local function log_rebase(v, f, k, base, nb)
	local t = {}
	for i = f, k do
		local o, c = sunpack('>I6I2', v, 2 + 8 * i)
		t[#t + 1] = spack('>I6I2', o + base - nb, c)
	end
	return concat(t)
end

local function eval_log(v, now, cost, quota, period)
	local k, base, c0, tk, ck, old = 0, 0, 0, 0, 0, 0
	if v then
		local len = #v
		local n = (len - 9) / 8
		if n >= 1 and n <= quota and n % 1 == 0 then
			local b, z = sunpack('>I7I2', v)
			local o, c = sunpack('>I6I2', v, len - 7)
			local w = (c - z) % TWO16
			if w >= n and w <= quota and b + o < TWO53 then
				k, base, c0, tk, ck = n, b, z, b + o, c
				old = tk + period
			end
		end
	end
	-- entries after now: the clock stepped back (see "Clock steps"). They
	-- move back together, in order, the newest to now, which a refusal
	-- writes too.
	local moved = false
	if tk > now then
		base, tk = base - (tk - now), now
		v = spack('>I7', base) .. sub(v, 8)
		moved = true
	end
	-- f: the oldest entry in the window (k + 1: none), whose time t has
	-- t + P > now; cf: the running total before it
	local f, cf, used, reset = k + 1, c0, 0, 0
	if k > 0 then
		local x = now - period - base
		if sunpack('>I6', v, 10) > x then
			f = 1
		elseif tk - base > x then
			local lo, hi = 2, k
			while lo < hi do
				local mid = floor((lo + hi) / 2)
				if sunpack('>I6', v, 2 + 8 * mid) > x then
					hi = mid
				else
					lo = mid + 1
				end
			end
			f = lo
		end
		if f <= k then
			if f > 1 then
				local _
				_, cf = sunpack('>I6I2', v, 2 + 8 * (f - 1))
			end
			used = (ck - cf) % TWO16
			reset = tk + period - now
		end
	end
	local at = now
	if cost <= quota and used + cost <= quota then
		local val
		if f > k then
			val = spack('>I7I2I6I2', at, 0, 0, cost)
		elseif at == tk then
			val = spack('>I7I2', base, cf) .. sub(v, 2 + 8 * f, -3) ..
			    spack('>I2', (ck + cost) % TWO16)
		elseif at - base < TWO48 then
			val = spack('>I7I2', base, cf) .. sub(v, 2 + 8 * f) ..
			    spack('>I6I2', at - base, (ck + cost) % TWO16)
		else
			local nb = base + sunpack('>I6', v, 2 + 8 * f)
			val = spack('>I7I2', nb, cf) .. log_rebase(v, f, k, base, nb) ..
			    spack('>I6I2', at - nb, (ck + cost) % TWO16)
		end
		-- more quota when the oldest leaves: this request, if alone
		local first = at
		if f <= k then
			first = base + sunpack('>I6', v, 2 + 8 * f)
		end
		return true, quota - used - cost, now - first - period, at + period - now, val, old
	end
	local more = 0
	if used >= quota then
		more = log_wait(v, base, ck, f, k, quota - 1, period, now)
	end
	local fix = moved and v or nil
	if cost > quota then
		return false, 0 - more, period, reset, fix, old
	end
	return false, 0 - more, log_wait(v, base, ck, f, k, quota - cost, period, now), reset, fix,
	    old
end

-- Requests in flight (algo 4): at most quota at once, each keeping its
-- place until its release (rl8_release) or for period at the latest. The
-- value: 16 bytes per request in flight, its id (8 bytes, as the agent
-- sends it) and when its place ends (microseconds, a float64); needed
-- until the last ends. A request without an id (nil) is not counted (its
-- place could never be given back); a request whose id holds a place
-- already passes without another. A refused request may retry when a
-- place frees, a response away: its retry_after is a second.
local NO_ID = '\0\0\0\0\0\0\0\0'
local cbuf = {}

local function eval_concurrency(v, now, id, quota, period)
	local n, live, last, old, has, moved = 0, 0, 0, 0, false, false
	local till = now + period
	if v and #v % 16 == 0 then
		for pos = 1, #v, 16 do
			local dl = sunpack('>d', v, pos + 8)
			if dl > old then
				old = dl
			end
			if dl > now then
				n = n + 1
				if dl > till then
					-- the clock stepped back (see "Clock steps"): the
					-- place ends within period, which a refusal writes too
					dl, moved = till, true
					cbuf[n] = sub(v, pos, pos + 7) .. spack('>d', till)
				else
					cbuf[n] = sub(v, pos, pos + 15)
				end
				if dl > last then
					last = dl
				end
				if id and sub(v, pos, pos + 7) == id then
					has = true
				end
			end
		end
	end
	live = n
	if id and not has then
		if live >= quota then
			return false, 0, 1000000, last > now and last - now or 0,
			    moved and concat(cbuf, '', 1, n) or nil, old
		end
		n = n + 1
		cbuf[n] = id .. spack('>d', now + period)
		last = now + period
		live = live + 1
	end
	local left = quota - live
	if left < 0 then
		left = 0
	end
	return true, left, 0, last > now and last - now or 0, concat(cbuf, '', 1, n), old
end

-- A penalty box (algo 5): the value is when the ban ends (microseconds);
-- refused until then, allowed after with nothing to write (NOWRITE). The
-- ban is put by rl8_penalize, for `length` (the limit's period): one that
-- ends later comes from a clock that stepped back (see "Clock steps") and
-- ends `length` after now, which the refusal writes.
local NOWRITE = {}

local function eval_ban(v, now, length)
	local till = v and tonumber(v)
	if till and till > now then
		if till - now > length then
			return false, 0, length, length, fmt('%d', now + length), 0
		end
		return false, 0, till - now, till - now
	end
	return true, 1, 0, 0, NOWRITE
end

-- v without the place of request id (its 8 bytes, or 16: the place's id
-- and end, the place one take made): the value left and whether it held
-- one.
local function concurrency_without(v, id)
	if #v % 16 ~= 0 then
		return v, false
	end
	local e = #id - 1
	for pos = 1, #v, 16 do
		if sub(v, pos, pos + e) == id then
			return sub(v, 1, pos - 1) .. sub(v, pos + 16), true
		end
	end
	return v, false
end

-- Returns nil when l is a valid limit, else what is wrong with it.
local function limit_error(l)
	if type(l) ~= 'table' or l[4] == nil or l[6] ~= nil or
	    (l[5] ~= nil and l[5] ~= 0 and l[5] ~= 1 and l[5] ~= 2) then
		return 'need [algo, quota, period_us, burst] or [algo, quota, period_us, burst, kept]'
	end
	local algo, quota, period, burst = l[1], l[2], l[3], l[4]
	if l[5] == 1 and algo ~= 0 then
		return 'only a token bucket is packed'
	end
	if l[5] == 2 and type(algo) == 'number' and algo > 3 then
		return 'a limit of requests in flight or a ban keeps its expiry'
	end
	if type(algo) ~= 'number' or algo < 0 or algo > 5 or algo % 1 ~= 0 then
		return 'algo must be 0, 1, 2, 3, 4 or 5'
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
	if algo == 3 and quota > LOG_QUOTA_MAX then
		return 'a log\'s quota must be at most 65535'
	end
	-- the bucket's depth in time, burst * period / quota, must stay below
	-- 2^53 once added to the clock
	if algo == 0 and burst > quota and burst / quota * period > TWO52 then
		return 'burst * period_us / quota exceeds 2^52'
	end
	return nil
end

-- A packed bucket's hash moves its expiry this many milliseconds past the
-- need that moves it (see "Packed buckets"): an eighth of the bucket's
-- depth in time, 1 ms to 60 s.
local function packed_step(l)
	local s = floor(l[6] * l[7] / l[8] / 8000)
	if s < 1 then
		return 1
	elseif s > 60000 then
		return 60000
	end
	return s
end

-- Rules by their bytes: checked and their constants computed once.
local rule_cache, rule_count = {}, 0

-- The limit records of a rule's bytes, or nil and what is wrong.
local function rule_of(bytes)
	local rule = rule_cache[bytes]
	if rule then
		return rule
	end
	local ok, ls, extra = pcall(mp_unpack, bytes)
	if not ok or extra ~= nil then
		return nil, 'bad msgpack'
	end
	local nl = type(ls) == 'table' and #ls
	if not nl or nl < 1 or nl > MAX_LIMITS or maxn(ls) ~= nl then
		return nil, fmt('need an array of 1 to %d limits', MAX_LIMITS)
	end
	rule = {}
	for j = 1, nl do
		local l = ls[j]
		local e = limit_error(l)
		if e then
			return nil, fmt('limit %d: %s', j, e)
		end
		local r = limit_record(l[1], l[2], l[3], l[4])
		if l[5] == 1 then
			-- (TAT's integer form stays below 2^53 until 2119 for n <= 3)
			if r[8] > PACKED_N_MAX then
				return nil, fmt('limit %d: a packed bucket needs quota / gcd(quota, period_us) <= %d',
				    j, PACKED_N_MAX)
			end
			r[14] = packed_step(r)
		else
			rule.plain = true
			r[15] = l[5] == 2
		end
		rule[j] = r
	end
	-- (a rule of one token bucket kept in a key: run()'s common case)
	rule.one_bucket = nl == 1 and rule[1][1] == 0 and not rule[1][14]
	if rule_count >= 256 then
		rule_cache, rule_count = {}, 0
	end
	rule_cache[bytes] = rule
	rule_count = rule_count + 1
	return rule
end

--[[ The calls: reading a call, deciding its requests in turn with the
evaluations above, writing what they took, and the refund. ]]

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

-- The value of limit l's key `name` at position p (packed or not), as
-- get_here() gives it.
local function limit_value(name, l, p, cluster)
	if l[14] then
		return get_packed(name, p, cluster)
	end
	return get_here(name, cluster)
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

-- A token bucket's stored value v, its TAT as (TAT - EPOCH) * n below
-- 2^53 or "a+r" past it, as a + r/n: whole microseconds and a remainder
-- below this limit's n; nil when v is no bucket of this n.
local function bucket_tat(v, n)
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
	if a and r and a < TWO54 and a % 1 == 0 and r >= 0 and r < n and r % 1 == 0 then
		return a, r
	end
	return nil
end

-- The value stored for a bucket whose TAT is a + r/n (bucket_tat's
-- forms); nil past 2^53 for a packed bucket, whose score cannot hold it.
local function bucket_value(a, r, n, packed)
	local t0 = a - EPOCH
	if t0 >= 0 and t0 * n + r < TWO53 then
		return fmt('%d', t0 * n + r)
	elseif packed then
		return nil
	end
	return fmt('%d+%d', a, r)
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
		local a, r = bucket_tat(v, n)
		if not a then
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
		local val = bucket_value(a, r, n, packed)
		if not val then
			return 0
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

-- The error of the first of the m requests of req (parsed from args) that
-- is malformed or names a packed bucket by a key of another length, or
-- nil: checked before anything is written.
local function requests_bad(args, req, m, nr, k0, np, mapped)
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
	local bad = requests_bad(args, req, m, nr, k0, np, mapped)
	if bad then
		return bad
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
			local v = limit_value(name, l, p, cluster)
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

-- Takes `cost` more from the key `name` of limit l, holding v (false:
-- none), for a charge settled above its estimate (see "Charge"): a token
-- bucket's TAT from max(TAT, now) on by cost * T, at most now + 2*cap*T;
-- a window's count in the present window up by cost, at most twice the
-- quota; a packed bucket's at position pos (see get_packed()). Returns 1
-- when it wrote the key, else 0 (a log, a place, a ban, or a value not of
-- the limit's shape).
local function charge_key(name, v, l, cost, now, pos)
	local algo, quota, period = l[1], l[2], l[3]
	if algo > 2 then
		return 0
	end
	local keep = l[15]
	if algo == 0 then
		local p, n = l[7], l[8]
		local a, r, old = now, 0, 0
		if v then
			a, r = bucket_tat(v, n)
			if not a then
				return 0
			end
			old = a + (r > 0 and 1 or 0)
			if a < now then
				a, r = now, 0
			end
		end
		local iq, ir = muldiv(cost, p, n)
		a, r = a + iq, r + ir
		if r >= n then
			a, r = a + 1, r - n
		end
		-- at most a capacity in debt
		local mq, mr = now + l[17], l[18]
		if a > mq or (a == mq and r > mr) then
			a, r = mq, mr
		end
		local val = bucket_value(a, r, n, l[14])
		if not val then
			return 0
		end
		if l[14] then
			-- (its set's expiry moved on past the new need, never back)
			write_packed(pos, (a - EPOCH) * n + r, l, now, old)
		elseif keep then
			rcall('SET', name, val, 'KEEPTTL')
		else
			rcall('SET', name, val, 'PXAT', expiry_ms(a + (r > 0 and 1 or 0), l[5]))
		end
		return 1
	end
	local ws = now - now % period
	local cur, prev = 0, 0
	local span = algo == 1 and 2 * period or period
	if v then
		local u, c, pv
		if algo == 1 then
			u, c, pv = match(v, '^(%d+):(%d+):(%d+)$')
		else
			u, c = match(v, '^(%d+):(%d+)$')
			pv = '0'
		end
		if not u then
			return 0
		end
		local st = u - span
		if st >= ws then
			cur, prev = c + 0, pv + 0
		elseif st == ws - period then
			prev = c + 0
		end
	end
	if algo == 2 then
		prev = 0
	end
	cur = cur + cost
	if cur > 2 * quota then
		cur = 2 * quota
	end
	local val
	if algo == 1 then
		val = fmt('%d:%d:%d', ws + span, cur, prev)
	else
		val = fmt('%d:%d', ws + span, cur)
	end
	if keep then
		rcall('SET', name, val, 'KEEPTTL')
	else
		rcall('SET', name, val, 'PXAT', expiry_ms(ws + span, l[5]))
	end
	return 1
end

-- Takes more for requests whose charge was settled above their estimate
-- (see "Charge"): the arguments of rl8_refund, each request's cost the
-- tokens taken beyond its estimate. Replies the number of keys written.
local function charge(args, cluster)
	local take = tonumber(args[1])
	if not take or take < 0 or take >= TWO53 or take % 1 ~= 0 then
		return fail('take_us must be an integer in 0..2^53')
	end
	local req, m, nr, k0, np, mapped = parse(args, 1, false)
	if not req then
		return fail(m)
	end
	local bad = requests_bad(args, req, m, nr, k0, np, mapped)
	if bad then
		return bad
	end
	local now = now_us()
	local changed = 0
	for i = 1, m do
		local ki, cost, rule = request_at(req, i, nr, np, 10)
		for j = 1, #rule do
			local p = ki + j - 1
			if mapped then
				p = kmap[p]
			end
			local name, l = args[k0 + p], rule[j]
			local v = limit_value(name, l, p, cluster)
			if v ~= nil then
				changed = changed + charge_key(name, v, l, cost, now, p)
			end
		end
	end
	return changed
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

register('rl8_decide', run, false)
register('rl8_decide_cluster', run, true)
register('rl8_refund', refund, false)
register('rl8_refund_cluster', refund, true)
register('rl8_return', give_back, false)
register('rl8_return_cluster', give_back, true)
register('rl8_charge', charge, false)
register('rl8_charge_cluster', charge, true)
register('rl8_penalize', penalize, false)
register('rl8_penalize_cluster', penalize, true)
register('rl8_release', release, false)
register('rl8_release_cluster', release, true)
-- (keys declared: the admin's are one client's, in one slot)
register('rl8_peek', peek, nil)
register('rl8_forget', forget, nil)
