# SPDX-License-Identifier: Apache-2.0
"""What an operator watches for a flood of identities: each Redis server's
memory and keys (spoa_rl_redis_used_memory_bytes, _maxmemory_bytes,
spoa_rl_redis_keys by node, read on connections of their own every
--redis-info-interval) following what the test writes to the server;
a look refused by the server counted in spoa_rl_redis_info_failures_total
while decisions go on; and the distinct clients of a rule and of a layer
(spoa_rl_clients_estimate) within 5% of 5,000 clients, with Redis and in
memory. The Cluster's series, one per master: test_cluster.py."""

import os
import re

import fleet
import harness
from harness import http_get, series, wait_for
from redis_helper import RedisServer, redis_agent
from test_redis import Spop

CLIENTS = 5000
LAYERED = """\
limits: ["5/1h"]
layers:
  everyone: { identity: global, limits: ["1000000/1h"] }
stack: [everyone]
"""


def rules_file(h):
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write(LAYERED)
    return path


def flood(a, mport):
    """One decision for each of CLIENTS distinct clients; returns the
    estimates of the rule and of its global layer."""
    keys = ["flood-%05d" % i for i in range(CLIENTS)]
    got = fleet.counts(fleet.burst([a.port], keys, per_key=1))
    assert set(got.values()) == {(1, 0, 0)}, sorted(set(got.values()))
    return (series(mport, "spoa_rl_clients_estimate", rule="default"),
            series(mport, "spoa_rl_clients_estimate", rule="everyone"))


def used_memory(redis):
    text = redis.command("INFO", "memory").decode()
    return int(re.search(r"^used_memory:(\d+)", text, re.M).group(1))


def test_memory_and_keys_follow_the_server(h):
    redis = RedisServer(h)
    mport = harness.free_port()
    a = redis_agent(h, redis, "--threads", "2", "--rules", rules_file(h),
                    "--redis-info-interval", "200ms", "--metrics", "127.0.0.1:%d" % mport)
    node = redis.addr
    wait_for(lambda: series(mport, "spoa_rl_redis_used_memory_bytes", node=node) is not None,
             5, "the server's memory read")
    assert series(mport, "spoa_rl_redis_maxmemory_bytes", node=node) == 0
    # what the test writes: keys of its own, a maxmemory
    args = []
    for i in range(1000):
        args += ["other:%d" % i, "x" * 100]
    redis.command("MSET", *args)
    redis.command("CONFIG", "SET", "maxmemory", "104857600")
    wait_for(lambda: series(mport, "spoa_rl_redis_maxmemory_bytes", node=node) == 104857600
             and series(mport, "spoa_rl_redis_keys", node=node) ==
             int(redis.command("DBSIZE")), 5, "the keys and maxmemory read")
    before = used_memory(redis)
    got = series(mport, "spoa_rl_redis_used_memory_bytes", node=node)
    assert abs(got - before) < before * 0.1, (got, before)

    rule, layer = flood(a, mport)
    print("%d clients: estimate %d (rule), %d (its global layer)" % (CLIENTS, rule, layer))
    assert abs(rule - CLIENTS) <= CLIENTS * 0.05, rule
    assert layer == 1, layer
    # every client's key, each within its expiry (an hour): the count
    # follows them, and the memory grew with them
    limiter = len(redis.rl_keys())
    assert limiter >= CLIENTS, limiter
    wait_for(lambda: series(mport, "spoa_rl_redis_keys", node=node) ==
             int(redis.command("DBSIZE")) >= 1000 + limiter, 5, "the new keys counted")
    wait_for(lambda: series(mport, "spoa_rl_redis_used_memory_bytes", node=node) >
             before + CLIENTS * 50, 5, "the memory grown")
    print("keys %d, used_memory %d (before the clients: %d)" % (
        series(mport, "spoa_rl_redis_keys", node=node),
        series(mport, "spoa_rl_redis_used_memory_bytes", node=node), before))
    assert series(mport, "spoa_rl_redis_info_failures_total", node=node) == 0


def test_a_refused_look_is_counted_and_decisions_go_on(h):
    """A user without DBSIZE: every look fails and is counted, once in
    the log, and the decisions are Redis's as before."""
    redis = RedisServer(h)
    redis.command("ACL", "SETUSER", "rl", "on", ">pw", "~*", "+@all", "-dbsize")
    mport = harness.free_port()
    a = redis_agent(h, redis, "--threads", "1", "--limit", "5/1h", "--redis-user", "rl",
                    "--redis-password", "pw", "--redis-info-interval", "200ms",
                    "--metrics", "127.0.0.1:%d" % mport)
    node = redis.addr
    wait_for(lambda: (series(mport, "spoa_rl_redis_info_failures_total", node=node) or 0) >= 3,
             5, "three failed looks")
    s = Spop(a.port)
    v = s.ask("refused-look")
    assert v["status"] == 0 and not v["degraded"], v
    assert series(mport, "spoa_rl_redis_used_memory_bytes", node=node) is None
    lines = [x for x in a.log().splitlines() if "cannot read its memory and keys" in x]
    assert len(lines) == 1 and "NOPERM" in lines[0], a.log()
    # granted: read at the next look, said once
    redis.command("ACL", "SETUSER", "rl", "+dbsize")
    wait_for(lambda: series(mport, "spoa_rl_redis_used_memory_bytes", node=node) is not None,
             5, "the memory read once allowed")
    wait_for(lambda: "its memory and keys read again" in a.log(), 5, "the log to say so")
    assert series(mport, "spoa_rl_redis_keys", node=node) == int(redis.command("DBSIZE"))
    s.close()


def test_clients_estimate_in_memory(h):
    mport = harness.free_port()
    a = h.agent("--threads", "2", "--rules", rules_file(h), "--metrics", "127.0.0.1:%d" % mport)
    wait_for(lambda: series(mport, "spoa_rl_clients_estimate", rule="default") == 0, 5,
             "the metrics listener")
    rule, layer = flood(a, mport)
    print("%d clients in memory: estimate %d (rule), %d (its global layer)" % (
        CLIENTS, rule, layer))
    assert abs(rule - CLIENTS) <= CLIENTS * 0.05, rule
    assert layer == 1, layer
    # the same clients again: the same estimate
    assert flood(a, mport) == (rule, layer)
    # no Redis: no Redis series
    assert "spoa_rl_redis_used_memory_bytes" not in http_get(mport, "/metrics").text
