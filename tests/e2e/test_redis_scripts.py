# SPDX-License-Identifier: Apache-2.0
"""The Redis function library that decides (agent/store/redis/ratelimit.lua)
against a real redis-server, compared with an ideal model of the limits
written here with exact rational arithmetic.

Redis's clock cannot be set, so every reply is checked against the model
run at the now_us that the reply itself returns. One redis-server serves
the whole module (started on first use, stopped at exit); every test uses
clients of its own, so keys never meet across tests.
"""

import atexit
import copy
import hashlib
import math
import os
import random
import shutil
import struct
import tempfile
import time
from fractions import Fraction

import harness
import lua_scripts
import mpack
from resp import Client, RespError, encode

TB, SW, FW, LG = 0, 1, 2, 3
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
        name = self.c.command("FUNCTION", "LOAD", "REPLACE", lua_scripts.library())
        assert name.decode() == lua_scripts.LIBRARY_NAME, name

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


def new_client():
    """A client no other test (or earlier run on this server) uses."""
    return os.urandom(8).hex()


# ------------------------------------------------------ calling the library


# A token bucket's state counts from here (the library's EPOCH).
EPOCH = 1704067200 * S


def tb_value(limit, a, r=0):
    """A token bucket's stored value for TAT = a + r/n: the integer
    (a - EPOCH) * n + r, or the text "a+r" where that would not be a whole
    number from 0 to 2^53."""
    _, quota, period, _ = limit[:4]
    n = quota // math.gcd(quota, period)
    x = (a - EPOCH) * n + r
    return "%d" % x if 0 <= x < 2 ** 53 else "%d+%d" % (a, r)


def key_of(client, limit):
    """The key of a client's limit, named by the limit's values, so that a
    changed limit is another key (the agent names it by a hash of them).
    A packed bucket's (a limit with a fifth element, 1): its set, "{" the
    tag "}~" and 8 characters of the limit's hash, then its member, 10
    more characters of the client. The tag is the client's first 2
    characters (256 tags here), or for a quarter of the clients (those
    whose first is 0 to 3) 3: those 2 and a "w" (as an agent names them
    with more than 4096 sets per limit), so both lengths meet in a call."""
    if len(limit) == 5 and limit[4] == 1:
        h = hashlib.sha256(repr(tuple(limit[:4])).encode()).hexdigest()[:8]
        tag = client[:2] + ("w" if client[0] in "0123" else "")
        name = "{%s}~%s%s" % (tag, h, client[2:12])
        assert is_packed(name), name
        return name
    if len(limit) == 5 and limit[4] == 2:
        # (a key of its own: see is_kept())
        return "{%s}%d.%d.%d.%d.k" % ((client,) + tuple(limit[:4]))
    return "{%s}%d.%d.%d.%d" % ((client,) + tuple(limit[:4]))


def is_kept(key):
    """A key written without an expiry (a limit whose fifth element is 2)."""
    return key.endswith(".k")


PACKED_MEMBER_LEN = 10


def is_packed(key):
    return ((len(key) == 23 and key[3:5] == "}~") or
            (len(key) == 24 and key[4:6] == "}~"))


def packed_parts(key):
    """A packed bucket's set and member."""
    return key[:-PACKED_MEMBER_LEN], key[-PACKED_MEMBER_LEN:]


def rule_bytes(limits):
    """A rule as the library takes it: a msgpack array of limits."""
    return mpack.packb([list(l) for l in limits])


def request_bytes(nrules, flat):
    """The <requests> argument: nrules, then first_key, cost and rule per
    request, big-endian."""
    return struct.pack(">H", nrules) + b"".join(struct.pack(">IIH", k, c, r) for k, c, r in flat)


def layout(reqs):
    """Requests of the shape the tests write, [(client, cost, limits)], as
    the library takes them: (the arguments after numkeys, the keys, the
    (first_key, cost, rule) of each request). Equal lists of limits make one
    rule, in the order first seen; a client's keys are named once and its
    requests share first_key, so a client keeps one rule per call, as the
    agent does."""
    rules, rindex, keys, first, flat = [], {}, [], {}, []
    for client, cost, limits in reqs:
        limits = tuple(tuple(l) for l in limits)
        if limits not in rindex:
            rules.append(rule_bytes(limits))
            rindex[limits] = len(rules)
        if client in first:
            fk, had = first[client]
            assert had == limits, "the tests keep a client to one rule per call"
        else:
            fk = len(keys) + 1
            first[client] = (fk, limits)
            keys += [key_of(client, l) for l in limits]
        flat.append((fk, cost, rindex[limits]))
    assert len(set(keys)) == len(keys), "a key named twice in one call"
    return [request_bytes(len(rules), flat)] + rules + keys, keys, flat


def layout_mapped(reqs):
    """layout() for requests whose limits are of several owners (a rule
    with layers): [(owners, cost, limits)], owners a tuple with one owner
    per limit. Each request's limits take positions of their own; the
    keymap names each position's key, each key named once (an owner's
    limit shared by several requests of the call)."""
    rules, rindex, keys, kindex, posmap, flat = [], {}, [], {}, [], []
    for owners, cost, limits in reqs:
        limits = tuple(tuple(l) for l in limits)
        if limits not in rindex:
            rules.append(rule_bytes(limits))
            rindex[limits] = len(rules)
        flat.append((len(posmap) + 1, cost, rindex[limits]))
        for o, l in zip(owners, limits):
            k = key_of(o, l)
            if k not in kindex:
                keys.append(k)
                kindex[k] = len(keys)
            posmap.append(kindex[k])
    head = struct.pack(">H", 0x8000 | len(rules))
    head += b"".join(struct.pack(">IIH", k, c, r) for k, c, r in flat)
    keymap = b"".join(struct.pack(">I", k) for k in posmap)
    return [head] + rules + [keymap] + keys, keys, flat


def _whole(x):
    """A number of the reply as an int: msgpack may carry it as a float
    (the agent reads both), which must then be a whole number below 2^53
    in magnitude (a window's time until more quota comes negated)."""
    if isinstance(x, float):
        assert x == int(x) and -2 ** 53 < x < 2 ** 53, x
        return int(x)
    assert isinstance(x, int) and not isinstance(x, bool), x
    return x


def parse_reply(raw):
    """(now_us, [(allowed, decider, [(rem, retry, reset)])]) from the reply's bytes;
    a request with a lease has a fourth element, (extra, (v_1, .. v_nl))."""
    now, results = mpack.unpackb(raw)
    out = []
    for res in results:
        a, d, per = res[:3]
        x = (_whole(a), _whole(d), [tuple(_whole(v) for v in p) for p in per])
        if len(res) == 4:
            extra, *vals = res[3]
            assert len(vals) == len(per) and all(v is None or isinstance(v, str)
                                                 for v in vals), res
            x += ((_whole(extra), tuple(vals)),)
        else:
            assert len(res) == 3, res
        out.append(x)
    return _whole(now), out


def fcall(args, fn="rl8_decide", c=None):
    """FCALL fn 0 *args, its reply parsed."""
    return parse_reply((c or redis().c).command("FCALL", fn, 0, *args))


def with_leases(args, ks):
    """The arguments of layout() or layout_mapped() with a lease per
    request: the flag 8192 in the requests' header, 4 bytes more per
    request (k, big-endian)."""
    head = args[0]
    assert (len(head) - 2) // 10 == len(ks) and (len(head) - 2) % 10 == 0
    out = struct.pack(">H", struct.unpack(">H", head[:2])[0] | 0x2000)
    for i, k in enumerate(ks):
        out += head[2 + 10 * i:12 + 10 * i] + struct.pack(">I", k)
    return [out] + args[1:]


def decide_args(reqs):
    """The arguments of a call deciding reqs: (client or owners, cost,
    limits) each, or (.., k) with a lease of at most k (then the call
    carries leases, 0 for a request without)."""
    base = [q[:3] for q in reqs]
    if base and isinstance(base[0][0], tuple):
        args = layout_mapped(base)[0]
    else:
        args = layout(base)[0]
    if any(len(q) > 3 for q in reqs):
        args = with_leases(args, [q[3] if len(q) > 3 else 0 for q in reqs])
    return args


def decide(reqs, fn="rl8_decide"):
    return fcall(decide_args(reqs), fn)


def get(key):
    """A key's value; a packed bucket's as its hash's field holds it."""
    if is_packed(key):
        v = redis().c.command("ZSCORE", *packed_parts(key))
    else:
        v = redis().c.command("GET", key)
    return None if v is None else v.decode()


def now_of_redis():
    """Redis's clock, in microseconds."""
    t = redis().c.command("TIME")
    return int(t[0]) * S + int(t[1])


def pexpiretime(key):
    return redis().c.command("PEXPIRETIME", key)


def ceil_div(a, b):
    return -(-a // b)


def grid_ms(period):
    """The expiry grid of a limit, in milliseconds."""
    return min(max(period // 16000, 1), 1000)


def expiry_ms(need, period):
    """When a key needed until `need` (microseconds) expires: rounded up to
    the millisecond, then to a multiple of its limit's grid."""
    g = grid_ms(period)
    return ceil_div(ceil_div(need, 1000), g) * g


# ------------------------------------------------------------- the model


class Model:
    """The limits as their definitions say, in exact rationals.

    Token bucket: tokens refill continuously at quota/period up to the
    capacity (burst or quota); a fresh client has a full bucket. Sliding
    window: estimate = prev * (1 - elapsed/P) + cur over aligned windows.
    Fixed window: a count per aligned window. Sliding log: the requests
    admitted less than P ago weigh at most the quota (see _log). A request
    is all or nothing. A request heavier than a limit's capacity is refused
    with one period. State is kept per key, as the library keeps it.
    """

    def __init__(self):
        self.st = {}  # key -> (limit, state, time of the write)
        self.written = []  # the keys the last decide() charged

    def decide(self, now, reqs):
        """The replies to reqs, (client or owners, cost, limits[, k]) each.
        A request with k > 0 that is allowed leases extra = min(k, the
        remaining of each limit) when its limits are all token buckets or
        windows: the keys take cost + extra, its reply is that of cost,
        and the lease element holds extra and each token bucket's value."""
        out = []
        self.written = []
        for q in reqs:
            client, cost, limits = q[:3]
            k = q[3] if len(q) > 3 else 0
            owners = client if isinstance(client, tuple) else (client,) * len(limits)
            keys = [key_of(o, l) for o, l in zip(owners, limits)]
            ev = [self.eval(key, tuple(l[:4]), now, cost) for key, l in zip(keys, limits)]
            ok = all(e[0] for e in ev)
            extra = 0
            if ok:
                took = ev
                if k and all(l[0] in (TB, SW, FW) for l in limits):
                    extra = min([k] + [e[1] for e in ev])
                if extra > 0:
                    took = [self.eval(key, tuple(l[:4]), now, cost + extra)
                            for key, l in zip(keys, limits)]
                    assert all(e[0] for e in took), (q, took)
                for key, l, e in zip(keys, limits, took):
                    self.st[key] = (tuple(l[:4]), e[4], now)
                    if key not in self.written:
                        self.written.append(key)
                dec = min(range(len(ev)), key=lambda j: (ev[j][1], j))
            else:
                dec = min((j for j in range(len(ev)) if not ev[j][0]),
                          key=lambda j: (-ev[j][2], j))
            res = (1 if ok else 0, dec + 1, [(e[1], e[2], e[3]) for e in ev])
            if k:
                vals = tuple(self.stored(key)[0] if extra and l[0] == TB else None
                             for key, l in zip(keys, limits))
                res += ((extra, vals),)
            out.append(res)
        return out

    def eval(self, key, l, now, cost):
        """(allowed, remaining, retry, reset, new state or None)."""
        algo, quota, period, burst = l
        st = self.st.get(key)
        state = st[1] if st else None
        if algo == TB:
            return self._token(state, now, cost, quota, period, burst)
        if algo == LG:
            return self._log(state, now, cost, quota, period)
        return self._window(state, now, cost, quota, period, algo == SW)

    def refund(self, now, take, reqs):
        """Gives back what reqs took at `take`: a token bucket's tokens at
        now plus the cost less what refills in the time since the take,
        deducted once per key and call (nothing while it is not all
        deducted), up to its capacity (a full
        bucket is no key); a window's count of the take's window, while the
        stored value holds that window, down to 0. Returns the number of
        keys changed."""
        owed = {}  # per key: the time since the take, deducted once
        changed = 0
        for client, cost, limits in reqs:
            owners = client if isinstance(client, tuple) else (client,) * len(limits)
            for o, l in zip(owners, limits):
                k = key_of(o, l)
                self._expire(k, now)
                owed.setdefault(k, [max(0, now - take)])
                changed += self._refund_key(now, take, k, cost, owed[k])
        return changed

    def _expire(self, k, now):
        """A key with an expiry (not kept, not packed) is gone from Redis
        once a call starts past it (Redis reads a function's keys at its
        start's millisecond, at or before the `now` the call reads), its
        state old whatever the model still holds: a fixed window's past
        window, a full bucket."""
        if k in self.st and not is_kept(k) and not is_packed(k):
            need = self.stored(k)[1]
            if now // 1000 > expiry_ms(need, self.st[k][0][2]):
                del self.st[k]

    def give_back(self, now, take, reqs, expect):
        """rl8_return: as refund(), but a token bucket's key only while its
        value is expect[key] (what the grant left there), compared at its
        turn. Returns the number of keys changed."""
        changed = 0
        for client, cost, limits in reqs:
            owners = client if isinstance(client, tuple) else (client,) * len(limits)
            for o, l in zip(owners, limits):
                k = key_of(o, l)
                if k not in self.st:
                    continue
                if l[0] == TB and self.stored(k)[0] != expect.get(k):
                    continue
                changed += self._refund_key(now, take, k, cost, None)
        return changed

    def _refund_key(self, now, take, k, cost, owed):
        if k not in self.st:
            return 0
        lim, st, t = self.st[k]
        algo, quota, period, burst = lim
        if algo == TB:
            cap = burst or quota
            rate = Fraction(quota, period)
            back = cost
            if owed is not None:
                # owed[0]: microseconds yet to deduct in this call
                back = cost - owed[0] * rate
                owed[0] = max(0, -back / rate)
                if back <= 0:
                    return 0
            left, at = st
            tokens = min(cap, left + (now - at) * rate) + back
            if tokens >= cap:
                del self.st[k]
            else:
                self.st[k] = (lim, (tokens, now), now)
            return 1
        ws, wt = take // period * period, t // period * period
        held = (wt, wt - period) if algo == SW else (wt,)
        if ws in held and ws in st:
            st = dict(st)
            st[ws] = max(0, st[ws] - cost)
            self.st[k] = (lim, st, t)
            return 1
        return 0

    def tat(self, key):
        """A token bucket's TAT (a Fraction of a microsecond), None when
        it has no key."""
        if key not in self.st:
            return None
        (_, quota, period, burst), s, t = self.st[key]
        return t + ((burst or quota) - s[0]) * Fraction(period, quota)

    def stored(self, key):
        """The value the library must keep under key, and until when (in
        microseconds) that value is needed."""
        (algo, quota, period, burst), s, t = self.st[key]
        if algo == TB:
            # TAT = A + R/n with T = p/n in lowest terms
            tat = self.tat(key)
            n = quota // math.gcd(quota, period)
            a = math.floor(tat)
            r = (tat - a) * n
            assert r.denominator == 1, (key, tat)
            return tb_value((algo, quota, period, burst), a, int(r)), math.ceil(tat)
        if algo == LG:
            return log_value(s), s.entries[-1][0] + period
        ws = t // period * period
        if algo == SW:
            u = ws + 2 * period
            return "%d:%d:%d" % (u, s.get(ws, 0), s.get(ws - period, 0)), u
        u = ws + period
        return "%d:%d" % (u, s[ws]), u

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
    def _log(st, now, cost, quota, period):
        """A sliding log by its definition: the weight at time x is that of
        the requests recorded at t with t + P > x; a request passes when the
        weight now plus its cost is at most the quota. It is recorded at
        now, or at the newest's time when the clock went back; what has
        left the window then is dropped (and never counts again). Each
        time is found by bisection over moments, as for the windows."""
        st = st or LogState(0, 0, [])

        def weight(x, entries):
            return sum(c for t, c in entries if t + period > x)

        def first(pred, lo, hi):
            assert pred(hi)
            while lo < hi:
                mid = (lo + hi) // 2
                if pred(mid):
                    hi = mid
                else:
                    lo = mid + 1
            return lo

        ents = st.entries
        # every moment that matters lies before the newest leaves
        hi = max([t + period - now for t, _ in ents] + [period]) + 1
        used = weight(now, ents)
        at = max([now] + [t for t, _ in ents])

        def until(k, entries):
            # until a request of cost k passes; 0 when it never can
            if k > quota:
                return 0
            return first(lambda d: weight(now + d, entries) + k <= quota, 0, hi)

        def reset(entries):
            return first(lambda d: weight(now + d, entries) == 0, 0, hi)

        if cost <= quota and used + cost <= quota:
            gone = [(t, c) for t, c in ents if t + period <= now]
            kept = [(t, c) for t, c in ents if t + period > now]
            assert ents[:len(gone)] == gone, "a log in order"
            if not kept:
                # nothing kept: the log starts over from this request
                new = LogState(at, 0, [(at, cost)])
            else:
                r0 = (st.r0 + sum(c for _, c in gone)) % 2 ** 16
                base = st.base
                if kept[-1][0] == at:
                    kept[-1] = (at, kept[-1][1] + cost)
                else:
                    if at - base >= 2 ** 48:
                        base = kept[0][0]
                    kept.append((at, cost))
                new = LogState(base, r0, kept)
            left = quota - used - cost
            return (True, left, -until(left + 1, new.entries), reset(new.entries), new)
        more = until(1, ents)
        if cost > quota:
            return (False, -more, period, reset(ents), None)
        return (False, -more, first(lambda d: weight(now + d, ents) + cost <= quota, 1, hi),
                reset(ents), None)

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

        def more(cs, k):
            # the RateLimit field's t: until a request of cost k (one more
            # than the remaining reported) passes; 0 when it passes now or
            # never can. The library sends it negated in the unused slot.
            if k > quota:
                return 0
            return first(lambda t: est(now + t, cs) + k <= quota, 0, 3 * period)

        e = est(now, counts)
        if e + cost <= quota:
            counts[ws] = counts.get(ws, 0) + cost
            counts = {w: c for w, c in counts.items() if w >= ws - period}
            left = math.floor(quota - e - cost)
            return (True, left, -more(counts, left + 1), reset(counts), counts)
        if cost > quota:
            return (False, -more(counts, 1), period, reset(counts), None)
        retry = first(lambda t: est(now + t, counts) + cost <= quota, 1, 3 * period)
        return (False, -more(counts, 1), retry, reset(counts), None)


class LogState:
    """A sliding log as the library stores it: base (B), the running total
    before the first entry (R0), and the entries [(time, cost)]."""

    def __init__(self, base, r0, entries):
        self.base, self.r0, self.entries = base, r0, list(entries)

    def __repr__(self):
        return "LogState(%d, %d, %r)" % (self.base, self.r0, self.entries)


def log_value(st):
    """A log's bytes: B in 7 bytes and R0 in 2, then per entry its offset
    from B in 6 bytes and the running total (mod 2^16) in 2, big-endian."""
    out, total = [struct.pack(">Q", st.base)[1:], struct.pack(">H", st.r0)], st.r0
    for t, c in st.entries:
        total = (total + c) % 2 ** 16
        assert 0 <= t - st.base < 2 ** 48
        out += [struct.pack(">Q", t - st.base)[2:], struct.pack(">H", total)]
    return b"".join(out)


def log_state(v):
    """A log's value read back (no check of its shape)."""
    base = int.from_bytes(v[:7], "big")
    r0 = prev = int.from_bytes(v[7:9], "big")
    entries = []
    for i in range(9, len(v), 8):
        off, tot = int.from_bytes(v[i:i + 6], "big"), int.from_bytes(v[i + 6:i + 8], "big")
        entries.append((base + off, (tot - prev) % 2 ** 16))
        prev = tot
    return LogState(base, r0, entries)


# ---------------------------------------------------------------- checks


def check_stored(model, keys):
    """Each of keys holds the model's value and expires where its need,
    rounded to its grid, says (a KEEPTTL write keeps an expiry that is
    that already). A key may have expired since, only past that moment."""
    cmds = []
    packed = [k for k in keys if is_packed(k)]
    keys = [k for k in keys if not is_packed(k)]
    if packed:
        check_packed(model, packed)
    for k in keys:
        cmds += [("GET", k), ("PEXPIRETIME", k)]
    reps = redis().c.pipeline(cmds + [("TIME",)])
    t = reps[-1]
    now_ms = int(t[0]) * 1000 + int(t[1]) // 1000
    for i, k in enumerate(keys):
        v, exp = reps[2 * i], reps[2 * i + 1]
        want, need = model.stored(k)
        want_exp = expiry_ms(need, model.st[k][0][2])
        if v is None or exp == -2:
            assert not is_kept(k), ("a key kept without an expiry is gone", k, want)
            assert want_exp <= now_ms, ("key gone before its expiry", k, want, want_exp, now_ms)
            continue
        got = v if isinstance(want, bytes) else v.decode()
        assert got == want, ("stored value", k, v, want)
        if is_kept(k):
            assert exp == -1, ("a key kept without an expiry has one", k, exp)
        else:
            assert exp == want_exp, ("expiry", k, want, exp, want_exp)


def packed_step_ms(limit):
    """A packed bucket's grid: an eighth of its depth in time, 1 ms to 60 s."""
    _, quota, period, burst = limit[:4]
    return min(max(int((burst or quota) * period / quota / 8000), 1), 60000)


def check_packed(model, keys):
    """Each packed bucket of keys holds the model's value in its set, or is
    gone only once its bucket is full; its set expires after that value's
    need, on a multiple of the limit's grid, and has only members (no
    other field)."""
    cmds = []
    for k in keys:
        h, f = packed_parts(k)
        cmds += [("ZSCORE", h, f), ("PEXPIRETIME", h), ("ZSCORE", h, "")]
    reps = redis().c.pipeline(cmds + [("TIME",)])
    t = reps[-1]
    now = int(t[0]) * S + int(t[1])
    for i, k in enumerate(keys):
        v, exp, other = reps[3 * i:3 * i + 3]
        want, need = model.stored(k)
        assert other is None, (k, other)
        if v is None:
            assert need <= now, ("a bucket gone before it is full", k, want, need, now)
            continue
        assert v.decode() == want, ("stored value", k, v, want)
        assert exp > 0 and exp * MS >= need, ("the set expires before its bucket's need",
                                              k, exp, need)
        assert exp % packed_step_ms(model.st[k][0]) == 0, ("off the grid", k, exp)


def check_absent(keys):
    for k in keys:
        assert get(k) is None, ("a full bucket is no key", k)


def check(model, reqs, what="", fn="rl8_decide", stored=True):
    """Calls the library with reqs, compares the reply with the model at
    the reply's now_us and, with stored, the keys it wrote."""
    now, got = decide(reqs, fn)
    want = model.decide(now, reqs)
    if got != want:
        lines = ["%s: library and model differ at now_us=%d" % (what, now)]
        for i, (q, g, w) in enumerate(zip(reqs, got, want)):
            mark = "  " if g == w else "!!"
            lines.append("%s request %d %r\n     got  %r\n     want %r" % (mark, i + 1, q, g, w))
        raise AssertionError("\n".join(lines))
    if stored:
        check_stored(model, model.written)
    return now, got


def run_timeline(lanes, steps, seed, sleeps, what, fn="rl8_decide"):
    """Drives the library through a random timeline and checks every reply,
    and the keys each call wrote, against the model. A lane is a client:
    (limits, costs, probability of a request in a step, at most per step)."""
    rng = random.Random(seed)
    clients = [new_client() for _ in lanes]
    model = Model()
    last = 0
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
        reqs = [(clients[li], cost, lanes[li][0]) for li, cost in plan]
        now, got = check(model, reqs, "%s %s seed %d step %d" % (what, fn, seed, step), fn)
        assert now >= last, "Redis's clock went back"
        last = now
        for a, _, _ in got:
            tally[a] += 1
        time.sleep(rng.choice(sleeps))
    # the timeline must exercise both answers, or it proves little
    assert tally[0] > 0 and tally[1] > 0, "allowed/refused tally %r" % tally
    return tally


# ----------------------------------------------------------------- tests


def test_library_registers_both_functions():
    lib = redis().c.command("FUNCTION", "LIST", "LIBRARYNAME", lua_scripts.LIBRARY_NAME)
    assert len(lib) == 1, lib
    info = dict(zip(lib[0][::2], lib[0][1::2]))
    fns = {}
    for f in info[b"functions"]:
        d = dict(zip(f[::2], f[1::2]))
        fns[d[b"name"].decode()] = sorted(x.decode() for x in d[b"flags"])
    assert fns == {"rl8_decide": [], "rl8_decide_cluster": ["allow-cross-slot-keys"],
                   "rl8_refund": [], "rl8_refund_cluster": ["allow-cross-slot-keys"],
                   "rl8_return": [], "rl8_return_cluster": ["allow-cross-slot-keys"],
                   "rl8_release": [], "rl8_release_cluster": ["allow-cross-slot-keys"],
                   "rl8_penalize": [], "rl8_penalize_cluster": ["allow-cross-slot-keys"],
                   "rl8_charge": [], "rl8_charge_cluster": ["allow-cross-slot-keys"],
                   "rl8_peek": [], "rl8_forget": []}, fns


def test_peek_and_forget_read_and_delete_packed_and_plain_keys():
    """The admin's look and reset: rl8_peek gives each key's value as GET
    does (a packed bucket's score), nil for none; rl8_forget deletes each
    (a packed bucket's member, its set's other members stay) and counts
    them."""
    tb, fw = packed((TB, 10, 10 * S, 0)), (FW, 5, 10 * S, 0)
    c = new_client()
    d = c[:2] + new_client()[2:]  # the same tag: the same set
    now, got = decide([((c, c), 1, (tb, fw)), ((d,), 2, (tb,))])
    assert [x[0] for x in got] == [1, 1], got
    keys = [key_of(c, tb), key_of(c, fw), "{%s}none" % c]
    vals = redis().c.command("FCALL", "rl8_peek", len(keys), *keys)
    assert vals[0].decode() == tb_value(tb, now + S) and vals[1].decode() == get(keys[1])
    assert vals[2] is None, vals
    assert redis().c.command("FCALL", "rl8_forget", len(keys), *keys) == 2
    assert redis().c.command("FCALL", "rl8_peek", 2, *keys[:2]) == [None, None]
    assert get(key_of(d, tb)) == tb_value(tb, now + 2 * S)


_DRIVER = """
bind()
local out, v = {}, {}
local i = 1
while i <= #ARGV do
	local id, algo = ARGV[i], tonumber(ARGV[i + 1])
	local now, cost, quota, period, burst = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]),
	    tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6])
	local ok, rem, ret, res, val, old
	if algo == 0 then
		ok, rem, ret, res, val, old = eval_token(v[id], now, cost,
		    limit_record(algo, quota, period, burst))
	elseif algo == 1 then
		ok, rem, ret, res, val, old = eval_sliding(v[id], now, cost, quota, period)
	elseif algo == 3 then
		ok, rem, ret, res, val, old = eval_log(v[id], now, cost, quota, period)
	else
		ok, rem, ret, res, val, old = eval_fixed(v[id], now, cost, quota, period)
	end
	if ok then
		v[id] = val
	end
	-- (a value may come as a number, which the library writes as digits;
	-- a log's bytes, in hex)
	if type(val) == 'number' then
		val = string.format('%d', val)
	elseif val and algo == 3 then
		val = val:gsub('.', function(c) return string.format('%02x', c:byte()) end)
	end
	-- (a refusal has a value only from a clock that stepped back, and
	-- the need of the value it read only then)
	out[#out + 1] = string.format('%d %d %d %d %s %d', ok and 1 or 0, rem, ret, res,
	    val or '-', (ok or val) and old or 0)
	i = i + 7
end
return out
"""


def _driver(driver):
    """An EVAL script: the library's code, then driver."""
    return lua_scripts.library_code() + driver


def test_core_math_at_chosen_times_matches_model():
    """The evaluation functions at times chosen here, with the extremes of
    the ranges (quota and period 2^47, 366 days, cost 2^32-1, a bucket 2^52
    us deep), where products exceed 2^53 and the exact paths matter. Each
    allowed step's new value must be the model's, and the need it reports
    of the value it read that of the previous step's value."""
    rng = random.Random(505)
    day = 86400 * S
    specs = [
        (TB, 2 ** 40, 366 * day, 0), (TB, 999983, day, 0), (TB, 7, S, 0),
        (TB, 3, 2 ** 40 + 1, 6000), (TB, 1, 366 * day, 142), (TB, 2 ** 40 - 3, 1000, 2 ** 40),
        (TB, 1000003, 3600 * S + 7, 5000000), (TB, 1, 2 ** 47, 32), (TB, 2 ** 47, 2 ** 47, 0),
        (TB, 2 ** 47 - 1, 3, 2 ** 47),
        (SW, 2 ** 40, 366 * day, 0), (SW, 3000000007, day + 1, 0), (SW, 5, 1000, 0),
        (SW, 2 ** 47, 2 ** 47, 0),
        (FW, 2 ** 40, 366 * day, 0), (FW, 7, 1000, 0), (FW, 2 ** 47, 2 ** 47 - 1, 0),
        (LG, 65535, 2 ** 47, 0), (LG, 1000, 366 * day, 0), (LG, 7, 1000, 0), (LG, 3, 1, 0),
        (LG, 1, 2 ** 47, 0),
    ]
    steps = []
    for si, (algo, quota, period, burst) in enumerate(specs):
        assert burst <= quota or burst * period <= 2 ** 52 * quota, "outside the library's range"
        now = 1795000000000000 + rng.randrange(10 ** 12)
        cap = burst or quota
        # (jumps bounded so that now + the deepest bucket stays below 2^53)
        span = min(period, 10 ** 13)
        for _ in range(40):
            now += rng.choice([0, 1, 7, rng.randrange(1000), rng.randrange(span // 3 + 1),
                               rng.randrange(span + 1), rng.randrange(2 * span + 1)])
            cost = min(rng.choice([1, 2, max(1, cap // 3), max(1, cap // 2), cap, cap + 1,
                                   rng.randrange(1, cap + 2)]), 2 ** 32 - 1)
            steps.append(("l%d" % si, (algo, quota, period, burst), now, cost))
    tally = check_steps(steps)
    assert min(tally) > len(steps) // 5, tally


def check_steps(steps):
    """Runs the evaluations of steps, (key, limit, now, cost) each, through
    the library at their times and checks each against the model: the
    decision, remaining, retry, reset, the new value and the need the
    library reports of the value it read (the previous step's value's).
    Returns [refused, allowed]."""
    argv = []
    for key, l, now, cost in steps:
        argv += [key, l[0], now, cost, l[1], l[2], l[3]]
    got = redis().c.command("EVAL", _driver(_DRIVER), 0, *argv)
    assert len(got) == len(steps)
    model = Model()
    tally = [0, 0]
    need = {}  # by key: the need of the value the library holds, 0 for none
    for (key, l, now, cost), g in zip(steps, got):
        ok, rem, ret, res, new = model.eval(key, l, now, cost)
        val, old = "-", 0
        if ok:
            old = need.get(key, 0)
            model.st[key] = (l, new, now)
            val, need[key] = model.stored(key)
            if isinstance(val, bytes):
                val = val.hex()
        tally[ok] += 1
        want = "%d %d %d %d %s %d" % (1 if ok else 0, rem, ret, res, val, old)
        assert g.decode() == want, ((key, l, now, cost), g, want)
    return tally


def test_token_bucket_within_a_microsecond_of_its_tat():
    """A bucket whose TAT is a fraction of a microsecond ahead (T = 18/5
    and 10/3 us): the part of the capacity in use is that fraction, not
    nothing, down to the last 1/n of a microsecond."""
    steps = []
    for si, (quota, period, burst) in enumerate([(5, 18, 0), (3, 10, 0), (5, 18, 2),
                                                  (7, 3, 0)]):
        t = 1795000000000000 + 1000 * si
        for dt, cost in [(0, 1), (3, 1), (3, 1), (4, 2), (10, 1), (11, 1), (11, 1), (12, 1),
                         (13, 3), (40, 1), (41, 1), (41, 5), (42, 1), (200, 1)]:
            steps.append(("f%d" % si, (TB, quota, period, burst), t + dt, cost))
    tally = check_steps(steps)
    assert min(tally) > 0, tally


def test_log_math_at_the_edges_of_the_window():
    """A log's requests made at the moments its entries leave the window,
    a microsecond before and after (with Redis's clock no test could aim
    there): each reply and value as the model says."""
    rng = random.Random(808)
    steps = []
    middle = 0  # moments an entry leaves with older ones gone, newer ones in
    for si, (quota, period) in enumerate([(5, 1000), (3, 7), (40, 100000), (12, 50)]):
        l = (LG, quota, period, 0)
        model = Model()
        key = "e%d" % si
        now = 1795000000000000 + rng.randrange(10 ** 6)
        for _ in range(150):
            st = model.st.get(key)
            ents = st[1].entries if st else []
            ends = [t + period + d for t, _ in ents for d in (-1, 0, 1)]
            ends = [t for t in ends if t >= now]
            if ends and rng.random() < 0.5:
                now = rng.choice(ends)
            else:
                now += rng.choice([0, 1, 1 + rng.randrange(period // 8 + 1)])
            middle += any(t + period == now for t, _ in ents[1:-1]) and \
                ents[0][0] + period < now
            cost = rng.choice([1, 1, 1, 2, quota, quota + 1])
            steps.append((key, l, now, cost))
            ok, _, _, _, new = model.eval(key, l, now, cost)
            if ok:
                model.st[key] = (l, new, now)
    assert middle > 10, middle
    tally = check_steps(steps)
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
    cases += [(2 ** 47, 2 ** 47, 2 ** 51 - 1), (2 ** 52 - 1, 1, 2 ** 52 - 1), (3, 2 ** 51, 7),
              (2 ** 47 - 1, 2 ** 47 - 3, 2 ** 42 + 15), (0, 2 ** 52, 3), (1, 1, 1)]
    script = _driver("""
bind()
local out = {}
for i = 1, #ARGV, 3 do
	local q, r = muldiv(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]))
	out[#out + 1] = string.format('%d %d', q, r)
end
return out
""")
    got = redis().c.command("EVAL", script, 0, *[x for c in cases for x in c])
    assert len(got) == len(cases)
    for (a, b, d), g in zip(cases, got):
        assert g.decode() == "%d %d" % divmod(a * b, d), (a, b, d, g)


def test_token_bucket_matches_model():
    lanes = [
        ([(TB, 5, 500 * MS, 0)], [1, 1, 2], 0.8, 2),
        # emission interval 1s/7, not a whole number of microseconds
        ([(TB, 7, 1 * S, 0)], [1, 3], 0.7, 1),
        ([(TB, 3, 300 * MS, 6)], [1, 2, 4, 7], 0.7, 2),
        # capacity * interval far beyond 2^53 in units of 1/quota us
        ([(TB, 999983, 86400 * S, 0)], [1, 250000, 400000], 0.5, 1),
        ([(TB, 2, 250 * MS, 11)], [1, 3, 5], 0.6, 1),
        # a deep bucket (2^51 us): capacity * period beyond 2^52
        ([(TB, 3, 2 ** 40 + 1, 6000)], [1, 2500], 0.5, 1),
        # emission intervals far below the expiry grid (100 us and 625 ms;
        # 50 us and 62 ms): most writes keep the expiry they find
        ([(TB, 100000, 10 * S, 0)], [1, 7, 30000, 60000], 0.8, 2),
        ([(TB, 20000, 1 * S, 0)], [1, 3, 5000, 15000], 0.8, 2),
    ]
    run_timeline(lanes, 45, 101, [0, 0.003, 0.01, 0.02, 0.04, 0.08, 0.2], "token bucket")


def test_windows_match_model():
    lanes = [
        ([(SW, 5, 400 * MS, 0)], [1, 1, 2], 0.8, 2),
        ([(SW, 7, 300 * MS, 0)], [1, 3, 8], 0.7, 1),
        ([(SW, 3000000000, 86400 * S, 0)], [1, 1000000000, 4294967295], 0.5, 1),
        ([(FW, 4, 300 * MS, 0)], [1, 2], 0.8, 2),
        ([(FW, 3, 200 * MS, 0)], [1, 4], 0.6, 1),
    ]
    run_timeline(lanes, 45, 202, [0, 0.003, 0.01, 0.02, 0.05, 0.1, 0.25], "windows")


_MIXED_LANES = [
    ([(TB, 10, 2 * S, 0), (SW, 4, 300 * MS, 0), (FW, 6, 500 * MS, 0)], [1, 2], 0.8, 2),
    ([(FW, 2, 250 * MS, 0), (TB, 9, 1 * S, 3)], [1, 2], 0.7, 2),
    # the first lane's token bucket, on another client
    ([(TB, 10, 2 * S, 0)], [1], 0.5, 1),
    ([(LG, 4, 300 * MS, 0), (TB, 10, 2 * S, 0)], [1, 2], 0.7, 2),
]


def test_mixed_limits_all_or_nothing_match_model():
    run_timeline(_MIXED_LANES, 40, 303, [0, 0.005, 0.02, 0.05, 0.1], "mixed")


def packed(limit):
    """A token bucket kept packed (see "Packed buckets")."""
    return tuple(limit[:4]) + (1,)


_PACKED_LANES = [
    ([packed((TB, 5, 500 * MS, 0))], [1, 1, 2], 0.8, 2),
    # T = 1s/3: n = 3, the most a packed bucket takes
    ([packed((TB, 3, 1 * S, 0))], [1, 2], 0.7, 1),
    ([packed((TB, 3, 300 * MS, 6))], [1, 2, 4, 7], 0.7, 2),
    ([packed((TB, 2, 250 * MS, 11))], [1, 3, 5], 0.6, 1),
    # a deep bucket (2^51 us) with n = 3
    ([packed((TB, 3, 2 ** 40 + 1, 6000))], [1, 2500], 0.5, 1),
    ([packed((TB, 100000, 10 * S, 0))], [1, 7, 30000, 60000], 0.8, 2),
    # a packed bucket beside a plain one, windows and a log: all or nothing
    ([packed((TB, 10, 2 * S, 0)), (SW, 4, 300 * MS, 0), (FW, 6, 500 * MS, 0)], [1, 2], 0.8, 2),
    ([(LG, 4, 300 * MS, 0), packed((TB, 12, 1 * S, 3)), (TB, 10, 2 * S, 0)], [1, 2], 0.7, 2),
]


def test_packed_buckets_match_model():
    """Packed token buckets decide as plain ones do, the model says so for
    each reply, and each bucket's value, its hash's expiry and mark are
    checked after each call. Clients share hashes (256 tags here), so
    fields come and go among others'."""
    for fn in lua_scripts.FUNCTIONS:
        run_timeline(_PACKED_LANES, 35, 404, [0, 0.003, 0.01, 0.02, 0.05, 0.1, 0.2],
                     "packed", fn)


def kept(limit):
    """A limit whose keys are written without an expiry (see "Keys without
    an expiry")."""
    return tuple(limit[:4]) + (2,)


_KEPT_LANES = [
    ([kept((TB, 5, 500 * MS, 0))], [1, 1, 2], 0.8, 2),
    ([kept((TB, 3, 1 * S, 0))], [1, 2], 0.7, 1),
    ([kept((TB, 7, 1 * S, 3))], [1, 2, 4], 0.7, 2),
    ([kept((SW, 4, 300 * MS, 0))], [1, 2], 0.8, 2),
    ([kept((FW, 6, 500 * MS, 0))], [1, 2, 3], 0.8, 2),
    ([kept((LG, 4, 300 * MS, 0))], [1, 2], 0.8, 2),
    # beside keys with an expiry and a packed bucket: all or nothing
    ([kept((TB, 10, 2 * S, 0)), (SW, 4, 300 * MS, 0), packed((TB, 6, 500 * MS, 0))], [1, 2],
     0.8, 2),
    ([kept((LG, 4, 300 * MS, 0)), (TB, 12, 1 * S, 3), kept((FW, 5, 400 * MS, 0))], [1, 2],
     0.7, 2),
]


def test_keys_without_expiry_match_model():
    """Limits whose keys are written without an expiry decide as the others
    do (the model says so for each reply), their keys hold the model's
    values and have no expiry, also once their state is old (a full
    bucket, a past window: read as an absent key is), while the keys of
    the same requests' other limits keep theirs."""
    for fn in lua_scripts.FUNCTIONS:
        run_timeline(_KEPT_LANES, 35, 505, [0, 0.003, 0.01, 0.02, 0.05, 0.1, 0.3, 0.6],
                     "kept", fn)


def test_packed_hash_expiry_and_sweep():
    """Clients of one tag share a limit's set. Its expiry covers every
    member's need, also when a call writes a later need before an earlier
    one, and moves on with a member's; a member whose bucket is full
    leaves when another member comes; the set expires by itself once no
    bucket in it is in use."""
    lim = packed((TB, 10, 10 * S + 10, 0))  # T = 1000001 us, a limit of this test only
    tag = new_client()[:2]
    a, b, c = (tag + new_client()[2:] for _ in range(3))
    h = packed_parts(key_of(a, lim))[0]
    assert h == packed_parts(key_of(b, lim))[0] == packed_parts(key_of(c, lim))[0]
    assert redis().c.command("EXISTS", h) == 0
    m = Model()
    # a's need 5 s away, b's 1 s: b's write comes after a's and must not
    # bring the set's expiry back
    check(m, [(a, 5, [lim]), (b, 1, [lim])], "a then b")
    exp = pexpiretime(h)
    assert exp * MS >= m.stored(key_of(a, lim))[1], exp
    # a's need moves by 2 s, past its grid step (1.25 s): the set's
    # expiry follows
    check(m, [(a, 2, [lim])], "a again")
    assert pexpiretime(h) > exp and pexpiretime(h) * MS >= m.stored(key_of(a, lim))[1]
    time.sleep(1.1)
    # b is full: c's new field sweeps it out, a stays
    assert get(key_of(b, lim)) is not None
    check(m, [(c, 1, [lim])], "c")
    assert get(key_of(b, lim)) is None and get(key_of(a, lim)) is not None
    assert redis().c.command("ZCARD", h) == 2  # a and c
    # a short bucket's hash: gone by itself soon after its need
    short = packed((TB, 5, 100 * MS + 5, 0))
    d = new_client()
    decide([(d, 1, [short])])
    hs = packed_parts(key_of(d, short))[0]
    assert redis().c.command("EXISTS", hs) == 1
    time.sleep(0.2)
    assert redis().c.command("EXISTS", hs) == 0


def test_logs_match_model():
    """Sliding logs through random timelines: two requests of a client in
    one call (one microsecond: one entry), weights, a cost over the quota,
    a log with a window, logs of 1000 and of 65535 (the library's bound),
    each reply and each value and expiry written as the model says."""
    lanes = [
        ([(LG, 5, 400 * MS, 0)], [1, 1, 2], 0.8, 2),
        ([(LG, 3, 200 * MS, 0)], [1, 4], 0.7, 1),
        ([(LG, 12, 600 * MS, 0), (FW, 8, 300 * MS, 0)], [1, 3], 0.7, 2),
        ([(LG, 1000, 1 * S, 0)], [1, 300, 700], 0.6, 2),
        ([(LG, 65535, 3600 * S, 0)], [1, 30000, 65535], 0.5, 1),
    ]
    run_timeline(lanes, 40, 707, [0, 0.003, 0.01, 0.02, 0.05, 0.1, 0.2], "logs")


def test_cluster_function_on_a_standalone_server_decides_like_rl8_decide():
    """rl8_decide_cluster reads each client's keys on its own (pcall): on a
    server that serves every slot it must decide exactly as rl8_decide."""
    tally = run_timeline(_MIXED_LANES, 30, 313, [0, 0.005, 0.02, 0.05, 0.1], "mixed",
                         fn="rl8_decide_cluster")
    assert tally[0] + tally[1] > 30
    # the same batches through both, on twin clients: periods long enough
    # that the moments between the two calls change no decision
    lim = [(TB, 20, 3600 * S, 0), (SW, 12, 3600 * S, 0), (FW, 15, 3600 * S, 0)]
    rng = random.Random(404)
    ca = [new_client() for _ in range(3)]
    cb = [new_client() for _ in range(3)]
    for step in range(12):
        plan = [(rng.randrange(3), rng.choice([1, 1, 2, 3])) for _ in range(rng.randint(1, 5))]
        _, a = decide([(ca[i], c, lim) for i, c in plan], "rl8_decide")
        _, b = decide([(cb[i], c, lim) for i, c in plan], "rl8_decide_cluster")

        def strip(res):
            # remaining as the agent reads it: a refusing window's slot
            # holds minus its (time-dependent) time until more quota
            return [(x[0], x[1], [max(p[0], 0) for p in x[2]]) for x in res]
        assert strip(a) == strip(b), (step, a, b)
        assert all(x[0] in (0, 1) for x in b), b


def test_cluster_function_reads_each_key_once_per_call():
    """rl8_decide_cluster reads a key on its first use in a call, whatever
    the request that names it: requests whose keys overlap (first_key 1
    over keys 1..2, then first_key 2 over keys 2..3) or a longer rule
    from the same first_key see what the call took before, never a value
    read again from Redis nor one left by an earlier call. (The agent
    sends neither shape; the library stays exact under both.)"""
    tb = (TB, 10, 3600 * S, 0)
    for fn in lua_scripts.FUNCTIONS:
        c = new_client()
        k = ["{%s}k%d" % (c, i) for i in (1, 2, 3)]
        r1, r2 = rule_bytes([tb, tb]), rule_bytes([tb, tb, tb])
        # request 1 takes 1 from keys 1 and 2, request 2 from keys 2 and 3:
        # key 2 has given 2
        _, got = fcall([request_bytes(2, [(1, 1, 1), (2, 1, 1)]), r1, r2] + k, fn)
        assert [p[0] for p in got[0][2]] == [9, 9] and [p[0] for p in got[1][2]] == [8, 9], \
            (fn, got)
        # a call that leaves an odd value at position 3, then one whose
        # second request reaches position 3 from the same first_key
        other = new_client()
        fcall([request_bytes(1, [(1, 5, 1)]), rule_bytes([tb, tb, tb])] +
              ["{%s}o%d" % (other, i) for i in (1, 2, 3)], fn)
        d = new_client()
        kd = ["{%s}d%d" % (d, i) for i in (1, 2, 3)]
        _, got = fcall([request_bytes(2, [(1, 1, 1), (1, 1, 2)]), r1, r2] + kd, fn)
        assert [p[0] for p in got[1][2]] == [8, 8, 9], (fn, got)


def test_keymap_shared_keys_match_model():
    """Requests whose limits are of several owners (a client's, and one
    shared by every client or by an address), keys named once through the
    keymap: each request sees what earlier ones of the call took from a
    shared key, all or nothing, exactly as the model, in both functions.
    Requests of the shared token bucket alone (a rule of one token bucket:
    the library's short path) read and write its key at the keymap's
    position among them."""
    for fn, seed in (("rl8_decide", 505), ("rl8_decide_cluster", 506)):
        rng = random.Random(seed)
        glob, addr = new_client(), [new_client() for _ in range(2)]
        clients = [new_client() for _ in range(4)]
        own = [[(TB, 3, 400 * MS, 0)], [(SW, 4, 300 * MS, 0)], [(FW, 3, 250 * MS, 0)],
               [(TB, 2, 200 * MS, 5)]]
        shared = [(TB, 7, 500 * MS, 0), (SW, 9, 400 * MS, 0)]
        model = Model()
        tally = [0, 0]
        for step in range(40):
            reqs = []
            for _ in range(rng.randint(1, 6)):
                if rng.random() < 0.3:
                    reqs.append(((glob,), rng.choice([1, 1, 2]), (shared[0],)))
                    continue
                c = rng.randrange(4)
                a = addr[c % 2]
                lim = tuple(own[c]) + (shared[0], shared[1])
                owners = (clients[c],) * len(own[c]) + (glob, a)
                reqs.append((owners, rng.choice([1, 1, 2]), lim))
            _, got = check(model, reqs, "keymap %s seed %d step %d" % (fn, seed, step), fn)
            for x in got:
                tally[x[0]] += 1
            time.sleep(rng.choice([0, 0.01, 0.03, 0.08, 0.15]))
        assert tally[0] > 0 and tally[1] > 0, tally


def tat_of(limit, v):
    """The TAT a token bucket's stored value v says (None: no key)."""
    if v is None:
        return None
    _, quota, period, _ = limit[:4]
    n = quota // math.gcd(quota, period)
    if "+" in v:
        a, r = v.split("+")
        return int(a) + Fraction(int(r), n)
    return EPOCH + Fraction(int(v), n)


def refund_at(model, fn, take, back, what):
    """Calls the refund function fn with back, taken at `take`, and gives
    it back in the model at the moment of Redis's clock the call read,
    which lies between a TIME before and one after: the only one at which
    the model's buckets hold what Redis's do, and its count of keys
    changed is the reply's. A bucket's TAT after a refund grows with that
    moment (what goes back is less the time since the take), and a full
    bucket (a TAT not past that moment, or no key) is below any; the
    count shrinks as it grows (a bucket refilled since the take, a window
    past, get nothing): bisect on both, since where every bucket is full
    (or a window ends between the two TIMEs) only the count tells the
    moments apart. Returns the reply and that moment."""
    buckets = sorted({key_of(o, l) for q in back for o, l in zip(q[0], q[2])
                      if l[0] == TB})
    lims = {key_of(o, l): l for q in back for o, l in zip(q[0], q[2])}
    t0 = now_of_redis()
    n = redis().c.command("FCALL", fn, 0, str(take), *layout_mapped(back)[0])
    t1 = now_of_redis()
    got = {k: tat_of(lims[k], get(k)) for k in buckets}
    lo, hi = t0, t1
    while lo <= hi:
        now = (lo + hi) // 2
        m = copy.deepcopy(model)
        changed = m.refund(now, take, back)
        def full(x):
            return None if x is None or x <= now else x
        pairs = [(full(m.tat(k)), full(got[k])) for k in buckets]
        # the model's moment is too early, or too late
        under = changed > n or any(w != g and (w is None or (g is not None and w < g))
                                   for w, g in pairs)
        over = changed < n or any(w != g and (g is None or (w is not None and w > g))
                                  for w, g in pairs)
        if not under and not over:
            model.st = m.st
            return n, now
        assert not (under and over), ("%s: no moment gives every bucket and the keys "
                                      "changed" % what, pairs, n, changed)
        if under:
            lo = now + 1
        else:
            hi = now - 1
    raise AssertionError("%s: no moment in %d..%d gives what Redis holds: %r, model %r"
                         % (what, t0, t1, [(k, got[k]) for k in buckets], pairs))


def test_refund_gives_back_what_was_taken():
    """rl8_refund gives back what a call took, as the model does: a token
    bucket's tokens up to its capacity (a full bucket's key deleted), a
    window's count in the window of the take while the value holds it;
    whatever time has passed since the take, on every algorithm, through
    the keymap, in both functions. Nothing is given back twice beyond the
    capacity, and a window gone leaves nothing to give."""
    # emission intervals that are not whole microseconds, windows short
    # enough that a refund may come a window late, and long ones whose
    # counts stay
    lims = [(TB, 7, 1 * S, 3), (TB, 9, 4 * S, 0), (SW, 4, 250 * MS, 0), (SW, 9, 3 * S, 0),
            (FW, 3, 200 * MS, 0), (FW, 8, 3 * S, 0),
            # packed buckets: T = 1s/3 (n = 3), and 400 ms
            packed((TB, 3, 1 * S, 2)), packed((TB, 10, 4 * S, 0)),
            # keys without an expiry
            kept((TB, 5, 2 * S, 0)), kept((SW, 6, 2 * S, 0))]
    shared = [(TB, 13, 2 * S, 0), (SW, 15, 3 * S, 0), packed((TB, 12, 2 * S, 0))]
    for fn, refund_fn, seed in (("rl8_decide", "rl8_refund", 707),
                                ("rl8_decide_cluster", "rl8_refund_cluster", 708)):
        rng = random.Random(seed)
        glob = new_client()
        clients = [new_client() for _ in range(3)]
        model = Model()
        given = 0
        for step in range(80):
            reqs = []
            for _ in range(rng.randint(1, 5)):
                c = rng.randrange(3)
                own = lims[(c + step // 8) % len(lims)]
                reqs.append(((clients[c], glob), rng.choice([1, 2, 3]),
                             (own, shared[step // 20 % 3])))
            what = "refund %s seed %d step %d" % (fn, seed, step)
            take, got = check(model, reqs, what, fn)
            taken = [q for q, x in zip(reqs, got) if x[0] == 1]
            if not taken or rng.random() < 0.3:
                continue
            back = rng.sample(taken, rng.randint(1, len(taken)))
            time.sleep(rng.choice([0, 0.005, 0.02, 0.05, 0.15, 0.4]))
            n, _ = refund_at(model, refund_fn, take, back, what)
            given += n
            keys = sorted({key_of(o, l) for q in back for o, l in zip(q[0], q[2])})
            present = [k for k in keys if k in model.st]
            check_stored(model, present)
            check_absent([k for k in keys if k not in model.st])
        assert given > 0


def test_refund_cases():
    """Each algorithm given back a part of what it holds, against the
    model: counts of several requests, a sliding window's count given
    back a window late (then it is the previous count), a fixed window's
    not at all once its window is gone, and a token bucket brought back
    to full deleted."""
    def take_and_refund(lim, n, back, pause, align=None):
        c = new_client()
        model = Model()
        if align:
            wait_phase(align, 0.1, 0.3)
        reqs = [((c,), 2, (lim,))] * n
        take, got = check(model, reqs, "take %r" % (lim,))
        assert all(x[0] == 1 for x in got), got
        if pause:
            time.sleep(pause)
            # a write in the next window, so the value moves on
            check(model, [((c,), 1, (lim,))], "later %r" % (lim,))
        changed, _ = refund_at(model, "rl8_refund", take, [((c,), 2, (lim,))] * back,
                               "refund %r" % (lim,))
        k = key_of(c, lim)
        if k in model.st:
            check_stored(model, [k])
        else:
            check_absent([k])
        return changed, get(k)

    ch, v = take_and_refund((FW, 20, 60 * S, 0), 3, 1, 0)
    assert ch == 1 and v.endswith(":4"), v
    ch, v = take_and_refund((SW, 20, 60 * S, 0), 3, 2, 0)
    assert ch == 2 and v.endswith(":2:0"), v
    ch, v = take_and_refund((TB, 7, 1 * S, 0), 3, 1, 0)
    assert ch == 1 and v is not None, v
    ch, v = take_and_refund((TB, 7, 1 * S, 0), 2, 2, 0)
    assert v is None, v
    # a window late: the sliding window's previous count; the fixed
    # window's count is gone
    ch, v = take_and_refund((SW, 20, 400 * MS, 0), 3, 1, 0.4, align=400 * MS)
    assert ch == 1 and v.endswith(":1:4"), v
    ch, v = take_and_refund((FW, 20, 400 * MS, 0), 3, 1, 0.4, align=400 * MS)
    assert ch == 0 and v.endswith(":1"), v
    # a bucket full again before the refund (T = 100 ms, the take's 2
    # tokens refilled in 300 ms), then taken from: the take's reservation is
    # gone, nothing goes back; a refund of it all would delete the later
    # request's take
    ch, v = take_and_refund((TB, 10, 1 * S, 0), 1, 1, 0.3)
    assert ch == 0 and v is not None, (ch, v)
    # five requests of 200 ms each given back 450 ms or more after their
    # take: the time since is deducted once from the five together (the
    # last 3 give back, fewer if the call came later), not from each (none
    # would)
    ch, v = take_and_refund((TB, 20, 2 * S, 0), 5, 5, 0.45)
    assert 1 <= ch <= 3 and v is not None, (ch, v)


def wait_phase(period_us, lo, hi):
    """Waits until Redis's clock is between lo and hi (fractions) of a
    window of period_us."""
    for _ in range(50):
        now = now_of_redis()
        e = now % period_us / period_us
        if lo <= e < hi:
            return
        time.sleep(((lo - e) % 1) * period_us / S + 0.001)
    raise AssertionError("phase not reached")


CC = 4  # concurrency: places in flight


def with_ids(args, ids):
    """layout()'s arguments with request ids (8 bytes each, one per
    request): the flag in the requests' header, the ids after the rules."""
    head = args[0]
    nrules = struct.unpack(">H", head[:2])[0]
    head = struct.pack(">H", nrules | 0x4000) + head[2:]
    return [head] + args[1:1 + nrules] + [b"".join(ids)] + args[1 + nrules:]


def decide_ids(reqs, ids, fn="rl8_decide"):
    return fcall(with_ids(layout(reqs)[0], ids), fn)


def rid(n):
    return struct.pack(">Q", n)


def test_concurrency_places():
    """Places in flight: taken while fewer than the quota are, the same
    request again holds its own, refused with a second to wait, given back
    by rl8_release (exactly its own, once), ended at their deadline; all
    or nothing with a token bucket of the same rule; a request without an
    id is not counted. Each value is the places left, 16 bytes each, and
    expires on the grid when the last ends."""
    for fn, rel in (("rl8_decide", "rl8_release"), ("rl8_decide_cluster", "rl8_release_cluster")):
        c = new_client()
        conc = (CC, 2, 400 * MS, 0)
        tb = (TB, 3, 3600 * S, 0)
        lim = [conc, tb]
        k = key_of(c, conc)
        now, got = decide_ids([(c, 1, lim)], [rid(1)], fn)
        assert got[0][0] == 1 and got[0][2][0] == (1, 0, 400 * MS), got
        assert len(redis().c.command("GET", k)) == 16
        assert pexpiretime(k) == expiry_ms(now + 400 * MS, 400 * MS)
        _, got = decide_ids([(c, 1, lim)], [rid(2)], fn)
        assert got[0][0] == 1 and got[0][2][0][0] == 0 and got[0][2][1][0] == 1, got
        # full: refused, a second to wait; the bucket not charged
        _, got = decide_ids([(c, 1, lim)], [rid(3)], fn)
        assert got[0][0] == 0 and got[0][1] == 1 and got[0][2][0][1] == S, got
        assert got[0][2][1][0] == 0 or got[0][2][1][0] == 1, got
        # the same request again: its place is held
        _, got = decide_ids([(c, 1, lim)], [rid(2)], fn)
        assert got[0][0] == 1, got
        # no id: not counted (and the bucket refuses now: 3 taken)
        _, got = decide_ids([(c, 1, [conc])], [b"\0" * 8], fn)
        assert got[0][0] == 1 and got[0][2][0][0] == 0, got
        # release: its own place, once
        assert redis().c.command("FCALL", rel, 0, rid(1), k) == 1
        assert redis().c.command("FCALL", rel, 0, rid(1), k) == 0
        assert redis().c.command("FCALL", rel, 0, rid(9), k) == 0
        assert len(redis().c.command("GET", k)) == 16
        _, got = decide_ids([(c, 1, [conc])], [rid(3)], fn)
        assert got[0][0] == 1 and got[0][2][0][0] == 0, got
        # a bucket that refuses takes no place
        _, got = decide_ids([(c, 1, lim)], [rid(4)], fn)
        assert got[0][0] == 0 and got[0][1] in (1, 2), got
        assert len(redis().c.command("GET", k)) == 32
        # every place ends at its deadline
        time.sleep(0.45)
        _, got = decide_ids([(c, 1, [conc])], [rid(5)], fn)
        assert got[0][0] == 1 and got[0][2][0][0] == 1, got
        assert len(redis().c.command("GET", k)) == 16
        # the last release leaves no key
        assert redis().c.command("FCALL", rel, 0, rid(5), k) == 1
        assert redis().c.command("EXISTS", k) == 0
    for fn in lua_scripts.FUNCTIONS:
        args = layout([(new_client(), 1, [(CC, 2, S, 0)])])[0]
        try:
            fcall(with_ids(args, [b"short"]), fn)
        except RespError as e:
            assert "ids: need 8 bytes per request" in str(e), e
        else:
            raise AssertionError("short ids accepted")
    for fn in lua_scripts.RELEASES:
        try:
            redis().c.command("FCALL", fn, 0, b"1234567", "k")
        except RespError as e:
            assert "release: need 8 bytes of ids per key" in str(e), e
        else:
            raise AssertionError("short release ids accepted")


def test_refund_gives_back_a_log_entry_and_a_place():
    """rl8_refund gives back every kind of state a decision takes: a log's
    entry at the take (its weight less the cost, the totals after it
    less the cost too, the key gone when nothing is left), and the place
    the take made for the request's id (compared and set: the id ending
    at the take's time + period); a place the request held before the
    take stays."""
    for fn, back in zip(lua_scripts.FUNCTIONS, lua_scripts.REFUNDS):
        c = new_client()
        cc, lg = (CC, 1, 60 * S, 0), (LG, 3, 60 * S, 0)
        lim = [cc, lg]
        kc, kl = key_of(c, cc), key_of(c, lg)

        def refund(take, n, cost=1):
            return redis().c.command("FCALL", back, 0, str(take),
                                     *with_ids(layout([(c, cost, lim)])[0], [rid(n)]))

        take, got = decide_ids([(c, 1, lim)], [rid(1)], fn)
        assert got[0][0] == 1, got
        # refused for want of a place, until the refund gives it back
        assert decide_ids([(c, 1, lim)], [rid(2)], fn)[1][0][0] == 0
        assert refund(take, 1) == 2
        assert redis().c.command("EXISTS", kc, kl) == 0
        assert refund(take, 1) == 0  # nothing left of it
        t2, got = decide_ids([(c, 2, lim)], [rid(2)], fn)
        assert got[0][0] == 1 and got[0][2][1][0] == 1, got
        # the same request again: its place was there before this take,
        # which the refund leaves; the take's entry goes
        t3, got = decide_ids([(c, 1, lim)], [rid(2)], fn)
        assert got[0][0] == 1 and got[0][2][1][0] == 0, got
        assert refund(t3, 2) == 1
        assert len(redis().c.command("GET", kc)) == 16
        assert redis().c.command("GET", kl) == _log_bytes(t2, 0, [(t2, 2)])
        # an entry before others: it goes, the totals after it follow
        redis().c.command("FCALL", "rl8_release", 0, rid(2), kc)
        t4, got = decide_ids([(c, 1, lim)], [rid(4)], fn)
        assert got[0][0] == 1 and t4 > t2, got
        assert refund(t2, 2, cost=2) == 1  # (the place of id 2 is gone)
        assert redis().c.command("GET", kl) == _log_bytes(t2, 0, [(t4, 1)])
        # a part of an entry of two requests of one microsecond; a cost
        # over the entry's weight, or at another time, gives nothing back
        c = new_client()
        kl = key_of(c, lg)
        t5, got = decide([(c, 1, [lg]), (c, 1, [lg])], fn)
        assert [x[0] for x in got] == [1, 1], got
        assert redis().c.command("GET", kl) == _log_bytes(t5, 0, [(t5, 2)])
        args = layout([(c, 3, [lg])])[0]
        assert redis().c.command("FCALL", back, 0, str(t5), *args) == 0
        args = layout([(c, 1, [lg])])[0]
        assert redis().c.command("FCALL", back, 0, str(t5 + 1), *args) == 0
        assert redis().c.command("FCALL", back, 0, str(t5), *args) == 1
        assert redis().c.command("GET", kl) == _log_bytes(t5, 0, [(t5, 1)])


BAN = 5  # a penalty box


def test_penalty_box():
    """rl8_penalize counts events in a sliding window and, at its quota,
    bans (the ban key: when it ends, expiring then); a ban limit refuses
    until then, with that long to wait, and allows after without writing;
    all or nothing with the rule's other limits."""
    for fn, pen in (("rl8_decide", "rl8_penalize"), ("rl8_decide_cluster", "rl8_penalize_cluster")):
        c = new_client()
        ban = (BAN, 1, 300 * MS, 0)
        tb = (TB, 5, 3600 * S, 0)
        count = rule_bytes([(SW, 3, 60 * S, 0)])
        ck, bk = "{%s}count" % c, key_of(c, ban)
        _, got = decide([(c, 1, [tb, ban])], fn)
        assert got[0][0] == 1 and redis().c.command("EXISTS", bk) == 0, got
        assert redis().c.command("FCALL", pen, 0, count, 300 * MS, ck, bk) == 0
        assert redis().c.command("FCALL", pen, 0, count, 300 * MS, ck, bk) == 0
        assert redis().c.command("FCALL", pen, 0, count, 300 * MS, ck, bk) == 1
        till = int(redis().c.command("GET", bk))
        assert pexpiretime(bk) == -(-till // 1000), (till, pexpiretime(bk))
        now, got = decide([(c, 1, [tb, ban])], fn)
        assert got[0][0] == 0 and got[0][1] == 2 and got[0][2][1][1] == till - now, got
        # the bucket was not charged: 4 left of 5 after the first request
        time.sleep(0.32)
        _, got = decide([(c, 1, [tb, ban])], fn)
        assert got[0][0] == 1 and got[0][2][0][0] == 3, got
        # past the quota, every event bans again
        assert redis().c.command("FCALL", pen, 0, count, 300 * MS, ck, bk) == 1
    for bad, err in (([rule_bytes([(TB, 3, S, 0)]), 5, "a", "b"], "one sliding window"),
                     ([count, 0, "a", "b"], "need <rule> <ban_us>"),
                     ([count, 5, "a"], "need <rule> <ban_us>")):
        try:
            redis().c.command("FCALL", "rl8_penalize", 0, *bad)
        except RespError as e:
            assert err in str(e), e
        else:
            raise AssertionError(bad)


def test_refund_with_bad_arguments_writes_nothing():
    c = new_client()
    lim = (TB, 5, 1 * S, 0)
    _, got = decide([(c, 3, [lim])])
    before = get(key_of(c, lim))
    args = layout([(c, 3, [lim])])[0]
    for fn in lua_scripts.REFUNDS:
        for take, rest, err in (
                ("x", args, "take_us must be an integer"),
                ("-1", args, "take_us must be an integer"),
                ("1.5", args, "take_us must be an integer"),
                ("1", [b"\x00"] + args[1:], "requests: need 2 + 10 * n bytes"),
                ("1", [struct.pack(">HIIH", 1, 2, 3, 1)] + args[1:],
                 "first_key must leave a key per limit"),
                ("1", [struct.pack(">HIIH", 0x8001, 1, 3, 1)] + args[1:2] + [b"\x00\x00\x00\x09"]
                 + args[2:], "keymap: position 1 must name a key")):
            try:
                redis().c.command("FCALL", fn, 0, take, *rest)
            except RespError as e:
                assert err in str(e), (fn, take, e)
            else:
                raise AssertionError((fn, take, "no error"))
        assert get(key_of(c, lim)) == before


def test_all_or_nothing():
    minute, second = (TB, 10, 60 * S, 0), (TB, 3, 1 * S, 0)
    c = new_client()
    now, got = decide([(c, 1, [minute, second])] * 4)
    assert [r[0] for r in got] == [1, 1, 1, 0], got
    assert [r[2][0][0] for r in got] == [9, 8, 7, 6], got
    assert [r[2][1][0] for r in got] == [2, 1, 0, 0], got
    assert got[3][1] == 2, "the 3/1s limit must decide: %r" % (got[3],)
    assert got[3][2][0][1] == 0 and got[3][2][1][1] == 333334, got[3]
    # the refused 4th took nothing: exactly 3 emission intervals stored
    assert get(key_of(c, minute)) == tb_value(minute, now + 3 * 6 * S)
    assert get(key_of(c, second)) == tb_value(second, now + 1 * S)
    now2, got2 = decide([(c, 1, [minute])])
    assert got2[0][:2] == (1, 1) and got2[0][2][0][0] == 6, got2
    assert got2[0][2][0][2] == 4 * 6 * S - (now2 - now), (now, now2, got2)
    # a request refused by its first limit alone charges neither key
    d = new_client()
    one = (FW, 1, 3600 * S, 0)
    decide([(d, 1, [one])])
    ten = (FW, 10, 3600 * S, 0)
    _, got = decide([(d, 1, [one, ten])] * 2)
    assert [r[:2] for r in got] == [(0, 1), (0, 1)], got
    assert got[0][2][1][0] == 9, got  # what the window of 10 would leave
    assert redis().c.command("EXISTS", key_of(d, ten)) == 0


def test_weighted_cost():
    c = new_client()
    lim = [(TB, 10, 1 * S, 0)]
    now, got = decide([(c, 3, lim)])
    assert got == [(1, 1, [(7, 0, 300000)])], got
    now2, got = decide([(c, 8, lim)])
    # 7 tokens plus what refilled since; 8 - that, at 10 per second
    if now2 - now < 100000:
        assert got[0][0] == 0
        assert got[0][2][0][1] == 100000 - (now2 - now), (now, now2, got)
    # heavier than the capacity: never passes, one period
    _, got = decide([(c, 11, lim)])
    assert got[0][0] == 0 and got[0][2][0][1] == 1 * S, got
    m = Model()
    c2 = new_client()
    for cost in (4, 5, 3, 2, 1):
        check(m, [(c2, cost, [(SW, 10, 1 * S, 0), (FW, 9, 1 * S, 0)])], "windows cost")
    # the heaviest cost the request bytes carry
    m = Model()
    c3 = new_client()
    big = [(FW, 2 ** 47, 3600 * S, 0), (TB, 2 ** 40, 3600 * S, 0), (SW, 2 ** 33, 3600 * S, 0)]
    _, got = check(m, [(c3, 2 ** 32 - 1, big)] * 3, "cost 2^32-1")
    assert [r[0] for r in got] == [1, 1, 0], got


def test_same_client_twice_in_one_batch():
    lim = [(TB, 3, 1 * S, 0)]
    a, b = new_client(), new_client()
    reqs = [(a, 1, lim), (a, 1, lim), (b, 1, lim), (a, 1, lim), (a, 1, lim), (b, 2, lim)]
    _, keys, flat = layout(reqs)
    assert [f[0] for f in flat] == [1, 1, 2, 1, 1, 2] and len(keys) == 2, flat
    now, got = decide(reqs)
    assert [(r[0], r[2][0][0]) for r in got] == \
        [(1, 2), (1, 1), (1, 2), (1, 0), (0, 0), (1, 0)], got
    assert got[4][2][0][1] == 333334, got  # ceil(1s / 3)
    # written once, with what the last allowed request left
    assert get(key_of(a, lim[0])) == tb_value(lim[0], now + 1 * S)
    assert get(key_of(b, lim[0])) == tb_value(lim[0], now + 1 * S)
    m = Model()
    wl = [(SW, 3, 1 * S, 0), (FW, 2, 1 * S, 0), (TB, 7, 1 * S, 0)]
    c = new_client()
    check(m, [(c, 1, wl)] * 4, "windows twice")


def test_expiry_is_the_need_rounded_to_the_grid():
    """Each key expires at its own need: rounded up to the millisecond, then
    to a multiple of its limit's grid, floor(period/16000) ms within
    1 .. 1000 (grids of 1, 10, 62, 625 and 1000 ms here)."""
    r = redis()
    limits = [(TB, 10, 1 * S, 0), (TB, 7, 1 * S, 0), (TB, 2, 20 * MS, 0), (TB, 3, 160 * MS, 0),
              (TB, 30, 10 * S, 0), (TB, 100, 3600 * S, 0), (SW, 5, 1 * S, 0),
              (SW, 5, 160 * MS, 0), (SW, 5, 3600 * S, 0), (FW, 5, 1 * S, 0),
              (FW, 5, 10 * S, 0), (FW, 5, 16 * S, 0)]
    for l in limits:
        c = new_client()
        k = key_of(c, l)
        now, got = decide([(c, 1, [l])] * 2)
        need = now + got[-1][2][0][2]  # now + reset: until when the value is needed
        exp = pexpiretime(k)
        want = expiry_ms(need, l[2])
        if exp == -2:  # gone already: only once its expiry passed (a slow machine)
            sec, usec = r.c.command("TIME")
            assert int(sec) * 1000 + int(usec) // 1000 >= want, (l, now, need, want)
            continue
        assert exp == want and exp % grid_ms(l[2]) == 0, (l, now, need, exp, want)
        if l[2] >= S:
            assert 0 < r.c.command("PTTL", k) <= want - now // 1000, l
    # the values say the same needs: a token bucket's TAT A + R/n (needed
    # until A, or A + 1), a window its U
    c = new_client()
    t7 = (TB, 7, 1 * S, 0)
    now, _ = decide([(c, 1, [t7])])
    # emission interval 1s/7: TAT is now + 142857 + 1/7 us, needed to its ceiling
    assert get(key_of(c, t7)) == tb_value(t7, now + 142857, 1)
    assert pexpiretime(key_of(c, t7)) == expiry_ms(now + 142858, S)
    s5, f5 = (SW, 5, 1 * S, 0), (FW, 5, 1 * S, 0)
    now, _ = decide([(c, 1, [s5, f5])])
    end = now // S * S + S
    assert get(key_of(c, s5)) == "%d:1:0" % (end + S)
    assert get(key_of(c, f5)) == "%d:1" % end
    assert pexpiretime(key_of(c, s5)) == expiry_ms(end + S, S)
    assert pexpiretime(key_of(c, f5)) == expiry_ms(end, S)


def _mark(key):
    """Sets key's expiry to a moment off every grid (its grid expiry plus
    7 ms) and returns it: only a KEEPTTL write leaves it."""
    at = pexpiretime(key) + 7
    assert redis().c.command("PEXPIREAT", key, at) == 1
    return at


def _need(v, limit):
    """Until when a value of the library's is needed: a token bucket's TAT
    A + R/n (an integer (A - EPOCH) * n + R, or the text "A+R") until A, or
    A + 1 when R > 0; a window's until its U."""
    algo, quota, period, _ = limit
    if algo == TB:
        if "+" in v:
            a, _, rest = v.partition("+")
            a, r = int(a), int(rest)
        else:
            n = quota // math.gcd(quota, period)
            a, r = divmod(int(v), n)
            a += EPOCH
        return a + (1 if r else 0)
    return int(v.split(":")[0])


def test_keepttl_when_the_grid_expiry_is_unchanged():
    """A key whose grid-rounded expiry is the one its old value implied
    keeps the expiry it has (SET ... KEEPTTL, or INCRBY for a whole number):
    here an odd one the test set, which no PXAT write would give. Any other
    key gets SET ... PXAT of its new expiry."""
    r = redis()
    kept = moved = 0
    # a window within its window: U unchanged. A bucket of 1000 per 16 s
    # (T = 16 ms, grid 1 s): TAT moves by less than the grid. A bucket of
    # 2 per 20 s: TAT moves by 10 s.
    for l in [(FW, 100, 60 * S, 0), (SW, 100, 60 * S, 0), (TB, 1000, 16 * S, 0),
              (TB, 2, 20 * S, 0)]:
        for _ in range(3):
            c = new_client()
            k = key_of(c, l)
            decide([(c, 1, [l])])
            before = get(k)
            at = _mark(k)
            now, got = decide([(c, 1, [l])])
            after = get(k)
            if l[0] == TB:  # a whole number of microseconds per request: TAT
                assert after == tb_value(l, now + got[0][2][0][2]), (l, after, now, got)
            g = grid_ms(l[2])
            assert before != after, (l, before, after)
            if expiry_ms(_need(before, l), l[2]) == expiry_ms(_need(after, l), l[2]):
                assert pexpiretime(k) == at, ("KEEPTTL", l, before, after)
                kept += 1
            else:
                assert pexpiretime(k) == expiry_ms(_need(after, l), l[2]), \
                    ("PXAT", l, before, after)
                assert pexpiretime(k) % g == 0
                moved += 1
    assert kept >= 6 and moved >= 3, (kept, moved)

    # the comparison is with the value read, not with a batch's earlier
    # requests: 100 requests of 16 ms move TAT 1.6 s, past the grid, though
    # each request alone moves it less
    l = (TB, 1000, 16 * S, 0)
    c = new_client()
    k = key_of(c, l)
    decide([(c, 1, [l])])
    at = _mark(k)
    now, got = decide([(c, 1, [l])] * 100)
    assert all(x[0] == 1 for x in got)
    assert pexpiretime(k) != at and pexpiretime(k) == expiry_ms(now + got[-1][2][0][2], l[2])

    # the old value's need is A + 1 when R > 0, A when R is 0: values set
    # here on the grid's boundaries tell them apart. T = 142 + 6/7 us,
    # grid 62 ms: one request moves TAT into the next millisecond.
    l = (TB, 7000, 1 * S, 0)
    g = grid_ms(l[2])
    assert g == 62
    for rem, keep in ((3, True), (0, False)):
        c = new_client()
        k = key_of(c, l)
        t = r.c.command("TIME")
        now_ms = int(t[0]) * 1000 + int(t[1]) // 1000
        a = (now_ms + 300) // g * g * 1000 + g * 1000  # a grid boundary, 300 .. 362 ms ahead
        v = tb_value(l, a, rem)
        old_exp = expiry_ms(a + (1 if rem else 0), l[2])
        r.c.command("SET", k, v, "PXAT", old_exp + 7)
        now, got = decide([(c, 1, [l])])
        assert got[0][0] == 1 and now < a, (got, now, a)
        new = Fraction(a) + Fraction(rem, 7) + Fraction(S, 7000)
        want = tb_value(l, math.floor(new), int((new - math.floor(new)) * 7))
        assert get(k) == want, (get(k), want)
        if keep:
            # A+1 on the boundary needs the next grid step, as the new TAT does
            assert pexpiretime(k) == old_exp + 7 and old_exp == a // 1000 + g, rem
        else:
            # A on the boundary is the boundary itself: the new TAT needs more
            assert old_exp == a // 1000 and pexpiretime(k) == a // 1000 + g, rem


def test_token_state_as_text_is_read_and_written_back_as_an_integer():
    """A token bucket's state is an integer wherever it fits; the text
    "A+R" (what a state that does not fit is written as) reads as the same
    TAT, and the next write of a state that fits is the integer."""
    r = redis()
    l = (TB, 7, 1 * S, 0)  # T = 1s/7: n = 7
    c = new_client()
    k = key_of(c, l)
    now = now_of_redis()
    # 5 requests of T = 142857 + 1/7 us in use: TAT = now + 714285 + 5/7
    r.c.command("SET", k, "%d+%d" % (now + 714285, 5), "PX", 60000)
    _, got = decide([(c, 1, [l])])
    assert got[0][0] == 1 and got[0][2][0][0] == 1, got
    # one T more: now + 857142 + 6/7, as the integer
    assert get(k).isdigit() and get(k) == tb_value(l, now + 857142, 6), get(k)


def test_a_refused_request_writes_nothing():
    r = redis()
    c = new_client()
    lim = [(TB, 1, 1 * S, 0), (SW, 5, 60 * S, 0), (FW, 5, 60 * S, 0)]
    decide([(c, 1, lim)])
    keys = [key_of(c, l) for l in lim]
    marks = [_mark(k) for k in keys]
    before = [get(k) for k in keys]
    _, got = decide([(c, 1, lim)] * 3)
    assert [x[0] for x in got] == [0, 0, 0] and got[0][1] == 1, got
    assert [get(k) for k in keys] == before
    assert [pexpiretime(k) for k in keys] == marks
    assert r.c.command("TYPE", keys[0]) == b"string"


def test_stale_values_and_keys_expire():
    r = redis()
    c = new_client()
    l = (TB, 1, 100 * MS, 0)
    now, _ = decide([(c, 1, [l])])
    k = key_of(c, l)
    assert r.c.command("EXISTS", k) == 1
    assert pexpiretime(k) == expiry_ms(now + 100000, l[2])
    time.sleep(0.25)
    assert r.c.command("EXISTS", k) == 0, get(k)
    # a value past its need that its key still holds counts as absent
    now = now_of_redis()
    tb, sw, fw = (TB, 3, 10 * S, 0), (SW, 3, 10 * S, 0), (FW, 3, 10 * S, 0)
    ws = now // (10 * S) * (10 * S)
    c = new_client()
    r.c.command("SET", key_of(c, tb), tb_value(tb, now - 1), "PX", 60000)
    r.c.command("SET", key_of(c, sw), "%d:3:3" % ws, "PX", 60000)  # two windows back
    r.c.command("SET", key_of(c, fw), "%d:3" % ws, "PX", 60000)  # the window before
    now2, got = decide([(c, 1, [tb, sw, fw])])
    assert now2 // (10 * S) * (10 * S) == ws, "a window ended in between: run again"
    assert got[0][0] == 1 and [p[0] for p in got[0][2]] == [2, 2, 2], got
    assert get(key_of(c, sw)) == "%d:1:0" % (ws + 20 * S)
    # a sliding value one window back is the previous count, not stale
    c = new_client()
    r.c.command("SET", key_of(c, sw), "%d:2:3" % (ws + 10 * S), "PX", 60000)
    now3, got = decide([(c, 1, [sw])])
    m = Model()
    m.st[key_of(c, sw)] = (sw, {ws - 10 * S: 2}, now)
    assert got == m.decide(now3, [(c, 1, [sw])]), got


def test_clients_are_independent():
    lim = [(TB, 3, 10 * S, 0), (SW, 2, 10 * S, 0)]
    a, b = new_client(), new_client()
    for _ in range(2):
        decide([(a, 1, lim)])
    _, got = decide([(a, 1, lim)])
    assert got[0][0] == 0 and got[0][1] == 2, got
    before = [get(key_of(a, l)) for l in lim]
    _, got = decide([(b, 1, lim)])
    assert got[0][0] == 1 and [p[0] for p in got[0][2]] == [2, 1], got
    _, got = decide([(b, 1, lim), (a, 1, lim)])
    assert got[0][:2] == (1, 2) and [p[0] for p in got[0][2]] == [1, 0], got
    assert got[1][:2] == (0, 2), got
    assert [get(key_of(a, l)) for l in lim] == before


def test_bad_arguments_write_nothing():
    r = redis()
    good = (TB, 10, S, 0)
    R = rule_bytes([good])
    R2 = rule_bytes([good, (FW, 5, S, 0)])
    c = new_client()
    k1, k2 = "{%s}a" % c, "{%s}b" % c
    PK = rule_bytes([packed(good)])
    pk = key_of("f" + c[1:], packed(good))  # (23 bytes: see key_of())

    def rq(nrules, *flat):
        return request_bytes(nrules, flat)

    def rule(*limit):
        return mpack.packb([list(limit)])

    one = rq(1, (1, 1, 1))
    # rbuf keeps the rules of earlier calls: a call of 3 rules first, on
    # keys of its own, so that rules 2 and 3 of it linger
    other = new_client()
    fcall([rq(3, (1, 1, 1), (2, 1, 2), (3, 1, 3)), R, rule(FW, 5, S, 0), rule(SW, 5, S, 0),
           "{%s}1" % other, "{%s}2" % other, "{%s}3" % other])
    # (the arguments after numkeys, the start of the message after
    # "rl decide: ", or None where any error will do)
    cases = [
        # the requests' bytes
        ([b"", R, k1], "requests: need 2 + 10 * n bytes"),
        ([b"\x00\x01", R, k1], "requests: need"),  # no request
        ([one[:-1], R, k1], "requests: need"),
        ([one + b"\x00", R, k1], "requests: need"),
        ([rq(1, *[(1, 1, 1)] * 4097), R, k1], "requests: need"),
        # nrules
        ([rq(0, (1, 1, 1)), R, k1], "requests: nrules"),
        ([rq(4097, (1, 1, 1)), R, k1], "requests: nrules"),
        ([rq(3, (1, 1, 1)), R, k1], "requests: nrules"),  # 3 rules, 2 arguments left
        ([rq(2, (1, 1, 1)), R, k1, k2], "rule 2: bad msgpack"),  # a key read as a rule
        # a request's fields
        ([rq(1, (1, 1, 0)), R, k1], "request 1: rule must be in 1..1"),
        ([rq(1, (1, 1, 2)), R, k1], "request 1: rule must be in 1..1"),
        ([rq(1, (1, 1, 65535)), R, k1], "request 1: rule"),
        ([rq(1, (1, 0, 1)), R, k1], "request 1: cost must be at least 1"),
        ([rq(1, (0, 1, 1)), R, k1], "request 1: first_key"),
        ([rq(1, (2, 1, 1)), R, k1], "request 1: first_key"),
        ([rq(1, (2 ** 32 - 1, 1, 1)), R, k1], "request 1: first_key"),
        ([rq(1, (1, 1, 1)), R2, k1], "request 1: first_key"),  # 2 limits, 1 key
        ([rq(1, (2, 1, 1)), R2, k1, k2], "request 1: first_key"),
        # rules: bytes that are not one msgpack array of limits
        ([one, b"\xc1", k1], "rule 1: bad msgpack"),  # a byte msgpack never uses
        ([one, b"\x91\x94\x00\x0a", k1], "rule 1: bad msgpack"),  # truncated
        ([one, R + b"\x00", k1], "rule 1: bad msgpack"),  # two values
        ([one, b"", k1], "rule 1: "),
        ([one, mpack.packb(7), k1], "rule 1: need an array of 1 to 64 limits"),
        ([one, mpack.packb("x"), k1], "rule 1: need an array"),
        ([one, mpack.packb(None), k1], "rule 1: need an array"),
        ([one, mpack.packb({"a": [0, 10, S, 0]}), k1], "rule 1: need an array"),
        ([one, mpack.packb([]), k1], "rule 1: need an array"),
        ([one, mpack.packb([list(good)] * 65), k1], "rule 1: need an array"),
        ([one, mpack.packb([list(good), None, list(good)]), k1, k2, "{%s}c" % c], "rule 1: "),
        # a limit
        ([one, mpack.packb(list(good)), k1], "rule 1: limit 1: need [algo"),  # not a rule
        ([one, mpack.packb([7]), k1], "rule 1: limit 1: need [algo"),
        ([one, mpack.packb([[0, 10, S]]), k1], "rule 1: limit 1: need [algo"),
        ([one, mpack.packb([[0, 10, S, 0, 9]]), k1], "rule 1: limit 1: need [algo"),
        ([one, mpack.packb([[0, 10, S, None]]), k1], "rule 1: limit 1: need [algo"),
        ([one, mpack.packb([["t", 0, 10, S, 0]]), k1], "rule 1: limit 1: algo must be"),  # a lid
        ([one, mpack.packb([["t", 0, 10, S, 0, 1]]), k1], "rule 1: limit 1: need [algo"),
        # packed buckets: a token bucket's, of n <= 3, named by 23 or 24 bytes
        ([one, mpack.packb([[0, 10, S, 0, True]]), k1], "rule 1: limit 1: need [algo"),
        ([one, mpack.packb([[SW, 10, S, 0, 1]]), k1], "rule 1: limit 1: only a token bucket"),
        ([one, mpack.packb([[LG, 10, S, 0, 1]]), k1], "rule 1: limit 1: only a token bucket"),
        ([one, mpack.packb([[0, 7, S, 0, 1]]), k1], "rule 1: limit 1: a packed bucket needs"),
        # keys without an expiry: not for requests in flight or a ban
        ([one, mpack.packb([[0, 10, S, 0, 3]]), k1], "rule 1: limit 1: need [algo"),
        ([one, mpack.packb([[4, 10, S, 0, 2]]), k1], "rule 1: limit 1: a limit of requests in"),
        ([one, mpack.packb([[5, 10, S, 0, 2]]), k1], "rule 1: limit 1: a limit of requests in"),
        ([one, PK, k1], "request 1: a packed bucket's key must be 23 or 24 bytes"),
        ([one, PK, pk[:-1]], "request 1: a packed bucket's key must be 23 or 24 bytes"),
        ([one, PK, pk + "xy"], "request 1: a packed bucket's key must be 23 or 24 bytes"),
        ([rq(1, (1, 1, 1), (2, 1, 1)), PK, pk, k2], "request 2: a packed bucket's key must"),
        ([one, mpack.packb([list(good), [0, 10, S]]), k1, k2], "rule 1: limit 2: need"),
    ]
    for algo in (6, -1, 1.5, "0", None, True):
        cases.append(([one, rule(algo, 10, S, 0), k1], "rule 1: limit 1: algo must be"))
    for q in (0, -1, 2 ** 47 + 1, 1.5, float("nan"), float("inf"), "10", None, False):
        cases.append(([one, rule(TB, q, S, 0), k1], "rule 1: limit 1: quota must be"))
    for p in (0, -S, 2 ** 47 + 1, 2 ** 60, 0.5, "1000000", None):
        cases.append(([one, rule(SW, 10, p, 0), k1], "rule 1: limit 1: period_us must be"))
    for b in (-1, 0.5, 2 ** 47 + 1, "0", None):
        cases.append(([one, rule(FW, 10, S, b), k1], "rule 1: limit 1: "))
    for b in (-1, 0.5, 2 ** 47 + 1, "0"):
        cases.append(([one, rule(TB, 10, S, b), k1], "rule 1: limit 1: burst must be"))
    for q in (65536, 2 ** 47):
        cases.append(([one, rule(LG, q, S, 0), k1], "rule 1: limit 1: a log's quota must be"))
    cases += [
        # buckets deeper than 2^52 us
        ([one, rule(TB, 1, 2 ** 46, 2 ** 20), k1], "rule 1: limit 1: burst * period_us"),
        ([one, rule(TB, 3, 2 ** 47, 2 ** 47), k1], "rule 1: limit 1: burst * period_us"),
        ([one, rule(TB, 1, 2 ** 47, 33), k1], "rule 1: limit 1: burst * period_us"),
        # a rule no request uses is checked all the same
        ([rq(2, (1, 1, 1)), R, rule(9, 1, 1, 0), k1], "rule 2: limit 1: algo"),
        ([rq(2, (1, 1, 1)), R, b"\xc1", k1], "rule 2: bad msgpack"),
        # a valid first request is not written when a later one is bad
        ([rq(1, (1, 1, 1), (2, 0, 1)), R, k1, k2], "request 2: cost"),
        ([rq(1, (1, 1, 1), (2, 1, 2)), R, k1, k2], "request 2: rule must be in 1..1"),
        ([rq(1, (1, 1, 1), (2, 1, 3)), R, k1, k2], "request 2: rule must be in 1..1"),
        ([rq(1, (1, 1, 1), (3, 1, 1)), R, k1, k2], "request 2: first_key"),
        ([rq(2, (1, 1, 1), (2, 1, 2)), R, R2, k1, k2], "request 2: first_key"),
        ([rq(1, *[(1, 1, 1)] * 300, (0, 1, 1)), R, k1], "request 301: first_key"),
        # no argument at all; no key at all
        ([], "requests: need 2 + 10 * n bytes"),
        ([one, R], "request 1: first_key"),
    ]
    for fn in lua_scripts.FUNCTIONS:
        for args, want in cases:
            try:
                fcall(args, fn)
            except RespError as e:
                msg = str(e)
                assert msg.startswith("ERR"), (fn, msg, args)
                if want is not None:
                    assert msg.startswith("ERR rl decide: " + want), (fn, msg, want, args)
            else:
                raise AssertionError("%s: no error for %r" % (fn, args))
            # (DBSIZE would not do: keys of other tests expire meanwhile)
            assert r.c.command("EXISTS", k1, k2, "{%s}c" % c) == 0, (fn, args)
            assert get(pk) is None, (fn, args)
    # and the library still decides
    _, got = fcall([one, R, k1])
    assert got == [(1, 1, [(9, 0, 100000)])], got


def test_edges_of_the_ranges_are_accepted():
    """The largest values the arguments may carry decide as the model says:
    quota, period and burst 2^47, a bucket exactly 2^52 us deep, a log of
    65535, a rule of 64 limits, 4096 rules in one call."""
    m = Model()
    c = new_client()
    edge = [(TB, 2 ** 47, 2 ** 47, 2 ** 47), (TB, 1, 2 ** 47, 32), (SW, 2 ** 47, 2 ** 47, 2 ** 47),
            (FW, 1, 2 ** 47, 0), (TB, 2 ** 47, 1, 0), (FW, 2 ** 47, 1, 0),
            (LG, 65535, 2 ** 47, 0), (LG, 1, 1, 0)]
    for _ in range(3):
        check(m, [(c, 1, edge), (c, 1, edge)], "edges")
    c = new_client()
    wide = [(TB, 10 + j, S * (1 + j % 5), 0) for j in range(64)]
    check(m, [(c, 2, wide)] * 3, "64 limits")
    # 4096 rules, each its own: one request uses the last
    rules = [rule_bytes([(FW, 1 + i, 3600 * S, 0)]) for i in range(4096)]
    c = new_client()
    last = (FW, 4096, 3600 * S, 0)
    _, got = fcall([request_bytes(4096, [(1, 5, 4096)])] + rules + [key_of(c, last)])
    # (a window that allows: minus its time until more quota, the window's
    # end, in the retry slot)
    assert got == [(1, 1, [(4091, -got[0][2][0][2], got[0][2][0][2])])], got


def test_foreign_values_count_as_fresh():
    """A value that does not have its limit's shape, or is out of its range,
    counts as absent; so does a key of another type (MGET reads nil), which
    the write replaces by a string. Values are set in the future where a
    misreading would show."""
    r = redis()
    now = now_of_redis()
    fut = now + 5 * S
    tb, t7, sw, fw = (TB, 3, 10 * S, 0), (TB, 7, 10 * S, 0), (SW, 3, 10 * S, 0), (FW, 3, 10 * S, 0)
    values = [
        (tb, "junk"), (tb, "%d:3" % fut), (tb, "%d:3:0" % fut), (tb, ""),
        # T = 10s/3 in lowest terms: n = 3, so R = 1 is a value of its own,
        # a TAT 5s ahead: the bucket half empty
        (tb, "%d+1" % fut),
        (t7, "%d+7" % fut), (t7, "%d+9" % fut), (t7, "%d+1.5" % fut), (t7, "%d+-1" % fut),
        (t7, "%d" % 2 ** 54), (t7, "%d.5" % fut),
        (sw, "junk"), (sw, "%d:3" % (fut + 20 * S)), (sw, "%d" % fut),
        (sw, "%d:3:0" % 2 ** 54), (sw, "%d:%d:0" % (fut + 20 * S, 2 ** 47 + 1)),
        (sw, "%d:0:%d" % (fut + 20 * S, 2 ** 47 + 1)), (sw, "%d:3:0:1" % (fut + 20 * S)),
        (sw, "-%d:3:0" % (fut + 20 * S)), (sw, "%s:3:0" % ("9" * 400)),
        (fw, "junk"), (fw, "%d:3:0" % fut), (fw, "%d+1" % fut), (fw, "%d:3" % 2 ** 54),
        (fw, "%d:%d" % (fut + 10 * S, 2 ** 47 + 1)), (fw, " %d:3" % fut),
    ]
    reqs, want = [], []
    for l, v in values:
        c = new_client()
        r.c.command("SET", key_of(c, l), v)
        reqs.append((c, 1, [l]))
        # (the one readable value leaves 1.5 tokens, 0.5 after this request)
        want.append(0 if (l, v) == (tb, "%d+1" % fut) else l[1] - 1)
    # keys of other types
    for l in (tb, sw, fw):
        for cmd in (("HSET", "{c}", "f", "1"), ("RPUSH", "{c}", "%d:3" % fut),
                    ("SADD", "{c}", "1")):
            c = new_client()
            r.c.command(cmd[0], key_of(c, l), *cmd[2:])
            reqs.append((c, 1, [l]))
            want.append(l[1] - 1)
    now2, got = decide(reqs)
    assert now2 - now < 4 * S, "too slow to tell"
    assert [g[2][0][0] for g in got] == want, list(zip(values + [None] * 9, got, want))
    for (c, _, ls), g in zip(reqs, got):
        assert g[0] == 1
        # a string now, with an expiry (none of these values gave one)
        assert r.c.command("TYPE", key_of(c, ls[0])) == b"string"
        assert pexpiretime(key_of(c, ls[0])) > 0


def _log_bytes(base, r0, entries):
    """A log's value from [(time, cost)], as the library writes it."""
    return log_value(LogState(base, r0, entries))


def test_log_values_of_another_shape_count_as_absent():
    """A value that is not a log of its limit (wrong length, more entries
    than the quota, a weight below its entries or over the quota, a time
    past 2^53, another algorithm's text, a key of another type) is a fresh
    client: the request passes with quota - 1 left, and the value becomes a
    log of this request alone. A value of the shape is read: one ahead of
    now (a clock that went back) moves back, its newest to now, where it
    takes the request."""
    r = redis()
    now = now_of_redis()
    fut = now + 5 * S
    lg = (LG, 3, 10 * S, 0)
    good = _log_bytes(fut - S, 0, [(fut - S, 1), (fut, 1)])
    values = [
        b"junk", b"", good[:9], good + b"\x00", good[:-1], good[:16],
        # four entries for a quota of 3
        _log_bytes(fut, 0, [(fut, 1), (fut + 1, 1), (fut + 2, 1), (fut + 3, 0)]),
        # two entries that weigh 1, or 4
        good[:-2] + good[15:17], good[:-2] + struct.pack(">H", 4),
        # a total that wraps: 2 entries weighing 65535
        good[:-2] + struct.pack(">H", 65535),
        # the newest time past 2^53
        _log_bytes(2 ** 53 - 10, 0, [(2 ** 53 - 10, 1), (2 ** 53 + 1, 1)]),
        b"\xff" * 17, b"%d" % now, b"%d:3:0" % (fut + 20 * S), b"%d:3" % fut,
    ]
    reqs = []
    for v in values:
        c = new_client()
        r.c.command("SET", key_of(c, lg), v)
        reqs.append((c, 1, [lg]))
    for cmd in (("HSET", "f", "1"), ("RPUSH", good), ("SADD", "1")):
        c = new_client()
        r.c.command(cmd[0], key_of(c, lg), *cmd[1:])
        reqs.append((c, 1, [lg]))
    # and the one readable value: 2 + 1 left 0; recorded at its newest,
    # moved back to now
    cg = new_client()
    r.c.command("SET", key_of(cg, lg), good, "PXAT", expiry_ms(fut + 10 * S, 10 * S))
    reqs.append((cg, 1, [lg]))
    now2, got = decide(reqs)
    assert now2 - now < 4 * S, "too slow to tell"
    for (c, _, _), g, v in zip(reqs[:-1], got, values + [None] * 3):
        assert g[0] == 1 and g[2][0][:2] == (2, -(10 * S)), (v, g)
        assert r.c.command("TYPE", key_of(c, lg)) == b"string"
        assert r.c.command("GET", key_of(c, lg)) == _log_bytes(now2, 0, [(now2, 1)]), v
        assert pexpiretime(key_of(c, lg)) == expiry_ms(now2 + 10 * S, 10 * S)
    # the readable one: allowed, 0 left; more when its first leaves; full
    # again when its newest (now this request too) leaves, a period from
    # now: its key's expiry moves back with it
    assert got[-1] == (1, 1, [(0, -9 * S, 10 * S)]), got[-1]
    assert r.c.command("GET", key_of(cg, lg)) == _log_bytes(now2 - S, 0, [(now2 - S, 1),
                                                                         (now2, 2)])
    assert pexpiretime(key_of(cg, lg)) == expiry_ms(now2 + 10 * S, 10 * S)
    _, got = decide([(cg, 1, [lg])])
    assert got[0][0] == 0, got


def test_log_rebase_merge_and_expiry():
    """A log whose next offset would reach 2^48 takes its oldest kept time
    as its base; requests of one call are one entry; a log's key expires
    when its newest request leaves the window, on its grid; what left the
    window is dropped, and the running total before the first entry kept
    moves with it."""
    r = redis()
    now = now_of_redis()
    lg = (LG, 5, 10 * S, 0)
    c = new_client()
    base = now - 2 ** 48 - S // 2
    # one entry gone (12 s ago), two kept (2 s and 1 s ago): offsets below
    # 2^48, this request's not
    st = LogState(base, 65534, [(now - 12 * S, 2), (now - 2 * S, 1), (now - S, 1)])
    r.c.command("SET", key_of(c, lg), log_value(st))
    m = Model()
    m.st[key_of(c, lg)] = (lg, st, now)
    now2, got = check(m, [(c, 1, [lg])], "rebase")
    assert got[0][:2] == (1, 1) and got[0][2][0][0] == 2, got
    v = log_state(r.c.command("GET", key_of(c, lg)))
    assert v.base == now - 2 * S and v.r0 == 0, v  # (65534 + 2) mod 2^16
    assert v.entries == [(now - 2 * S, 1), (now - S, 1), (now2, 1)], v
    # three requests of one call: one entry of 3, with what they left
    c = new_client()
    now3, got = check(Model(), [(c, 1, [lg])] * 3, "one call")
    assert [g[2][0][0] for g in got] == [4, 3, 2], got
    assert r.c.command("GET", key_of(c, lg)) == _log_bytes(now3, 0, [(now3, 3)])
    # expiry: the newest request's time + P, on the grid; gone after
    short = (LG, 2, 100 * MS, 0)
    c = new_client()
    now4, got = decide([(c, 1, [short])])
    assert pexpiretime(key_of(c, short)) == expiry_ms(now4 + 100 * MS, 100 * MS)
    time.sleep(0.06)
    now5, got = decide([(c, 1, [short])])
    assert got[0][2][0][:2] == (0, -(now4 + 100 * MS - now5)), (now4, now5, got)
    assert pexpiretime(key_of(c, short)) == expiry_ms(now5 + 100 * MS, 100 * MS)
    time.sleep(0.25)
    assert r.c.command("EXISTS", key_of(c, short)) == 0


def test_window_from_a_clock_that_stepped_back_keeps_its_counts():
    """A window later than the present one (Redis's clock stepped back):
    its counts hold in the present window, and a refusal moves the key
    there, so that they stop holding when it ends, not after the step."""
    r = redis()
    c = new_client()
    f, s = (FW, 3, S, 0), (SW, 3, S, 0)
    now, _ = decide([(c, 1, [f, s])])
    later = (now // S + 5) * S  # a window start seen by a clock ahead
    r.c.command("SET", key_of(c, f), "%d:3" % (later + S))
    r.c.command("SET", key_of(c, s), "%d:3:0" % (later + 2 * S))
    now, got = decide([(c, 1, [f, s])])
    end = now // S * S + S
    # in the next window the 3 weigh 3 * (1 - e/P): 2 + 1 fits at e = P/3;
    # a request of cost 1 is this one: more quota comes when it would pass
    # (negated in the unused remaining slot)
    assert got == [(0, 2, [(-(end - now), end - now, end - now),
                           (-(end - now + 333334), end - now + 333334, end + S - now)])], \
        (now, got)
    assert get(key_of(c, f)) == "%d:3" % end
    assert get(key_of(c, s)) == "%d:3:0" % (end + S)
    assert pexpiretime(key_of(c, f)) == expiry_ms(end, S)
    # a sliding window that allows moves its value to the present window
    c = new_client()
    s5 = (SW, 5, S, 0)
    r.c.command("SET", key_of(c, s5), "%d:3:1" % (later + 2 * S))
    now, got = decide([(c, 1, [s5])])
    ws = now // S * S
    # 3 + 1 * (1 - e/P) + 1: allowed, nothing whole left
    assert got[0][:2] == (1, 1) and got[0][2][0][0] == 0, got
    assert get(key_of(c, s5)) == "%d:4:1" % (ws + 2 * S)


# rl8_decide as an EVAL script whose TIME is ARGV[1] (microseconds): the
# library's run() with the command it calls for TIME answered here, the
# rest of its arguments rl8_decide's.
_AT_DRIVER = """
bind()
local real, t = rcall, tonumber(ARGV[1])
rcall = function(cmd, ...)
	if cmd == 'TIME' then
		return {string.format('%d', math.floor(t / 1000000)), string.format('%d', t % 1000000)}
	end
	return real(cmd, ...)
end
local args = {}
for i = 2, #ARGV do
	args[i - 1] = ARGV[i]
end
return run(args, false)
"""


def decide_at(t, args):
    """rl8_decide's call of args, its clock at t: the reply parsed."""
    now, got = parse_reply(redis().c.command("EVAL", _driver(_AT_DRIVER), 0, t, *args))
    assert now == t, (now, t)
    return got


def test_clock_that_steps_back_owes_at_most_a_period():
    """Redis's clock an hour back (an NTP step, a failover to a server
    whose clock is behind): each limit holds the client for at most what
    one period holds, not for the step, and the refusal writes the state
    so read, so that the client runs on from the present. (Times ahead of
    Redis's own clock, so that the keys' expiries are in its future.)"""
    before = now_of_redis() + 2 * 3600 * S
    after = before - 3600 * S
    # a 100/1m client that used 2 tokens: a bucket a capacity in debt
    # (the most a charge leaves), the next token 60.6 s away
    c, tb = new_client(), (TB, 100, 60 * S, 0)
    for i in range(2):
        assert decide_at(before + i, decide_args([(c, 1, [tb])]))[0][0] == 1
    got = decide_at(after, decide_args([(c, 1, [tb])]))
    assert got == [(0, 1, [(0, 60 * S + 600 * MS, 120 * S)])], got
    assert get(key_of(c, tb)) == tb_value(tb, after + 120 * S)
    assert pexpiretime(key_of(c, tb)) == expiry_ms(after + 120 * S, 60 * S)
    got = decide_at(after + 60 * S + 600 * MS, decide_args([(c, 1, [tb])]))
    assert got[0][:2] == (1, 1) and got[0][2][0][0] == 0, got
    # windows and a log of 3/10s, spent, in a rule of several limits (the
    # general path): refused until the present window ends, or until the
    # log's oldest, moved back, leaves
    P = 10 * S
    fw, sw, lg = (FW, 3, P, 0), (SW, 3, P, 0), (LG, 3, P, 0)
    roomy = (TB, 1000, 86400 * S, 0)  # a day deep: no step of an hour empties it
    ends = {}
    for lim in (fw, sw, lg):
        c = new_client()
        for i in range(3):
            assert decide_at(before + i, decide_args([(c, 1, [lim, roomy])]))[0][0] == 1
        got = decide_at(after, decide_args([(c, 1, [lim, roomy])]))
        assert got[0][:2] == (0, 1), (lim, got)
        retry = got[0][2][0][1]
        end = after - after % P + P
        if lim is lg:
            # the entries moved back by (before + 2) - after: the oldest to
            # after - 2, leaving 10 s later
            assert retry == P - 2, (lim, got)
            assert redis().c.command("GET", key_of(c, lg)) == _log_bytes(
                after - 2, 0, [(after - 2, 1), (after - 1, 1), (after, 1)])
            again = after - 2 + P
        elif lim is fw:
            assert retry == end - after, (lim, got)
            assert get(key_of(c, fw)) == "%d:3" % end
            again = end
        else:
            # the 3 fade over the next window: one fits once they weigh 2
            assert retry == end - after + P // 3 + 1, (lim, got)
            assert get(key_of(c, sw)) == "%d:3:0" % (end + P)
            again = after + retry
        assert retry < P + P // 2, (lim, got)
        got = decide_at(again, decide_args([(c, 1, [lim, roomy])]))
        assert got[0][0] == 1, (lim, got)
        ends[lim] = again
    # a place in flight of at most 10 s ends 10 s after the step at the
    # latest
    c, cc = new_client(), (CC, 1, P, 0)
    args = lambda n: with_ids(layout([(c, 1, [cc, roomy])])[0], [rid(n)])  # noqa: E731
    assert decide_at(before, args(1))[0][0] == 1
    got = decide_at(after, args(2))
    assert got[0][:2] == (0, 1) and got[0][2][0][1:] == (S, P), got
    assert decide_at(after + P - 1, args(3))[0][0] == 0
    assert decide_at(after + P, args(4))[0][0] == 1
    # a ban of 5 minutes, put before the step: 5 minutes from the step
    c, ban = new_client(), (BAN, 1, 300 * S, 0)
    redis().c.command("SET", key_of(c, ban), "%d" % (before + 300 * S))
    got = decide_at(after, decide_args([(c, 1, [ban, roomy])]))
    assert got[0][:2] == (0, 1) and got[0][2][0][1] == 300 * S, got
    assert get(key_of(c, ban)) == "%d" % (after + 300 * S)
    assert decide_at(after + 300 * S, decide_args([(c, 1, [ban, roomy])]))[0][0] == 1


# A reply of every shape: more than 15 results, a rule of more than 15
# limits, integers of every msgpack width, 2^32 and beyond too.
_MANY = [(TB, 2 ** i, S, 0) for i in range(17)]
_WIDTHS = [(TB, 100, 10 * S, 0), (TB, 60000, 10 * S, 0), (SW, 10 ** 6, 2 ** 40, 0),
           (FW, 2 ** 40, 2 ** 36, 0)]


def _wide_replies():
    """The raw replies to a batch of every shape and to one past 4000
    bytes, each with its requests."""
    clients = [new_client() for _ in range(7)]
    reqs = [(clients[i % 3], 1 + i % 2, _WIDTHS) for i in range(18)] + [(clients[3], 1, _MANY)]
    # requests of one limit, with numbers beyond 2^32
    reqs += [(clients[5], 3, _WIDTHS[3:]), (clients[6], 5, _WIDTHS[2:3])]
    long_reqs = [(clients[4], 1, _WIDTHS)] * 400
    return [(reqs, redis().c.command("FCALL", "rl8_decide", 0, *layout(reqs)[0])),
            (long_reqs, redis().c.command("FCALL", "rl8_decide", 0, *layout(long_reqs)[0]))]


def test_reply_of_every_shape_matches_model():
    """Whatever encoding each number takes, the reply holds the model's
    decisions, whole numbers of every width."""
    (reqs, raw), (long_reqs, long_raw) = _wide_replies()
    now, results = parse_reply(raw)
    assert len(results) == 21 and len(results[18][2]) == 17
    flat = [x for res in results for p in res[2] for x in p]
    for lo, hi in ((0, 127), (128, 255), (256, 65535), (65536, 2 ** 32 - 1), (2 ** 32, 2 ** 53)):
        assert any(lo <= x <= hi for x in flat), (lo, hi, flat)
    assert Model().decide(now, reqs) == results
    now, results = parse_reply(long_raw)
    assert len(long_raw) > 4000 and Model().decide(now, long_reqs) == results


def _array_header(n):
    """msgpack's shortest array header: fixarray, else array 16."""
    return bytes([0x90 + n]) if n < 16 else b"\xdc" + struct.pack(">H", n)


def _reply_bytes(now, results):
    """The reply as the library's header documents it, byte for byte:
    [now_us, results], each [allowed, decider, per_limit], array headers in
    their shortest form, allowed and decider fixints, and every other
    number (now_us, remaining, retry_after_us, reset_us) a float64."""
    out = bytearray(b"\x92\xcb" + struct.pack(">d", now)) + _array_header(len(results))
    for res in results:
        a, d, per = res[:3]
        out += bytes([0x90 + len(res), a, d]) + _array_header(len(per))
        for p in per:
            out.append(0x93)
            for x in p:
                out += b"\xcb" + struct.pack(">d", x)
        if len(res) == 4:
            # the lease: [extra, v_1 .. v_nl], each v a str (fixstr, or
            # str 8 from 32 bytes) or nil
            extra, vals = res[3]
            out += _array_header(1 + len(vals)) + b"\xcb" + struct.pack(">d", extra)
            for v in vals:
                if v is None:
                    out.append(0xc0)
                else:
                    v = v.encode()
                    out += (bytes([0xa0 + len(v)]) if len(v) < 32 else bytes([0xd9, len(v)])) + v
    return bytes(out)


def test_reply_bytes_are_the_documented_msgpack():
    """The library writes its reply in pieces; the bytes must be exactly
    the documented encoding, more than 15 results, more than 15 limits,
    and numbers from 0 to beyond 2^32 (exact as float64 below 2^53)."""
    for _, raw in _wide_replies():
        now, results = parse_reply(raw)
        want = _reply_bytes(now, results)
        assert raw == want, "reply bytes differ from byte %d: %r, want %r" % (
            next(i for i in range(len(raw)) if raw[i:i + 1] != want[i:i + 1]), raw[:40], want[:40])


def test_largest_batch_matches_model():
    """4096 requests (the most a call takes) over 4200 keys, more than one
    MGET reads: each client's state must come from its own key, in either
    MGET, twice over."""
    lim = [(TB, 2, 3600 * S, 0), (FW, 3, 3600 * S, 0)]
    clients = [new_client() for _ in range(2100)]
    reqs = [(clients[i % 2100], 1, lim) for i in range(4096)]
    _, keys, _ = layout(reqs)
    assert len(keys) == 4200
    m = Model()
    for rnd in range(3):
        _, got = check(m, reqs, "largest batch %d" % rnd)
        assert len(got) == 4096
    assert got[0][0] == 0 and got[-1][0] == 0


def test_rule_cache():
    """Rules are kept by their bytes, up to 256: the same bytes many times,
    and more than 256 distinct rules in a sequence and in one call, decide
    as the model says."""
    m = Model()
    c = new_client()
    lim = [(FW, 1000, 3600 * S, 0), (TB, 500, 3600 * S, 0)]
    for i in range(300):
        check(m, [(c, 1, lim)], "same rule %d" % i, stored=i % 50 == 0)
    # 300 rules, each its own client: one per call, then in reverse (the
    # cache emptied in between), then all in one call
    rules = [[(TB, 10 + i, 3600 * S, 0), (FW, 2 + i % 3, 3600 * S, 0)] for i in range(300)]
    clients = [new_client() for _ in rules]
    for i in list(range(300)) + list(range(299, -1, -1)):
        check(m, [(clients[i], 1, rules[i])], "rule %d" % i, stored=False)
    _, got = check(m, [(clients[i], 1, rules[i]) for i in range(300)], "300 rules")
    assert [g[0] for g in got].count(1) == 200, got  # the third of 2 refused
    # the same limits in other bytes (a wider integer) are the same limit
    c = new_client()
    l = (FW, 3, 3600 * S, 0)
    wide = b"\x91\x94\x02\xce\x00\x00\x00\x03\xce" + struct.pack(">I", 3600 * S) + b"\x00"
    assert mpack.unpackb(wide) == [list(l)]
    for rule, want in ((wide, 2), (rule_bytes([l]), 1), (wide, 0)):
        _, got = fcall([request_bytes(1, [(1, 1, 1)]), rule, key_of(c, l)])
        assert got[0][:2] == (1, 1) and got[0][2][0][0] == want, got


# ---------------------------------------------------------------- leases


def return_lease(take, back, vals, fn="rl8_return", mapped=True, before=None):
    """FCALL fn for one lease: back [(client or owners, unspent, limits)]
    (one request), vals the v_j of the grant's lease element. Returns the
    keys changed, the moment just after, and the expect by key (for
    Model.give_back); appends the moment just before to `before` when
    given (the function ran between the two)."""
    (owners, _, limits), = back
    if mapped:
        args = layout_mapped(back)[0]
    else:
        args = layout(back)[0]
    owners = owners if isinstance(owners, tuple) else (owners,) * len(limits)
    expect = {key_of(o, l): v for o, l, v in zip(owners, limits, vals)}
    if before is not None:
        before.append(now_of_redis())
    n = redis().c.command("FCALL", fn, 0, str(take), mpack.packb(list(vals)), *args)
    return n, now_of_redis(), expect


def packable(limit):
    """The limit packed when it can be (a token bucket of n <= 3)."""
    if limit[0] == TB and limit[1] // math.gcd(limit[1], limit[2]) <= 3:
        return packed(limit)
    return limit


def lease_timeline(fn, ret_fn, seed, mapped, steps=40, pack=False):
    """Random calls mixing requests with a lease (k of every size) and
    without, over token buckets (emission intervals of whole and of
    fractional microseconds), windows and a log, several rules in a call;
    each reply and each value written checked against the model, and some
    leases given back (a part of the extra, a call or a few later, while
    other requests may have touched their keys), the keys then as the
    model says. mapped: a shared bucket and window of every client,
    through the keymap."""
    rng = random.Random(seed)
    rules = [
        [(TB, 40, 1 * S, 0)],
        [(TB, 21, 1 * S, 8), (FW, 12, 400 * MS, 0)],
        [(SW, 16, 500 * MS, 0), (TB, 50, 2 * S, 0)],
        [(FW, 10, 300 * MS, 0)],
        # a log: never leases
        [(LG, 5, 400 * MS, 0), (TB, 10, 1 * S, 0)],
    ]
    shared = ((TB, 90, 1 * S, 0), (SW, 100, 600 * MS, 0))
    if pack:
        rules = [[packable(l) for l in r] for r in rules]
        shared = tuple(packable(l) for l in shared) + (packed((TB, 80, 1 * S, 0)),)
    glob = new_client()
    clients = [new_client() for _ in rules]
    model = Model()
    pending = []  # (due step, take, request as returned, vals)
    tally = {"leased": 0, "refused": 0, "back": 0, "kept": 0, "bucket kept": 0, "log": 0}
    for step in range(steps):
        reqs = []
        for _ in range(rng.randint(1, 6)):
            c = rng.randrange(len(rules))
            limits = tuple(rules[c])
            who = clients[c]
            if mapped:
                limits += shared
                who = (clients[c],) * len(rules[c]) + (glob,) * len(shared)
            q = (who, rng.choice([1, 1, 2]), limits)
            if rng.random() < 0.6:
                q += (rng.choice([0, 1, 2, 3, 5, 8] * 4 + [100, 2 ** 32 - 1]),)
            reqs.append(q)
        what = "leases %s seed %d step %d" % (fn, seed, step)
        take, got = check(model, reqs, what, fn)
        for q, x in zip(reqs, got):
            if len(x) < 4:
                continue
            extra, vals = x[3]
            if x[0] != 1:
                assert extra == 0 and set(vals) == {None}, x
                tally["refused"] += 1
            elif q[2][0][0] == LG:
                assert extra == 0, x
                tally["log"] += 1
            elif extra > 0:
                tally["leased"] += 1
                if rng.random() < 0.7:
                    back = (q[0], rng.randint(1, extra), q[2])
                    pending.append((step + rng.choice([0, 0, 1, 3]), take, back, vals))
        for due in [p for p in pending if p[0] <= step]:
            pending.remove(due)
            _, t, back, vals = due
            before = []
            n, now, expect = return_lease(t, [back], vals, ret_fn, mapped, before)
            # (a bucket another request wrote since: kept as it is)
            tally["bucket kept"] += sum(1 for k, v in expect.items()
                                        if v is not None and k in model.st and
                                        model.stored(k)[0] != v)
            # The function ran at a moment between before[0] and now: a
            # bucket the return fills by now but not by before[0] may be
            # full, or hold what it holds at before[0] (the value a return
            # leaves does not depend on the moment, only its being full).
            early = copy.deepcopy(model)
            early.give_back(before[0], t, [back], expect)
            model.give_back(now, t, [back], expect)
            keys = sorted(expect)
            tally["back" if n else "kept"] += 1
            check_stored(model, [k for k in keys if k in model.st])
            gone = [k for k in keys if k not in model.st]
            check_absent([k for k in gone if k not in early.st])
            check_stored(early, [k for k in gone if k in early.st and get(k) is not None])
        time.sleep(rng.choice([0, 0.005, 0.02, 0.05, 0.1]))
    print("  %s %s seed %d: %r" % (fn, "mapped" if mapped else "plain", seed, tally))
    assert tally["leased"] > 5 and tally["refused"] > 0 and tally["back"] > 0, tally
    assert tally["bucket kept"] > 0, tally
    return tally


def test_leases_match_model():
    """Leases through random timelines, in both functions, with and
    without the keymap: every reply (a lease's extra and values too) and
    every value written, and what rl8_return gives back, as the model."""
    for fn, ret_fn, seed, mapped in (("rl8_decide", "rl8_return", 901, False),
                                      ("rl8_decide_cluster", "rl8_return_cluster", 902, False),
                                      ("rl8_decide", "rl8_return", 903, True),
                                      ("rl8_decide_cluster", "rl8_return_cluster", 904, True)):
        lease_timeline(fn, ret_fn, seed, mapped)


def test_packed_leases_match_model():
    """test_leases_match_model with the token buckets that can be packed
    packed (and a shared packed bucket): the lease's values are the hash
    fields' as Redis prints them, and a return compares them so."""
    for fn, ret_fn, seed, mapped in (("rl8_decide", "rl8_return", 905, False),
                                      ("rl8_decide_cluster", "rl8_return_cluster", 906, True)):
        lease_timeline(fn, ret_fn, seed, mapped, pack=True)


def test_lease_takes_what_the_tightest_limit_leaves():
    """extra is min(k, each limit's remaining after the request): the
    reply is the request's own (its remaining and times at its cost),
    the keys hold cost + extra, and a later request of the call sees
    them; every key's value and expiry as the model."""
    for fn in lua_scripts.FUNCTIONS:
        lim = [(TB, 10, 3600 * S, 0), (FW, 5, 3600 * S, 0), (SW, 7, 3600 * S, 0)]
        m = Model()
        c = new_client()
        _, got = check(m, [(c, 1, lim, 100)], "tightest", fn)
        (a, d, per, (extra, vals)), = got
        assert a == 1 and d == 2 and [p[0] for p in per] == [9, 4, 6], got
        assert extra == 4 and vals[0] is not None and vals[1:] == (None, None), got
        assert vals[0] == get(key_of(c, lim[0]))
        assert get(key_of(c, lim[1])).endswith(":5") and get(key_of(c, lim[2])).endswith(":5:0")
        # the window is spent: the next request is refused, and leases nothing
        _, got = check(m, [(c, 1, lim, 100)], "spent", fn)
        assert got[0][0] == 0 and got[0][3] == (0, (None, None, None)), got
        # k below every remaining: extra is k; a later request of the call
        # sees the lease's tokens taken
        c = new_client()
        roomy = [(TB, 10, 3600 * S, 0), (FW, 8, 3600 * S, 0), (SW, 9, 3600 * S, 0)]
        _, got = check(m, [(c, 2, roomy, 3), (c, 1, roomy)], "k", fn)
        assert got[0][3][0] == 3 and [p[0] for p in got[0][2]] == [8, 6, 7], got
        assert len(got[1]) == 3 and [p[0] for p in got[1][2]] == [4, 2, 3], got
        # the lease's value of a bucket of fractional T (1s/7) and one
        # written as the text "A+R" (n = 2^47 - 1: beyond 2^53)
        c = new_client()
        t7, big = (TB, 7, 1 * S, 0), (TB, 2 ** 47 - 1, 3, 0)
        now, got = check(m, [(c, 1, [t7, big], 2)], "values", fn)
        extra, vals = got[0][3]
        # big is full again within a few microseconds: its key expires
        # at the next millisecond, perhaps before it is read back
        held = get(key_of(c, big))
        assert extra == 2 and vals[0] == get(key_of(c, t7)), got
        assert held is None or vals[1] == held, (got, held)
        assert "+" in vals[1] and "+" not in vals[0], vals


def test_lease_is_zero_for_other_limits_and_refusals():
    """A rule with a log, a limit of requests in flight or a penalty box
    leases nothing (extra 0, every value nil) and takes its cost alone; a
    refused request leases nothing and writes nothing."""
    lg = (LG, 5, 3600 * S, 0)
    tb = (TB, 10, 3600 * S, 0)
    for fn in lua_scripts.FUNCTIONS:
        m = Model()
        c = new_client()
        _, got = check(m, [(c, 1, [tb, lg], 50)], "log", fn)
        assert got[0][0] == 1 and got[0][3] == (0, (None, None)), got
        assert [p[0] for p in got[0][2]] == [9, 4]
        # a limit of requests in flight (with ids) and a ban
        for other in ((CC, 3, 60 * S, 0), (BAN, 1, 60 * S, 0)):
            c = new_client()
            args = with_leases(with_ids(layout([(c, 1, [tb, other])])[0], [rid(1)]), [50])
            now, got = fcall(args, fn)
            assert got[0][0] == 1 and got[0][3] == (0, (None, None)), got
            assert got[0][2][0][0] == 9, got
            assert get(key_of(c, tb)) == tb_value(tb, now + 360 * S), get(key_of(c, tb))
        # refused: no lease, nothing written
        c = new_client()
        one = (FW, 1, 3600 * S, 0)
        check(m, [(c, 1, [one, tb])], "take", fn)
        before = [get(key_of(c, l)) for l in (one, tb)]
        _, got = check(m, [(c, 1, [one, tb], 5)] * 2, "refused", fn)
        assert [x[0] for x in got] == [0, 0] and got[0][3] == (0, (None, None)), got
        assert [get(key_of(c, l)) for l in (one, tb)] == before


def test_lease_of_zero_replies_as_before():
    """A request whose k is 0 in a call with leases replies the 3 elements
    of a call without them, byte for byte; the values written are the same
    too (twin clients, a bucket: its reply does not depend on the time)."""
    lim = [(TB, 10, 3600 * S, 0), (TB, 7, 60 * S, 3)]
    for fn in lua_scripts.FUNCTIONS:
        a, b = new_client(), new_client()
        plain = [(a, 1, lim), (a, 2, lim)]
        leased = [(b, 1, lim, 0), (b, 2, lim, 0)]
        raw_a = redis().c.command("FCALL", fn, 0, *decide_args(plain))
        raw_b = redis().c.command("FCALL", fn, 0, *decide_args(leased))
        assert decide_args(leased)[0][:2] == b"\x20\x01"
        assert raw_a[10:] == raw_b[10:], (raw_a, raw_b)
        assert [len(x) for x in parse_reply(raw_b)[1]] == [3, 3]
        # (a and b decided moments apart: the same TAT relative to each now)
        na, nb = parse_reply(raw_a)[0], parse_reply(raw_b)[0]
        for l in lim:
            va, vb = get(key_of(a, l)), get(key_of(b, l))
            n = l[1] // math.gcd(l[1], l[2])
            assert int(vb) - int(va) == (nb - na) * n, (l, va, vb)


def test_lease_reply_bytes_are_the_documented_msgpack():
    """A reply with leases, byte for byte as documented: 4 elements for a
    request with k > 0, 3 for k = 0, extra a float64, the values fixstr or
    str 8 (a text "A+R" of 32 bytes and more) or nil, a lease array of 16
    entries and more (array 16)."""
    c, d, e = new_client(), new_client(), new_client()
    # T = 2^47 / q, 9 taken (the window leaves 8): the remainder R of TAT
    # is 9 * 2^47 mod q, 15 digits, and the text 32 bytes
    q = 2 ** 47 - 12000000000001
    big = (TB, q, 2 ** 47, 0)
    wide = [(TB, 50 + j, 3600 * S, 0) for j in range(14)] + [(FW, 90, 3600 * S, 0)]
    reqs = [(c, 1, [big, (SW, 9, 60 * S, 0)], 33015), (d, 1, wide, 7), (c, 2, [big,
            (SW, 9, 60 * S, 0)], 0), (e, 1, [(FW, 3, 60 * S, 0)], 2 ** 32 - 1)]
    raw = redis().c.command("FCALL", "rl8_decide", 0, *decide_args(reqs))
    now, results = parse_reply(raw)
    assert [len(x) for x in results] == [4, 4, 3, 4], results
    assert len(results[1][3][1]) == 15 and results[1][3][0] == 7, results[1]
    assert len(results[0][3][1][0]) >= 32 and "+" in results[0][3][1][0], results[0]
    assert results[3][3] == (2, (None,)), results[3]
    assert raw == _reply_bytes(now, results)
    assert Model().decide(now, reqs) == results


def test_return_gives_back_an_untouched_lease():
    """An untouched key takes the unspent tokens back exactly (TAT back by
    them: a following request sees them), the windows their count; the
    cluster function the same on a standalone server."""
    lim = [(TB, 10, 3600 * S, 0), (FW, 20, 3600 * S, 0), (SW, 20, 3600 * S, 0)]
    for fn, ret in zip(lua_scripts.FUNCTIONS, lua_scripts.RETURNS):
        m = Model()
        c = new_client()
        take, got = check(m, [(c, 1, lim, 6)], "grant", fn)
        extra, vals = got[0][3]
        assert extra == 6, got
        n, now, expect = return_lease(take, [(c, 4, lim)], vals, ret, mapped=False)
        assert n == 3, n
        assert m.give_back(now, take, [(c, 4, lim)], expect) == 3
        check_stored(m, [key_of(c, l) for l in lim])
        # 1 + 6 taken, 4 back: the next request leaves 10 - 3 - 1 = 6
        _, got = check(m, [(c, 1, lim)], "after", fn)
        assert [p[0] for p in got[0][2]] == [6, 16, 16], got
        # given back once: the value moved on, the bucket keeps its tokens
        before = get(key_of(c, lim[0]))
        n, _, _ = return_lease(take, [(c, 1, [lim[0]])], vals[:1], ret, mapped=False)
        assert n == 0 and get(key_of(c, lim[0])) == before


def test_return_after_another_request_keeps_a_bucket():
    """Once another request has written the key, a token bucket's tokens
    are not given back (its value unchanged), a fixed window's count in
    the grant's window is; a refused request in between writes nothing,
    so the return still finds its value."""
    tb, fw = (TB, 10, 3600 * S, 0), (FW, 20, 3600 * S, 0)
    for fn, ret in zip(lua_scripts.FUNCTIONS, lua_scripts.RETURNS):
        m = Model()
        c = new_client()
        take, got = check(m, [((c, c), 1, (tb, fw), 5)], "grant", fn)
        vals = got[0][3][1]
        check(m, [((c, c), 1, (tb, fw))], "touch", fn)
        before = get(key_of(c, tb))
        n, now, expect = return_lease(take, [((c, c), 3, (tb, fw))], vals, ret)
        assert n == 1 and get(key_of(c, tb)) == before, (n, before)
        assert m.give_back(now, take, [((c, c), 3, (tb, fw))], expect) == 1
        assert get(key_of(c, fw)).endswith(":4"), get(key_of(c, fw))
        check_stored(m, [key_of(c, tb), key_of(c, fw)])
        # a refusal in between: the bucket's value stays the grant's
        d = new_client()
        one = (FW, 1, 3600 * S, 0)
        check(m, [((d, d), 1, (one,))], "fill", fn)
        take, got = check(m, [((d, d), 1, (tb,), 5)], "grant 2", fn)
        vals = got[0][3][1]
        _, got = check(m, [((d, d, d), 1, (tb, one, fw))], "refused", fn)
        assert got[0][0] == 0, got
        n, now, expect = return_lease(take, [((d,), 5, (tb,))], vals, ret)
        assert n == 1 and m.give_back(now, take, [((d,), 5, (tb,))], expect) == 1
        check_stored(m, [key_of(d, tb)])


def test_return_never_lifts_a_bucket_over_its_capacity():
    """Tokens refilled since the grant are not given twice: back at full,
    the key is deleted; and a bucket refilled to full and taken again by
    another agent keeps what it holds (the lease's reservation was
    absorbed), where a plain refund would lift it."""
    for fn, ret in zip(lua_scripts.FUNCTIONS, lua_scripts.RETURNS):
        lim = (TB, 5, 500 * MS, 0)  # T = 100 ms
        c = new_client()
        take, got = decide([(c, 1, [lim], 4)], fn)
        assert got[0][3][0] == 4, got
        time.sleep(0.15)
        n, _, _ = return_lease(take, [(c, 4, [lim])], got[0][3][1], ret, mapped=False)
        assert n == 1 and redis().c.command("EXISTS", key_of(c, lim)) == 0
        # full again at 500 ms; another request then; the return keeps it
        c = new_client()
        take, got = decide([(c, 1, [lim], 4)], fn)
        time.sleep(0.55)
        _, after = decide([(c, 1, [lim])], fn)
        assert after[0][2][0][0] == 4, after
        v = get(key_of(c, lim))
        n, _, _ = return_lease(take, [(c, 4, [lim])], got[0][3][1], ret, mapped=False)
        assert n == 0 and get(key_of(c, lim)) == v


def test_lease_and_return_with_bad_arguments_write_nothing():
    """Leases badly laid out, and a return with bad arguments: an error
    reply, nothing written. rl8_refund and rl8_return take no leases."""
    r = redis()
    tb = (TB, 10, S, 0)
    c = new_client()
    k = key_of(c, tb)
    good = decide_args([(c, 1, [tb], 5)])
    assert len(good[0]) == 16
    decide_cases = [
        ([good[0][:-4]] + good[1:], "requests: need 2 + 14 * n bytes"),
        ([good[0] + b"\x00" * 10] + good[1:], "requests: need 2 + 14 * n bytes"),
        # ids for the leased requests: 8 bytes per request, not per record
        ([struct.pack(">H", 0x6001) + good[0][2:], good[1], b"\x00" * 14, k],
         "ids: need 8 bytes per request"),
        ([good[0][:2] + struct.pack(">IIHI", 1, 0, 1, 5)] + good[1:],
         "request 1: cost must be at least 1"),
        ([good[0] + struct.pack(">IIHI", 2, 1, 1, 5)] + good[1:], "request 2: first_key"),
    ]
    for fn in lua_scripts.FUNCTIONS:
        for args, want in decide_cases:
            try:
                fcall(args, fn)
            except RespError as e:
                assert want is None or str(e).startswith("ERR rl decide: " + want), (fn, e)
            else:
                raise AssertionError((fn, args))
            assert r.c.command("EXISTS", k) == 0, (fn, args)
    _, got = decide([(c, 1, [tb], 2)])
    before = get(k)
    vals = got[0][3][1]
    plain = layout([(c, 1, [tb])])[0]
    exp = mpack.packb(list(vals))
    return_cases = [
        (["x", exp] + plain, "take_us must be an integer"),
        (["-1", exp] + plain, "take_us must be an integer"),
        (["1"], "requests: need"),
        (["1", exp, good[0]] + plain[1:], "requests: leases are taken only by a decide"),
        (["1", exp, b"\x00"] + plain[1:], "requests: need 2 + 10 * n bytes"),
        (["1", b"\xc1"] + plain, "expect: need a msgpack array of 1 entries"),
        (["1", mpack.packb(vals[0])] + plain, "expect: need a msgpack array"),
        (["1", mpack.packb([])] + plain, "expect: need a msgpack array of 1"),
        (["1", mpack.packb([vals[0], None])] + plain, "expect: need a msgpack array of 1"),
        (["1", exp + b"\xc0"] + plain, "expect: need"),
        (["1", mpack.packb({"a": 1})] + plain, "expect: need"),
        (["1", mpack.packb([7])] + plain, "expect: entry 1 must be nil or a string"),
        (["1", mpack.packb([[vals[0]]])] + plain, "expect: entry 1 must be nil"),
        (["1", exp, struct.pack(">HIIH", 1, 2, 1, 1)] + plain[1:], "request 1: first_key"),
        (["1", exp, struct.pack(">HIIH", 0x8001, 1, 1, 1)] + plain[1:2] +
         [b"\x00\x00\x00\x09"] + plain[2:], "keymap: position 1 must name a key"),
    ]
    for fn in lua_scripts.RETURNS:
        for args, want in return_cases:
            try:
                r.c.command("FCALL", fn, 0, *args)
            except RespError as e:
                assert str(e).startswith("ERR rl decide: " + want), (fn, want, e)
            else:
                raise AssertionError((fn, args))
            assert get(k) == before, (fn, args)
    for fn in lua_scripts.REFUNDS:
        try:
            r.c.command("FCALL", fn, 0, "1", good[0], *plain[1:])
        except RespError as e:
            assert "requests: leases are taken only by a decide" in str(e), e
        else:
            raise AssertionError(fn)
    assert get(k) == before
    # and a good return still gives back
    assert r.c.command("FCALL", "rl8_return", 0, "1", exp, *plain) == 1


# ------------------------------------------------------------- measure


def _measure(batch, seconds=None, depth=16):
    """Prints decisions per second with `batch` requests per FCALL, `depth`
    calls in flight on one connection; fails on an error reply. A smoke
    test under pipelining: `make bench` has the figures
    (RL_MEASURE_SECONDS=2 for a longer look)."""
    seconds = float(os.environ.get("RL_MEASURE_SECONDS", seconds or 0.25))
    r = redis()
    lim = [(TB, 1000000, 60 * S, 0), (SW, 10000000, 3600 * S, 0)]
    pool = [new_client() for _ in range(4096)]
    # pre-encoded commands, so the client's own cost stays small
    cmds = []
    for i in range(64):
        reqs = [(pool[(i * batch + j) % len(pool)], 1, lim) for j in range(batch)]
        cmds.append(("FCALL", "rl8_decide", 0, *layout(reqs)[0]))
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
        if ln.startswith("cmdstat_fcall:"):
            usec = int(dict(kv.split("=") for kv in ln.split(":", 1)[1].split(","))["usec"])
    assert usec > 0, "no FCALL in commandstats"
    print("  measure batch %2d: %.0f/s (server %.1f us/call, %.0f/s of server time)"
          % (batch, calls * batch / wall, usec / max(calls, 1), calls * batch / (usec / 1e6)))


def test_measure_batch_1():
    _measure(1)


def test_measure_batch_16():
    _measure(16)


def test_measure_batch_64():
    _measure(64)
