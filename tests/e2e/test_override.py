# SPDX-License-Identifier: Apache-2.0
"""Per-client limits (docs/rules.md, "Overrides"): a message argument
gives a client its own limit instead of its rule's rates, bounded by the
rule's max_override; raw SPOP in memory and on Redis, then through the
real haproxy with a map (haproxy-examples/overrides.cfg), changed at run
time on HAProxy's CLI.
"""

import json
import os
import re
import time

import harness
import spop
from harness import http_get, wait_for
from redis_helper import RedisServer, redis_agent

RULES = """\
# the tests read every variable of a decision
answer: full
identity: [api_key, ip]
override_argument: rl_limit
tiers:
  t: { limits: ["3/1h"], max_override: "10/1h" }
endpoints:
  - { name: fixed, match: { path: /fixed }, limits: ["2/1h"] }
"""


def rules_file(h):
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write(RULES)
    return path


class Spop(spop.Session):
    def ask(self, key, limit=None, path="/"):
        return self.check_rate([("rl_limit", limit)] if limit is not None else (),
                               api_key=key, path=path)


def check_overrides(s):
    # the rule's own limit without an override, or with one that is no limit
    assert [s.ask("plain")["limit"] for _ in range(2)] == [3, 3]
    v = s.ask("bad", "lots")
    assert v["limit"] == 3 and v["policy"] == '"t";q=3;w=3600', v
    # an override: the client's own bucket, its own policy
    v = s.ask("own", "5/1h")
    assert v["status"] == 0 and v["limit"] == 5 and v["remaining"] == 4, v
    assert v["policy"] == '"t";q=5;w=3600' and v["rule"] == "t", v
    for left in (3, 2, 1, 0):
        assert s.ask("own", "5/1h")["remaining"] == left
    assert s.ask("own", "5/1h")["status"] == 429
    # above max_override, in rate or in burst: the max
    v = s.ask("greedy", "1000/1s")
    assert v["limit"] == 10 and v["policy"] == '"t";q=10;w=3600', v
    v = s.ask("greedy2", "20/2h")
    assert v["limit"] == 10, v
    # a changed override is a fresh bucket; a rule without max_override
    # takes none
    assert s.ask("own", "6/1h")["remaining"] == 5
    v = s.ask("own", "9/1h", path="/fixed")
    assert v["limit"] == 2 and v["rule"] == "fixed", v


def test_override_in_memory(h):
    a = h.agent("--rules", rules_file(h))
    s = Spop(a.port)
    check_overrides(s)
    s.c.close()


def test_override_on_redis(h):
    redis = RedisServer(h)
    a = redis_agent(h, redis, "--rules", rules_file(h))
    s = Spop(a.port)
    check_overrides(s)
    s.c.close()


def test_override_from_a_map_through_haproxy(h):
    """haproxy-examples/overrides.cfg with a map: a key in it gets its own
    limit, another the rule's; `set map` on HAProxy's CLI changes a
    client's limit at once, without a reload."""
    mapf = os.path.join(h.dir, "limits.map")
    with open(mapf, "w") as f:
        f.write("k-big 5/1h\n")
    rules = rules_file(h)
    a = h.agent("--rules", rules)
    backend = h.backend()
    cfg = os.path.join(harness.ROOT, "haproxy-examples", "overrides.cfg")
    spoe = os.path.join(harness.ROOT, "spoe-conf", "ratelimit-overrides.conf")
    hp = h.haproxy(a.port, backend.port, cfg=cfg,
                   env={"RL_SPOE_CONF": spoe, "RL_LIMITS_MAP": mapf})
    wait_for(lambda: hp.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 5,
             "agent1 UP in haproxy's stats")

    def policy(key):
        r = http_get(hp.port, "/", headers={"X-Api-Key": key})
        assert r.status == 200, r
        return r.headers["RateLimit-Policy"]

    assert policy("k-big") == '"t";q=5;w=3600'
    assert policy("k-small") == '"t";q=3;w=3600'
    out = hp.master_cli("@1 set map %s k-big 8/1h" % mapf)
    assert "Unknown" not in out, out
    assert policy("k-big") == '"t";q=8;w=3600'


def start_admin(h, *args, redis=None):
    """An agent with the rules, metrics and admin (a.mport); on redis, once
    it is ready."""
    mport = harness.free_port()
    argv = ("--rules", rules_file(h), "--metrics", "127.0.0.1:%d" % mport, "--admin") + args
    a = redis_agent(h, redis, *argv) if redis else h.agent(*argv)
    a.mport = mport
    return a


def admin(a, method, query):
    r = http_get(a.mport, "/admin/override?" + query, method=method)
    return r.status, json.loads(r.body)


def test_admin_override_in_memory(h):
    """PUT /admin/override gives a client its own limit (bounded by
    max_override, on every rule that takes one), at once and without a
    reload; DELETE takes it back; a ttl ends it by itself. It outranks an
    override from the message."""
    a = start_admin(h)
    s = Spop(a.port)
    assert s.ask("k2")["limit"] == 3
    st, body = admin(a, "PUT", "api_key=k2&limit=6/1h")
    assert st == 200 and body["override"] == "6/1h" and body["rules"] == ["t"], body
    v = s.ask("k2")
    assert v["limit"] == 6 and v["policy"] == '"t";q=6;w=3600', v
    assert s.ask("k2", "9/1h")["limit"] == 6  # the operator's wins
    assert s.ask("k3")["limit"] == 3          # another client: the rule's
    # the admin's look and reset go to the limit in force, the override's
    look = json.loads(http_get(a.mport, "/admin/client?api_key=k2").body)
    (t,) = [r for r in look["rules"] if r["rule"] == "t"]
    assert t["limits"] == [{"limit": "6/1h", "remaining": 4, "reset": t["limits"][0]["reset"]}]
    r = http_get(a.mport, "/admin/reset?api_key=k2", method="POST")
    assert r.status == 200, r.body
    assert s.ask("k2")["remaining"] == 5
    # above max_override: the max
    admin(a, "PUT", "api_key=k2&limit=1000/1s")
    assert s.ask("k2")["limit"] == 10
    st, body = admin(a, "DELETE", "api_key=k2")
    assert st == 200 and body["override"] is None, body
    assert s.ask("k2")["limit"] == 3
    # a ttl
    admin(a, "PUT", "api_key=k4&limit=7/1h&ttl=1s")
    assert s.ask("k4")["limit"] == 7
    time.sleep(1.1)
    assert s.ask("k4")["limit"] == 3
    # errors: no limit, a bad one, a bad ttl, no client named
    assert admin(a, "PUT", "api_key=k2")[0] == 400
    assert admin(a, "PUT", "api_key=k2&limit=7")[0] == 400
    assert admin(a, "PUT", "api_key=k2&limit=7/1h&ttl=x")[0] == 400
    assert admin(a, "PUT", "limit=7/1h")[0] == 400
    s.c.close()


def test_admin_override_across_a_fleet_on_redis(h):
    """Two agents on one Redis: an override set through one agent applies
    on the other within a second (it polls the fleet's overrides every
    half second); removed, likewise."""
    redis = RedisServer(h)
    args = ("--redis", redis.addr, "--hash-key-file", h.hash_key_file())
    a = start_admin(h, *args)
    b = h.agent("--rules", rules_file(h), *args, name="agent-b")
    wait_for(lambda: "ready" in a.log() and "ready" in b.log(), 5, "both agents' workers")
    sb = Spop(b.port)
    assert sb.ask("f1")["limit"] == 3
    t0 = time.monotonic()
    st, body = admin(a, "PUT", "api_key=f1&limit=8/1h")
    assert st == 200 and body["store"] == "redis", body
    wait_for(lambda: sb.ask("f1")["limit"] == 8, 1.5, "agent b to apply the override")
    print("  applied by the other agent after %.2f s" % (time.monotonic() - t0))
    # the admin's look (on agent a, once its own poll has the override)
    # goes to the override's key, which the decisions use; the rule's own
    # key (f1's first request) is no longer looked at
    def look():
        return json.loads(http_get(a.mport, "/admin/client?api_key=f1").body)["rules"][0]

    wait_for(lambda: list(look()["keys"]) == ["t8/3600000000/0"], 3,
             "agent a's look to go to the override's key")
    assert list(look()["fields"]) == ["t8/3600000000/0"], look()
    admin(a, "DELETE", "api_key=f1")
    wait_for(lambda: sb.ask("f1")["limit"] == 3, 1.5, "agent b to drop the override")
    sb.c.close()


def test_admin_override_answers_the_limit_in_force(h):
    """A PUT above max_override answers the limit that applies (the max),
    and the one asked for apart, under each rule."""
    a = start_admin(h)
    st, body = admin(a, "PUT", "api_key=k9&limit=1000/1s")
    assert st == 200, body
    assert body["override"] == "10/1h" and body["requested"] == "1000/1s", body
    assert body["limits"] == {"t": "10/1h"}, body
    assert Spop(a.port).ask("k9")["limit"] == 10


CHURN_RULES = """\
identity: [api_key]
tiers:
  t: { limits: ["1000/1h"], max_override: "100000/1s" }
# the tests read every variable of a decision
answer: full
"""


def test_overridden_limits_that_come_and_go(h):
    """300 distinct limits set, used and removed one after another: the
    room for overridden limits (256 held at once) is given back, so a
    limit set after them applies (the abuser gets 2 of 30, not the rule's
    1000), and none went unapplied."""
    path = os.path.join(h.dir, "churn.yaml")
    with open(path, "w") as f:
        f.write(CHURN_RULES)
    mport = harness.free_port()
    a = h.agent("--rules", path, "--metrics", "127.0.0.1:%d" % mport, "--admin")
    a.mport = mport
    s = Spop(a.port)
    for i in range(300):
        st, body = admin(a, "PUT", "api_key=c%d&limit=5/%ds" % (i, i + 1))
        assert st == 200, body
        assert s.ask("c%d" % i)["limit"] == 5
        assert admin(a, "DELETE", "api_key=c%d" % i)[0] == 200
    st, body = admin(a, "PUT", "api_key=abuser&limit=2/1m")
    assert st == 200 and body["override"] == "2/1m", body
    got = [s.ask("abuser")["status"] for _ in range(30)]
    assert got.count(0) == 2 and got.count(429) == 28, got
    metrics = http_get(mport, "/metrics").text
    assert "\nspoa_rl_override_unapplied_total 0\n" in metrics, metrics
    s.c.close()


def test_override_without_room_is_refused(h):
    """While 256 distinct overridden limits are in use at once (decisions
    from message arguments waiting for a stopped Redis), an operator's
    override with yet another limit cannot be applied: its PUT fails with
    a clear error, and the metric counts it. Once they are answered, the
    same PUT applies."""
    path = os.path.join(h.dir, "room.yaml")
    with open(path, "w") as f:
        f.write("identity: [api_key]\noverride_argument: rl_limit\n" + CHURN_RULES.split("\n", 1)[1])
    redis = RedisServer(h)
    mport = harness.free_port()
    a = redis_agent(h, redis, "--rules", path, "--threads", "1", "--redis-timeout", "20000",
                    "--metrics", "127.0.0.1:%d" % mport, "--admin")
    a.mport = mport
    c = spop.Conn(a.port, timeout=10)
    c.handshake()
    redis.pause()
    try:
        for i in range(256):
            c.send(spop.notify(i + 1, 1, [("check-rate", spop.check_rate_args(
                api_key="w%d" % i) + [("rl_limit", "5/%ds" % (i + 1))])]))

        def queries():
            m = re.search(r"\nspoa_rl_redis_queries_total (\d+)\n",
                          http_get(mport, "/metrics").text)
            return int(m.group(1))
        wait_for(lambda: queries() >= 256, 5, "the 256 decisions to wait for Redis")
        st, body = admin(a, "PUT", "api_key=late&limit=2/1m")
        assert st == 503 and "no room for another overridden limit" in body["error"], body
        assert "\nspoa_rl_override_unapplied_total 1\n" in http_get(mport, "/metrics").text
    finally:
        redis.resume()
    for _ in range(256):
        c.expect(spop.ACK)
    st, body = admin(a, "PUT", "api_key=late&limit=2/1m")
    assert st == 200 and body["override"] == "2/1m", body
    c.close()


OV_HASH = "{AAAA}overrides"


def fill_overrides(redis, n, prefix="f"):
    """n operator overrides of made-up clients, written straight into the
    fleet's hash (32 hex digits per field, as the agent writes them), and
    the version moved."""
    fields = []
    for i in range(n):
        fields += ["%s%031x" % (prefix, i), "5/1h 0"]
    for k in range(0, len(fields), 20000):
        redis.command("HSET", OV_HASH, *fields[k:k + 20000])
    redis.command("INCR", OV_HASH + ":version")


def test_many_overrides_on_redis(h):
    """40,000 operator overrides (80,000 elements in one HGETALL, past the
    replies' bound): the agent reads them in pages on a connection of
    their own, its decisions keep their connection, and an override set
    among them applies."""
    redis = RedisServer(h)
    fill_overrides(redis, 40000)
    a = start_admin(h, "--redis-timeout", "2000", redis=redis)
    s = Spop(a.port)
    st, body = admin(a, "PUT", "api_key=among&limit=8/1h")
    assert st == 200, body
    wait_for(lambda: s.ask("among")["limit"] == 8, 10, "the override to apply")
    for i in range(20):
        v = s.ask("other%d" % i)
        assert v["limit"] == 3 and not v.get("degraded"), v
    assert "lost its connection" not in a.log(), a.log()[-2000:]
    s.c.close()


def test_expired_overrides_leave_redis(h):
    """50 overrides of one second: their entries leave the fleet's hash
    soon after they end, not with the next change."""
    redis = RedisServer(h)
    a = start_admin(h, redis=redis)
    for i in range(50):
        st, body = admin(a, "PUT", "api_key=t%d&limit=5/1h&ttl=1s" % i)
        assert st == 200, body
    assert redis.command("HLEN", OV_HASH) == 50
    wait_for(lambda: redis.command("HLEN", OV_HASH) == 0, 5, "the expired entries to go")
    # one set since, without a ttl, stays
    admin(a, "PUT", "api_key=kept&limit=5/1h")
    time.sleep(1.5)
    assert redis.command("HLEN", OV_HASH) == 1


def test_operator_overrides_are_bounded_on_redis(h):
    """At most 100,000 operator overrides: a PUT of a new client past them
    is refused with a clear error, a change of one already there is not,
    and a removal makes room."""
    redis = RedisServer(h)
    fill_overrides(redis, 99999)
    a = start_admin(h, redis=redis)
    st, body = admin(a, "PUT", "api_key=last&limit=5/1h")
    assert st == 200, body
    st, body = admin(a, "PUT", "api_key=one-more&limit=5/1h")
    assert st == 409 and "at most 100000" in body["error"], (st, body)
    assert admin(a, "PUT", "api_key=last&limit=6/1h")[0] == 200
    assert admin(a, "DELETE", "api_key=last")[0] == 200
    assert admin(a, "PUT", "api_key=one-more&limit=5/1h")[0] == 200
    assert redis.command("HLEN", OV_HASH) == 100000
