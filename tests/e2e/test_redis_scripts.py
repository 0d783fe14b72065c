"""The Redis decision scripts (agent/store/redis/decide.lua and decide_plain.lua)
against a real redis-server, compared with an ideal model of the limits
written here with exact rational arithmetic.

Redis's clock cannot be set, so every reply is checked against the model
run at the now_us that the reply itself returns. One redis-server serves
the whole module (started on first use, stopped at exit); every test uses
client keys of its own.
"""

import atexit
import copy
import math
import os
import random
import shutil
import tempfile
import time
from fractions import Fraction

import harness
import lua_scripts
import mpack
from resp import Client, RespError, encode

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT_MP = lua_scripts.SCRIPT_MP

TB, SW, FW = 0, 1, 2
MS = 1000
S = 1000000

# ---------------------------------------------------------------- server


class _Redis:
    def __init__(self):
        if shutil.which("redis-server") is None:
            raise harness.Skip("redis-server is not installed")
        self.dir = tempfile.mkdtemp(prefix="rl-e2e-redis-")
        last = None
        for _ in range(3):
            self.port = harness.free_port()
            self.proc = harness.Proc(
                "redis", ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no", "--daemonize", "no",
                          "--dir", self.dir],
                os.path.join(self.dir, "redis.log"))
            try:
                harness.wait_port(self.port, timeout=5.0, proc=self.proc.popen)
                break
            except RuntimeError as e:  # the port was taken in between: again
                last = e
                self.proc.stop()
        else:
            raise RuntimeError("redis-server did not start: %s" % last)
        self.c = Client("127.0.0.1", self.port)
        self.sha_mp = self.c.command("SCRIPT", "LOAD", lua_scripts.msgpack_script()).decode()
        self.sha_plain = self.c.command("SCRIPT", "LOAD", lua_scripts.plain_script()).decode()

    def stop(self):
        try:
            self.c.close()
        except OSError:
            pass
        self.proc.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


_server = None


def redis():
    global _server
    if _server is None:
        _server = _Redis()
        atexit.register(_server.stop)
    return _server


def new_key():
    """A client key no other test (or earlier run on this server) uses."""
    return "rl:{%s}" % os.urandom(16).hex()


# ------------------------------------------------------- calling scripts


def to_rules(reqs):
    """Requests of the shape the tests write, [(key_index, cost, limits)],
    in the scripts' shape: (rules, flat). Equal lists of limits make one
    rule, in the order first seen; flat is key_index, cost, rule_index per
    request."""
    rules, index, flat = [], {}, []
    for ki, cost, ls in reqs:
        rule = tuple(tuple(l) for l in ls)
        if rule not in index:
            rules.append([list(l) for l in rule])
            index[rule] = len(rules)
        flat += [ki, cost, index[rule]]
    return rules, flat


def mp_arg(reqs):
    """decide.lua's ARGV[1] for requests of the tests' shape."""
    return mpack.packb(list(to_rules(reqs)))


def call_mp(keys, reqs, c=None):
    """decide.lua; returns (now_us, [(allowed, decider, [(rem, retry, reset)])])."""
    r = redis()
    raw = (c or r.c).command("EVALSHA", r.sha_mp, len(keys), *keys, mp_arg(reqs))
    now, results = mpack.unpackb(raw)
    return now, [(a, d, [tuple(p) for p in per]) for a, d, per in results]


def plain_layout(rules, flat):
    """decide_plain.lua's ARGV: nrules, then per rule nlimits and the five
    values of each limit, then the flat requests."""
    args = [len(rules)]
    for rule in rules:
        args.append(len(rule))
        for l in rule:
            args += list(l)
    return args + list(flat)


def plain_args(reqs):
    return plain_layout(*to_rules(reqs))


def call_plain(keys, reqs, c=None):
    """decide_plain.lua, its flat reply reshaped like call_mp's."""
    r = redis()
    flat = (c or r.c).command("EVALSHA", r.sha_plain, len(keys), *keys, *plain_args(reqs))
    assert all(isinstance(x, int) for x in flat), flat
    now, pos, out = flat[0], 1, []
    for _, _, ls in reqs:
        a, d = flat[pos], flat[pos + 1]
        pos += 2
        per = []
        for _ in ls:
            per.append(tuple(flat[pos:pos + 3]))
            pos += 3
        out.append((a, d, per))
    assert pos == len(flat), "reply longer than the requests: %r" % flat
    return now, out


CALLS = (("decide.lua", call_mp), ("decide_plain.lua", call_plain))


# ------------------------------------------------------------- the model


class Model:
    """The limits as their definitions say, in exact rationals.

    Token bucket: tokens refill continuously at quota/period up to the
    capacity (burst or quota); a fresh client has a full bucket. Sliding
    window: estimate = prev * (1 - elapsed/P) + cur over aligned windows.
    Fixed window: a count per aligned window. A request is all or nothing.
    A request heavier than a limit's capacity is refused with one period.
    """

    def __init__(self):
        self.st = {}

    def decide(self, now, keys, reqs):
        out = []
        for ki, cost, ls in reqs:
            key = keys[ki - 1]
            ev = [self._eval(key, l, now, cost) for l in ls]
            ok = all(e[0] for e in ev)
            if ok:
                for l, e in zip(ls, ev):
                    self.st[(key, l[0])] = e[4]
                dec = min(range(len(ev)), key=lambda j: (ev[j][1], j))
            else:
                dec = min((j for j in range(len(ev)) if not ev[j][0]),
                          key=lambda j: (-ev[j][2], j))
            out.append((1 if ok else 0, dec + 1, [(e[1], e[2], e[3]) for e in ev]))
        return out

    def _eval(self, key, l, now, cost):
        lid, algo, quota, period, burst = l
        st = self.st.get((key, lid))
        if algo == TB:
            return self._token(st, now, cost, quota, period, burst)
        return self._window(st, now, cost, quota, period, algo == SW)

    @staticmethod
    def _token(st, now, cost, quota, period, burst):
        cap = burst or quota
        rate = Fraction(quota, period)  # tokens per microsecond
        tokens = Fraction(cap) if st is None else min(cap, st[0] + (now - st[1]) * rate)

        def until_full(t):
            return math.ceil((cap - t) / rate)

        if cost > cap:
            return (False, 0, period, until_full(tokens), None)
        if tokens >= cost:
            left = tokens - cost
            return (True, math.floor(left), 0, until_full(left), (left, now))
        return (False, 0, math.ceil((cost - tokens) / rate), until_full(tokens), None)

    @staticmethod
    def _window(st, now, cost, quota, period, sliding):
        counts = dict(st or {})
        ws = now // period * period

        def est(t, cs):
            w = t // period * period
            cur = cs.get(w, 0)
            if not sliding:
                return Fraction(cur)
            return Fraction(cs.get(w - period, 0) * (period - (t - w)), period) + cur

        def first(pred, lo, hi):
            # the smallest t in [lo, hi] with pred(t); pred is monotonic
            assert pred(hi)
            while lo < hi:
                mid = (lo + hi) // 2
                if pred(mid):
                    hi = mid
                else:
                    lo = mid + 1
            return lo

        def reset(cs):
            return first(lambda t: est(now + t, cs) == 0, 0, 2 * period)

        e = est(now, counts)
        if e + cost <= quota:
            counts[ws] = counts.get(ws, 0) + cost
            counts = {w: c for w, c in counts.items() if w >= ws - period}
            return (True, math.floor(quota - e - cost), 0, reset(counts), counts)
        if cost > quota:
            return (False, 0, period, reset(counts), None)
        retry = first(lambda t: est(now + t, counts) + cost <= quota, 1, 3 * period)
        return (False, 0, retry, reset(counts), None)


# ---------------------------------------------------------------- checks


def check(call, model, keys, reqs, what=""):
    now, got = call(keys, reqs)
    want = model.decide(now, keys, reqs)
    if got != want:
        lines = ["%s: script and model differ at now_us=%d" % (what, now)]
        for i, (q, g, w) in enumerate(zip(reqs, got, want)):
            mark = "  " if g == w else "!!"
            lines.append("%s request %d %r\n     got  %r\n     want %r" % (mark, i + 1, q, g, w))
        raise AssertionError("\n".join(lines))
    return now, got


def run_timeline(lanes, steps, seed, sleeps, what):
    """Drives both scripts through the same random timeline, each on keys of
    its own, and checks every reply against its own model. A lane is
    (limits, costs, probability of a request in a step, at most per step)."""
    rng = random.Random(seed)
    keys = {name: [new_key() for _ in lanes] for name, _ in CALLS}
    models = {name: Model() for name, _ in CALLS}
    last = {name: 0 for name, _ in CALLS}
    tally = [0, 0]
    for step in range(steps):
        plan = []
        for li, (limits, costs, prob, most) in enumerate(lanes):
            for _ in range(most):
                if rng.random() < prob:
                    plan.append((li, rng.choice(costs)))
        if not plan:
            plan.append((0, lanes[0][1][0]))
        rng.shuffle(plan)
        for name, call in CALLS:
            ks, reqs = [], []
            for li, cost in plan:
                k = keys[name][li]
                if k not in ks:
                    ks.append(k)
                reqs.append((ks.index(k) + 1, cost, lanes[li][0]))
            now, got = check(call, models[name], ks, reqs,
                             "%s %s seed %d step %d" % (what, name, seed, step))
            assert now >= last[name], "Redis's clock went back"
            last[name] = now
            for a, _, _ in got:
                tally[a] += 1
        time.sleep(rng.choice(sleeps))
    # the timeline must exercise both answers, or it proves little
    assert tally[0] > 0 and tally[1] > 0, "allowed/refused tally %r" % tally
    return tally


def field(key, lid):
    v = redis().c.command("HGET", key, lid)
    return None if v is None else v.decode()


def hgetall(key):
    flat = redis().c.command("HGETALL", key)
    return {flat[i].decode(): flat[i + 1].decode() for i in range(0, len(flat), 2)}


def ceil_div(a, b):
    return -(-a // b)


# ----------------------------------------------------------------- tests


def test_plain_script_is_assembled_with_the_one_core():
    plain = lua_scripts.plain_script()
    assert lua_scripts.core(plain) == lua_scripts.core(lua_scripts.msgpack_script())
    assert plain.count("-- ==== BEGIN CORE") == 1 and lua_scripts.CORE_MARK not in plain


_DRIVER = """
local out, v = {}, {}
local i = 1
while i <= #ARGV do
	local lid, algo = ARGV[i], tonumber(ARGV[i + 1])
	local now, cost, quota, period, burst = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]),
	    tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6])
	local ok, rem, ret, res, val
	if algo == 0 then
		ok, rem, ret, res, val = eval_token(v[lid], now, cost, quota, period, burst)
	elseif algo == 1 then
		ok, rem, ret, res, val = eval_sliding(v[lid], now, cost, quota, period)
	else
		ok, rem, ret, res, val = eval_fixed(v[lid], now, cost, quota, period)
	end
	if ok then
		v[lid] = val
	end
	out[#out + 1] = string.format('%d %d %d %d', ok and 1 or 0, rem, ret, res)
	i = i + 7
end
return out
"""


def _core_driver():
    with open(SCRIPT_MP) as f:
        text = f.read()
    return text[text.index("-- ==== BEGIN CORE"):text.index("-- ==== END CORE ====")] + _DRIVER


def test_core_math_at_chosen_times_matches_model():
    """The evaluation functions of the core at times chosen here, with the
    extremes of the ranges (quota 2^40, 366 days, cost 2^32-1, deep
    buckets), where products exceed 2^53 and the exact paths matter."""
    rng = random.Random(505)
    day = 86400 * S
    specs = [
        (TB, 2 ** 40, 366 * day, 0), (TB, 999983, day, 0), (TB, 7, S, 0),
        (TB, 3, 2 ** 40 + 1, 6000), (TB, 1, 366 * day, 142), (TB, 2 ** 40 - 3, 1000, 2 ** 40),
        (TB, 1000003, 3600 * S + 7, 5000000), (SW, 2 ** 40, 366 * day, 0),
        (SW, 3000000007, day + 1, 0), (SW, 5, 1000, 0),
        (FW, 2 ** 40, 366 * day, 0), (FW, 7, 1000, 0),
    ]
    argv, steps = [], []
    for si, (algo, quota, period, burst) in enumerate(specs):
        assert burst <= quota or burst * period <= 2 ** 52 * quota, "outside the scripts' range"
        now = 1795000000000000 + rng.randrange(10 ** 12)
        cap = burst or quota
        for _ in range(40):
            now += rng.choice([0, 1, 7, rng.randrange(1000), rng.randrange(period // 3 + 1),
                               rng.randrange(period + 1), rng.randrange(2 * period + 1)])
            cost = min(rng.choice([1, 2, max(1, cap // 3), max(1, cap // 2), cap, cap + 1,
                                   rng.randrange(1, cap + 2)]), 2 ** 32 - 1)
            lid = "l%d" % si
            argv += [lid, algo, now, cost, quota, period, burst]
            steps.append((lid, algo, now, cost, quota, period, burst))
    got = redis().c.command("EVAL", _core_driver(), 0, *argv)
    model, key = Model(), "k"
    tally = [0, 0]
    for (lid, algo, now, cost, quota, period, burst), g in zip(steps, got):
        ok, rem, ret, res, new = model._eval(key, (lid, algo, quota, period, burst), now, cost)
        if ok:
            model.st[(key, lid)] = new
        tally[ok] += 1
        want = "%d %d %d %d" % (1 if ok else 0, rem, ret, res)
        assert g.decode() == want, ((lid, algo, now, cost, quota, period, burst), g, want)
    assert len(got) == len(steps)
    assert min(tally) > len(steps) // 5, tally


def test_core_muldiv_is_exact():
    rng = random.Random(606)
    cases = []
    for _ in range(300):
        d = rng.choice([rng.randrange(1, 1000), rng.randrange(1, 2 ** 30),
                        rng.randrange(1, 2 ** 52)])
        a = rng.randrange(0, 2 ** 47)
        bmax = min(2 ** 52, (2 ** 53 * d) // max(a, 1))
        b = rng.randrange(0, bmax)
        cases.append((a, b, d))
    cases += [(2 ** 47, 2 ** 47, 2 ** 51 - 1), (2 ** 52 - 1, 1, 2 ** 52 - 1), (3, 2 ** 51, 7)]
    script = _core_driver().replace(_DRIVER, """
local out = {}
for i = 1, #ARGV, 3 do
	local q, r = muldiv(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]))
	out[#out + 1] = string.format('%d %d', q, r)
end
return out
""")
    got = redis().c.command("EVAL", script, 0, *[x for c in cases for x in c])
    for (a, b, d), g in zip(cases, got):
        assert g.decode() == "%d %d" % divmod(a * b, d), (a, b, d, g)


def test_token_bucket_matches_model():
    lanes = [
        ([("t5", TB, 5, 500 * MS, 0)], [1, 1, 2], 0.8, 2),
        # emission interval 1s/7, not a whole number of microseconds
        ([("t7", TB, 7, 1 * S, 0)], [1, 3], 0.7, 1),
        ([("t3b6", TB, 3, 300 * MS, 6)], [1, 2, 4, 7], 0.7, 2),
        # capacity * interval far beyond 2^53 in units of 1/quota us
        ([("tbig", TB, 999983, 86400 * S, 0)], [1, 250000, 400000], 0.5, 1),
        ([("tb11", TB, 2, 250 * MS, 11)], [1, 3, 5], 0.6, 1),
        # a deep bucket (2^51 us): capacity * period beyond 2^52
        ([("tdeep", TB, 3, 2 ** 40 + 1, 6000)], [1, 2500], 0.5, 1),
    ]
    run_timeline(lanes, 45, 101, [0, 0.003, 0.01, 0.02, 0.04, 0.08, 0.2], "token bucket")


def test_windows_match_model():
    lanes = [
        ([("s5", SW, 5, 400 * MS, 0)], [1, 1, 2], 0.8, 2),
        ([("s7", SW, 7, 300 * MS, 0)], [1, 3, 8], 0.7, 1),
        ([("sbig", SW, 3000000000, 86400 * S, 0)], [1, 1000000000, 4294967295], 0.5, 1),
        ([("f4", FW, 4, 300 * MS, 0)], [1, 2], 0.8, 2),
        ([("f3", FW, 3, 200 * MS, 0)], [1, 4], 0.6, 1),
    ]
    run_timeline(lanes, 45, 202, [0, 0.003, 0.01, 0.02, 0.05, 0.1, 0.25], "windows")


def test_mixed_limits_all_or_nothing_match_model():
    lanes = [
        ([("t10", TB, 10, 2 * S, 0), ("s4", SW, 4, 300 * MS, 0), ("f6", FW, 6, 500 * MS, 0)],
         [1, 2], 0.8, 2),
        ([("f2", FW, 2, 250 * MS, 0), ("t9", TB, 9, 1 * S, 3)], [1, 2], 0.7, 2),
        # shares lid t10 with the first lane's limit on another client
        ([("t10", TB, 10, 2 * S, 0)], [1], 0.5, 1),
    ]
    run_timeline(lanes, 40, 303, [0, 0.005, 0.02, 0.05, 0.1], "mixed")


def test_all_or_nothing():
    minute, second = ("t10m", TB, 10, 60 * S, 0), ("t3s", TB, 3, 1 * S, 0)
    for name, call in CALLS:
        k = new_key()
        reqs = [(1, 1, [minute, second])] * 4
        now, got = call([k], reqs)
        assert [r[0] for r in got] == [1, 1, 1, 0], (name, got)
        assert [r[2][0][0] for r in got] == [9, 8, 7, 6], (name, got)
        assert [r[2][1][0] for r in got] == [2, 1, 0, 0], (name, got)
        assert got[3][1] == 2, "%s: the 3/1s limit must decide: %r" % (name, got[3])
        assert got[3][2][0][1] == 0 and got[3][2][1][1] == 333334, got[3]
        # the refused 4th took nothing: exactly 3 emission intervals stored
        assert field(k, "t10m") == "%d" % (now + 3 * 6 * S), (name, hgetall(k))
        assert field(k, "t3s") == "%d" % (now + 1 * S), (name, hgetall(k))
        now2, got2 = call([k], [(1, 1, [minute])])
        assert got2[0][:2] == (1, 1) and got2[0][2][0][0] == 6, (name, got2)
        assert got2[0][2][0][2] == 4 * 6 * S - (now2 - now), (name, now, now2, got2)


def test_weighted_cost():
    for name, call in CALLS:
        k = new_key()
        lim = [("t10", TB, 10, 1 * S, 0)]
        now, got = call([k], [(1, 3, lim)])
        assert got == [(1, 1, [(7, 0, 300000)])], (name, got)
        now2, got = call([k], [(1, 8, lim)])
        # 7 tokens plus what refilled since; 8 - that, at 10 per second
        if now2 - now < 100000:
            assert got[0][0] == 0
            assert got[0][2][0][1] == 100000 - (now2 - now), (name, now, now2, got)
        # heavier than the capacity: never passes, one period
        _, got = call([k], [(1, 11, lim)])
        assert got[0][0] == 0 and got[0][2][0][1] == 1 * S, (name, got)
        m = Model()
        k2 = new_key()
        for cost in (4, 5, 3, 2, 1):
            check(call, m, [k2], [(1, cost, [("s10", SW, 10, 1 * S, 0), ("f9", FW, 9, 1 * S, 0)])],
                  name + " windows cost")


def test_same_client_twice_in_one_batch():
    lim = [("t3", TB, 3, 1 * S, 0)]
    for name, call in CALLS:
        a, b = new_key(), new_key()
        reqs = [(1, 1, lim), (1, 1, lim), (2, 1, lim), (1, 1, lim), (1, 1, lim), (2, 2, lim)]
        now, got = call([a, b], reqs)
        assert [(r[0], r[2][0][0]) for r in got] == \
            [(1, 2), (1, 1), (1, 2), (1, 0), (0, 0), (1, 0)], (name, got)
        assert got[4][2][0][1] == 333334, (name, got)  # ceil(1s / 3)
        assert field(a, "t3") == "%d" % (now + 1 * S), (name, hgetall(a))
        m = Model()
        wl = [("s3", SW, 3, 1 * S, 0), ("f2", FW, 2, 1 * S, 0)]
        c = new_key()
        check(call, m, [c], [(1, 1, wl)] * 4, name + " windows twice")


def test_ttl_is_what_the_fields_need():
    r = redis()
    for name, call in CALLS:
        k = new_key()
        now, _ = call([k], [(1, 1, [("t10", TB, 10, 1 * S, 0)])] * 3)
        # PTTL counts from the current millisecond rounded down
        pttl = r.c.command("PTTL", k)
        assert 0 < pttl <= ceil_div(now + 300000, 1000) - now // 1000, (name, pttl)
        assert r.c.command("PEXPIRETIME", k) == ceil_div(now + 300000, 1000), name

        # emission interval 1s/7: TAT is now + 142857 + 1/7 us, needed to its ceiling
        k = new_key()
        now, _ = call([k], [(1, 1, [("t7", TB, 7, 1 * S, 0)])])
        assert field(k, "t7") == "%d+1" % (now + 142857), hgetall(k)
        assert r.c.command("PEXPIRETIME", k) == ceil_div(now + 142858, 1000), name

        k = new_key()
        now, _ = call([k], [(1, 1, [("s5", SW, 5, 1 * S, 0)])])
        end2 = now // S * S + 2 * S  # the end of the next window
        assert 0 < r.c.command("PTTL", k) <= end2 // 1000 - now // 1000, name
        assert r.c.command("PEXPIRETIME", k) == end2 // 1000, name
        assert field(k, "s5") == "%d:1:0" % end2, hgetall(k)

        k = new_key()
        now, _ = call([k], [(1, 1, [("f5", FW, 5, 1 * S, 0)])])
        end = now // S * S + S
        assert 0 < r.c.command("PTTL", k) <= end // 1000 - now // 1000, name
        assert r.c.command("PEXPIRETIME", k) == end // 1000, name

        # a later write of a short-lived limit keeps what the other field needs
        k = new_key()
        now, _ = call([k], [(1, 1, [("f1", FW, 1, 10 * S, 0)])])
        f1_end = now // (10 * S) * (10 * S) + 10 * S
        now2, _ = call([k], [(1, 1, [("t10", TB, 10, 1 * S, 0)])])
        if f1_end > now2:  # (else the window ended in between: f1 is gone)
            assert sorted(hgetall(k)) == ["f1", "t10"], (name, hgetall(k))
        want = max(f1_end if f1_end > now2 else 0, now2 + 100000)
        assert r.c.command("PEXPIRETIME", k) == ceil_div(want, 1000), (name, hgetall(k))


def test_stale_fields_go_and_keys_expire():
    r = redis()
    for name, call in CALLS:
        k = new_key()
        now, _ = call([k], [(1, 1, [("t100ms", TB, 1, 100 * MS, 0)])])
        assert r.c.command("EXISTS", k) == 1
        assert r.c.command("PEXPIRETIME", k) == ceil_div(now + 100000, 1000)
        time.sleep(0.25)
        assert r.c.command("EXISTS", k) == 0, (name, hgetall(k))
        # writing a limit drops the fields of the key that are past their need
        k = new_key()
        now, _ = call([k], [(1, 1, [("t100ms", TB, 1, 100 * MS, 0), ("f3s", FW, 5, 3 * S, 0)])])
        time.sleep(0.15)
        now2, _ = call([k], [(1, 1, [("g", FW, 5, 3 * S, 0)])])
        want = ["f3s", "g"] if now // (3 * S) == now2 // (3 * S) else ["g"]
        assert sorted(hgetall(k)) == want, (name, hgetall(k))
        # a refused request writes nothing and leaves the expiry alone
        k = new_key()
        now, _ = call([k], [(1, 1, [("t", TB, 1, 1 * S, 0)])])
        exp = r.c.command("PEXPIRETIME", k)
        before = hgetall(k)
        _, got = call([k], [(1, 1, [("t", TB, 1, 1 * S, 0)])])
        assert got[0][0] == 0 and hgetall(k) == before
        assert r.c.command("PEXPIRETIME", k) == exp


def test_clients_are_independent():
    lim = [("t3", TB, 3, 10 * S, 0), ("s2", SW, 2, 10 * S, 0)]
    for name, call in CALLS:
        a, b = new_key(), new_key()
        for _ in range(2):
            call([a], [(1, 1, lim)])
        _, got = call([a], [(1, 1, lim)])
        assert got[0][0] == 0 and got[0][1] == 2, (name, got)
        before = hgetall(a)
        _, got = call([b], [(1, 1, lim)])
        assert got[0][0] == 1 and [p[0] for p in got[0][2]] == [2, 1], (name, got)
        _, got = call([a, b], [(2, 1, lim), (1, 1, lim)])
        assert got[0][:2] == (1, 2) and [p[0] for p in got[0][2]] == [1, 0], (name, got)
        assert got[1][:2] == (0, 2), (name, got)
        assert hgetall(a) == before


def test_bad_arguments_write_nothing():
    r = redis()
    good_limit = ["t", TB, 10, S, 0]
    good = [[good_limit]]  # one rule of one limit
    bad_limit = ["t", 9, 1, 1, 0]
    k1, k2 = new_key(), new_key()
    wrong = new_key()
    r.c.command("SET", wrong, "not a hash")

    def mp(rules, reqs):
        return mpack.packb([rules, reqs])

    # (keys, ARGV[1], the start of the message after "rl decide: ", or None
    # where any message will do)
    bad_mp = [
        ([k1], b"\xc1", "ARGV[1]: bad msgpack"),             # never used byte
        ([k1], b"\x93\x01", "ARGV[1]: bad msgpack"),         # truncated array
        ([k1], mp(good, [1, 1, 1]) + b"\x01", "ARGV[1]: need exactly one"),  # two values
        # ARGV[1] not [rules, requests]
        ([k1], mpack.packb({"a": 1}), "ARGV[1]: need [rules, requests]"),
        ([k1], mpack.packb({"rules": good, "requests": [1, 1, 1]}),
         "ARGV[1]: need [rules, requests]"),
        ([k1], mpack.packb([good]), "ARGV[1]: need [rules, requests]"),
        ([k1], mpack.packb([good, [1, 1, 1], [1, 1, 1]]), "ARGV[1]: need [rules, requests]"),
        ([k1], mpack.packb([]), "ARGV[1]: need [rules, requests]"),
        ([k1], mpack.packb(7), "ARGV[1]: need [rules, requests]"),
        # the requests
        ([k1], mp(good, []), "requests: "),                  # no request
        ([k1], mp(good, {"a": 1}), "requests: "),
        ([k1], mp(good, 7), "requests: "),
        ([k1], mp(good, [1, 1]), "requests: "),              # not 3 per request
        ([k1], mp(good, [1, 1, 1, 1]), "requests: "),
        ([k1], mp(good, [1, 1, 1, None, 1, 1]), None),     # a hole
        ([k1], mp(good, [[1, 1, 1]]), None),               # nested as before
        ([k1], mp(good, [1, 1, 1] * 4097), "requests: "),
        ([k1], mp(good, [2, 1, 1]), "request 1: key_index"),  # key_index past KEYS
        ([k1], mp(good, [0, 1, 1]), "request 1: key_index"),
        ([k1], mp(good, [1, 0, 1]), "request 1: cost"),      # cost 0
        ([k1], mp(good, [1, 1.5, 1]), "request 1: cost"),
        ([k1], mp(good, [1, 2 ** 32, 1]), "request 1: cost"),
        ([k1], mp(good, [1, "1", 1]), "request 1: cost"),
        ([k1], mp(good, [1, 1, 0]), "request 1: rule_index"),  # rule_index 0
        ([k1], mp(good, [1, 1, 2]), "request 1: rule_index"),  # past the rules
        ([k1], mp(good, [1, 1, 1.5]), "request 1: rule_index"),
        ([k1], mp(good, [1, 1, "1"]), "request 1: rule_index"),
        # the rules
        ([k1], mp([], [1, 1, 1]), "rules: "),
        ([k1], mp({"a": good[0]}, [1, 1, 1]), "rules: "),
        ([k1], mp(7, [1, 1, 1]), "rules: "),
        ([k1], mp(good * 4097, [1, 1, 1]), "rules: "),
        ([k1], mp([[]], [1, 1, 1]), "rule 1: "),            # no limit
        ([k1], mp([7], [1, 1, 1]), "rule 1: "),
        ([k1], mp([[["l%d" % i, TB, 10, S, 0] for i in range(65)]], [1, 1, 1]), "rule 1: "),
        ([k1], mp([good_limit], [1, 1, 1]), "rule 1 limit 1: "),  # a limit, not a rule
        ([k1], mp([[["t", 3, 10, S, 0]]], [1, 1, 1]), "rule 1 limit 1: algo"),
        ([k1], mp([[["t", TB, 0, S, 0]]], [1, 1, 1]), "rule 1 limit 1: quota"),
        ([k1], mp([[["t", TB, 10, 0, 0]]], [1, 1, 1]), "rule 1 limit 1: period"),
        ([k1], mp([[["t", TB, 10, -S, 0]]], [1, 1, 1]), "rule 1 limit 1: period"),
        ([k1], mp([[["t", TB, 10, S, -1]]], [1, 1, 1]), "rule 1 limit 1: burst"),
        ([k1], mp([[["t", TB, 10, 2 ** 60, 0]]], [1, 1, 1]), "rule 1 limit 1: period"),
        ([k1], mp([[["t", TB, 1, 2 ** 46, 2 ** 20]]], [1, 1, 1]), "rule 1 limit 1: "),  # deep
        ([k1], mp([[["", TB, 10, S, 0]]], [1, 1, 1]), "rule 1 limit 1: lid"),
        ([k1], mp([[[7, TB, 10, S, 0]]], [1, 1, 1]), "rule 1 limit 1: lid"),
        ([k1], mp([[good_limit, good_limit]], [1, 1, 1]), "rule 1 limit 2: duplicate lid"),
        ([k1], mp([[["s", SW, 5, S, 0], good_limit, ["t", FW, 3, S, 0]]], [1, 1, 1]),
         "rule 1 limit 3: duplicate lid"),
        ([k1], mp([[["t", TB, 10, S]]], [1, 1, 1]), "rule 1 limit 1: "),        # short
        ([k1], mp([[["t", TB, 10, S, 0, 9]]], [1, 1, 1]), "rule 1 limit 1: "),  # long
        ([k1], mp([[["t", TB, None, S, 0]]], [1, 1, 1]), "rule 1 limit 1: quota"),
        ([k1], mp([[good_limit, None, ["u", TB, 10, S, 0]]], [1, 1, 1]), None),  # a hole
        # a rule no request uses is checked all the same
        ([k1], mp([[good_limit], [bad_limit]], [1, 1, 1]), "rule 2 limit 1: algo"),
        ([k1], mp([[good_limit], []], [1, 1, 1]), "rule 2: "),
        # a valid first request does not get written when the second is bad
        ([k1, k2], mp([[good_limit], [bad_limit]], [1, 1, 1, 2, 1, 2]), "rule 2 limit 1: algo"),
        ([k1, k2], mp(good, [1, 1, 1, 2, 0, 1]), "request 2: cost"),
        ([k1, k2], mp(good, [1, 1, 1, 2, 1, 2]), "request 2: rule_index"),
        (["rl:{nothex}"], mp(good, [1, 1, 1]), "key 1: "),
        (["other:{%s}" % ("a" * 32)], mp(good, [1, 1, 1]), "key 1: "),
        ([k1, "rl:{%s}" % ("a" * 31)], mp(good, [1, 1, 1]), "key 2: "),
        # a key of the wrong type fails before anything is written
        ([k1, wrong], mp(good, [1, 1, 1, 2, 1, 1]), "WRONGTYPE"),
    ]
    g = list(good_limit)
    # (keys, ARGV, as bad_mp)
    bad_plain = [
        ([k1], [], None),
        ([k1], [0], None),                                   # nrules 0
        ([k1], ["x"], None),
        ([k1], [1], None),                                   # nlimits missing
        ([k1], [1, 0, 1, 1, 1], None),                       # nlimits 0
        ([k1], [1, "x", *g, 1, 1, 1], None),
        ([k1], [1, 1, "t", 0, 10, S], None),                 # a short limit
        ([k1], [1, 1, *g], None),                            # no request
        ([k1], [1, 1, *g, 1, 1], None),                      # not 3 per request
        ([k1], [1, 1, *g, 1, 1, 1, "extra"], None),
        ([k1], [2, 1, *g, 1, 1, 1], None),                   # a rule missing
        ([k1], [1, 2, *g, 1, 1, 1], None),                   # a limit missing
        ([k1], [1, 1, "t", "zero", 10, S, 0, 1, 1, 1], "rule 1 limit 1: algo"),
        ([k1], [1, 1, "t", 0, "nan", S, 0, 1, 1, 1], "rule 1 limit 1: quota"),
        ([k1], [1, 1, "t", 0, "inf", S, 0, 1, 1, 1], "rule 1 limit 1: quota"),
        ([k1], [1, 1, "t", 0, 10, S, 0.5, 1, 1, 1], "rule 1 limit 1: burst"),
        ([k1], [1, 2, *g, *g, 1, 1, 1], "rule 1 limit 2: duplicate lid"),
        ([k1], [1, 1, *g, 2, 1, 1], "request 1: key_index"),
        ([k1], [1, 1, *g, 0, 1, 1], "request 1: key_index"),
        ([k1], [1, 1, *g, 1, 0, 1], "request 1: cost"),
        ([k1], [1, 1, *g, 1, 2 ** 32, 1], "request 1: cost"),
        ([k1], [1, 1, *g, 1, "x", 1], "request 1: cost"),
        ([k1], [1, 1, *g, 1, 1, 0], "request 1: rule_index"),
        ([k1], [1, 1, *g, 1, 1, 2], "request 1: rule_index"),
        ([k1], [1, 1, *g, 1, 1, 1.5], "request 1: rule_index"),
        ([k1], [2, 1, *g, 1, *bad_limit, 1, 1, 1], "rule 2 limit 1: algo"),  # unused
        ([k1, k2], [2, 1, *g, 1, "t", 0, 10, S, 5.5, 1, 1, 1, 2, 1, 2], "rule 2 limit 1: burst"),
        ([k1, k2], [1, 1, *g, 1, 1, 1, 2, 1, 0], "request 2: rule_index"),
        (["rl:{nothex}"], [1, 1, *g, 1, 1, 1], "key 1: "),
        ([k1, wrong], [1, 1, *g, 1, 1, 1, 2, 1, 1], "WRONGTYPE"),
    ]
    cases = [(r.sha_mp, keys, [arg], want) for keys, arg, want in bad_mp]
    cases += [(r.sha_plain, keys, args, want) for keys, args, want in bad_plain]
    cases.append((r.sha_mp, [k1], [], None))
    cases.append((r.sha_mp, [k1], [mp(good, [1, 1, 1]), b"more"], None))
    for sha, keys, args, want in cases:
        try:
            r.c.command("EVALSHA", sha, len(keys), *keys, *args)
        except RespError as e:
            msg = str(e)
            assert msg.startswith("ERR") or msg.startswith("WRONGTYPE"), msg
            if want == "WRONGTYPE":
                assert "WRONGTYPE" in msg, (msg, keys, args)
            else:
                assert "rl decide: " in msg, (msg, keys, args)
                if want is not None:
                    assert msg.split("rl decide: ", 1)[1].startswith(want), (msg, want, keys, args)
        else:
            raise AssertionError("no error for %r %r" % (keys, args))
        # (DBSIZE would not do: keys of other tests expire meanwhile)
        assert r.c.command("EXISTS", k1, k2) == 0, (keys, args)
        assert r.c.command("TYPE", wrong) == b"string"
    assert r.c.command("EXISTS", k1, k2) == 0
    # and the scripts still work
    _, got = call_mp([k1], [(1, 1, [tuple(good_limit)])])
    assert got == [(1, 1, [(9, 0, 100000)])], got


def test_foreign_field_values_count_as_fresh():
    r = redis()
    for name, call in CALLS:
        k = new_key()
        # garbage, a field of another shape, a remainder this limit cannot have
        r.c.command("HSET", k, "t", "junk", "s", "12:3", "f", "1:2:3", "t7", "%d+9" % (2 ** 52))
        _, got = call([k], [(1, 1, [("t", TB, 3, S, 0), ("s", SW, 3, S, 0),
                                    ("f", FW, 3, S, 0), ("t7", TB, 7, S, 0)])])
        assert got[0][0] == 1 and [p[0] for p in got[0][2]] == [2, 2, 2, 6], (name, got)
        assert sorted(hgetall(k)) == ["f", "s", "t", "t7"]


def test_window_from_a_clock_that_stepped_back_keeps_its_counts():
    r = redis()
    for name, call in CALLS:
        k = new_key()
        now, _ = call([k], [(1, 1, [("f", FW, 3, S, 0), ("s", SW, 3, S, 0)])])
        later = (now // S + 5) * S  # a window start seen by a clock ahead
        r.c.command("HSET", k, "f", "%d:3" % (later + S), "s", "%d:3:0" % (later + 2 * S))
        now, got = call([k], [(1, 1, [("f", FW, 3, S, 0)]), (1, 1, [("s", SW, 3, S, 0)])])
        end = now // S * S + S
        assert got[0] == (0, 1, [(0, end - now, end - now)]), (name, got)
        # in the next window the 3 weigh 3 * (1 - e/P): 2 + 1 fits at e = P/3
        assert got[1] == (0, 1, [(0, end - now + 333334, end + S - now)]), (name, got)


def test_scripts_agree_on_the_same_timeline():
    # periods long enough that the few milliseconds between the two calls
    # cannot change allowed, decider or remaining
    lim = [("t20", TB, 20, 3600 * S, 0), ("s12", SW, 12, 3600 * S, 0), ("f15", FW, 15, 3600 * S, 0)]
    rng = random.Random(404)
    ka = [new_key() for _ in range(3)]
    kb = [new_key() for _ in range(3)]
    for step in range(12):
        idx = [rng.randrange(3) for _ in range(rng.randint(1, 4))]
        costs = [rng.choice([1, 1, 2, 3]) for _ in idx]
        ks = sorted(set(idx))
        reqs = [(ks.index(i) + 1, c, lim) for i, c in zip(idx, costs)]
        _, a = call_mp([ka[i] for i in ks], reqs)
        _, b = call_plain([kb[i] for i in ks], reqs)

        def strip(res):
            return [(x[0], x[1], [p[0] for p in x[2]]) for x in res]
        assert strip(a) == strip(b), (step, a, b)


# ------------------------------------------------- argument checks, fuzzed

# Values that break the arguments wherever they land (or, for some, nowhere).
_ODD = [None, "1", "", "x" * 65, 1.5, -1, 0, 2 ** 32, 2 ** 47 + 1, float("nan"),
        float("inf"), -float("inf"), True, False, [], [1], {"a": 1}, 5.0, 3]


# Keys of the right shape (upper case hex) or not.
_ODD_KEYS = ["rl:{%s}" % ("A" * 32), "rl:{%s}" % ("a" * 31), "rl:{%s}" % ("g" * 32),
             "x:{%s}" % ("a" * 32), "rl:{%s}x" % ("a" * 32)]


def _odd(rng):
    """One of _ODD, a copy: a later break may change the arrays it holds."""
    return copy.deepcopy(rng.choice(_ODD))


def _lists(t):
    return [x for x in t if isinstance(x, list)] if isinstance(t, list) else []


def _random_case(rng):
    """A random (keys, rules, requests) of decide.lua's shape, often slightly
    wrong: a value replaced, an element added, dropped or turned into a
    hole, an array turned into a map, a bad key, a key_index or rule_index
    out of range, a lid twice in one rule. Lids repeat across rules, with
    the same or other values, and some rules no request uses (they are
    checked all the same)."""
    keys = [new_key() for _ in range(rng.randint(1, 3))]
    spec = {lid: [lid, rng.randint(0, 2), rng.choice([1, 7, 1000]),
                  rng.choice([1, 999, S]), rng.choice([0, 0, 5])] for lid in "abcde"}
    rules = []
    for _ in range(rng.randint(1, 3)):
        rule = []
        for lid in rng.sample("abcde", rng.randint(1, 4)):
            lim = list(spec[lid])
            if rng.random() < 0.2:
                lim[rng.randint(2, 4)] += 1  # same lid, other (valid) values
            rule.append(lim)
        rules.append(rule)
    reqs = []
    for _ in range(rng.randint(1, 4)):
        reqs += [rng.randint(1, len(keys)), rng.randint(1, 9), rng.randint(1, len(rules))]

    for _ in range(rng.choice([0, 1, 1, 1, 2])):
        # what to break: the rules, a rule, a limit, the requests, an index
        # in the requests, a key, a rule's lids
        kind = rng.randrange(8)
        if kind == 0:
            t = rules
        elif kind == 1:
            t = rng.choice(_lists(rules) or [rules])
        elif kind == 2:
            t = rng.choice([l for r in _lists(rules) for l in _lists(r)] or [rules])
        elif kind == 3:
            t = reqs
        elif kind == 4:
            if isinstance(reqs, list) and len(reqs) >= 3:
                # at the edges of the ranges, or just past them
                i = 3 * rng.randrange(len(reqs) // 3)
                if rng.random() < 0.5:
                    reqs[i] = rng.choice([0, len(keys), len(keys) + 1])
                else:
                    n = len(rules) if isinstance(rules, (list, dict)) else 1
                    reqs[i + 2] = rng.choice([0, n, n + 1])
            continue
        elif kind == 5:
            keys[rng.randrange(len(keys))] = rng.choice(_ODD_KEYS)
            continue
        elif kind == 6:
            # a lid twice in one rule, with the same or other values
            r = rng.choice(_lists(rules) or [[]])
            ls = _lists(r)
            if ls:
                dup = list(rng.choice(ls))
                if len(dup) > 2 and rng.random() < 0.5:
                    dup[2] = rng.choice([1, 7, 1000])
                r.insert(rng.randrange(len(r) + 1), dup)
            continue
        else:
            # the rules or the requests as a whole
            if rng.random() < 0.5:
                rules = _odd(rng)
            else:
                reqs = _odd(rng)
            continue
        if not isinstance(t, list):
            continue
        how = rng.randrange(6)
        if how <= 1 and t:
            t[rng.randrange(len(t))] = _odd(rng)
        elif how == 2:
            t.append(_odd(rng))
        elif how == 3 and t:
            del t[rng.randrange(len(t))]
        elif how == 4 and t:
            t.insert(rng.randrange(len(t) + 1), None)  # a hole
        elif t:
            t.append(t[0])  # a duplicate
    # arrays as maps: read by position all the same
    if rng.random() < 0.1:
        parents = [("rules", None)] + [(r, None) for r in _lists(rules)]
        parents += [(r, j) for r in _lists(rules) for j, l in enumerate(r) if isinstance(l, list)]
        parents.append(("reqs", None))
        where, j = rng.choice(parents)
        if where == "rules" and isinstance(rules, list):
            rules = {i + 1: v for i, v in enumerate(rules)}
        elif where == "reqs" and isinstance(reqs, list):
            reqs = {i + 1: v for i, v in enumerate(reqs)}
        elif isinstance(where, list) and j is None:
            i = rules.index(where)
            rules[i] = {i2 + 1: v for i2, v in enumerate(where)}
        elif isinstance(where, list):
            where[j] = {i2 + 1: v for i2, v in enumerate(where[j])}
    if rng.random() < 0.05 and _lists(rules) and _lists(rules)[0]:
        # a deep bucket: too deep (2^66 us), or just within (about 2^51 us)
        _lists(rules)[0][0] = rng.choice([["deep", TB, 1, 2 ** 46, 2 ** 20],
                                          ["deep", TB, 3, 2 ** 40 + 1, 6000]])
    return keys, rules, reqs


_CHECKS_DRIVER = """
local now = 1795000000000000
local out = {}
for i = 1, #ARGV do
	local case = cmsgpack.unpack(ARGV[i])
	local ok, res = pcall(decide, case[1], case[2], case[3], now)
	local fast = ok and res ~= nil
	local slow = validate(case[1], case[2], case[3]) == nil
	out[i] = (fast and 2 or 0) + (slow and 1 or 0)
end
return out
"""


def test_fast_checks_agree_with_validate():
    """decide() checks the arguments itself, faster than validate() (the
    reference, whose messages the scripts return); the two must accept
    exactly the same arguments. Then each script, called for real, must
    answer an error exactly for what validate() refuses, and write nothing
    when it does."""
    r = redis()
    rng = random.Random(707)
    cases = [_random_case(rng) for _ in range(1500)]
    script = _core_driver().replace(_DRIVER, _CHECKS_DRIVER)
    verdicts = r.c.command("EVAL", script, 0, *[mpack.packb(list(c)) for c in cases])
    assert len(verdicts) == len(cases)
    accepted = 0
    for (keys, rules, reqs), v in zip(cases, verdicts):
        assert v in (0, 3), ("decide() and validate() disagree (%d)" % v, keys, rules, reqs)
        accepted += v == 3
    assert 100 < accepted < len(cases) - 100, accepted
    for (keys, rules, reqs), v in zip(cases, verdicts):
        arg = mpack.packb([rules, reqs])
        try:
            r.c.command("EVALSHA", r.sha_mp, len(keys), *keys, arg)
        except RespError as e:
            assert v == 0, ("refused what validate() accepts", str(e), keys, rules, reqs)
            assert str(e).startswith("ERR rl decide: "), (str(e), keys, rules, reqs)
            fresh = [k for k in keys if k not in _ODD_KEYS]  # (others are shared)
            assert not fresh or r.c.command("EXISTS", *fresh) == 0, (keys, rules, reqs)
        else:
            assert v == 3, ("accepted what validate() refuses", keys, rules, reqs)


_PLAIN_DRIVER = """
local function same(a, b)
	if type(a) ~= type(b) then
		return false
	end
	if type(a) ~= 'table' then
		return a == b or (a ~= a and b ~= b)
	end
	if #a ~= #b then
		return false
	end
	for i = 1, #a do
		if not same(a[i], b[i]) then
			return false
		end
	end
	return true
end
local out = {}
for i = 1, #ARGV do
	local argv = cmsgpack.unpack(ARGV[i])
	local ok, frules, freqs = pcall(parse_plain_fast, argv)
	local srules, sreqs = parse_plain(argv)
	if not (ok and frules) then
		out[i] = srules and 1 or 0
	elseif same(frules, srules) and same(freqs, sreqs) then
		out[i] = 3
	else
		out[i] = 4
	end
end
return out
"""


def test_plain_fast_parse_agrees_with_parse_plain():
    """decide_plain.lua parses ARGV with s + 0 first (an error on text that
    is not a number) and falls back to parse_plain() (tonumber, a message);
    whatever the fast parse returns, rules and requests, must be exactly
    what parse_plain() returns."""
    text = lua_scripts.plain_script()
    a = text.index("-- ==== BEGIN CORE")
    b = text.index("local ok, rules, reqs = pcall(parse_plain_fast, ARGV)")
    core_end = text.index("-- ==== END CORE ====")
    script = text[a:core_end] + text[text.index("\n", core_end):b] + _PLAIN_DRIVER
    rng = random.Random(808)
    odd = ["x", "", "1.5", "-1", "0", "nan", "inf", " 7", "0x10", "1e3", "7 ", "-0", "+5",
           str(2 ** 47 + 1), str(2 ** 60)]
    cases = []
    for _ in range(400):
        _, rules, reqs = _random_case(random.Random(rng.random()))
        # what the flat layout can carry: arrays, limits of five values
        rules = [r for r in _lists(rules) if r and all(isinstance(l, list) and len(l) == 5
                                                        for l in r)]
        if not rules or not isinstance(reqs, list) or not reqs:
            continue
        args = [str(x) if not isinstance(x, str) else x for x in plain_layout(rules, reqs)]
        for _ in range(rng.choice([0, 0, 1, 2])):
            how = rng.randrange(4)
            if how <= 1:
                args[rng.randrange(len(args))] = rng.choice(odd)
            elif how == 2:
                args.append(rng.choice(odd))
            else:
                del args[rng.randrange(len(args))]
        cases.append(args)
    got = redis().c.command("EVAL", script, 0, *[mpack.packb(c) for c in cases])
    assert len(got) == len(cases)
    for args, v in zip(cases, got):
        assert v != 4, ("parse_plain_fast() and parse_plain() differ", args)
    assert got.count(3) > 100 and got.count(1) + got.count(0) > 50, \
        [got.count(x) for x in range(4)]


def test_msgpack_reply_is_canonical():
    """decide.lua builds its reply from pieces; the bytes must be those of
    the shortest encoding of every integer and array length, as
    cmsgpack.pack made them: more than 15 results, a request with more
    than 15 limits, and integers of every width."""
    keys = [new_key() for _ in range(3)]
    many = [("m%d" % i, TB, 2 ** i, S, 0) for i in range(17)]
    widths = [("w1", TB, 100, 10 * S, 0), ("w2", TB, 60000, 10 * S, 0),
              ("w3", SW, 10 ** 6, 2 ** 40, 0), ("w4", FW, 2 ** 40, 2 ** 36, 0)]
    reqs = [(1 + i % 3, 1 + i % 2, widths) for i in range(18)] + [(2, 1, many)]
    raw = redis().c.command("EVALSHA", redis().sha_mp, len(keys), *keys, mp_arg(reqs))
    now, results = mpack.unpackb(raw)
    assert raw == mpack.packb([now, results])
    assert len(results) == 19 and len(results[18][2]) == 17
    flat = [x for r in results for p in r[2] for x in p]
    for lo, hi in ((0, 127), (128, 255), (256, 65535), (65536, 2 ** 32 - 1), (2 ** 32, 2 ** 53)):
        assert any(lo <= x <= hi for x in flat), (lo, hi, flat)
    # and the decisions are the model's
    assert Model().decide(now, keys, reqs) == \
        [(a, d, [tuple(p) for p in per]) for a, d, per in results]


# ------------------------------------------------------------- measure


def _measure(batch, seconds=None, depth=16):
    """Prints decisions per second of each script with `batch` requests per
    EVALSHA, `depth` calls in flight on one connection; fails on an error
    reply. A smoke test under pipelining: `make bench` has the figures
    (RL_MEASURE_SECONDS=2 for a longer look)."""
    seconds = float(os.environ.get("RL_MEASURE_SECONDS", seconds or 0.25))
    r = redis()
    lim = [["t1m", TB, 1000000, 60 * S, 0], ["s1h", SW, 10000000, 3600 * S, 0]]
    pool = [new_key() for _ in range(4096)]
    line = []
    for name, sha in (("msgpack", r.sha_mp), ("plain", r.sha_plain)):
        # pre-encoded commands, so the client's own cost stays small
        cmds = []
        for i in range(64):
            keys = [pool[(i * batch + j) % len(pool)] for j in range(batch)]
            reqs = [(j + 1, 1, lim) for j in range(batch)]
            if sha == r.sha_mp:
                args = [mp_arg(reqs)]
            else:
                args = plain_args(reqs)
            cmds.append(("EVALSHA", sha, batch, *keys, *args))
        wire = [b"".join(encode(c) for c in cmds[i:i + depth]) for i in range(0, len(cmds), depth)]
        c = Client("127.0.0.1", r.port)
        try:
            c.command("CONFIG", "RESETSTAT")
            calls = 0
            t0 = time.monotonic()
            end = t0 + seconds
            i = 0
            while time.monotonic() < end:
                c.send(wire[i % len(wire)])
                for _ in range(depth):
                    rep = c.read_reply()
                    if isinstance(rep, RespError):
                        raise rep
                calls += depth
                i += 1
            wall = time.monotonic() - t0
            stats = c.command("INFO", "commandstats").decode()
        finally:
            c.close()
        usec = 0
        for ln in stats.splitlines():
            if ln.startswith("cmdstat_evalsha:"):
                usec = int(dict(kv.split("=") for kv in ln.split(":", 1)[1].split(","))["usec"])
        line.append("%s %.0f/s (server %.1f us/call, %.0f/s of server time)"
                    % (name, calls * batch / wall, usec / max(calls, 1),
                       calls * batch / (usec / 1e6) if usec else 0))
    print("  measure batch %2d: %s" % (batch, "; ".join(line)))


def test_measure_batch_1():
    _measure(1)


def test_measure_batch_16():
    _measure(16)


def test_measure_batch_64():
    _measure(64)
