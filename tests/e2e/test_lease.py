# SPDX-License-Identifier: Apache-2.0
"""Leased tokens (--lease) against a real redis-server: a hot client's
requests decided from leases, never over its limit across agents (one with
its clock hours off), refused early by at most a lease per holder, unspent
tokens given back when a lease ends and when the agent stops, an admin
reset, and cold clients decided in Redis as without leases.

Load comes from build/spop-bench (closed or open loop, one client:
--keys 1 names it key-000000), several at once, one per agent."""

import json
import os
import re
import signal
import subprocess
import threading
import time

import harness
from harness import http_get
from redis_helper import RedisServer, redis_agent
from spop import ACK, Conn
import spop
from test_cluster import skewed

CLIENT = "key-000000"  # spop-bench's client with --keys 1


def start(h, redis, *args, name=None, prefix=()):
    """An agent on redis with metrics on a free port (a.mport)."""
    mport = harness.free_port()
    # (the tests read remaining: every variable of a decision; a rules
    # file of theirs says answer: full)
    full = () if "-f" in args else ("--answer", "full")
    a = redis_agent(h, redis, "--metrics", "127.0.0.1:%d" % mport, "--redis-timeout", "1000",
                    *full, *args, name=name, prefix=prefix)
    a.mport = mport
    return a


def metric(a, name):
    m = re.search(r"^%s (\d+)$" % re.escape(name), http_get(a.mport, "/metrics").text, re.M)
    assert m, "no metric %s" % name
    return int(m.group(1))


def bench(port, *args):
    """spop-bench on one agent; its JSON summary."""
    r = subprocess.run([os.path.join(harness.BUILD, "spop-bench"), "--addr",
                        "127.0.0.1:%d" % port, "--keys", "1", "--threads", "1", "--json"] +
                       [str(x) for x in args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def benches(agents, *args):
    """spop-bench on every agent at once; their summaries and the wall time
    from before the first started to after the last ended."""
    out = [None] * len(agents)

    def run(i):
        out[i] = bench(agents[i].port, *args)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(agents))]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    wall = time.monotonic() - t0
    assert all(o is not None for o in out), out
    return out, wall


def fcalls(redis, fn):
    text = redis.client().command("INFO", "commandstats").decode()
    m = re.search(r"cmdstat_fcall:calls=(\d+)", text)
    return int(m.group(1)) if m else 0


def ask(port, key=CLIENT):
    with Conn(port, timeout=5.0) as c:
        c.handshake()
        c.send(spop.check_rate(1, 1, api_key=key))
        return spop.as_read(c.expect(ACK).vars())


@harness.serial
def test_hot_client_never_over_its_limit_across_agents_one_skewed(h):
    """Three agents (one 5 hours ahead), one client far above 200/s from
    all of them for about 3 s: it gets at most what the bucket allows over
    the run (200 at first, 200 per second after) and at least that less a
    lease per holder and the last interval's refill;
    most answers come from the agents, not from Redis."""
    redis = RedisServer(h)
    # one worker each: a holder per agent (leases are each worker's)
    lease = ("--limit", "200/1s", "--lease", "100ms", "-t", "1")
    agents = [start(h, redis, *lease, name="agent1"),
              start(h, redis, *lease, name="agent2"),
              start(h, redis, *lease, name="skewed", prefix=skewed("+5h"))]
    calls0 = fcalls(redis, "rl8_decide")
    out, wall = benches(agents, "--conns", "2", "--inflight", "4", "--requests", "100000000",
                        "--duration", "3")
    calls = fcalls(redis, "rl8_decide") - calls0
    passed = sum(o["passed"] for o in out)
    decided = sum(o["passed"] + o["limited"] for o in out)
    assert all(o["errors"] == 0 and o["lost"] == 0 for o in out), out
    # never over: the bucket's 200 and its refill over the whole run
    assert passed <= 200 + 200 * wall, (passed, wall)
    # refused early by at most a lease per holder (k: 10% of 200), and by
    # what refilled in the last interval, which a waiting holder had not
    # claimed yet, below what the bucket gave over the shortest run
    shortest = min(o["seconds"] for o in out)
    holders, k, interval = 3, 20, 0.1
    assert passed >= 200 + 200 * shortest - holders * k - 200 * interval, (passed, shortest)
    assert decided > 20 * passed, (decided, passed)
    # the payoff: far fewer Redis calls than decisions, and leases spent
    assert calls * 20 <= decided, (calls, decided)
    # leases were taken and spent (which agent wins a race for the tokens
    # that refill is chance: not every agent needs to)
    assert sum(metric(a, "spoa_rl_lease_grants_total") for a in agents) > 0
    assert sum(metric(a, "spoa_rl_lease_decisions_total") for a in agents) > 0
    # the tokens in the leases count: none was spent twice or lost
    granted = sum(metric(a, "spoa_rl_lease_tokens_total") for a in agents)
    spent = sum(metric(a, "spoa_rl_lease_decisions_total") for a in agents)
    assert spent <= granted, (spent, granted)


def test_a_client_under_its_limit_is_decided_from_leases(h):
    """2000 requests/s of one client under a large limit: most decisions
    come from leases, one Redis call brings many; the answers count down
    as Redis's would."""
    redis = RedisServer(h)
    a = start(h, redis, "--limit", "100000/1h", "--lease", "100ms")
    calls0 = fcalls(redis, "rl8_decide")
    (o,), _ = benches([a], "--conns", "1", "--inflight", "1", "--rate", "2000",
                      "--requests", "4000")
    calls = fcalls(redis, "rl8_decide") - calls0
    assert o["passed"] == 4000 and o["limited"] == 0, o
    from_leases = metric(a, "spoa_rl_lease_decisions_total")
    assert from_leases >= 0.8 * 4000, from_leases
    assert calls * 20 <= 4000, calls


class Client:
    """One SPOP connection, one check-rate at a time: requests in a known
    order, so a client's leases are known too. With an interval much longer
    than the requests take, a client asking n times gets no lease for its
    first 3 requests (under LEASE_MIN tokens), then leases of 4, 9, 19, ...
    tokens (its demand so far), each asked when the last one is spent."""

    def __init__(self, port, key=CLIENT, **args):
        self.c = Conn(port, timeout=5.0)
        self.c.handshake()
        self.key = key
        self.args = args
        self.sid = 0

    def ask(self):
        self.sid += 1
        self.c.send(spop.check_rate(self.sid, 1, api_key=self.key, **self.args))
        f = self.c.expect(ACK)
        assert f.sid == self.sid, f
        return spop.as_read(f.vars())

    def close(self):
        self.c.close()


def leased_25(port, c=None, key=CLIENT):
    """25 requests on one connection (so one worker: leases are each
    worker's): leases of 4 (requests 5-8), 9 (10-18) and 19 (20-38), 13
    tokens of it left. Returns the answers."""
    own = c is None
    c = c or Client(port, key)
    try:
        got = [c.ask() for _ in range(25)]
    finally:
        if own:
            c.close()
    assert all(v["status"] == 0 for v in got), got
    return got


def test_leases_follow_the_client_s_demand(h):
    redis = RedisServer(h)
    a = start(h, redis, "--limit", "1000/1h", "--lease", "1s")
    calls0 = fcalls(redis, "rl8_decide")
    got = leased_25(a.port)
    # requests 1-4, 9 and 19 went to Redis; the rest came from leases
    assert fcalls(redis, "rl8_decide") - calls0 == 6
    assert metric(a, "spoa_rl_lease_grants_total") == 3
    assert metric(a, "spoa_rl_lease_tokens_total") == 4 + 9 + 19
    assert metric(a, "spoa_rl_lease_decisions_total") == 25 - 6
    # the answers count down as Redis's would (refill: under a token here)
    assert [v["remaining"] for v in got] == list(range(999, 974, -1)), got


def test_unspent_tokens_go_back_when_a_lease_ends(h):
    """The 13 tokens left go back when the lease's interval is over: a
    plain agent then finds the bucket holding what 25 requests took."""
    redis = RedisServer(h)
    a = start(h, redis, "--limit", "1000/1h", "--lease", "1s")
    leased_25(a.port)
    harness.wait_for(lambda: metric(a, "spoa_rl_lease_returned_tokens_total") == 13, 3,
                     "the unspent tokens to go back")
    plain = start(h, redis, "--limit", "1000/1h", name="plain")
    # 25 taken, and this one (the refill since: under a token)
    assert ask(plain.port)["remaining"] in (974, 975)
    assert metric(a, "spoa_rl_lease_dropped_tokens_total") == 0


def test_unspent_tokens_go_back_when_the_agent_stops(h):
    redis = RedisServer(h)
    a = start(h, redis, "--limit", "1000/1h", "--lease", "1s")
    leased_25(a.port)
    assert h.stop(a) == 0
    plain = start(h, redis, "--limit", "1000/1h", name="plain")
    assert ask(plain.port)["remaining"] in (974, 975)


def test_tokens_do_not_go_back_to_a_bucket_touched_since(h):
    """Another agent's request since the lease: the tokens stay taken (they
    may have been absorbed while the bucket was full), so the bucket shows
    the lease as spent: under-admission, never over."""
    redis = RedisServer(h)
    a = start(h, redis, "--limit", "1000/1h", "--lease", "1s")
    plain = start(h, redis, "--limit", "1000/1h", name="plain")
    leased_25(a.port)
    assert ask(plain.port)["remaining"] in (961, 962)
    harness.wait_for(lambda: metric(a, "spoa_rl_lease_returned_tokens_total") == 13, 3,
                     "the return to be sent")
    assert ask(plain.port)["remaining"] in (960, 961)


def test_an_admin_reset_voids_the_leases(h):
    redis = RedisServer(h)
    a = start(h, redis, "--limit", "1000/1h", "--lease", "1s", "--admin")
    c = Client(a.port)
    leased_25(a.port, c)
    r = http_get(a.mport, "/admin/reset?api_key=%s" % CLIENT, method="POST")
    assert r.status == 200, r
    # the next request (same worker) is Redis's, on a fresh bucket: not
    # the lease's 974
    v = c.ask()
    c.close()
    assert v["remaining"] == 999 and v["status"] == 0, v
    dropped = metric(a, "spoa_rl_lease_dropped_tokens_total")
    assert dropped == 13, (dropped, metric(a, "spoa_rl_lease_returned_tokens_total"))


def test_rules_file_lease_per_rule(h):
    """`lease` in the rules file: the file's interval for its rules, a
    tier's own `off`; without --lease on the command line."""
    redis = RedisServer(h)
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write("answer: full\nlease: 1s\n"
                "tiers:\n"
                "  default: leased\n"
                "  leased: { limits: [\"1000/1h\"] }\n"
                "  plain: { limits: [\"1000/1h\"], lease: off }\n")
    a = start(h, redis, "-f", path)
    calls0 = fcalls(redis, "rl8_decide")
    c = Client(a.port, "p1", tier="plain")
    got = [c.ask()["remaining"] for _ in range(25)]
    c.close()
    assert got == list(range(999, 974, -1)), got
    assert fcalls(redis, "rl8_decide") - calls0 == 25
    assert metric(a, "spoa_rl_lease_grants_total") == 0
    c = Client(a.port, "p2", tier="leased")
    got = [c.ask()["remaining"] for _ in range(25)]
    c.close()
    assert got == list(range(999, 974, -1)), got
    assert fcalls(redis, "rl8_decide") - calls0 == 25 + 6
    assert metric(a, "spoa_rl_lease_grants_total") == 3


def test_cold_clients_are_decided_in_redis(h):
    """A client asking less than a few tokens per interval gets no lease:
    every decision is Redis's, exactly as without --lease."""
    redis = RedisServer(h)
    a = start(h, redis, "--limit", "5/1h", "--lease", "100ms")
    c = Client(a.port, "cold")
    got = [c.ask()["status"] for _ in range(7)]
    c.close()
    assert got == [0] * 5 + [429] * 2, got
    assert metric(a, "spoa_rl_lease_grants_total") == 0
    assert metric(a, "spoa_rl_lease_decisions_total") == 0


def test_lease_needs_redis(h):
    binary = os.path.join(harness.BUILD, "spoa-ratelimit")
    r = subprocess.run([binary, "--check", "--limit", "5/1h", "--lease", "100ms"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode != 0 and "--lease" in r.stderr, r
    r = subprocess.run([binary, "--check", "--limit", "5/1h", "--redis", "127.0.0.1:1",
                        "--lease", "5s"], capture_output=True, text=True, timeout=10)
    assert r.returncode != 0 and "--lease" in r.stderr, r
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write("limits: [\"10/1s\"]\nlease: 100ms\n")
    r = subprocess.run([binary, "--check", "-f", path], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode != 0 and "lease (rules file)" in r.stderr, r


def test_a_lease_answers_while_redis_is_paused(h):
    """Leased tokens are the agent's: while Redis does not answer, they
    still decide (allowed, not degraded) until spent; then the rule's
    failure policy answers (open: forwarded, degraded)."""
    redis = RedisServer(h)
    a = start(h, redis, "--limit", "1000/1h", "--lease", "1s", "--redis-timeout", "100")
    c = Client(a.port)
    leased_25(a.port, c)
    redis.pause()
    try:
        got = [c.ask() for _ in range(14)]
    finally:
        redis.resume()
    c.close()
    assert all(v["status"] == 0 and not v["degraded"] for v in got[:13]), got
    assert [v["remaining"] for v in got[:13]] == list(range(974, 961, -1)), got
    assert got[13]["status"] == 0 and got[13]["degraded"], got[13]


def test_shadow_mode_with_leases(h):
    """A rule in shadow mode with leases: exactly its quota is admitted by
    the limit (from Redis and from leases), the rest passes marked as
    refused in shadow mode."""
    redis = RedisServer(h)
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write("answer: full\nlimits: [\"100/1h\"]\nshadow: true\nlease: 1s\n")
    a = start(h, redis, "-f", path)
    c = Client(a.port)
    got = [c.ask() for _ in range(150)]
    c.close()
    assert all(v["status"] == 0 for v in got), got
    assert [v["shadow"] for v in got] == [False] * 100 + [True] * 50, got
    assert metric(a, "spoa_rl_lease_decisions_total") > 50


def check_topology(h, start_agent, key):
    """Leases on a topology, for its own test module: start_agent(*args,
    name=...) starts an agent on it. A client's leases grow with its
    demand, its answers count down as Redis's would, and its unspent
    tokens go back when the agent stops (a plain agent then finds the
    bucket holding what 25 requests took)."""
    a = start_agent("--limit", "1000/1h", "--answer", "full", "--lease", "1s", name="leasing")
    got = leased_25(a.port, key=key)
    assert [v["remaining"] for v in got] == list(range(999, 974, -1)), got
    assert h.stop(a) == 0
    plain = start_agent("--limit", "1000/1h", "--answer", "full", name="plain")
    assert ask(plain.port, key)["remaining"] in (974, 975)


def test_leases_of_packed_buckets(h):
    """--lease with --redis-packed: the grants, the answers and the return
    of the unspent tokens when the agent stops, on a packed bucket."""
    redis = RedisServer(h)
    check_topology(h, lambda *args, name: start(h, redis, "--redis-packed", *args, name=name),
                   "lease-packed")
    assert [t.decode() for t in redis.client().command("KEYS", "*")] and all(
        redis.command("TYPE", k) == b"zset" for k in redis.client().command("KEYS", "*"))


def test_a_reset_through_another_agent_voids_leases_within_an_interval(h):
    """An admin reset at agent B: agent A's lease of the client ends with
    its interval (1 s here, the most there is), after which A decides on
    the fresh bucket; its unspent tokens do not go into that bucket."""
    redis = RedisServer(h)
    a = start(h, redis, "--limit", "1000/1h", "--lease", "1s", name="holder")
    b = start(h, redis, "--limit", "1000/1h", "--admin", name="admin")
    c = Client(a.port)
    leased_25(a.port, c)
    t0 = time.monotonic()
    assert http_get(b.mport, "/admin/reset?api_key=%s" % CLIENT, method="POST").status == 200
    fresh = None
    while time.monotonic() - t0 < 3:
        v = c.ask()
        if v["remaining"] >= 990:
            fresh = time.monotonic() - t0
            break
        time.sleep(0.05)
    c.close()
    assert fresh is not None and fresh <= 1.2, fresh
    # the fresh bucket counts only what A asked of it since
    assert v["remaining"] == 999, v



def test_a_lease_asked_with_a_request_answered_locally_is_not_awaited(h):
    """A request that asks for a lease and is then refused by the local
    refusal cache sends no call: the client must not wait for a grant
    (it used to, 4 s long, every request going to Redis one by one
    meanwhile). Limit 9/1h, leases of at most 4 (--lease-share 50)."""
    redis = RedisServer(h)
    a = start(h, redis, "--limit", "9/1h", "--lease", "1s", "--lease-share", "50", "--admin",
              "-t", "1")
    c = Client(a.port)
    # 1-3 in Redis, 4 with a lease of 4 (1 token left), 5-8 from it
    assert [c.ask()["status"] for _ in range(8)] == [0] * 8
    # 9 asks for a lease and takes the last token (a lease of 0: the
    # holder waits at most an interval), 10 (in the same call) is refused
    # and its refusal is cached for the bucket's 400 s
    c.sid += 2
    c.c.send(spop.check_rate(c.sid - 1, 1, api_key=CLIENT) +
             spop.check_rate(c.sid, 1, api_key=CLIENT))
    got = sorted((f.sid, spop.as_read(f.vars())["status"]) for f in (c.c.expect(ACK), c.c.expect(ACK)))
    assert [st for _, st in got] == [0, 429], got
    time.sleep(1.1)
    # 11 would ask for a lease; the cache refuses it first
    assert c.ask()["status"] == 429
    assert http_get(a.mport, "/admin/reset?api_key=%s" % CLIENT, method="POST").status == 200
    calls0 = fcalls(redis, "rl8_decide")
    assert [c.ask()["status"] for _ in range(9)] == [0] * 9
    c.close()
    # on the fresh bucket: leases again (4 + 4 from two calls), not a call
    # per request
    assert fcalls(redis, "rl8_decide") - calls0 <= 3


@harness.serial
def test_a_hot_client_s_calls_stay_few_at_a_steady_rate(h):
    """One client at 20x its limit from two agents on a timetable (the
    bench's H0/HL, shorter): with leases Redis sees a call per hundreds of
    decisions. A lease asked for with a request that the local refusal
    cache then answered used to leave the client waiting for a grant that
    never came, all its requests going to Redis one by one."""
    redis = RedisServer(h)
    lease = ("--limit", "1000/1s", "--lease", "100ms", "-t", "1")
    agents = [start(h, redis, *lease, name="agent1"), start(h, redis, *lease, name="agent2")]
    calls0 = fcalls(redis, "rl8_decide")
    out, wall = benches(agents, "--conns", "8", "--inflight", "20", "--rate", "10000",
                        "--requests", "30000")
    calls = fcalls(redis, "rl8_decide") - calls0
    decided = sum(o["passed"] + o["limited"] for o in out)
    assert decided == 60000 and all(o["errors"] == 0 for o in out), out
    assert sum(o["passed"] for o in out) <= 1000 + 1000 * wall
    assert calls * 50 <= decided, (calls, decided)


def test_a_reload_bringing_lease_to_a_memory_store_warns(h):
    """At start a file with lease on a memory store is refused; a reload
    that brings one is taken (the rest of the file may be wanted) with a
    warning that leases are ignored, and decisions go on in memory."""
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write("limits: [\"3/1h\"]\n")
    a = h.agent("-f", path)
    with open(path, "w") as f:
        f.write("limits: [\"5/1h\"]\nlease: 100ms\n")
    a.signal(signal.SIGHUP)
    harness.wait_for(lambda: "reloaded" in a.log(), 5, "the reload")
    assert "lease in the rules is ignored" in a.log()
    c = Client(a.port, "memory")
    got = [c.ask()["status"] for _ in range(6)]
    c.close()
    assert got == [0] * 5 + [429], got
