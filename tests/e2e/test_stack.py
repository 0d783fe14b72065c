"""Layers stacked on rules (docs/rules.md, "Layers"): several limits of
several identities for one request, all or nothing, in memory and in each
Redis topology. Raw SPOP to the agent (tests/e2e/spop.py), whole answers
compared; the HAProxy test sends real HTTP.
"""

import os

import spop
from harness import http_get, wait_for
from redis_helper import RedisServer
from spop import ACK, Conn

RULES = """\
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


class Spop:
    def __init__(self, port):
        self.c = Conn(port, timeout=5.0)
        self.c.handshake()
        self.sid = 0

    def ask(self, key, ip="10.0.0.1", path="/"):
        self.sid += 1
        args = spop.check_rate_args(api_key=key, ip=ip, path=path)
        self.c.send(spop.notify(self.sid, 1, [("check-rate", args)]))
        f = self.c.expect(ACK)
        assert (f.sid, f.fid) == (self.sid, 1), f
        return f.vars()

    def close(self):
        self.c.close()


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
    a = h.agent("--rules", rules_file(h), "--threads", "2", "--redis", redis.addr,
                "--hash-key-file", h.hash_key_file())
    wait_for(lambda: "ready" in a.log(), 5, "the agent's Redis workers")
    s = Spop(a.port)
    check_stack(s)
    s.close()
