# SPDX-License-Identifier: Apache-2.0
"""The Redis topologies the store's Cluster, Sentinel and shard tests run on
(tests/e2e/redis_topology.py), checked on their own: a cluster serving every
slot with a replica per master, slots computed as Redis does, a master's
failover, resharding, adding and removing a master, reset() after damage; a
sentinel set electing the replica, with and without passwords; independent
shards.

One cluster and one sentinel set serve the whole module (module fixtures,
see run.py); each test starts with reset(). Durations are printed, not
bounded: the waits have generous timeouts and say what they waited for.
"""

import random

from harness import wait_for
from redis_topology import SLOTS, Cluster, Sentinel, Shards, _info, crc16, key_slot
from resp import Client, RespError

CLUSTER_PORT_MAX = 65535 - 10000


def fixture_cluster():
    return Cluster(masters=3, replicas_per_master=1)


def fixture_sentinel():
    return Sentinel(sentinels=3)


def fixture_sentinel_auth():
    return Sentinel(sentinels=3, password="s3cret", sentinel_password="watch3r")


def fixture_shards():
    return Shards(3)


def covered(masters):
    """Every slot of the masters' ranges, asserting none is served twice."""
    seen = set()
    for m in masters:
        for lo, hi in m.slots:
            r = set(range(lo, hi + 1))
            assert not seen & r, "slots %d-%d served twice" % (lo, hi)
            seen |= r
    return seen


def assert_healthy(cluster, nmasters=3):
    """nmasters masters each with one replica, every slot served once, every
    node saying ok."""
    masters, replicas = cluster.masters(), cluster.replicas()
    assert len(masters) == nmasters, masters
    assert sorted(r.master_id for r in replicas) == sorted(m.id for m in masters), (
        masters, replicas)
    assert covered(masters) == set(range(SLOTS))
    for port in [m.port for m in masters + replicas]:
        ci = _info(cluster.command(port, "CLUSTER", "INFO"))
        assert ci["cluster_state"] == "ok", (port, ci)
        assert ci["cluster_slots_assigned"] == ci["cluster_slots_ok"] == str(SLOTS), (port, ci)
        assert ci["cluster_size"] == str(nmasters), (port, ci)


def fill(cluster, n, prefix="rl:"):
    """Writes n keys, each through the master serving it; returns them."""
    keys = ["%s{%032x}" % (prefix, random.getrandbits(128)) for _ in range(n)]
    for k in keys:
        with cluster.client(cluster.node_for_key(k)) as c:
            assert c.command("SET", k, k) == b"OK"
    return keys


def assert_keys_where_slots_say(cluster, keys):
    by_master = cluster.keys_by_master("rl:*")
    want = {m.port: [] for m in cluster.masters()}
    for k in keys:
        want[cluster.node_for_key(k)].append(k)
    assert by_master == {p: sorted(ks) for p, ks in want.items()}, (by_master, want)


# ---------------------------------------------------------------- cluster


def test_cluster_serves_every_slot_with_three_masters_each_with_a_replica(cluster):
    cluster.reset()
    print("cluster created in %.2fs" % cluster.create_seconds)
    assert_healthy(cluster)
    members = cluster.masters() + cluster.replicas()
    assert len({m.port for m in members}) == len({m.id for m in members}) == 6
    seeds = cluster.seeds().split(",")
    assert sorted(seeds) == sorted("127.0.0.1:%d" % m.port for m in members), seeds
    assert all(m.port < CLUSTER_PORT_MAX for m in members), members
    # Every node hands a client the same slot map: CLUSTER SLOTS.
    for m in members:
        with cluster.client(m.port) as c:
            ranges = sorted((lo, hi, node[1]) for lo, hi, node, *_ in c.command("CLUSTER", "SLOTS"))
            ci = _info(c.command("CLUSTER", "INFO"))
        assert ranges == sorted((lo, hi, x.port) for x in cluster.masters() for lo, hi in x.slots)
        assert ci["cluster_known_nodes"] == "6", ci


def test_cluster_slot_of_agrees_with_cluster_keyslot(cluster):
    assert crc16(b"123456789") == 0x31C3  # the reference value of CRC16-XMODEM
    rnd = random.Random(7)
    keys = ["rl:{%032x}" % rnd.getrandbits(128) for _ in range(150)]
    keys += ["key:%d" % i for i in range(100)]
    keys += ["{user%d}.following" % i for i in range(20)]
    keys += ["", "{", "}", "{}", "{}x", "x{}", "x{}{y}", "{a}{b}", "a{b", "a}b{c}", "{{a}}",
             "{a", "}{a}", "a{b}c{d}", "{ }", "{\u00e9t\u00e9}", "\u00e9t\u00e9", "rl:{}"]
    keys += [bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 40))) for _ in range(50)]
    port = cluster.masters()[0].port
    with cluster.client(port) as c:
        got = c.pipeline([("CLUSTER", "KEYSLOT", k) for k in keys])
    bad = [(k, key_slot(k), g) for k, g in zip(keys, got) if key_slot(k) != g]
    assert not bad, "%d of %d disagree, e.g. %r" % (len(bad), len(keys), bad[:5])
    assert cluster.slot_of("{user1}.following") == cluster.slot_of("{user1}.followers")
    assert cluster.slot_of("123456789") == 0x31C3 % SLOTS


def test_cluster_key_written_through_its_master_is_read_back(cluster):
    cluster.reset()
    keys = fill(cluster, 60)
    masters = cluster.masters()
    for k in keys:
        home = cluster.node_for_key(k)
        with cluster.client(home) as c:
            assert c.command("GET", k) == k.encode()
        # Any other master redirects to the home one.
        other = next(m.port for m in masters if m.port != home)
        with cluster.client(other) as c:
            try:
                c.command("GET", k)
                raise AssertionError("node %d answered for a key of %d" % (other, home))
            except RespError as e:
                assert str(e) == "MOVED %d 127.0.0.1:%d" % (key_slot(k), home), e
    assert_keys_where_slots_say(cluster, keys)
    # The keys reach the replicas too (read with READONLY once WAIT says so).
    for m in masters:
        with cluster.client(m.port) as c:
            assert c.command("WAIT", 1, 10000) == 1
    for r in cluster.replicas():
        mport = cluster.port_of(r.master_id)
        mine = [k for k in keys if cluster.node_for_key(k) == mport]
        with cluster.client(r.port) as c:
            c.command("READONLY")
            assert c.pipeline([("GET", k) for k in mine]) == [k.encode() for k in mine]


def test_cluster_reset_leaves_a_clean_cluster(cluster):
    cluster.reset()
    fill(cluster, 30)
    fill(cluster, 5, prefix="other:")
    # Damage: a reshard cut short, a replica paused, another one killed.
    masters = cluster.masters()
    replicas = cluster.replicas()
    r = cluster.reshard(masters[0].port, masters[1].port, 4000, background=True)
    wait_for(lambda: "Moving slot" in r.output() or not r.running(), 30,
             "the reshard to move slots")
    r.stop()
    cluster.nodes[replicas[0].port].pause()
    cluster.kill_node(replicas[1].port)
    cluster.reset()
    assert_healthy(cluster)
    assert cluster.keys_by_master("*") == {m.port: [] for m in cluster.masters()}
    for m in cluster.masters() + cluster.replicas():
        assert cluster.command(m.port, "DBSIZE") == 0, m
    # What the stopped reshard had moved stays moved: put it back.
    moved = len(covered([masters[0]])) - len(covered([cluster.masters()[0]]))
    print("the cut reshard had moved %d slots" % moved)
    if moved:
        cluster.reshard(masters[1].port, masters[0].port, moved)


def test_cluster_kill_master_promotes_its_replica(cluster):
    cluster.reset()
    victim = cluster.masters()[0]
    keys = [k for k in fill(cluster, 60) if cluster.node_for_key(k) == victim.port]
    with cluster.client(victim.port) as c:
        assert c.command("WAIT", 1, 10000) == 1
    (replica,) = [r.port for r in cluster.replicas() if r.master_id == victim.id]

    cluster.kill_master(victim.port)
    new, secs = cluster.wait_promoted(victim.port)
    print("master %d killed: replica %d promoted, cluster ok after %.2fs"
          % (victim.port, new, secs))
    assert new == replica
    assert [m.port for m in cluster.masters() if m.slots == victim.slots] == [new]
    assert _info(cluster.command(new, "INFO", "replication"))["role"] == "master"
    with cluster.client(new) as c:
        assert c.pipeline([("GET", k) for k in keys]) == [k.encode() for k in keys]
        assert c.command("SET", keys[0], "after") == b"OK"

    # The old master comes back as the new one's replica.
    back = cluster.restart_node(victim.port)
    assert back.role == "replica" and back.master_id == cluster.ids[new], back
    assert_healthy(cluster)


def test_cluster_reshard_moves_slots_and_their_keys(cluster):
    cluster.reset()
    keys = fill(cluster, 200)
    src, dst = cluster.masters()[:2]
    r = cluster.reshard(src.port, dst.port, 300, background=True)
    r.wait()
    after = {m.port: m for m in cluster.masters()}
    moved = covered([src]) - covered([after[src.port]])
    assert len(moved) == 300 and moved <= covered([after[dst.port]]), moved
    assert covered(after.values()) == set(range(SLOTS))
    assert_keys_where_slots_say(cluster, keys)
    # And back, so that the masters serve as many slots as before.
    cluster.reshard(dst.port, src.port, 300)
    assert len(covered([cluster.masters()[0]])) == len(covered([src]))


def test_cluster_add_and_remove_a_master(cluster):
    cluster.reset()
    first = cluster.masters()[0]
    port = cluster.add_master()
    new = {m.port: m for m in cluster.masters()}[port]
    assert new.slots == () and len(cluster.masters()) == 4
    cluster.reshard(first.port, port, 10)
    keys = fill(cluster, 300)
    assert {m.port: m for m in cluster.masters()}[port].slots != ()
    assert_keys_where_slots_say(cluster, keys)
    cluster.reshard(port, first.port, 10)
    cluster.remove_node(port)
    assert port not in [m.port for m in cluster.members()]
    assert_healthy(cluster)
    cluster.reset()


# --------------------------------------------------------------- sentinel


def assert_sentinels_name(s, port):
    for i in range(len(s.sentinels)):
        with s.sentinel_client(i) as c:
            assert c.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.master_name) == [
                b"127.0.0.1", str(port).encode()]
            assert c.command("SENTINEL", "CKQUORUM", s.master_name).startswith(b"OK 3 usable")


def test_sentinel_reports_the_master_and_its_replica(sentinel):
    sentinel.reset()
    addrs = sentinel.sentinel_addrs().split(",")
    assert addrs == ["127.0.0.1:%d" % p for p in sentinel.sentinel_ports()] and len(addrs) == 3
    mport = sentinel.master_port()
    assert_sentinels_name(sentinel, mport)
    (rport,) = sentinel.replica_ports()
    assert sentinel.server(mport).info("replication")["connected_slaves"] == "1"
    ri = sentinel.server(rport).info("replication")
    assert ri["role"] == "slave" and ri["master_port"] == str(mport), ri
    with sentinel.client() as c:
        assert c.command("SET", "k", "v") == b"OK"
        assert c.command("WAIT", 1, 10000) == 1
    assert sentinel.server(rport).command("GET", "k") == b"v"


def test_sentinel_elects_the_replica_when_the_master_dies(sentinel):
    sentinel.reset()
    (rport,) = sentinel.replica_ports()
    with sentinel.client() as c:
        c.command("SET", "before", "1")
        assert c.command("WAIT", 1, 10000) == 1
    old = sentinel.kill_master()
    new, secs = sentinel.wait_failover()
    print("master %d killed: sentinels elected %d after %.2fs" % (old, new, secs))
    assert new == rport
    assert sentinel.master_port() == new
    with sentinel.client() as c:
        assert c.command("GET", "before") == b"1"
        assert c.command("SET", "after", "2") == b"OK"

    # reset(): the old master back as a replica of the new one, no keys.
    sentinel.reset()
    assert sentinel.master_port() == new and sentinel.replica_ports() == [old]
    assert_sentinels_name(sentinel, new)
    assert sentinel.server(old).info("replication")["master_port"] == str(new)
    assert sentinel.server(new).command("DBSIZE") == sentinel.server(old).command("DBSIZE") == 0


def test_sentinel_with_passwords(sentinel_auth):
    s = sentinel_auth
    s.reset()
    mport = s.master_port()
    for port in [mport] + s.replica_ports() + s.sentinel_ports():
        with Client("127.0.0.1", port) as c:
            try:
                c.command("PING")
                raise AssertionError("port %d answered without a password" % port)
            except RespError as e:
                assert str(e).startswith("NOAUTH"), e
    assert_sentinels_name(s, mport)
    old = s.kill_master()
    new, secs = s.wait_failover()
    print("with passwords: master %d killed, sentinels elected %d after %.2fs" % (old, new, secs))
    s.reset()
    assert s.replica_ports() == [old]


# ----------------------------------------------------------------- shards


def test_shards_are_independent_servers(shards):
    shards.reset()
    ports = shards.ports()
    assert len(set(ports)) == 3
    assert shards.addrs() == ",".join("127.0.0.1:%d" % p for p in ports)
    run_ids = set()
    for i in range(3):
        info = _info(shards.servers[i].command("INFO"))
        assert info["role"] == "master" and info["cluster_enabled"] == "0", info
        run_ids.add(info["run_id"])
        with shards.client(i) as c:
            assert c.command("SET", "k", "shard%d" % i) == b"OK"
    assert len(run_ids) == 3
    assert [shards.servers[i].command("GET", "k") for i in range(3)] == [
        b"shard0", b"shard1", b"shard2"]
    # One down, the others unaffected; reset() brings it back, empty.
    shards.servers[1].stop()
    assert shards.servers[0].command("GET", "k") == b"shard0"
    shards.reset()
    assert [s.command("DBSIZE") for s in shards.servers] == [0, 0, 0]
