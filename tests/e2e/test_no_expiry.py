# SPDX-License-Identifier: Apache-2.0
"""Keys without an expiry (--redis-expiry) against a real redis-server:
by default where the server evicts them, and on every server with never;
the limits' keys are written without one and decide as keys with one do,
exact across a fleet through the real haproxy; a limit of requests in
flight keeps its expiry; the agent says whether the server evicts them,
and follows a change of its policy; turning it on keeps the clients'
state.
"""

import collections
import json
import os
import re
import subprocess

import harness
from test_packed import rules_file, scan
from test_redis import (RedisServer, Spop, assert_log_clean, concurrent_gets, fleet_of_two,
                        start_agent)

EVICTING = ["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"]


def ttls(redis, keys):
    return {k: redis.command("PTTL", k) for k in keys}


def test_no_expiry_fleet_is_exact(h):
    """Two agents behind two haproxy, 16 clients at once on one key:
    exactly the quota passes; the one key has no expiry; each agent says
    the server evicts such keys."""
    redis = RedisServer(h, extra=EVICTING)
    backend = h.backend()
    hps = fleet_of_two(h, redis, backend, "--redis-no-expiry")
    results = [r for _, r in concurrent_gets(hps, "fleet-key")]
    assert collections.Counter(r.status for r in results) == {200: 100, 429: 300}
    rem = sorted(int(r.headers["RateLimit"].split(";r=")[1].split(";")[0])
                 for r in results if r.status == 200)
    assert rem == list(range(100)), rem
    keys = scan(redis)
    assert list(keys) == ["string"] and len(keys["string"]) == 1, keys
    assert ttls(redis, keys["string"]) == {keys["string"][0]: -1}
    for a in h.agents:
        assert "keys without an expiry" in a.log(), a.log()
        assert "maxmemory 67108864, allkeys-lru: it evicts the keys without an expiry" in \
            a.log(), a.log()
        assert_log_clean(a)


def test_every_algorithm_without_expiry(h):
    """A token bucket, a sliding and a fixed window and a log, all or
    nothing, beside a plain agent on another Redis: the same answers, and
    none of the keys has an expiry, also once their state is old."""
    plain_redis, redis = RedisServer(h, name="plain"), RedisServer(h, extra=EVICTING)
    path = rules_file(h, "limits: [3/1s, {rate: 4/2s, algorithm: sliding}, "
                         "{rate: 5/3s, algorithm: fixed}, {rate: 4/4s, algorithm: log}]\n")
    plain = Spop(start_agent(h, plain_redis, "--rules", path, name="plain").port)
    kept = Spop(start_agent(h, redis, "--rules", path, "--redis-no-expiry", name="kept").port)
    for i in range(5):
        a, b = plain.ask("mix"), kept.ask("mix")
        assert a["status"] == b["status"] and a["remaining"] == b["remaining"], (i, a, b)
    keys = scan(redis)
    assert list(keys) == ["string"] and len(keys["string"]) == 4, keys
    assert set(ttls(redis, keys["string"]).values()) == {-1}
    plain_keys = scan(plain_redis)["string"]
    assert all(t > 0 for t in ttls(plain_redis, plain_keys).values())
    # a second later the bucket has room again, the others some left
    harness.time.sleep(1.1)
    assert kept.ask("mix")["status"] == 0
    assert set(ttls(redis, scan(redis)["string"]).values()) == {-1}


def test_turning_it_on_keeps_the_clients(h):
    """The keys keep their names: a client counted by an agent with
    expiries is counted on by one without, its key's expiry gone at the
    first write; without maxmemory, the agent
    warns that the keys would fill the server, and its gauge says so."""
    redis = RedisServer(h)
    mport = harness.free_port()
    first = Spop(start_agent(h, redis, "--limit", "3/1h", name="first").port)
    assert [first.ask("on")["status"] for _ in range(2)] == [0, 0]
    (key,) = scan(redis)["string"]
    assert redis.command("PTTL", key) > 0
    a = start_agent(h, redis, "--limit", "3/1h", "--redis-no-expiry", "--metrics",
                    "127.0.0.1:%d" % mport, name="second")
    second = Spop(a.port)
    assert [second.ask("on")["status"] for _ in range(2)] == [0, 429]
    # the same key, written without its expiry (one MSET)
    assert list(scan(redis)["string"]) == [key] and redis.command("PTTL", key) == -1
    harness.wait_for(lambda: "need maxmemory and an allkeys-lru or allkeys-lfu" in a.log(), 5,
                     "the warning")
    assert "maxmemory 0, policy noeviction" in a.log(), a.log()
    assert not_evicting(mport, redis) == 1
    # and once the server evicts, a new connection finds it so
    redis.command("CONFIG", "SET", "maxmemory", "64mb", "maxmemory-policy", "allkeys-lfu")
    redis.command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    harness.wait_for(lambda: not_evicting(mport, redis) == 0, 10, "the gauge to clear")
    assert "allkeys-lfu: it evicts the keys without an expiry" in a.log()


def not_evicting(mport, redis):
    """The agent's spoa_rl_redis_node_not_evicting for redis."""
    text = harness.http_get(mport, "/metrics").text
    m = re.search(r'^spoa_rl_redis_node_not_evicting\{node="[^"]*:%d"\} (\d+)$' % redis.port,
                  text, re.M)
    assert m, text
    return int(m.group(1))


def test_no_expiry_needs_redis_and_keys(h):
    binary = os.path.join(harness.BUILD, "spoa-ratelimit")
    for args, want in ((["--redis-no-expiry"], "--redis-expiry never: with a Redis store only"),
                       (["--redis-expiry", "never"],
                        "--redis-expiry never: with a Redis store only"),
                       (["--redis-no-expiry", "--redis", "127.0.0.1:1", "--redis-packed"],
                        "--redis-expiry never: packed buckets have their sets' expiry"),
                       (["--redis-expiry", "sometimes", "--redis", "127.0.0.1:1"],
                        "--redis-expiry: auto, always or never, not 'sometimes'"),
                       (["--redis-no-expiry", "--redis", "127.0.0.1:1"], None),
                       (["--redis-expiry", "always", "--redis", "127.0.0.1:1"], None),
                       (["--redis-expiry", "auto", "--redis", "127.0.0.1:1",
                         "--redis-packed"], None)):
        r = subprocess.run([binary, "--check", "--limit", "5/1h"] + args, capture_output=True,
                           text=True, timeout=10)
        if want:
            assert r.returncode != 0 and want in r.stderr, r
        else:
            assert r.returncode == 0, r


def test_overrides_stay_in_use(h):
    """In a Redis that evicts the least recently used keys, the overrides'
    hash (read only when it changes) is used by the agent's poll as its
    version is, so it is never the idlest key; the override applies, and
    the admin's look shows a client's key without an expiry."""
    import time
    redis = RedisServer(h, extra=EVICTING)
    mport = harness.free_port()
    path = rules_file(h, "tiers:\n  t: { limits: [\"3/1h\"], max_override: \"10/1h\" }\n")
    a = start_agent(h, redis, "--rules", path, "--redis-no-expiry", "--metrics",
                    "127.0.0.1:%d" % mport, "--admin")
    r = harness.http_get(mport, "/admin/override?api_key=vip&limit=7/1h", method="PUT")
    assert r.status == 200, r.text
    (key,) = [k for k in scan(redis)["hash"]]
    time.sleep(3.5)
    assert redis.command("OBJECT", "IDLETIME", key) <= 1
    assert Spop(a.port).ask("vip")["remaining"] == 6
    assert not_evicting(mport, redis) == 0
    # the admin's look at a client of the rule's own limit: its key has
    # no expiry
    assert Spop(a.port).ask("plain")["remaining"] == 2
    info = json.loads(harness.http_get(mport, "/admin/client?api_key=plain").text)
    (rule,) = info["rules"]
    assert rule["ttl_ms"] == -1 and len(rule["fields"]) == 1, rule
    assert_log_clean(a)


def test_auto_drops_the_expiry_where_the_server_evicts(h):
    """By default the agent looks at each server: on one that evicts
    (maxmemory, allkeys-lru) the limits' keys go without an expiry, on one
    that does not they keep it, and the agent says which; --redis-expiry
    always keeps it everywhere; packed buckets keep their sets' expiry.
    The gauge stays 0: no key without an expiry is on a server that does
    not evict it."""
    evicting, plain = RedisServer(h, extra=EVICTING, name="evicting"), RedisServer(h, name="plain")
    path = rules_file(h, "limits: [3/1h, {rate: 4/2s, algorithm: sliding}]\n")
    ports = [harness.free_port() for _ in range(2)]
    on_evicting = start_agent(h, evicting, "--rules", path, "--metrics",
                              "127.0.0.1:%d" % ports[0], name="on-evicting")
    on_plain = start_agent(h, plain, "--rules", path, "--metrics", "127.0.0.1:%d" % ports[1],
                           name="on-plain")
    # each connection looked before it was ready: the first keys already
    # follow what it found
    assert "it evicts the keys without an expiry: the limits' keys are written without " \
        "one" in on_evicting.log(), on_evicting.log()
    assert "policy noeviction: the limits' keys are written with an expiry" in on_plain.log()
    assert "keys without an expiry where the server evicts them" in on_evicting.log()
    a, b = Spop(on_evicting.port), Spop(on_plain.port)
    for i in range(4):
        x, y = a.ask("auto"), b.ask("auto")
        assert (x["status"], x["remaining"]) == (y["status"], y["remaining"]), (i, x, y)
    keys = scan(evicting)["string"]
    assert len(keys) == 2 and set(ttls(evicting, keys).values()) == {-1}
    assert sorted(scan(plain)["string"]) == sorted(keys)
    assert all(t > 0 for t in ttls(plain, keys).values())
    assert not_evicting(ports[0], evicting) == 0 and not_evicting(ports[1], plain) == 0
    for agent in (on_evicting, on_plain):
        assert_log_clean(agent)
    # always: with an expiry on the server that evicts
    evicting.command("FLUSHALL")
    kept = Spop(start_agent(h, evicting, "--rules", path, "--redis-expiry", "always",
                            name="always").port)
    assert kept.ask("always")["status"] == 0
    assert all(t > 0 for t in ttls(evicting, scan(evicting)["string"]).values())
    # packed buckets: the sets' expiry (and the window's key's)
    evicting.command("FLUSHALL")
    packed = Spop(start_agent(h, evicting, "--rules", path, "--redis-packed",
                              name="packed").port)
    assert packed.ask("packed")["status"] == 0
    held = scan(evicting)
    assert sorted(held) == ["string", "zset"], held
    assert all(t > 0 for t in ttls(evicting, held["string"] + held["zset"]).values())


def test_auto_follows_the_server_s_policy(h):
    """A server that stops evicting is found out by the agent's next look
    (every 10 s, on each connection): the keys written after have an
    expiry again, a key written without one gets it back at its next
    write, the agent warns, and its gauge says that keys without an
    expiry may stay on a server that does not evict them; once the server
    evicts again, a new connection finds it at once."""
    redis = RedisServer(h, extra=EVICTING)
    mport = harness.free_port()
    a = start_agent(h, redis, "--limit", "5/1h", "--metrics", "127.0.0.1:%d" % mport)
    spop = Spop(a.port)
    assert spop.ask("early")["status"] == 0
    (early,) = scan(redis)["string"]
    assert redis.command("PTTL", early) == -1
    redis.command("CONFIG", "SET", "maxmemory", "0", "maxmemory-policy", "noeviction")
    harness.wait_for(lambda: "it no longer evicts the keys without an expiry" in a.log(), 15,
                     "the next look")
    assert not_evicting(mport, redis) == 1
    assert spop.ask("late")["remaining"] == 4
    (late,) = set(scan(redis)["string"]) - {early}
    assert redis.command("PTTL", late) > 0
    assert spop.ask("early")["remaining"] == 3
    assert redis.command("PTTL", early) > 0
    redis.command("CONFIG", "SET", "maxmemory", "64mb", "maxmemory-policy", "allkeys-lfu")
    redis.command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    harness.wait_for(lambda: not_evicting(mport, redis) == 0, 10, "the gauge to clear")
    assert "allkeys-lfu: it evicts the keys without an expiry" in a.log()
    assert spop.ask("early")["remaining"] == 2
    assert redis.command("PTTL", early) == -1


def test_a_server_that_refuses_config_keeps_the_expiry(h):
    """An ACL user without CONFIG, as managed services give: the look is
    refused, the keys keep their expiry, the agent says so once (info,
    not a warning), and that connection does not ask again every 10 s:
    each refusal would be an entry of the server's ACL LOG."""
    import time
    redis = RedisServer(h, extra=EVICTING)
    redis.command("ACL", "SETUSER", "rl", "on", ">pw", "~*", "+@all", "-config")
    redis.command("ACL", "LOG", "RESET")
    a = start_agent(h, redis, "--limit", "5/1h", "--redis-user", "rl", "--redis-password", "pw")
    assert re.search(r"cannot read maxmemory-policy \(NOPERM[^)]*\): the limits' keys are "
                     r"written with an expiry", a.log()), a.log()
    assert Spop(a.port).ask("refused")["status"] == 0
    (key,) = scan(redis)["string"]
    assert redis.command("PTTL", key) > 0
    time.sleep(11)
    refusals = []
    for entry in redis.command("ACL", "LOG"):
        e = dict(zip(entry[::2], entry[1::2]))
        if e[b"object"].lower().startswith(b"config"):
            refusals.append(int(e[b"count"]))
    assert refusals == [1], refusals
    assert_log_clean(a)
