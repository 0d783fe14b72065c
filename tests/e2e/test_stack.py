# SPDX-License-Identifier: Apache-2.0
"""Layers stacked on rules (docs/rules.md, "Layers"): several limits of
several identities for one request, all or nothing, in memory and in each
Redis topology. Raw SPOP to the agent (tests/e2e/spop.py), whole answers
compared; the HAProxy test sends real HTTP.
"""

import os

import spop
from harness import http_get, wait_for
from redis_helper import RedisServer, redis_agent

RULES = """\
# the tests read every variable of a decision
answer: full
identity: [api_key, ip]
layers:
  search-global:
    identity: global
    limits: ["5/1h"]
  per-ip:
    identity: ip
    limits: ["4/1h"]
tiers:
  free: { limits: ["3/1h"], stack: [per-ip] }
endpoints:
  - name: search
    match: { path: /search }
    limits: ["100/1h"]
    stack: [search-global]
"""

FREE_POLICY = '"free";q=3;w=3600, "per-ip";q=4;w=3600'
SEARCH_POLICY = '"search";q=100;w=3600, "search-global";q=5;w=3600'


class Spop(spop.Session):
    def ask(self, key, ip="10.0.0.1", path="/"):
        return self.check_rate(api_key=key, ip=ip, path=path)


def fixed_key_file(h):
    """A hash key the same in every run: the Cluster and shards tests place
    their clients' keys the same way each time, so the decisions made in
    parts (and refunded) are the same ones in every run."""
    path = os.path.join(h.dir, "fixed.key")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("a fixed key for the stacked-limit tests, 0123456789\n")
    return path


def rules_file(h, text=RULES):
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def answer(status, rule, limit, remaining, name, policy, reset=3600):
    """The variables of a decision of the rules above: `rule` named in
    txn.rl.rule (the refusing layer's name when a layer refuses), limit
    and remaining those of the deciding limit `name`."""
    window = 3600
    t = window // limit if (status or remaining < limit) else 0
    v = {"status": status, "retry_after": t if status else 0, "limit": limit,
         "remaining": remaining, "reset": reset, "policy": policy,
         "ratelimit": '"%s";r=%d;t=%d' % (name, remaining, t), "priority": 2,
         "reason": "limited" if status else "ok", "rule": rule, "shadow": False,
         "degraded": False}
    return v


def strip_times(v):
    """The answer without the times that depend on when the test runs
    (reset, retry_after and t are checked apart, within a second)."""
    v = dict(v)
    for k in ("reset", "retry_after"):
        v.pop(k, None)
    if v.get("ratelimit"):
        v["ratelimit"] = v["ratelimit"].rsplit(";t=", 1)[0]
    return v


def check_stack(s):
    """The scenario every store must decide the same way."""
    want = lambda *a, **k: strip_times(answer(*a, **k))  # noqa: E731
    got = lambda *a, **k: strip_times(s.ask(*a, **k))  # noqa: E731
    # Client a from 10.0.0.1: its tier's 3/1h decides (fewer left than
    # the address's 4/1h), then refuses its fourth request.
    assert got("a") == want(0, "free", 3, 2, "free", FREE_POLICY)
    assert got("a") == want(0, "free", 3, 1, "free", FREE_POLICY)
    assert got("a") == want(0, "free", 3, 0, "free", FREE_POLICY)
    assert got("a") == want(429, "free", 3, 0, "free", FREE_POLICY)
    # Client b from the same address: the address has 1 request left.
    assert got("b") == want(0, "free", 4, 0, "per-ip", FREE_POLICY)
    # Refused by the layer, which the answer names; b's own bucket is not
    # charged (all or nothing) ...
    assert got("b") == want(429, "per-ip", 4, 0, "per-ip", FREE_POLICY)
    # ... as b from another address shows: 2 of its 3 left before this one.
    v = got("b", ip="10.0.0.2")
    assert v == want(0, "free", 3, 1, "free", FREE_POLICY), v
    # The search endpoint's global 5/1h: one bucket for every client.
    for i in range(5):
        v = got("c%d" % i, ip="10.1.0.%d" % i, path="/search")
        assert v == want(0, "search", 5, 4 - i, "search-global", SEARCH_POLICY), (i, v)
    v = got("c9", ip="10.1.0.9", path="/search")
    assert v == want(429, "search-global", 5, 0, "search-global", SEARCH_POLICY), v
    # The client refused by the global limit kept its own 100/1h whole.
    v = s.ask("c9", ip="10.1.0.9", path="/search")
    assert v["status"] == 429 and v["rule"] == "search-global", v


def test_stack_in_memory(h):
    a = h.agent("--rules", rules_file(h), "--threads", "2")
    s = Spop(a.port)
    check_stack(s)
    s.close()


def test_stack_on_redis(h):
    redis = RedisServer(h)
    a = redis_agent(h, redis, "--rules", rules_file(h), "--threads", "2")
    s = Spop(a.port)
    check_stack(s)
    s.close()


def test_stack_through_haproxy(h):
    """Through the real haproxy (basic.cfg, every request from 127.0.0.1):
    the tier's per-client limit and the address's layer, then the search
    endpoint's global layer, refusing with 429 and Retry-After; the
    RateLimit-Policy header lists every limit that applied, RateLimit
    names the one that decided; a refused request reaches no backend."""
    import harness

    rules = rules_file(h, """\
identity: [api_key, ip]
layers:
  search-global: { identity: global, limits: ["4/1h"] }
  per-ip: { identity: ip, limits: ["5/1h"] }
tiers:
  argument: tier
  default: free
  free: { limits: ["3/1h"], stack: [per-ip] }
  pro: { limits: ["100/1h"], stack: [per-ip] }
endpoints:
  - { name: search, match: { path: /search }, limits: ["100/1h"], stack: [search-global] }
""")
    a = h.agent("--rules", rules, "--threads", "2")
    backend = h.backend()
    # the keys of the test in the map: the SPOE file sends only those
    keys = h.tiers_map("k1", "k2", *("s%d" % i for i in range(10)))
    hp = h.haproxy(a.port, backend.port, env={"RL_TIERS_MAP": keys})
    wait_for(lambda: hp.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 5,
             "agent1 UP in haproxy's stats")
    policy = '"free";q=3;w=3600, "per-ip";q=5;w=3600'

    def get(key, path="/"):
        return http_get(hp.port, path, headers={"X-Api-Key": key})

    for i in range(3):
        r = get("k1")
        assert r.status == 200 and r.headers["RateLimit-Policy"] == policy, r
        assert r.headers["RateLimit"].startswith('"free";r=%d;' % (2 - i)), r
    r = get("k1")
    assert r.status == 429 and r.headers["RateLimit"].startswith('"free";r=0;'), r
    assert int(r.headers["Retry-After"]) > 0, r
    # k2 from the same address: 2 left of the address's 5
    for left in (1, 0):
        r = get("k2")
        assert r.status == 200 and r.headers["RateLimit"].startswith('"per-ip";r=%d;' % left), r
    r = get("k2")
    assert r.status == 429 and r.headers["RateLimit"].startswith('"per-ip";r=0;'), r
    assert r.headers["RateLimit-Policy"] == policy, r
    # the search endpoint: 4 for everybody
    spolicy = '"search";q=100;w=3600, "search-global";q=4;w=3600'
    for i in range(4):
        r = get("s%d" % i, "/search")
        assert r.status == 200 and r.headers["RateLimit-Policy"] == spolicy, r
    r = get("s9", "/search")
    assert r.status == 429 and r.headers["RateLimit"].startswith('"search-global";r=0;'), r
    assert backend.count == 3 + 2 + 4, backend.count


def test_stack_in_shadow_mode_and_without_the_store(h):
    """Shadow mode: a layer's refusal is computed, named and exported, and
    the request passes. Without Redis, the local failure policy decides
    every part in this agent's memory, all or nothing, marked degraded."""
    import harness

    shadow = rules_file(h, "shadow: true\n" + RULES)
    a = h.agent("--rules", shadow)
    s = Spop(a.port)
    # p takes 3 of the address's 4 (its fourth is refused by its tier, in
    # shadow: passed, nothing taken), q the last one, then q is refused
    for _ in range(4):
        s.ask("p", ip="10.9.0.1")
    v = s.ask("q", ip="10.9.0.1")
    assert v["status"] == 0 and v["shadow"] is False and v["remaining"] == 0, v
    v = s.ask("q", ip="10.9.0.1")
    assert v["status"] == 0 and v["shadow"] is True and v["reason"] == "limited", v
    assert v["rule"] == "per-ip" and v["ratelimit"].startswith('"per-ip";r=0;'), v
    s.close()

    local = os.path.join(h.dir, "local.yaml")
    with open(local, "w") as f:
        f.write("on_store_failure: local\n" + RULES)
    dead = harness.free_port()
    b = h.agent("--rules", local, "--redis", "127.0.0.1:%d" % dead, "--redis-timeout", "50")
    s = Spop(b.port)
    got = [s.ask("a") for _ in range(4)]
    assert [v["status"] for v in got] == [0, 0, 0, 429], got
    assert all(v["degraded"] for v in got), got
    assert got[3]["rule"] == "free", got
    v = s.ask("b")
    assert v["status"] == 0 and v["degraded"], v
    v = s.ask("b")
    assert v["status"] == 429 and v["rule"] == "per-ip" and v["degraded"], v
    s.close()


def test_example_rules_load():
    """examples/rules-layers.yaml is a valid file."""
    import subprocess
    import harness

    path = os.path.join(harness.ROOT, "examples", "rules-layers.yaml")
    out = subprocess.run([os.path.join(harness.BUILD, "spoa-ratelimit"),
                          "--rules", path, "--check"], capture_output=True, text=True)
    assert out.returncode == 0 and "ok, 7 rule(s)" in out.stdout + out.stderr, out


# A rule whose own limits are a log and places in flight, under a layer
# counted per address: a request the layer refuses must give back the
# place and the log's entry its own part took (on a Cluster or shards,
# where the parts are decided on different servers, by the refund).
PLACES_RULES = """\
# the tests read every variable of a decision
answer: full
identity: [api_key]
layers:
  per-ip: { identity: ip, limits: ["1/1h"] }
tiers:
  default: free
  free:
    limits: [{ rate: "3/1h", algorithm: log }]
    concurrency: 1
    max_duration: 10m
    stack: [per-ip]
"""


class PlacesSpop(spop.Session):
    def ask(self, key, ip, rid):
        return self.check_rate([("request_id", rid)], api_key=key, ip=ip)

    def release(self, place, rid):
        return self.notify([("release", [("place", place), ("request_id", rid)])])


def check_places_given_back(s, clients=4):
    """Each client: refused three times by its address's layer, which
    another client spent; its place and its log are then whole: admitted
    from other addresses, one request in flight at a time, exactly 3
    times in the hour."""
    for c in range(clients):
        spent = "10.%d.0.1" % c
        assert s.ask("spender%d" % c, spent, "s%d" % c)["status"] == 0
        for i in range(3):
            v = s.ask("client%d" % c, spent, "r%d-%d" % (c, i))
            assert v["status"] == 429 and v["rule"] == "per-ip", (c, i, v)
        for i in range(3):
            v = s.ask("client%d" % c, "10.%d.1.%d" % (c, i), "a%d-%d" % (c, i))
            assert v["status"] == 0, (c, i, v)
            assert s.release(v["place"], "a%d-%d" % (c, i)) == {}
        v = s.ask("client%d" % c, "10.%d.1.9" % c, "a%d-9" % c)
        assert v["status"] == 429 and v["rule"] == "free" and v["reason"] == "limited", (c, v)


def test_places_given_back_in_memory(h):
    a = h.agent("--rules", rules_file(h, PLACES_RULES))
    s = PlacesSpop(a.port)
    check_places_given_back(s)
    s.close()


def test_places_given_back_on_redis(h):
    redis = RedisServer(h)
    a = redis_agent(h, redis, "--rules", rules_file(h, PLACES_RULES))
    s = PlacesSpop(a.port)
    check_places_given_back(s)
    s.close()
