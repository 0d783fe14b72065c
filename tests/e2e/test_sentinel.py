# SPDX-License-Identifier: Apache-2.0
"""The agent with Redis Sentinel (--redis-sentinel A,B,C --redis-master
NAME): a master, a replica and three sentinels (tests/e2e/redis_topology.py),
shared by the module's tests, each of which starts with reset().

- exact decisions from two agents on the master the sentinels name;
- the master killed under load: exact decisions from the new master within
  the failover time plus one second;
- passwords on the data servers and on the sentinels;
- packed buckets and keys without an expiry on the master;
- Redis's memory and keys: the master's series alone.
"""

import re
import time

import fleet
import harness
from harness import http_get, wait_for
from redis_topology import Sentinel


def fixture_sentinel():
    return Sentinel(sentinels=3)


def fixture_sentinel_auth():
    return Sentinel(sentinels=3, password="s3cret", sentinel_password="watch3r")


def start(h, sentinel, *args, name=None, threads=2):
    # (the tests read every variable of a decision: a rules file of theirs
    # says answer: full)
    full = () if ("-f" in args or "--rules" in args) else ("--answer", "full")
    a = h.agent("--threads", str(threads), "--redis-sentinel", sentinel.sentinel_addrs(),
                "--redis-master", sentinel.master_name, "--redis-timeout", "1000", *full, *args,
                name=name)
    wait_for(lambda: len(set(re.findall(r"redis: worker (\d+) ready", a.log()))) >= threads
             or not a.alive(), 10, "%s's workers to be ready on the master" % a.name)
    assert a.alive(), a.log()
    return a


def keys(n, tag):
    return ["%s-%03d" % (tag, i) for i in range(n)]


def test_exact_across_two_agents(h, sentinel):
    sentinel.reset()
    agents = [start(h, sentinel, "--limit", "4/1h", name="agent%d" % i) for i in (1, 2)]
    got = fleet.counts(fleet.burst([a.port for a in agents], keys(50, "s"), per_key=6))
    wrong = {k: c for k, c in got.items() if c != (4, 2, 0)}
    assert not wrong, sorted(wrong.items())[:5]
    with sentinel.client() as c:
        assert len(c.command("KEYS", "{????}????????")) == 50


def test_failover_under_load(h, sentinel):
    sentinel.reset()
    a = start(h, sentinel, "--limit", "100000/1h", "--redis-timeout", "200")
    old = sentinel.master_port()
    steady = fleet.Steady([a.port], keys(20, "f"), conns=4, duration=60)
    try:
        wait_for(lambda: steady.count() > 200, 20, "traffic to flow")
        t_kill = time.monotonic()
        sentinel.kill_master()
        new_port, failover_s = sentinel.wait_failover()
        assert new_port != old

        fleet.wait_recovered(steady, 0.5, 20, 30, "decisions from the new master")
        n = steady.count()
        wait_for(lambda: steady.count() > n + 100, 20, "traffic after the failover")
    finally:
        answers = steady.stop()
    last = fleet.last_degraded(answers)
    after = (last - t_kill) if last else 0.0
    print("  sentinel failover took %.1f s; the agent's last degraded answer came %.2f s "
          "after the kill" % (failover_s, after))
    assert after <= failover_s + 1.0, (after, failover_s)
    assert "switch-master" in a.log() or "master mymaster is" in a.log(), a.log()[-2000:]
    # decided by the new master: its keys
    with sentinel.client(new_port) as c:
        assert len(c.command("KEYS", "{????}????????")) == 20


def test_passwords(h, sentinel_auth):
    sentinel_auth.reset()
    a = start(h, sentinel_auth, "--limit", "3/1h", "--redis-password", "s3cret",
              "--redis-sentinel-password", "watch3r")
    got = fleet.counts(fleet.burst([a.port], keys(10, "p"), per_key=4, conns=2))
    assert all(c == (3, 1, 0) for c in got.values()), got


def test_leases_through_sentinel(h, sentinel):
    from test_lease import check_topology

    sentinel.reset()
    check_topology(h, lambda *args, name: start(h, sentinel, *args, name=name),
                   "lease-sentinel")


def test_packed_and_no_expiry_through_sentinel(h, sentinel):
    """Packed buckets, then keys without an expiry, on the master the
    sentinels name: exact from two agents, the keys of the layout on the
    master, and the master's eviction policy looked at through the
    connection Sentinel gave."""
    sentinel.reset()
    agents = [start(h, sentinel, "--limit", "4/1h", "--redis-packed-sets", "16",
                    name="packed%d" % i) for i in (1, 2)]
    got = fleet.counts(fleet.burst([a.port for a in agents], keys(40, "pk"), per_key=6))
    wrong = {k: c for k, c in got.items() if c != (4, 2, 0)}
    assert not wrong, sorted(wrong.items())[:5]
    for a in agents:
        a.stop()
    master = sentinel.master_port()
    with sentinel.client() as c:
        sets = c.command("KEYS", "*~*")
        assert 0 < len(sets) <= 16, sets
        assert sum(c.command("ZCARD", k) for k in sets) == 40
        c.command("FLUSHALL")
        c.command("CONFIG", "SET", "maxmemory", "64mb", "maxmemory-policy", "allkeys-lru")
    try:
        agents = [start(h, sentinel, "--limit", "4/1h", "--redis-no-expiry",
                        name="kept%d" % i) for i in (1, 2)]
        got = fleet.counts(fleet.burst([a.port for a in agents], keys(40, "nx"), per_key=6))
        wrong = {k: c for k, c in got.items() if c != (4, 2, 0)}
        assert not wrong, sorted(wrong.items())[:5]
        with sentinel.client() as c:
            names = c.command("KEYS", "{????}????????")
            assert len(names) == 40 and {c.command("PTTL", k) for k in names} == {-1}
        for a in agents:
            assert "allkeys-lru: it evicts the keys without an expiry" in a.log(), a.log()
            assert ":%d" % master in a.log()
    finally:
        with sentinel.client() as c:
            c.command("CONFIG", "SET", "maxmemory", "0", "maxmemory-policy", "noeviction")


def test_memory_and_keys_of_the_master(h, sentinel):
    """One series of memory and keys, the master's (not its replica's),
    following the keys the decisions wrote there."""
    sentinel.reset()
    mport = harness.free_port()
    a = start(h, sentinel, "--limit", "3/1h", "--redis-info-interval", "200ms",
              "--metrics", "127.0.0.1:%d" % mport)
    fleet.burst([a.port], keys(40, "mem"), per_key=1)
    port = sentinel.master_port()

    def keys_series():
        text = http_get(mport, "/metrics").text
        return {m.group(1): int(m.group(2)) for m in
                re.finditer(r'^spoa_rl_redis_keys\{node="([^"]+)"\} (\d+)$', text, re.M)}

    def dbsize():
        with sentinel.client(port) as c:
            return int(c.command("DBSIZE"))

    wait_for(lambda: [(n.rsplit(":", 1)[1], v) for n, v in keys_series().items()] ==
             [(str(port), dbsize())], 10, "the master's keys counted")
    assert dbsize() >= 40

