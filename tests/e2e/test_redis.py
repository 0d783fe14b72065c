# SPDX-License-Identifier: Apache-2.0
"""The agent with its Redis store, against a real redis-server started for
each test (tests/e2e/redis_helper.py): exact counts across a fleet of agents,
every algorithm, several limits all or nothing, weighted cost, key expiry,
Redis going away, pausing and coming back, AUTH and ACL users, a Unix
socket, the local refusal cache, the decision library lost and loaded again.

Most checks speak raw SPOP to the agent (tests/e2e/spop.py) and compare the
whole set of variables of each ACK; the fleet and restart tests go through
the real haproxy. Times are Redis's clock where a window's phase matters.
"""

import collections
import os
import re
import threading
import time

import fleet
import harness
import spop
from harness import http_get, wait_for
from redis_helper import RedisServer
from spop import ACK, Conn

# the library's epoch: a token bucket's state counts from it
EPOCH = 1704067200 * 1000000
# a key per limit of a client: its tag (a Cluster hash tag), then the limit
KEY_RE = re.compile(r"^\{[A-Za-z0-9_-]{4}\}[A-Za-z0-9_-]{8}$")
TAG_RE = re.compile(r"^\{[A-Za-z0-9_-]{4}\}$")
RATELIMIT_RE = re.compile(r'^"([^"]+)";r=(\d+);t=(\d+)$')

# Agent log lines that mean trouble in a run where Redis stays healthy.
BAD_LOG_RE = re.compile(r"\d\dZ (error|warning): |disconnect, status|Sanitizer|"
                        r"runtime error|Assertion|Segmentation|Abort")

# Extra response headers that expose what the agent answered (and whether
# the SPOE exchange itself failed), added to the shipped example.
DEBUG_HEADERS = (
    '    http-after-response set-header X-RL-Degraded "%[var(txn.rl.degraded)]"'
    ' if { var(txn.rl.degraded) -m found }\n'
    # (the agent sends degraded only when true: an answer without it is 0)
    '    http-after-response set-header X-RL-Degraded 0'
    ' if !{ var(txn.rl.degraded) -m found } !{ var(txn.rl.error) -m found }\n'
    '    http-after-response set-header X-RL-Error "%[var(txn.rl.error)]"'
    ' if { var(txn.rl.error) -m found }\n'
)

S = 1000000  # microseconds


# ---------------------------------------------------------------- helpers


def ok(quota, window, remaining, reset, t, name="default", policy=None):
    """The variables of an allowed request decided by Redis. reset: seconds
    until the limit is full again; t, the RateLimit field's: until more
    quota (draft -10; a token bucket's next token)."""
    return {
        "status": 0, "retry_after": 0, "limit": quota, "remaining": remaining,
        "reset": reset, "policy": policy or '"default";q=%d;w=%d' % (quota, window),
        "ratelimit": '"%s";r=%d;t=%d' % (name, remaining, t), "priority": 2,
        "reason": "ok", "rule": "default", "shadow": False, "degraded": False,
    }


def limited(quota, window, retry_after, reset, t, name="default", policy=None):
    """The variables of a refused request (t as in ok())."""
    return {
        "status": 429, "retry_after": retry_after, "limit": quota, "remaining": 0,
        "reset": reset, "policy": policy or '"default";q=%d;w=%d' % (quota, window),
        "ratelimit": '"%s";r=0;t=%d' % (name, t), "priority": 2,
        "reason": "limited", "rule": "default", "shadow": False, "degraded": False,
    }


def degraded(quota, window):
    """Decided without Redis: forwarded, and no client counts."""
    return {
        "status": 0, "retry_after": 0, "limit": quota,
        "policy": '"default";q=%d;w=%d' % (quota, window), "priority": 2,
        "reason": "ok", "rule": "default", "shadow": False, "degraded": True,
    }


def start_agent(h, redis, *args, threads=1, name=None, ready=True):
    """An agent on `redis`; with ready, returns once every worker has
    loaded the decision script (so no first request races the connect)."""
    # (the tests read every variable of a decision: a rules file of theirs
    # says answer: full)
    full = () if ("-f" in args or "--rules" in args) else ("--answer", "full")
    a = h.agent("--threads", str(threads), "--redis", redis.addr,
                "--hash-key-file", h.hash_key_file(), *full, *args, name=name)
    if ready:
        wait_for(lambda: len(set(re.findall(r"redis: worker (\d+) ready", a.log()))) >= threads
                 or not a.alive(), 5, "%s's workers to be ready with Redis" % a.name)
        assert a.alive(), a.log()
    return a


def assert_log_clean(agent):
    bad = [line for line in agent.log().splitlines() if BAD_LOG_RE.search(line)]
    assert not bad, "%s log has: %r" % (agent.name, bad[:5])


class Spop:
    """One SPOP connection to an agent, one check-rate at a time."""

    def __init__(self, port):
        self.c = Conn(port, timeout=5.0)
        self.c.handshake()
        self.sid = 0

    def ask(self, key, extra=()):
        """The ACK's variables for a check-rate with api_key=key and more
        arguments `extra` ([(name, value)])."""
        self.sid += 1
        args = spop.check_rate_args(api_key=key) + list(extra)
        self.c.send(spop.notify(self.sid, 1, [("check-rate", args)]))
        f = self.c.expect(ACK)
        assert (f.sid, f.fid) == (self.sid, 1), f
        assert f.flags == spop.FLAG_FIN, f
        return spop.as_read(f.vars())

    def timed(self, key, extra=()):
        t = time.monotonic()
        v = self.ask(key, extra)
        return v, time.monotonic() - t

    def close(self):
        self.c.close()


def wait_decided_by_redis(s, timeout, what):
    """Asks for fresh clients until an answer comes from Redis, not degraded."""
    n = [0]

    def from_redis():
        n[0] += 1
        return not s.ask("probe%d" % n[0])["degraded"]

    wait_for(from_redis, timeout, what, interval=0.05)


def sleep_until(t):
    left = t - time.monotonic()
    if left > 0:
        time.sleep(left)


def redis_sleep_until(redis, target_us):
    """Sleeps until Redis's clock reaches target_us; returns its time then."""
    for _ in range(100):
        now = redis.now_us()
        if now >= target_us:
            return now
        time.sleep(min((target_us - now) / S + 0.001, 1.0))
    raise AssertionError("Redis's clock did not reach %d" % target_us)


def wait_window_phase(redis, period_us, lo_us, hi_us):
    """Waits until Redis's clock is lo_us to hi_us into a window of
    period_us (windows are aligned on multiples of the period); returns the
    window's start."""
    for _ in range(5):
        now = redis.now_us()
        e = now % period_us
        if lo_us <= e < hi_us:
            return now - e
        target = now - e + lo_us + (period_us if e >= lo_us else 0)
        redis_sleep_until(redis, target)
    raise AssertionError("could not reach the phase [%d, %d) of a %d us window"
                         % (lo_us, hi_us, period_us))


def ratelimit_of(v):
    """(name, remaining, t) from a RateLimit value."""
    m = RATELIMIT_RE.match(v or "")
    assert m, "RateLimit %r" % (v,)
    return m.group(1), int(m.group(2)), int(m.group(3))


def haproxy_cfg(h):
    """The shipped haproxy example plus X-RL-Degraded and X-RL-Error."""
    with open(harness.BASIC_CFG) as f:
        text = f.read()
    anchor = "    default_backend app\n"
    assert text.count(anchor) == 1, "basic.cfg has no single '%s'" % anchor.strip()
    path = os.path.join(h.dir, "haproxy-debug.cfg")
    with open(path, "w") as f:
        f.write(text.replace(anchor, DEBUG_HEADERS + anchor))
    return path


def spoe_conf(h, processing):
    """The shipped SPOE configuration with another `timeout processing`."""
    with open(harness.SPOE_CONF) as f:
        text = f.read()
    text, n = re.subn(r"(?m)^(\s*timeout processing\s+)\S+", r"\g<1>" + processing, text)
    assert n == 1, "ratelimit.conf has no single 'timeout processing'"
    path = os.path.join(h.dir, "ratelimit-%s.conf" % processing)
    with open(path, "w") as f:
        f.write(text)
    return path


# The API keys of these tests, in the map the SPOE file verifies them with
# (a key it does not list is sent as no key: the address is the client).
KEYS = ("fleet-key", "other-key", "before", "after")


def start_haproxy(h, agent, backend, name="haproxy", spoe=None):
    env = {"RL_TIERS_MAP": h.tiers_map(*KEYS)}
    if spoe:
        env["RL_SPOE_CONF"] = spoe
    hp = h.haproxy(agent.port, backend.port, cfg=haproxy_cfg(h), env=env, name=name)
    wait_for(lambda: hp.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 5,
             "%s to see its agent UP" % name)
    return hp


def get(hp, key):
    return http_get(hp.port, "/", headers={"X-Api-Key": key})


def fleet_of_two(h, redis, backend, *args):
    """Two agents on redis (2 workers, --limit 100/1d, a deadline of 1 s,
    and args), each behind a haproxy of its own (`timeout processing` 2 s)
    to backend; the two haproxy."""
    spoe = spoe_conf(h, "2s")
    hps = []
    for i in (1, 2):
        a = start_agent(h, redis, "--limit", "100/1d", "--redis-timeout", "1000", *args,
                        threads=2, name="agent%d" % i)
        hps.append(start_haproxy(h, a, backend, name="haproxy%d" % i, spoe=spoe))
    return hps


def concurrent_gets(hps, key, nthreads=16, each=25):
    """nthreads clients at once (a barrier), each sending `each` requests
    for key in turn to the haproxy of hps; [(haproxy's name, response)]."""
    results, errors = [], []
    lock = threading.Lock()
    barrier = threading.Barrier(nthreads)

    def client(t):
        try:
            barrier.wait(timeout=10)
            for j in range(each):
                hp = hps[(t + j) % len(hps)]
                r = get(hp, key)
                with lock:
                    results.append((hp.name, r))
        except Exception as e:  # noqa: BLE001 - reported below
            with lock:
                errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(t,), daemon=True)
               for t in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "client threads still running"
    assert not errors, errors[:3]
    assert len(results) == nthreads * each, len(results)
    return results


# ------------------------------------------------ 1, 2: exact across a fleet


def test_fleet_through_haproxy_is_exact_under_concurrency(h):
    # Exactness is a property of decisions Redis makes; a missed deadline is
    # the degraded path, tested on its own below. Generous deadlines keep a
    # busy machine out of this test, and any degraded or failed exchange is
    # counted and fails it rather than being tolerated.
    redis = RedisServer(h)
    backend = h.backend()
    hps = fleet_of_two(h, redis, backend)

    t0 = time.monotonic()
    results = concurrent_gets(hps, "fleet-key")
    late = int(time.monotonic() - t0) + 1

    statuses = collections.Counter(r.status for _, r in results)
    assert statuses == {200: 100, 429: 300}, statuses
    bad = [(n, r) for n, r in results
           if r.headers.get("X-RL-Degraded") != "0" or r.headers.get("X-RL-Error") is not None]
    assert not bad, "%d answers degraded or failed, e.g. %r" % (len(bad), bad[:2])
    per_hp = collections.Counter(n for n, _ in results)
    assert per_hp == {"haproxy1": 200, "haproxy2": 200}, per_hp

    # One token per 864 s: each allowed request left a distinct count.
    remaining = []
    for _, r in results:
        assert r.headers.get("RateLimit-Policy") == '"default";q=100;w=86400', r
        name, rem, t = ratelimit_of(r.headers.get("RateLimit"))
        assert name == "default", r
        # t: the next token, 864 s away at most, however many were used
        assert 864 - late <= t <= 864, r
        if r.status == 200:
            remaining.append(rem)
        else:
            assert rem == 0, r
            ra = int(r.headers["Retry-After"])
            assert 864 - late <= ra <= 864, r
    assert sorted(remaining) == list(range(100)), sorted(remaining)
    assert backend.count == 100, backend.count

    # One Redis key for the client's one limit, a string.
    keys = redis.rl_keys()
    assert len(keys) == 1 and KEY_RE.match(keys[0]), keys
    assert redis.command("TYPE", keys[0]) == b"string"

    # Another key is untouched by all that.
    r = get(hps[1], "other-key")
    assert r.status == 200, r
    assert r.headers.get("RateLimit") == '"default";r=99;t=864', r
    assert r.headers.get("X-RL-Degraded") == "0", r
    assert len(redis.rl_keys()) == 2
    for a in h.agents:
        assert_log_clean(a)


def test_fleet_through_raw_spop_is_exact_with_pipelining(h):
    redis = RedisServer(h)
    agents = [start_agent(h, redis, "--limit", "100/1d", "--redis-timeout", "1000",
                          threads=2, name="agent%d" % i) for i in (1, 2)]
    nconn, per_conn = 8, 50
    # 8 connections over both agents, each with 50 NOTIFYs in one write
    acks = fleet.burst([a.port for a in agents], ["pipelined"], per_key=nconn * per_conn,
                       conns=nconn, timeout=10.0)["pipelined"]
    assert len(acks) == nconn * per_conn, len(acks)
    assert [v for v in acks if v["degraded"]] == []
    allowed = [v for v in acks if v["status"] == 0]
    refused = [v for v in acks if v["status"] == 429]
    assert len(allowed) == 100 and len(refused) == 300, (len(allowed), len(refused))
    assert sorted(v["remaining"] for v in allowed) == list(range(100))
    for v in refused:
        assert v["remaining"] == 0 and v["reason"] == "limited", v
        assert 860 <= v["retry_after"] <= 864, v
    keys = redis.rl_keys()
    assert len(keys) == 1, keys
    for a in agents:
        assert_log_clean(a)


# ------------------------------------------------------- 3: every algorithm


def test_token_bucket_sequence_and_recovery(h):
    redis = RedisServer(h)
    a = start_agent(h, redis, "--limit", "3/2s:token")
    s = Spop(a.port)
    # Capacity 3, one token per 2/3 s.
    t0 = time.monotonic()
    # t: the next token, under 1 s away each time (full: 2 s per token taken)
    assert s.ask("tb") == ok(3, 2, 2, 1, 1)
    assert s.ask("tb") == ok(3, 2, 1, 2, 1)
    assert s.ask("tb") == ok(3, 2, 0, 2, 1)
    v = s.ask("tb")
    assert v == limited(3, 2, 1, 2, 1), v
    assert time.monotonic() - t0 < 0.25, "too slow for the exact values above"
    # After Retry-After one token is back, and this request takes it.
    time.sleep(v["retry_after"])
    assert s.ask("tb") == ok(3, 2, 0, 2, 1)
    # Full again 2/3 s after the last token was due.
    sleep_until(t0 + 3.0)
    assert s.ask("tb") == ok(3, 2, 2, 1, 1)
    assert_log_clean(a)


def test_sliding_window_sequence_and_recovery(h):
    redis = RedisServer(h)
    a = start_agent(h, redis, "--limit", "3/2s:sliding")
    s = Spop(a.port)
    P = 2 * S
    # Windows are aligned on multiples of 2 s of Redis's clock; start early
    # in one so the figures below do not depend on the moment.
    ws = wait_window_phase(redis, P, 50000, 250000)
    # reset: until the end of the next window, 4 s minus the phase. t:
    # until one more request fits, in the next window as the count fades:
    # 1 + 3 <= 3 once it is 0 (4 s), 2 + 2 once 2 * (2 - e) / 2 <= 1
    # (e = 1 s, so 3 s) and 3 + 1 at e = 2/3 s (so 3 s, rounded up).
    assert s.ask("sw") == ok(3, 2, 2, 4, 4)
    assert s.ask("sw") == ok(3, 2, 1, 4, 3)
    assert s.ask("sw") == ok(3, 2, 0, 4, 3)
    # Passes in the next window once 3 * (2 - e) / 2 + 1 <= 3: e = 2/3 s.
    assert s.ask("sw") == limited(3, 2, 3, 4, 3)
    assert redis.now_us() - ws < 450000, "too slow for the exact values above"
    # 1.05 s into the next window: the previous count weighs 3 * 0.95 / 2.
    # One more fits once 3 * (2 - e) / 2 + 1 + 1 <= 3: e = 4/3 s, 0.28 s on.
    redis_sleep_until(redis, ws + P + 1050000)
    assert s.ask("sw") == ok(3, 2, 0, 3, 1)
    v = s.ask("sw")
    assert v == limited(3, 2, 1, 3, 1), v
    assert redis.now_us() - ws < P + 1300000, "too slow for the exact values above"
    # After Retry-After: the window after, where the previous count is 1.
    # Two more once the previous count of 1 has faded: the window's end.
    time.sleep(v["retry_after"])
    assert s.ask("sw") == ok(3, 2, 1, 4, 2)
    assert_log_clean(a)


def test_fixed_window_sequence_and_recovery(h):
    redis = RedisServer(h)
    a = start_agent(h, redis, "--limit", "3/2s:fixed")
    s = Spop(a.port)
    ws = wait_window_phase(redis, 2 * S, 50000, 250000)
    # t: more comes only with the next window, as the reset
    assert s.ask("fw") == ok(3, 2, 2, 2, 2)
    assert s.ask("fw") == ok(3, 2, 1, 2, 2)
    assert s.ask("fw") == ok(3, 2, 0, 2, 2)
    v = s.ask("fw")
    assert v == limited(3, 2, 2, 2, 2), v
    assert redis.now_us() - ws < 450000, "too slow for the exact values above"
    time.sleep(v["retry_after"])
    # A new window, counted from zero. Its end is ws + 4 s; the reset the
    # script reports depends on when Redis ran it, which a stalled machine
    # can push past ws + 3 s: it is read between two readings of the clock.
    assert 2 * S <= redis.now_us() - ws < 3 * S
    for remaining in (2, 1):
        t0 = redis.now_us()
        v = s.ask("fw")
        t1 = redis.now_us()
        assert t1 - ws < 4 * S, "too slow: the window ended"
        resets = {-(-(ws + 4 * S - t) // S) for t in (t0, t1)}
        assert v in [ok(3, 2, remaining, r, r) for r in resets], (v, resets)
    assert_log_clean(a)


def test_a_bucket_from_a_clock_an_hour_ahead_owes_its_capacity_at_most(h):
    """Redis's clock an hour behind the one that wrote a bucket (a failover
    to a replica whose clock is behind, an NTP step back): a 100/1s client
    that used 2 tokens is not refused for the hour (Retry-After 3600) but
    owes a capacity beyond empty at most (the most a charge leaves): its
    next token 1.01 s away, and its key runs on from Redis's present."""
    redis = RedisServer(h)
    a = start_agent(h, redis, "--limit", "100/1s")
    s = Spop(a.port)
    assert s.ask("stepped")["remaining"] == 99
    assert s.ask("stepped")["remaining"] == 98
    key, = redis.rl_keys()
    # the state as the server an hour ahead wrote it (T = 10 ms is a
    # whole number of microseconds: the value is TAT - EPOCH), with its
    # expiry
    x = int(redis.command("GET", key)) + 3600 * S
    assert redis.command("SET", key, str(x), "PX", str(3660 * 1000)) == b"OK"
    v = s.ask("stepped")
    assert v == limited(100, 1, 2, 2, 2), v
    assert int(redis.command("GET", key)) <= redis.now_us() - EPOCH + 2 * S
    assert redis.command("PTTL", key) <= 2100
    time.sleep(v["retry_after"])
    v = s.ask("stepped")
    assert v["status"] == 0, v
    assert_log_clean(a)


def test_log_refuses_at_n_through_haproxy(h):
    """5/2s as a log and as a fixed window, each an endpoint of the rules,
    through haproxy and the agent on Redis: one request 0.6 s before a
    window boundary (of Redis's clock, which aligns the fixed window), four
    0.4 s before (time enough for eight requests through HAProxy on a busy
    machine), five just after. The fixed window lets all ten through in
    under a second; the log lets five, refuses the next five until its
    first request is 2 s old, then lets exactly one more. Its key holds
    the five requests at the times Redis admitted them."""
    redis = RedisServer(h)
    rules = os.path.join(h.dir, "log.yaml")
    with open(rules, "w") as f:
        f.write("answer: full\nendpoints:\n"
                "  - { name: fixed, match: { path: /fixed }, "
                "limits: [{ rate: 5/2s, algorithm: fixed }] }\n"
                "  - { name: log, match: { path: /log }, "
                "limits: [{ rate: 5/2s, algorithm: log }] }\n")
    a = start_agent(h, redis, "-f", rules)
    hp = start_haproxy(h, a, h.backend())
    P = 2 * S

    def ask(path):
        r = http_get(hp.port, path, headers={"X-Api-Key": "edge"})
        assert r.status in (200, 429), r
        assert r.headers.get("X-RL-Degraded") in ("0", None), r
        return r

    ws = wait_window_phase(redis, P, 1400000, 1450000)
    passed = {"/fixed": 0, "/log": 0}
    t0 = redis.now_us()
    for path in passed:
        passed[path] += ask(path).status == 200
    redis_sleep_until(redis, ws + 1600000)
    for _ in range(4):
        for path in passed:
            passed[path] += ask(path).status == 200
    assert redis.now_us() < ws + P, "too slow: the window ended"
    assert passed == {"/fixed": 5, "/log": 5}, passed
    redis_sleep_until(redis, ws + P + 50000)
    refused = []
    for _ in range(5):
        passed["/fixed"] += ask("/fixed").status == 200
        r = ask("/log")
        passed["/log"] += r.status == 200
        if r.status == 429:
            refused.append(r)
    t_end = redis.now_us()
    assert t_end < ws + P + 500000, "too slow for the figures below"
    assert passed == {"/fixed": 10, "/log": 5}, passed
    # the first request leaves at about ws + 3.4 s: Retry-After and t say
    # 2 s (1.3 s, up)
    for r in refused:
        assert r.headers.get("Retry-After") == "2", r
        assert ratelimit_of(r.headers.get("RateLimit")) == ("log", 0, 2), r
    # the log's key: five requests, the first at t0 and four 0.2 s on
    # (a log is binary: any byte may be ":" or a digit; the windows' and
    # buckets' values are text of digits, ":" and "+", never this long)
    logs = [v for v in (redis.command("GET", k) for k in redis.rl_keys())
            if v and len(v) == 9 + 8 * 5 and not re.fullmatch(rb"[0-9:+]+", v)]
    assert len(logs) == 1, logs
    v = logs[0]
    base = int.from_bytes(v[:7], "big")
    times = [base + int.from_bytes(v[i:i + 6], "big") for i in range(9, len(v), 8)]
    totals = [int.from_bytes(v[i + 6:i + 8], "big") for i in range(9, len(v), 8)]
    assert totals == [1, 2, 3, 4, 5] and int.from_bytes(v[7:9], "big") == 0, v
    assert t0 <= times[0] < ws + 1500000 and ws + 1600000 <= times[1] < ws + P, (ws, times)
    assert times == sorted(times), times
    # once the first has left its window, exactly one more
    redis_sleep_until(redis, times[0] + P)
    r = ask("/log")
    assert r.status == 200, r
    assert ratelimit_of(r.headers.get("RateLimit"))[:2] == ("log", 0), r
    assert ask("/log").status == 429
    assert redis.now_us() < times[1] + P, "too slow: the second left too"
    assert_log_clean(a)


# --------------------------------------------- 4: several limits, all or none


def test_several_limits_all_or_nothing(h):
    redis = RedisServer(h)
    a = start_agent(h, redis, "--limit", "5/1d", "--limit", "2/1s")
    s = Spop(a.port)
    pol = '"default-1d";q=5;w=86400, "default-1s";q=2;w=1'
    day, sec = "default-1d", "default-1s"
    t0 = time.monotonic()
    # The limit with the fewest remaining speaks: 2/1s.
    assert s.ask("multi") == ok(2, 1, 1, 1, 1, name=sec, policy=pol)
    assert s.ask("multi") == ok(2, 1, 0, 1, 1, name=sec, policy=pol)
    # Refused by 2/1s; 5/1d would allow it but is not charged.
    assert s.ask("multi") == limited(2, 1, 1, 1, 1, name=sec, policy=pol)
    assert time.monotonic() - t0 < 0.4, "too slow for the exact values above"

    # In Redis, 5/1d holds exactly two requests: its value is the
    # theoretical arrival time, 2 * 17280 s ahead (less the time gone by);
    # 2/1s's, one key of the same client (the same tag), is 1 s ahead. Both
    # intervals are whole numbers of microseconds: the value is TAT - EPOCH.
    keys = redis.rl_keys()
    assert len(keys) == 2 and keys[0][:6] == keys[1][:6], keys
    tat = EPOCH + max(int(redis.command("GET", k)) for k in keys)
    ahead = tat - redis.now_us()
    assert 2 * 17280 * S - 2 * S < ahead <= 2 * 17280 * S, ahead

    # One second later 2/1s is full again; 5/1d has 3 left, not 2.
    sleep_until(t0 + 1.15)
    assert s.ask("multi") == ok(2, 1, 1, 1, 1, name=sec, policy=pol)  # 5/1d: 2 left
    assert s.ask("multi") == ok(2, 1, 0, 1, 1, name=sec, policy=pol)  # 5/1d: 1 left
    sleep_until(t0 + 2.4)
    # The fifth allowed request empties 5/1d, which now has the fewest.
    v = s.ask("multi")
    late = int(time.monotonic() - t0) + 1
    assert v["status"] == 0 and v["degraded"] is False, v
    assert v["limit"] == 5 and v["remaining"] == 0, v
    assert 86400 - late <= v["reset"] <= 86400, v
    # t: its next token, a fifth of a day away, not the day until full
    name, rem, t = ratelimit_of(v["ratelimit"])
    assert (name, rem) == (day, 0) and 17280 - late <= t <= 17280, v
    assert v["policy"] == pol, v
    # And 5/1d refuses the next one, for a fifth of a day: when the token
    # that lets it pass comes.
    v = s.ask("multi")
    assert v["status"] == 429 and v["limit"] == 5 and v["remaining"] == 0, v
    assert 17280 - late <= v["retry_after"] <= 17280, v
    assert 86400 - late <= v["reset"] <= 86400, v
    assert v["ratelimit"] == '"%s";r=0;t=%d' % (day, v["retry_after"]), v
    assert_log_clean(a)


# ------------------------------------------------------------ 5: weighted cost


def test_weighted_cost(h):
    redis = RedisServer(h)
    for mode in ([], ["--no-local-cache"]):
        a = start_agent(h, redis, "--limit", "10/1d", "--cost-arg", "cost", *mode)
        s = Spop(a.port)
        key = "heavy%d" % len(mode)
        w3 = [("cost", 3)]
        # One token per 8640 s; each request takes three.
        # t: the next token, 8640 s away whatever was taken
        assert s.ask(key, w3) == ok(10, 86400, 7, 25920, 8640), mode
        assert s.ask(key, w3) == ok(10, 86400, 4, 51840, 8640), mode
        assert s.ask(key, w3) == ok(10, 86400, 1, 77760, 8640), mode
        # One left: three are needed, two more come in 17280 s. A request
        # of weight 1 would pass now: more quota is there now, t=0.
        assert s.ask(key, w3) == limited(10, 86400, 17280, 77760, 0), mode
        assert s.ask(key, w3) == limited(10, 86400, 17280, 77760, 0), mode
        s.close()
        assert_log_clean(a)


def test_local_cache_does_not_refuse_a_lighter_request(h):
    # The cache's own promise: it never refuses a request that Redis would
    # allow. Weights make that a matter of the request, not only the client:
    # after a request of weight 3 is refused, one of weight 1 still fits,
    # and a request heavier than the whole bucket never passes but leaves
    # the bucket as it was. Without the cache first, to check the figures.
    redis = RedisServer(h)
    for mode in (["--no-local-cache"], []):
        a = start_agent(h, redis, "--limit", "10/1d", "--cost-arg", "cost", *mode)
        s = Spop(a.port)
        key = "light%d" % len(mode)
        for rem in (7, 4, 1):
            assert s.ask(key, [("cost", 3)])["remaining"] == rem
        assert s.ask(key, [("cost", 3)]) == limited(10, 86400, 17280, 77760, 0), mode
        v = s.ask(key, [("cost", 1)])
        assert v == ok(10, 86400, 0, 86400, 8640), (mode, "weight 1 after weight 3 refused", v)
        key = "huge%d" % len(mode)
        # Weight 11 over a capacity of 10: refused for one period.
        # (a full bucket: no more to come, t=0)
        assert s.ask(key, [("cost", 11)]) == limited(10, 86400, 86400, 0, 0), mode
        v = s.ask(key, [("cost", 1)])
        assert v == ok(10, 86400, 9, 8640, 8640), (mode, "weight 1 after weight 11 refused", v)
        s.close()


# -------------------------------------------------------------- 6: key expiry


def test_keys_expire_when_full_again(h):
    redis = RedisServer(h)
    a = start_agent(h, redis, "--limit", "5/1s")
    s = Spop(a.port)
    assert s.ask("exp") == ok(5, 1, 4, 1, 1)
    keys = redis.rl_keys()
    assert len(keys) == 1 and KEY_RE.match(keys[0]), keys
    key = keys[0]
    assert redis.command("TYPE", key) == b"string"
    # One token used: full again 200 ms later, and the key goes then. The
    # expiry is rounded up to Redis's next millisecond, then to the limit's
    # grid (1/16 of its period, 62 ms here), so PTTL read within the same
    # millisecond as the call may say up to 62 + 1 more.
    pttl = redis.command("PTTL", key)
    assert 0 < pttl <= 201 + 62, pttl
    for rem in (3, 2, 1, 0):
        assert s.ask("exp")["remaining"] == rem
    t_last = time.monotonic()
    pttl = redis.command("PTTL", key)
    assert 700 < pttl <= 1001 + 62, pttl
    wait_for(lambda: redis.command("EXISTS", key) == 0, 1.5, "the key to expire")
    assert time.monotonic() - t_last < 1.2
    assert redis.rl_keys() == []
    # A client that comes back starts full.
    assert s.ask("exp") == ok(5, 1, 4, 1, 1)
    assert_log_clean(a)


# --------------------------------------------------- 7: Redis going and back


def test_redis_restart_and_script_flush_through_haproxy(h):
    redis = RedisServer(h)
    a = start_agent(h, redis, "--limit", "100/1m", threads=2)
    backend = h.backend()
    hp = start_haproxy(h, a, backend)  # the shipped SPOE file: 50 ms processing
    policy = '"default";q=100;w=60'

    def exact(key, remaining):
        r = get(hp, key)
        assert r.status == 200, r
        assert r.headers.get("X-RL-Degraded") == "0", r
        assert r.headers.get("X-RL-Error") is None, r
        assert r.headers.get("RateLimit-Policy") == policy, r
        assert ratelimit_of(r.headers.get("RateLimit"))[:2] == ("default", remaining), r

    for rem in (99, 98, 97):
        exact("before", rem)

    redis.stop()
    # Every answer is quick and fail-open: forwarded, degraded, no counts.
    for _ in range(10):
        t = time.monotonic()
        r = get(hp, "before")
        dt = time.monotonic() - t
        assert r.status == 200 and r.body == b"ok\n", r
        assert r.headers.get("X-RL-Degraded") == "1", r
        assert r.headers.get("X-RL-Error") is None, r
        assert r.headers.get("RateLimit-Policy") == policy, r
        assert r.headers.get("RateLimit") is None, r
        assert dt < 0.1, "answered in %.3f s with Redis down" % dt
    assert a.alive()

    redis.restart()
    n = [0]

    def recovered():
        # Ten decisions in a row from Redis (both workers reconnected);
        # the probes' keys are not in the map: the address's bucket.
        for _ in range(10):
            n[0] += 1
            r = get(hp, "probe%d" % n[0])
            if r.headers.get("X-RL-Degraded") != "0":
                return False
        return True

    wait_for(recovered, 6, "decisions from Redis again", interval=0.1)
    for rem in (99, 98, 97, 96):
        exact("after", rem)

    # The library gone: the agent loads it again and answers exactly.
    assert re.search(r"redis: worker \d+ ready \(library spoa_ratelimit_v8\)", a.log())
    assert redis.command("FUNCTION", "LIST", "LIBRARYNAME", "spoa_ratelimit_v8") != []
    redis.command("FUNCTION", "FLUSH")
    assert redis.command("FUNCTION", "LIST", "LIBRARYNAME", "spoa_ratelimit_v8") == []
    for rem in (95, 94, 93, 92, 91, 90):
        exact("after", rem)
    assert redis.command("FUNCTION", "LIST", "LIBRARYNAME", "spoa_ratelimit_v8") != []
    assert a.alive()
    assert "AddressSanitizer" not in a.log()


# -------------------------------------------------------------- 8: deadline


@harness.serial
def test_deadline_when_redis_is_paused(h):
    redis = RedisServer(h)
    a = start_agent(h, redis, "--limit", "100/1m", "--redis-timeout", "20")
    s = Spop(a.port)
    assert s.ask("paused") == ok(100, 60, 99, 1, 1)
    redis.pause()
    try:
        # within Redis's first 100 ms of silence, the local bucket (100/1m
        # for one agent) counts them; after that, the failure policy
        # (open) forwards them: allowed and degraded either way
        for i in range(5):
            v, dt = s.timed("paused")
            assert v["status"] == 0 and v["degraded"] and v["limit"] == 100, v
            assert dt < 0.1, "answer %d took %.3f s with Redis paused" % (i, dt)
    finally:
        redis.resume()
    wait_decided_by_redis(s, 5, "decisions from Redis after SIGCONT")
    assert s.ask("fresh") == ok(100, 60, 99, 1, 1)
    assert s.ask("fresh") == ok(100, 60, 98, 2, 1)


def metric(port, name):
    text = http_get(port, "/metrics").text
    m = re.search(r"^%s (\d+)$" % re.escape(name), text, re.M)
    assert m, "no metric %s in:\n%s" % (name, text)
    return int(m.group(1))


def rule_metric(port, name, rule):
    text = http_get(port, "/metrics").text
    m = re.search(r'^%s\{rule="%s"\} (\d+)$' % (re.escape(name), re.escape(rule)), text, re.M)
    assert m, "no metric %s{rule=%s} in:\n%s" % (name, rule, text)
    return int(m.group(1))


def burst_calls(h, redis, *args, n=200):
    """EVALSHA calls Redis ran for n NOTIFYs sent in one write to a fresh
    agent with `args`; every decision must come from Redis."""
    a = start_agent(h, redis, "--limit", "1000000/1h", "--redis-timeout", "2000", *args)
    before = redis.decision_calls()
    with Conn(a.port, timeout=10.0) as c:
        c.handshake()
        c.send(b"".join(spop.check_rate(sid, 1, api_key="k%d" % sid) for sid in range(1, n + 1)))
        for _ in range(n):
            v = c.expect(ACK, timeout=10).vars()
            assert v["status"] == 0 and not v["degraded"], v
    return redis.decision_calls() - before


def test_batching_and_calls_in_flight(h):
    redis = RedisServer(h)
    # one decision per call, as many calls out as come: one call each
    assert burst_calls(h, redis, "--redis-batch", "1", "--redis-pipeline", "1024") == 200
    # batches of up to 64 with one call out at a time: the 200 decisions
    # gather behind the first call into at least ceil(200/64) calls, and
    # far fewer than 200
    calls = burst_calls(h, redis, "--redis-batch", "64", "--redis-pipeline", "1")
    assert 4 <= calls <= 40, calls
    # one decision per call and one call out at a time: still one each
    assert burst_calls(h, redis, "--redis-batch", "1", "--redis-pipeline", "1") == 200


def test_several_rules_in_one_call(h):
    """A call carries each of its batch's rules once and a rule index per
    decision: one client's decisions under three rules (two endpoints and
    the default tier, no limit in common), interleaved in one write, each
    meet their own rule's limits exactly, and share calls."""
    rules = os.path.join(h.dir, "rules.yaml")
    with open(rules, "w") as f:
        f.write("answer: full\ntiers:\n  default: t\n  t: { limits: [\"6/1h\"] }\n"
                "endpoints:\n"
                "  - { name: a, match: { path: /a }, limits: [\"3/1h\"] }\n"
                "  - { name: b, match: { path: /b }, limits: [\"2/1h\", \"4/1m\"] }\n")
    want = {"/a": (3, "a"), "/b": (2, "b"), "/x": (6, "t")}
    redis = RedisServer(h)
    for enc in ("first", "second"):
        a = start_agent(h, redis, "--rules", rules,
                        "--redis-pipeline", "1", "--redis-timeout", "2000",
                        name="agent-" + enc)
        before = redis.decision_calls()
        sent = {}
        with Conn(a.port, timeout=10.0) as c:
            c.handshake()
            frames = []
            for i in range(8):
                for path in ("/a", "/b", "/x"):
                    sid = len(sent) + 1
                    sent[sid] = path
                    frames.append(spop.check_rate(sid, 1, api_key=enc + "-client", path=path))
            c.send(b"".join(frames))
            passed = collections.Counter()
            for _ in sent:
                f = c.expect(ACK, timeout=10)
                v = f.vars()
                path = sent[f.sid]
                assert not v["degraded"] and v["rule"] == want[path][1], (enc, path, v)
                passed[path] += v["status"] == 0
        assert passed == {p: n for p, (n, _) in want.items()}, (enc, passed)
        calls = redis.decision_calls() - before
        assert calls < len(sent), (enc, calls)
        assert_log_clean(a)

def histogram(port, name):
    """A histogram of /metrics: ({le: cumulative count}, sum, count)."""
    text = http_get(port, "/metrics").text
    buckets = {m.group(1): int(m.group(2)) for m in
               re.finditer(r'^%s_bucket\{le="([^"]+)"\} (\d+)$' % re.escape(name), text, re.M)}
    total = re.search(r"^%s_sum (\S+)$" % re.escape(name), text, re.M)
    count = re.search(r"^%s_count (\d+)$" % re.escape(name), text, re.M)
    assert buckets and total and count, "no histogram %s in:\n%s" % (name, text)
    return buckets, float(total.group(1)), int(count.group(1))


@harness.serial
def test_latency_histograms(h):
    redis = RedisServer(h)
    mport = harness.free_port()
    a = start_agent(h, redis, "--limit", "100/1m", "--redis-timeout", "2000",
                    "--metrics", "127.0.0.1:%d" % mport)
    s = Spop(a.port)
    for i in range(20):
        assert not s.ask("quick")["degraded"]
    # one decision held up by Redis for at least 150 ms: its time counts
    # from submission, and it lands above the 100 ms bound
    with Conn(a.port, timeout=10.0) as c:
        c.handshake()
        redis.pause()
        try:
            c.send(spop.check_rate(1, 1, api_key="slow"))
            time.sleep(0.15)
        finally:
            redis.resume()
        v = c.expect(ACK, timeout=5).vars()
        assert v["status"] == 0 and not v["degraded"], v
    name = "spoa_rl_redis_decision_duration_seconds"
    buckets, total, count = histogram(mport, name)
    assert count == 21 == metric(mport, "spoa_rl_redis_replies_total")
    bounds = list(buckets)
    assert bounds[-1] == "+Inf" and buckets["+Inf"] == count
    assert [float(b) for b in bounds[:-1]] == sorted(float(b) for b in bounds[:-1])
    values = [buckets[b] for b in bounds]
    assert values == sorted(values), values
    assert buckets["0.1"] == 20, buckets
    assert total >= 0.15, total
    calls, ctotal, ccount = histogram(mport, "spoa_rl_redis_call_duration_seconds")
    assert ccount == metric(mport, "spoa_rl_redis_calls_total") == calls["+Inf"]
    assert calls["0.1"] == ccount - 1 and ctotal >= 0.15, (calls, ctotal)


def test_circuit_breaker_when_redis_stalls(h):
    redis = RedisServer(h)
    mport = harness.free_port()
    a = start_agent(h, redis, "--limit", "100/1m", "--redis-timeout", "20",
                    "--metrics", "127.0.0.1:%d" % mport)
    s = Spop(a.port)
    assert s.ask("cb") == ok(100, 60, 99, 1, 1)
    redis.pause()
    try:
        # Deadlines missed in Redis's first 100 ms of silence are
        # saturation (the local bucket answers: Redis may only be busy);
        # the first after that opens the breaker, and the next decisions
        # do not wait for Redis at all (the failure policy: open).
        got = [s.ask("cb%d" % i) for i in range(15)]
        assert all(v["status"] == 0 and v["degraded"] for v in got), got
        assert got[-1] == degraded(100, 60), got[-1]
        assert metric(mport, "spoa_rl_redis_breaker_trips_total") >= 1
        skips = metric(mport, "spoa_rl_redis_breaker_skips_total")
        assert skips >= 5, skips
        assert rule_metric(mport, "spoa_rl_saturated_total", "default") >= 1
        assert "deciding without Redis" in a.log()
    finally:
        redis.resume()
    # the pause is at most 0.5 s doubled per failed probe
    wait_decided_by_redis(s, 8, "decisions from Redis once it answers")
    assert "Redis answers again" in a.log()
    assert s.ask("fresh") == ok(100, 60, 99, 1, 1)


def test_admin_inspect_and_reset(h):
    import json
    redis = RedisServer(h)
    mport = harness.free_port()
    a = start_agent(h, redis, "--limit", "2/1d", "--metrics", "127.0.0.1:%d" % mport, "--admin")
    s = Spop(a.port)
    assert s.ask("adm")["status"] == 0
    assert s.ask("adm")["status"] == 0
    assert s.ask("adm")["status"] == 429
    assert s.ask("adm")["status"] == 429  # from the local refusal cache
    r = http_get(mport, "/admin/client?api_key=adm")
    assert r.status == 200, r
    info = json.loads(r.text)
    assert info["identity"] == "api_key" and info["value"] == "adm", info
    (rule,) = info["rules"]
    assert rule["rule"] == "default" and TAG_RE.match(rule["key"]), rule
    # the expiry is rounded up to the next millisecond, then to the grid
    assert len(rule["fields"]) == 1 and 0 < rule["ttl_ms"] <= 86400 * 1000 + 1000, rule
    (lid,) = rule["fields"]
    assert lid == "t2/86400000000/0" and list(rule["keys"]) == [lid], rule
    keys = [k.decode() if isinstance(k, bytes) else k for k in redis.rl_keys()]
    assert keys == [rule["keys"][lid]] and keys[0].startswith(rule["key"]), keys
    r = http_get(mport, "/admin/reset?api_key=adm", method="POST")
    assert r.status == 200 and json.loads(r.text)["rules"][0]["deleted"] == 1, r
    # the bucket is full again, and no worker answers from its cache
    v = s.ask("adm")
    assert v["status"] == 0 and v["remaining"] == 1, v
    assert http_get(mport, "/admin/client").status == 400
    assert http_get(mport, "/admin/nothing").status == 404
    assert "admin: reset the buckets of api_key=adm" in a.log()


# ------------------------------------------------------------ 9: AUTH, ACL


def test_auth_with_password_and_env(h):
    redis = RedisServer(h, extra=["--requirepass", "secret"], password="secret")
    a = start_agent(h, redis, "--redis-password", "secret", "--limit", "10/1m")
    assert Spop(a.port).ask("auth") == ok(10, 60, 9, 6, 6)
    assert_log_clean(a)
    os.environ["RL_REDIS_PASSWORD"] = "secret"
    try:
        b = start_agent(h, redis, "--limit", "10/1m", name="agent-env")
    finally:
        del os.environ["RL_REDIS_PASSWORD"]
    # the same bucket, a token less (its times count from the first ask)
    v = Spop(b.port).ask("auth")
    assert (v["status"], v["remaining"], v["degraded"]) == (0, 8, False), v
    assert_log_clean(b)


@harness.serial
def test_auth_with_a_wrong_password_answers_degraded(h):
    redis = RedisServer(h, extra=["--requirepass", "secret"], password="secret")
    a = start_agent(h, redis, "--redis-password", "wrong", "--limit", "10/1m", ready=False)
    wait_for(lambda: "(WRONGPASS)" in a.log(), 5, "the agent to log the AUTH error")
    s = Spop(a.port)
    for _ in range(3):
        v, dt = s.timed("auth")
        assert v == degraded(10, 60), v
        assert dt < 0.1, dt
    assert redis.rl_keys() == []
    # (the overrides' reader, on a thread of its own, may log first)
    lines = [x for x in a.log().splitlines() if "(WRONGPASS)" in x]
    assert len(lines) == 1, a.log()  # once, not at every reconnection
    assert "error: " in lines[0] and "--redis-password-file" in lines[0], lines


def test_acl_user(h):
    redis = RedisServer(h, extra=["--user", "alice", "on", ">pw", "~*", "+@all",
                                  "--user", "default", "off"],
                        user="alice", password="pw")
    a = start_agent(h, redis, "--redis-user", "alice", "--redis-password", "pw",
                    "--limit", "10/1m")
    assert Spop(a.port).ask("acl") == ok(10, 60, 9, 6, 6)
    # The agent's connection is alice's (the default user is off anyway).
    with redis.client() as c:
        c.command("CLIENT", "SETNAME", "checker")
        clients = c.command("CLIENT", "LIST").decode().splitlines()
    agent_conns = [x for x in clients if "name=checker" not in x]
    assert agent_conns and all(" user=alice " in x for x in agent_conns), clients
    assert_log_clean(a)
    # A wrong password for alice: degraded, and said in the log.
    b = start_agent(h, redis, "--redis-user", "alice", "--redis-password", "nope",
                    "--limit", "10/1m", ready=False, name="agent-wrong")
    wait_for(lambda: "(WRONGPASS)" in b.log(), 5, "the agent to log the AUTH error")
    assert Spop(b.port).ask("acl") == degraded(10, 60)


# ------------------------------------------------------------ 10: Unix socket


def test_unix_socket(h):
    path = os.path.join(h.dir, "redis.sock")
    redis = RedisServer(h, unixsocket=path)
    a = start_agent(h, redis, "--limit", "10/1m")
    s = Spop(a.port)
    assert s.ask("unix") == ok(10, 60, 9, 6, 6)
    assert s.ask("unix") == ok(10, 60, 8, 12, 6)
    keys = redis.rl_keys()
    assert len(keys) == 1 and KEY_RE.match(keys[0]), keys
    assert_log_clean(a)


# ----------------------------------------------------- 11: local refusal cache


def test_local_refusal_cache(h):
    redis = RedisServer(h)
    answers = {}
    for mode, extra_calls in (("cache", 0), ("no-cache", 50)):
        args = ["--limit", "2/1d"] + (["--no-local-cache"] if mode == "no-cache" else [])
        a = start_agent(h, redis, *args, name="agent-" + mode)
        s = Spop(a.port)
        key = "refused-" + mode
        t0 = time.monotonic()
        assert s.ask(key) == ok(2, 86400, 1, 43200, 43200)
        assert s.ask(key) == ok(2, 86400, 0, 86400, 43200)
        first = s.ask(key)
        assert first == limited(2, 86400, 43200, 86400, 43200), (mode, first)
        before = redis.decision_calls()
        for _ in range(50):
            v = s.ask(key)
            assert v == first, (mode, v, first)
        after = redis.decision_calls()
        assert time.monotonic() - t0 < 0.9, "too slow for the exact values above"
        assert after - before == extra_calls, (mode, before, after)
        answers[mode] = first
        s.close()
        assert_log_clean(a)
    assert answers["cache"] == answers["no-cache"], answers


# ------------------------------------------ 12: rules that name one limit


def test_rules_naming_the_same_limit_keep_their_own_keys(h):
    """A client's buckets are its rule's: two endpoints whose rules name the
    same limit (5/1h) count one client apart under each (its identity is
    hashed with the rule's name), each in keys of its own, in one write of
    decisions interleaved."""
    rules = os.path.join(h.dir, "rules.yaml")
    with open(rules, "w") as f:
        f.write("answer: full\ntiers:\n  default: t\n  t: { limits: [\"100/1h\"] }\n"
                "endpoints:\n"
                "  - { name: a, match: { path: /a }, limits: [\"5/1h\"] }\n"
                "  - { name: b, match: { path: /b }, limits: [\"5/1h\", \"50/1m\"] }\n")
    redis = RedisServer(h)
    a = start_agent(h, redis, "--rules", rules, "--redis-timeout", "2000")
    with Conn(a.port, timeout=10.0) as c:
        c.handshake()
        c.send(b"".join(spop.check_rate(sid, 1, api_key="shared", path="/a" if sid % 2 else "/b")
                        for sid in range(1, 21)))
        acks = {}
        for _ in range(20):
            f = c.expect(ACK, timeout=10)
            acks[f.sid] = f.vars()
    assert [v for v in acks.values() if v["degraded"]] == [], acks
    for rule, first in (("a", 1), ("b", 2)):
        mine = [acks[sid] for sid in range(first, 21, 2)]
        assert [v["rule"] for v in mine] == [rule] * 10, mine
        assert [v["status"] for v in mine] == [0] * 5 + [429] * 5, mine
        assert [v["remaining"] for v in mine[:5]] == [4, 3, 2, 1, 0], mine
    # a's 5/1h under one tag; b's 5/1h and 50/1m under another
    keys = redis.rl_keys()
    tags = collections.Counter(k[:6] for k in keys)
    assert len(keys) == 3 and sorted(tags.values()) == [1, 2], keys
    assert_log_clean(a)
