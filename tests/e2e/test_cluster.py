# SPDX-License-Identifier: Apache-2.0
"""The agent on a Redis Cluster (--redis-cluster): 3 masters with a replica
each (tests/e2e/redis_topology.py), shared by the module's tests, each of
which starts with reset().

- exact decisions for a hundred clients spread over every master, from two
  agents, one of them with its clock hours off (faketime);
- slots resharded under load: no client gets more than its limit and
  under 5% of decisions are degraded;
- a master killed: its replica takes over and decisions are exact again,
  not degraded, within seconds (printed);
- the admin endpoint and the per-node metrics on a cluster, Redis's
  memory and keys one series per master.

Decisions during a topology change are refused, not forwarded, when the
store cannot decide (on_store_failure: closed), so that "at most the
limit" counts every request that passed.
"""

import json
import os
import re
import subprocess
import glob
import time

import fleet
import harness
from harness import http_get, wait_for
from redis_topology import Cluster
from resp import RespError


def fixture_cluster():
    return Cluster(masters=3, replicas_per_master=1)


def rules(h, limit, failure="open"):
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        # (the tests read every variable of a decision)
        f.write("answer: full\nlimits: [%s]\non_store_failure: %s\n" % (limit, failure))
    return path


def start(h, cluster, *args, name=None, prefix=(), threads=2, metrics=False):
    extra = []
    mport = None
    if metrics:
        mport = harness.free_port()
        extra = ["--metrics", "127.0.0.1:%d" % mport, "--admin"]
    # (the tests read every variable of a decision: a rules file of theirs
    # says answer: full)
    if "-f" not in args and "--rules" not in args:
        extra += ["--answer", "full"]
    a = h.agent("--threads", str(threads), "--redis-cluster", cluster.seeds(2),
                "--redis-timeout", "200", *extra, *args, name=name, prefix=prefix)
    # every worker has the slot map
    wait_for(lambda: len(set(re.findall(r"cluster: worker (\d+): 3 masters serve 16384",
                                         a.log()))) >= threads or not a.alive(),
             10, "%s's workers to have the slot map" % a.name)
    assert a.alive(), a.log()
    a.mport = mport
    return a


def decision_calls(cluster):
    """Decision calls (FCALL) so far, summed over the masters."""
    n = 0
    for m in cluster.masters():
        text = cluster.command(m.port, "INFO", "commandstats").decode()
        found = re.search(r"cmdstat_fcall:calls=(\d+)", text)
        n += int(found.group(1)) if found else 0
    return n


def skewed(offset):
    """A prefix that runs a command with its clock `offset` off (libfaketime,
    preloaded by env so the agent is the process signalled), or () when
    libfaketime is missing."""
    libs = glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")
    if not libs:
        return ()
    preload = [libs[0]]
    # a sanitizer's runtime must come first among preloaded libraries
    ldd = subprocess.run(["ldd", os.path.join(harness.BUILD, "spoa-ratelimit")],
                         capture_output=True, text=True).stdout
    asan = re.search(r"(/\S*libasan\.so\S*)", ldd)
    if asan:
        preload.insert(0, asan.group(1))
    return ("env", "LD_PRELOAD=" + ":".join(preload), "FAKETIME=" + offset)


def keys(n, tag):
    return ["%s-%03d" % (tag, i) for i in range(n)]


def test_exact_across_two_agents_one_skewed(h, cluster):
    cluster.reset()
    # exactness, not latency: a generous deadline on a loaded machine
    a1 = start(h, cluster, "-f", rules(h, "5/1h"), "--redis-timeout", "1000", name="agent1")
    a2 = start(h, cluster, "-f", rules(h, "5/1h"), "--redis-timeout", "1000", name="agent2",
               prefix=skewed("+5h"))
    clients = keys(100, "c")
    calls0 = decision_calls(cluster)
    got = fleet.counts(fleet.burst([a1.port, a2.port], clients, per_key=8))
    calls = decision_calls(cluster) - calls0
    wrong = {k: c for k, c in got.items() if c != (5, 3, 0)}
    assert not wrong, "clients not at exactly 5 allowed, 3 refused, none degraded: %s" % (
        sorted(wrong.items())[:5],)
    by_master = cluster.keys_by_master()
    assert len(by_master) == 3 and all(len(ks) > 10 for ks in by_master.values()), {
        p: len(ks) for p, ks in by_master.items()}
    assert sum(len(ks) for ks in by_master.values()) == 100
    # batched per node, across slots: far fewer script calls than decisions
    assert calls < 800 / 3, calls


def test_packed_buckets_across_two_agents(h, cluster):
    """--redis-packed on a Cluster: exact for a hundred clients from two
    agents; the sets of the clients' tags spread over every master. The
    same with 65536 sets per limit (--redis-packed-sets: tags of three
    characters, names of 24 bytes)."""
    for i, (args, pattern) in enumerate(((("--redis-packed",), "{??}~????????"),
                                         (("--redis-packed-sets", "65536"), "{???}~????????"))):
        cluster.reset()
        a1, a2 = (start(h, cluster, "-f", rules(h, "5/1h"), "--redis-timeout", "1000", *args,
                        name="agent%d-%d" % (n, i)) for n in (1, 2))
        got = fleet.counts(fleet.burst([a1.port, a2.port], keys(100, "p"), per_key=8))
        wrong = {k: c for k, c in got.items() if c != (5, 3, 0)}
        assert not wrong, (args, sorted(wrong.items())[:5])
        by_master = cluster.keys_by_master(pattern)
        assert len(by_master) == 3 and all(len(ks) > 10 for ks in by_master.values()), {
            p: len(ks) for p, ks in by_master.items()}
        # a hundred clients among 4096 tags or more: nearly a set each
        assert 90 <= sum(len(ks) for ks in by_master.values()) <= 100
        a1.stop()
        a2.stop()


def test_keys_without_expiry_across_two_agents(h, cluster):
    """A Cluster whose masters evict, one agent with --redis-no-expiry and
    one with the default (auto): exact for a hundred clients from the two,
    every key on every master without an expiry, and each master's policy
    read and found evicting by both."""
    cluster.reset()
    masters = cluster.masters()
    try:
        for m in masters:
            cluster.command(m.port, "CONFIG", "SET", "maxmemory", "256mb",
                            "maxmemory-policy", "allkeys-lru")
        a1, a2 = (start(h, cluster, "-f", rules(h, "5/1h"), "--redis-timeout", "1000",
                        *extra, name="agent%d" % n)
                  for n, extra in ((1, ["--redis-no-expiry"]), (2, [])))
        # (a connection looks at its master before its first call)
        got = fleet.counts(fleet.burst([a1.port, a2.port], keys(100, "n"), per_key=8))
        wrong = {k: c for k, c in got.items() if c != (5, 3, 0)}
        assert not wrong, sorted(wrong.items())[:5]
        by_master = cluster.keys_by_master()
        assert len(by_master) == 3 and sum(len(ks) for ks in by_master.values()) == 100
        for port, ks in by_master.items():
            assert {cluster.command(port, "PTTL", k) for k in ks} == {-1}, port
        for a in (a1, a2):
            for m in masters:
                wait_for(lambda: re.search(r"redis: [^ ]*:%d: maxmemory 268435456, allkeys-lru: "
                                           r"it evicts" % m.port, a.log()), 5,
                         "%s to find %d evicting" % (a.name, m.port))
    finally:
        for m in masters:
            cluster.command(m.port, "CONFIG", "SET", "maxmemory", "0",
                            "maxmemory-policy", "noeviction")


def test_reshard_under_load(h, cluster):
    cluster.reset()
    a = start(h, cluster, "-f", rules(h, "20/1h", "closed"), threads=2, metrics=True)
    clients = keys(100, "r")
    masters = cluster.masters()
    steady = fleet.Steady([a.port], clients, conns=4, duration=60)
    try:
        wait_for(lambda: steady.count() > 500, 20, "traffic to flow")
        # a third of the first master's slots go to the second, then back
        moving = cluster.reshard(masters[0].port, masters[1].port, 3000, background=True)
        moving.wait(timeout=60)
        back = cluster.reshard(masters[1].port, masters[0].port, 3000, background=True)
        back.wait(timeout=60)
        n = steady.count()
        wait_for(lambda: steady.count() > n + 500, 20, "traffic after the reshard")
    finally:
        answers = steady.stop()
    allowed = fleet.allowed_by_key(answers)
    over = {k: c for k, c in allowed.items() if c > 20}
    assert not over, "clients over their limit: %s" % sorted(over.items())[:5]
    degraded = sum(1 for _, _, v in answers if v["degraded"])
    print("  reshard of 3000 slots there and back: %d decisions, %d degraded (%.2f%%), "
          "%d moved" % (len(answers), degraded, 100.0 * degraded / len(answers),
                        metric(a, "spoa_rl_redis_moved_total")))
    assert degraded < 0.05 * len(answers), (degraded, len(answers))


def metric(a, name):
    if not a.mport:
        return -1
    m = re.search(r"^%s (\d+)$" % name, http_get(a.mport, "/metrics").text, re.M)
    return int(m.group(1)) if m else -1


def test_master_killed(h, cluster):
    cluster.reset()
    a = start(h, cluster, "-f", rules(h, "1000/1h", "closed"), threads=2, metrics=True)
    clients = keys(60, "k")
    steady = fleet.Steady([a.port], clients, conns=4, duration=60)
    try:
        wait_for(lambda: steady.count() > 300, 20, "traffic to flow")
        victim = cluster.masters()[0].port
        t_kill = time.monotonic()
        cluster.kill_master(victim)
        new_port, promoted_s = cluster.wait_promoted(victim)
        # decisions flow exact again: a run of answers, none degraded
        fleet.wait_recovered(steady, 1.0, 50, 30, "decisions not degraded again")
        n = steady.count()
        wait_for(lambda: steady.count() > n + 200, 20, "traffic after recovery")
    finally:
        answers = steady.stop()
    last = fleet.last_degraded(answers)
    after = (last - t_kill) if last else 0.0
    print("  master killed: replica promoted after %.1f s; last degraded answer %.1f s "
          "after the kill" % (promoted_s, after))
    assert after < promoted_s + 10, (after, promoted_s)
    assert metric(a, "spoa_rl_redis_topology_changes_total") >= 1
    # Fresh clients, on every master, over both workers: exact and none
    # degraded. A worker that sent nothing to the dead master since the
    # promotion still has the old map: its first decisions there find the
    # connection refused and wait for a fresh map instead of going to the
    # failure policy.
    got = fleet.counts(fleet.burst([a.port], keys(30, "after"), per_key=3))
    assert all(c == (3, 0, 0) for c in got.values()), got


def test_first_decisions_after_a_promotion_on_a_worker_that_sent_none(h, cluster):
    """A worker that never sent a decision to a master learns of its
    replacement from its first decision there: the old master refuses the
    connection, and the decisions that never left wait for a fresh map
    (within their deadline) instead of going to the failure policy."""
    cluster.reset()
    a = start(h, cluster, "-f", rules(h, "1000/1h", "closed"), threads=1, metrics=True)
    # Not the master of the fleet's overrides ("{AAAA}overrides"), which
    # worker 0 polls every half second: that worker is connected to it.
    polled = cluster.node_for_slot(cluster.slot_of("{AAAA}overrides"))
    victim = [m.port for m in cluster.masters() if m.port != polled][0]

    def master_of(client):
        info = json.loads(http_get(a.mport, "/admin/client?api_key=" + client).text)
        return cluster.node_for_slot(cluster.slot_of(info["rules"][0]["key"]))

    mine, others = [], []
    for c in keys(400, "p"):
        (mine if master_of(c) == victim else others).append(c)
    mine, others = mine[:20], others[:20]
    assert len(mine) == 20 and len(others) == 20, (len(mine), len(others))
    # traffic to the other masters only: the worker never connects to the victim
    got = fleet.counts(fleet.burst([a.port], others, per_key=2))
    assert all(c == (2, 0, 0) for c in got.values()), got
    nodes = set(re.findall(r'^spoa_rl_redis_node_calls_total\{node="([^"]+)"\} [1-9]',
                           http_get(a.mport, "/metrics").text, re.M))
    assert "127.0.0.1:%d" % victim not in nodes, nodes
    cluster.kill_master(victim)
    cluster.wait_promoted(victim)
    got = fleet.counts(fleet.burst([a.port], mine, per_key=3))
    assert all(c == (3, 0, 0) for c in got.values()), got


def refused_look_names_the_keys(a, cluster):
    """A look that Redis refuses (here an ASK: the client's slot is being
    migrated and its keys are not on the node the agent's map names) still
    says the keys' names, beside Redis's error."""
    (key,) = json.loads(http_get(a.mport, "/admin/client?api_key=adm-new").text)["rules"][0][
        "keys"].values()
    with cluster.migrating(key, finish=False) as (slot, _, _):
        info = json.loads(http_get(a.mport, "/admin/client?api_key=adm-new").text)["rules"][0]
        assert info["error"].startswith("ASK %d " % slot), info
        assert list(info["keys"].values()) == [key], info


def test_admin_and_node_metrics(h, cluster):
    cluster.reset()
    a = start(h, cluster, "--limit", "2/1h", metrics=True)
    fleet.burst([a.port], keys(30, "m"), per_key=3)
    text = http_get(a.mport, "/metrics").text
    nodes = set(re.findall(r'^spoa_rl_redis_node_calls_total\{node="([^"]+)"\} [1-9]', text,
                           re.M))
    assert nodes == {"127.0.0.1:%d" % m.port for m in cluster.masters()}, (nodes, text[-2000:])
    r = http_get(a.mport, "/admin/client?api_key=m-007")
    assert r.status == 200, r
    assert '"store": "redis"' in r.text and '"fields": {' in r.text, r.text
    assert '"ttl_ms": ' in r.text, r.text
    r = http_get(a.mport, "/admin/reset?api_key=m-007", method="POST")
    assert r.status == 200 and '"deleted": 1' in r.text, r.text
    got = fleet.counts(fleet.burst([a.port], ["m-007"], per_key=3, conns=1))
    assert got["m-007"] == (2, 1, 0), got
    refused_look_names_the_keys(a, cluster)


def node_series(mport, name):
    """{node: value} of the series name{node=...}."""
    text = http_get(mport, "/metrics").text
    return {m.group(1): int(m.group(2)) for m in
            re.finditer(r'^%s\{node="([^"]+)"\} (\d+)$' % name, text, re.M)}


def test_memory_and_keys_by_master(h, cluster):
    """One series of memory and keys per master (none for a replica or a
    seed that is not one), each following the keys the clients' decisions
    wrote on that master."""
    cluster.reset()
    a = start(h, cluster, "--limit", "2/1h", "--redis-info-interval", "200ms", metrics=True)
    masters = {"127.0.0.1:%d" % m.port: m.port for m in cluster.masters()}
    wait_for(lambda: set(node_series(a.mport, "spoa_rl_redis_used_memory_bytes")) ==
             set(masters), 10, "every master's memory read")
    fleet.burst([a.port], keys(300, "mem"), per_key=1)

    def dbsizes():
        return {n: int(cluster.command(p, "DBSIZE")) for n, p in masters.items()}

    wait_for(lambda: node_series(a.mport, "spoa_rl_redis_keys") == dbsizes(), 10,
             "the keys of every master counted")
    got = node_series(a.mport, "spoa_rl_redis_keys")
    print("keys by master:", got)
    assert sum(got.values()) >= 300 and all(n > 0 for n in got.values()), got
    assert set(node_series(a.mport, "spoa_rl_redis_maxmemory_bytes")) == set(masters)
    assert all(v == 0 for v in node_series(a.mport, "spoa_rl_redis_info_failures_total")
               .values())


def test_admin_on_packed_buckets(h, cluster):
    """The admin look and reset with --redis-packed on a Cluster: found on
    the master of the client's 12-bit tag, read and deleted through the
    library (rl8_peek, rl8_forget)."""
    cluster.reset()
    a = start(h, cluster, "--limit", "2/1h", "--redis-packed", metrics=True)
    fleet.burst([a.port], keys(30, "m"), per_key=3)
    r = http_get(a.mport, "/admin/client?api_key=m-007")
    assert r.status == 200 and '"fields": {"t2/3600000000/0": "' in r.text, r.text
    r = http_get(a.mport, "/admin/reset?api_key=m-007", method="POST")
    assert r.status == 200 and '"deleted": 1' in r.text, r.text
    got = fleet.counts(fleet.burst([a.port], ["m-007"], per_key=3, conns=1))
    assert got["m-007"] == (2, 1, 0), got
    refused_look_names_the_keys(a, cluster)


def test_migrating_slot_is_followed_with_asking(h, cluster):
    """A client's slot in the middle of a migration (IMPORTING on one master,
    MIGRATING on another, its key not yet on the source): its decisions are
    made on the importing master, after ASKING, exactly."""
    cluster.reset()
    a = start(h, cluster, "--limit", "3/1h", "--redis-timeout", "1000", metrics=True)
    # the client's one key (one limit)
    (key,) = json.loads(http_get(a.mport, "/admin/client?api_key=moving").text)["rules"][0][
        "keys"].values()
    with cluster.migrating(key) as (slot, src, dst):
        got = fleet.burst([a.port], ["moving"], per_key=5, conns=1)["moving"]
        assert [(v["status"], v["degraded"]) for v in got] == [(0, False)] * 3 + [(429, False)] * 2, got
        assert metric(a, "spoa_rl_redis_asking_total") >= 5
        with cluster.client(dst) as c:
            c.command("ASKING")
            assert c.command("EXISTS", key) == 1
        # the source has no such key: it redirects
        with cluster.client(src) as c:
            try:
                c.command("EXISTS", key)
                assert False, "the key is on the source too"
            except RespError as e:
                assert str(e).startswith("ASK %d " % slot), e


def test_packed_bucket_in_a_migrating_slot_stays_where_its_set_is(h, cluster):
    """--redis-packed, a client's slot set MIGRATING with its set still on
    the source: decided on the source, where its bucket is (the set's name,
    not the bucket's, says where it lives), so its count goes on; once the
    set is moved, on the importing master, after ASKING."""
    cluster.reset()
    a = start(h, cluster, "--limit", "4/1h", "--redis-timeout", "1000", "--redis-packed",
              metrics=True)
    (name,) = json.loads(http_get(a.mport, "/admin/client?api_key=moving").text)["rules"][0][
        "keys"].values()
    zset = name[:13]
    slot = cluster.slot_of(zset)
    src = cluster.node_for_slot(slot)
    dst = next(m.port for m in cluster.masters() if m.port != src)
    src_id, dst_id = cluster.ids[src], cluster.ids[dst]
    got = fleet.burst([a.port], ["moving"], per_key=2, conns=1)["moving"]
    assert [v["remaining"] for v in got] == [3, 2], got
    try:
        assert cluster.command(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", src_id) == b"OK"
        assert cluster.command(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id) == b"OK"
        got = fleet.burst([a.port], ["moving"], per_key=1, conns=1)["moving"]
        assert [(v["status"], v["remaining"], v["degraded"]) for v in got] == [(0, 1, False)], got
        # the set moves: the next decisions are the importing master's
        assert cluster.command(src, "MIGRATE", "127.0.0.1", dst, zset, 0, 5000) == b"OK"
        got = fleet.burst([a.port], ["moving"], per_key=2, conns=1)["moving"]
        assert [(v["status"], v["degraded"]) for v in got] == [(0, False), (429, False)], got
        assert metric(a, "spoa_rl_redis_asking_total") >= 2
    finally:
        for port in (dst, src):
            cluster.command(port, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)


def test_layers_across_masters(h, cluster):
    """A rule with layers on a Cluster: a global layer's key, an address's
    and a client's live on different masters; each part is decided on its
    master and a refused decision gives back what its other parts took
    (test_stack's scenario: a lost refund fails it)."""
    import test_stack

    cluster.reset()
    a = start(h, cluster, "--rules", test_stack.rules_file(h), "--hash-key-file",
              test_stack.fixed_key_file(h), threads=1, metrics=True)
    s = test_stack.Spop(a.port)
    test_stack.check_stack(s)
    s.close()
    assert metric(a, "spoa_rl_redis_split_total") > 0
    assert metric(a, "spoa_rl_redis_refunds_total") > 0
    assert metric(a, "spoa_rl_redis_refunds_lost_total") == 0


def test_refund_gives_back_places_and_logs_on_a_cluster(h, cluster):
    """A decision split over masters and refused by the part on another
    master gives back its concurrency place and its log's entry."""
    import test_stack

    cluster.reset()
    a = start(h, cluster, "--rules", test_stack.rules_file(h, test_stack.PLACES_RULES),
              "--hash-key-file", test_stack.fixed_key_file(h), threads=1, metrics=True)
    s = test_stack.PlacesSpop(a.port)
    test_stack.check_places_given_back(s)
    s.close()
    assert metric(a, "spoa_rl_redis_refunds_total") > 0
    assert metric(a, "spoa_rl_redis_refunds_lost_total") == 0


def test_concurrency_on_a_cluster(h, cluster):
    """Concurrency places on a Cluster: taken where the client's keys live,
    given back there by the release, ended at max_duration
    (test_concurrency's scenario)."""
    import test_concurrency

    cluster.reset()
    a = start(h, cluster, "--rules", test_concurrency.rules_file(h), "--hash-key-file",
              h.hash_key_file(), threads=1)
    s = test_concurrency.Spop(a.port)
    test_concurrency.check_places(s)
    s.c.close()


def test_penalty_on_a_cluster(h, cluster):
    """The penalty box on a Cluster: the count and the ban of a client live
    with its keys (test_penalty's scenario)."""
    import test_penalty

    cluster.reset()
    a = start(h, cluster, "--rules", test_penalty.rules_file(h), "--hash-key-file",
              h.hash_key_file(), threads=1)
    s = test_penalty.Spop(a.port)
    test_penalty.check_penalties(s)
    s.c.close()


def test_admin_override_on_a_cluster(h, cluster):
    """An operator's override on a Cluster: the fleet's overrides live in
    one slot, wherever the map puts it; every agent polls them there. The
    same with packed buckets, whose clients' tags are shorter than the
    overrides' ("{AA}" and "{AAAA}" hash to slots of different masters):
    the overrides go to their own key's master."""
    import test_override

    for i, extra in enumerate(((), ("--redis-packed",))):
        cluster.reset()
        a = start(h, cluster, "--rules", test_override.rules_file(h), "--hash-key-file",
                  h.hash_key_file(), *extra, threads=2, metrics=True, name="agent%d" % i)
        s = test_override.Spop(a.port)
        assert s.ask("co1")["limit"] == 3
        r = http_get(a.mport, "/admin/override?api_key=co1&limit=7/1h", method="PUT")
        assert r.status == 200, (extra, r)
        wait_for(lambda: s.ask("co1")["limit"] == 7, 1.5, "the override to apply")
        s.c.close()
        assert h.stop(a) == 0


def test_override_and_log_on_a_cluster(h, cluster):
    """A client's own limit from the message (test_override's scenario),
    and an exact sliding log, on a Cluster."""
    import test_override

    cluster.reset()
    a = start(h, cluster, "--rules", test_override.rules_file(h), "--hash-key-file",
              h.hash_key_file(), threads=1)
    s = test_override.Spop(a.port)
    test_override.check_overrides(s)
    s.close()
    path = os.path.join(h.dir, "log.yaml")
    with open(path, "w") as f:
        f.write('limits: [{ rate: "3/1h", algorithm: log }]\n')
    b = start(h, cluster, "--rules", path, "--hash-key-file", h.hash_key_file(), threads=1,
              name="log-agent")
    s = test_override.Spop(b.port)
    got = [s.check_rate(api_key="logged")["status"] for _ in range(4)]
    assert got == [0, 0, 0, 429], got
    v = s.check_rate(api_key="logged")
    assert 3599 <= v["retry_after"] <= 3600 and v["policy"] == '"default";q=3;w=3600', v
    s.close()


def test_leases_on_a_cluster(h, cluster):
    """--lease on a Cluster: the leases of a client grow with its demand
    (rl8_decide_cluster), the answers count down as Redis's would, and the
    unspent tokens go back to its master when the agent stops
    (rl8_return_cluster)."""
    from test_lease import Client, leased_25

    cluster.reset()
    a = start(h, cluster, "-f", rules(h, "1000/1h"), "--lease", "1s", metrics=True)
    calls0 = decision_calls(cluster)
    got = leased_25(a.port)
    assert [v["remaining"] for v in got] == list(range(999, 974, -1)), got
    assert decision_calls(cluster) - calls0 == 6
    assert metric(a, "spoa_rl_lease_grants_total") == 3
    assert h.stop(a) == 0
    plain = start(h, cluster, "-f", rules(h, "1000/1h"), name="plain")
    c = Client(plain.port)
    assert c.ask()["remaining"] in (974, 975)
    c.close()
