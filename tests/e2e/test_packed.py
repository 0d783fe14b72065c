# SPDX-License-Identifier: Apache-2.0
"""Packed buckets (--redis-packed) against a real redis-server: a token
bucket lives as a member of its limit's sorted set for the clients of its
tag, other limits as string keys in the same slot; the answers are those
of the plain layout, exact across a fleet through the real haproxy; the
admin look and reset, leases and the sets' expiry work on them; and the
memory per client is measured against the plain layout's.
"""

import collections
import json
import os
import re
import subprocess

import harness
import test_stack
from harness import http_get, wait_for
from test_redis import (RedisServer, Spop, assert_log_clean, concurrent_gets, fleet_of_two,
                        limited, ok, start_agent)

# "{TT}~" the limit's set (8 characters), then the client's member (10)
SET_RE = re.compile(r"^\{[A-Za-z0-9_-]{2}\}~[A-Za-z0-9_-]{8}$")
MEMBER_RE = re.compile(r"^[A-Za-z0-9_-]{10}$")
# a key of a limit that is not packed: "{TT}" then 10 characters
KEY_RE = re.compile(r"^\{[A-Za-z0-9_-]{2}\}[A-Za-z0-9_-]{10}$")


def scan(redis):
    """Every key of the server, by type."""
    out, cursor = collections.defaultdict(list), b"0"
    with redis.client() as c:
        while True:
            cursor, batch = c.command("SCAN", cursor, "COUNT", 1000)
            for k in batch:
                out[c.command("TYPE", k).decode()].append(k.decode())
            if cursor == b"0":
                return {t: sorted(ks) for t, ks in out.items()}


def members(redis, name):
    """A set's members and scores."""
    flat = redis.command("ZRANGE", name, 0, -1, "WITHSCORES")
    return {m.decode(): int(s) for m, s in zip(flat[::2], flat[1::2])}


def rules_file(h, text):
    """A rules file of `text` whose answers carry every variable."""
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write("answer: full\n" + text)
    return path


def test_packed_fleet_is_exact(h):
    """Two agents behind two haproxy, 16 clients at once on one key: exactly
    the quota passes, with the plain layout's headers; Redis holds one
    sorted set with the client's member, and no string key."""
    redis = RedisServer(h)
    backend = h.backend()
    hps = fleet_of_two(h, redis, backend, "--redis-packed")
    results = [r for _, r in concurrent_gets(hps, "fleet-key")]
    assert collections.Counter(r.status for r in results) == {200: 100, 429: 300}
    assert all(r.headers.get("X-RL-Degraded") == "0" for r in results)
    rem = sorted(int(r.headers["RateLimit"].split(";r=")[1].split(";")[0])
                 for r in results if r.status == 200)
    assert rem == list(range(100)), rem
    assert backend.count == 100
    keys = scan(redis)
    assert list(keys) == ["zset"] and len(keys["zset"]) == 1, keys
    (name,) = keys["zset"]
    assert SET_RE.match(name), name
    got = members(redis, name)
    assert len(got) == 1 and MEMBER_RE.match(next(iter(got))), got
    # the set expires past the bucket's need (a day away), on its grid
    # (an eighth of the bucket's depth, 60 s at most)
    exp = redis.command("PEXPIRETIME", name)
    assert exp > 0 and exp % 60000 == 0, exp
    for a in h.agents:
        assert_log_clean(a)


def test_packed_answers_are_the_plain_layout_s(h):
    """The same sequence of requests on a packed agent and on a plain one
    (each on its own Redis) gets the same variables, every one."""
    plain_redis, packed_redis = RedisServer(h, name="plain"), RedisServer(h, name="packed")
    plain = Spop(start_agent(h, plain_redis, "--limit", "3/2s:token", name="plain").port)
    packed = Spop(start_agent(h, packed_redis, "--limit", "3/2s:token", "--redis-packed",
                              name="packed").port)
    want = [ok(3, 2, 2, 1, 1), ok(3, 2, 1, 2, 1), ok(3, 2, 0, 2, 1), limited(3, 2, 1, 2, 1)]
    for i, w in enumerate(want):
        a, b = plain.ask("seq"), packed.ask("seq")
        assert a == b, (i, a, b)
        # (the third request and after: exact only when quick)
        if i < 2:
            assert b == w, (i, b)
    assert list(scan(packed_redis)) == ["zset"]
    assert list(scan(plain_redis)) == ["string"]


def test_a_rule_s_windows_stay_keys_in_its_client_s_slot(h):
    """A token bucket of n <= 3 is packed; a window, and a bucket of 1s/7,
    stay string keys, named with the same 12-bit tag (one Cluster slot per
    client); all or nothing across them as ever."""
    redis = RedisServer(h)
    path = rules_file(h, "limits: [3/1h, 7/1s, {rate: 2/1m, algorithm: fixed}]\n")
    s = Spop(start_agent(h, redis, "--rules", path, "--redis-packed").port)
    assert [s.ask("mix")["status"] for _ in range(3)] == [0, 0, 429]
    keys = scan(redis)
    assert sorted(keys) == ["string", "zset"], keys
    (zset,) = keys["zset"]
    assert SET_RE.match(zset) and len(keys["string"]) == 2, keys
    for k in keys["string"]:
        assert KEY_RE.match(k) and k[:4] == zset[:4], (k, zset)
    # the refused request took nothing: one request counted in the bucket
    got = members(redis, zset)
    assert len(got) == 1, got


def test_packed_admin_inspect_and_reset(h):
    """The admin endpoint reads a packed bucket (its set's time to live)
    and resets it, leaving the set's other members."""
    redis = RedisServer(h)
    mport = harness.free_port()
    # (a hash key of every run: o1086's bucket is in adm's set)
    a = start_agent(h, redis, "--limit", "2/1d", "--redis-packed", "--metrics",
                    "127.0.0.1:%d" % mport, "--admin", "--hash-key-file",
                    test_stack.fixed_key_file(h))
    s = Spop(a.port)
    assert [s.ask("adm")["status"] for _ in range(3)] == [0, 0, 429]
    other = "o1086"
    assert s.ask(other)["remaining"] == 1
    (name,) = scan(redis)["zset"]
    assert len(members(redis, name)) == 2, "o1086 and adm no longer share a set"
    info = json.loads(http_get(mport, "/admin/client?api_key=adm").text)
    (rule,) = info["rules"]
    (lid,) = rule["fields"]
    assert lid == "t2/86400000000/0", rule
    assert SET_RE.match(rule["keys"][lid][:13]), rule
    # (the set outlives the need by the step: 60 s, the most)
    assert 86400 * 1000 < rule["ttl_ms"] <= 86460 * 1000, rule
    r = http_get(mport, "/admin/reset?api_key=adm", method="POST")
    assert r.status == 200 and json.loads(r.text)["rules"][0]["deleted"] == 1, r.text
    v = s.ask("adm")
    assert v["status"] == 0 and v["remaining"] == 1, v
    assert s.ask(other)["remaining"] == 0
    assert_log_clean(a)


def test_packed_sets_expire_when_their_buckets_are_full(h):
    """A set goes by itself once none of its buckets is in use: after the
    last need, plus the limit's step (an eighth of the bucket's depth)."""
    redis = RedisServer(h)
    s = Spop(start_agent(h, redis, "--limit", "5/1s", "--redis-packed").port)
    assert s.ask("exp")["remaining"] == 4
    (name,) = scan(redis)["zset"]
    pttl = redis.command("PTTL", name)
    # one token: full 200 ms later; the step is 1 s / 8
    assert 0 < pttl <= 200 + 125 + 2, pttl
    wait_for(lambda: redis.command("EXISTS", name) == 0, 2, "the set to expire")
    assert s.ask("exp")["remaining"] == 4


def test_packed_needs_redis(h):
    binary = os.path.join(harness.BUILD, "spoa-ratelimit")
    r = subprocess.run([binary, "--check", "--limit", "5/1h", "--redis-packed"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode != 0 and "--redis-packed: with a Redis store only" in r.stderr, r
    r = subprocess.run([binary, "--check", "--limit", "5/1h", "--redis-packed", "--redis",
                        "127.0.0.1:1"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r
    for bad in ("0", "3", "524288", "4k"):
        r = subprocess.run([binary, "--check", "--limit", "5/1h", "--redis-packed-sets", bad,
                            "--redis", "127.0.0.1:1"], capture_output=True, text=True,
                           timeout=10)
        assert r.returncode == 2 and "--redis-packed-sets: expected a power of two" in r.stderr, r
    for good in ("1", "4096", "262144"):
        r = subprocess.run([binary, "--check", "--limit", "5/1h", "--redis-packed-sets", good,
                            "--redis", "127.0.0.1:1"], capture_output=True, text=True,
                           timeout=10)
        assert r.returncode == 0, r
    r = subprocess.run([binary, "--check", "--limit", "5/1h", "--redis-packed-sets", "64"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode != 0 and "with a Redis store only" in r.stderr, r


def test_fewer_sets_per_limit(h):
    """--redis-packed-sets 4 on two agents: the clients of a limit share
    four sets (the tag's top 2 bits), each client counted exactly across
    the two; the agent says so at start."""
    redis = RedisServer(h)
    agents = [start_agent(h, redis, "--limit", "3/1h", "--redis-packed-sets", "4",
                          name="agent%d" % i) for i in (1, 2)]
    spops = [Spop(a.port) for a in agents]
    clients = ["c%d" % i for i in range(200)]
    for c in clients:
        got = [spops[j % 2].ask(c)["status"] for j in range(4)]
        assert got == [0, 0, 0, 429], (c, got)
    keys = scan(redis)
    assert list(keys) == ["zset"] and len(keys["zset"]) == 4, keys
    for name in keys["zset"]:
        # 2 bits of 12: the first digit's top two, the second digit 0
        assert SET_RE.match(name) and name[1] in "AQgw" and name[2] == "A", name
        assert name[4:] == keys["zset"][0][4:], keys
    assert sum(len(members(redis, n)) for n in keys["zset"]) == len(clients)
    for a in agents:
        assert "packed buckets (4 sets per limit)" in a.log(), a.log()
        assert_log_clean(a)


def test_more_sets_per_limit(h):
    """--redis-packed-sets 262144: a tag of three characters (18 bits) for
    every key of a client, its packed bucket named by 24 bytes, its window
    by 15; both decided all or nothing, and the admin look and reset find
    them."""
    redis = RedisServer(h)
    mport = harness.free_port()
    path = rules_file(h, "limits: [2/1d, {rate: 5/1m, algorithm: fixed}]\n")
    a = start_agent(h, redis, "--rules", path, "--redis-packed-sets", "262144", "--metrics",
                    "127.0.0.1:%d" % mport, "--admin")
    s = Spop(a.port)
    assert [s.ask("adm")["status"] for _ in range(3)] == [0, 0, 429]
    keys = scan(redis)
    assert sorted(keys) == ["string", "zset"], keys
    (zset,), (key,) = keys["zset"], keys["string"]
    assert re.match(r"^\{[A-Za-z0-9_-]{3}\}~[A-Za-z0-9_-]{8}$", zset), zset
    assert re.match(r"^\{[A-Za-z0-9_-]{3}\}[A-Za-z0-9_-]{10}$", key), key
    assert zset[:5] == key[:5]
    (member,) = members(redis, zset)
    assert redis.command("GET", key) is not None
    info = json.loads(http_get(mport, "/admin/client?api_key=adm").text)
    (rule,) = info["rules"]
    assert sorted(rule["keys"].values()) == sorted([zset + member, key]), rule
    r = http_get(mport, "/admin/reset?api_key=adm", method="POST")
    assert r.status == 200 and json.loads(r.text)["rules"][0]["deleted"] == 2, r.text
    assert scan(redis) == {}
    assert s.ask("adm")["remaining"] == 1
    assert "packed buckets (262144 sets per limit)" in a.log()
    assert_log_clean(a)
