# SPDX-License-Identifier: Apache-2.0
"""The agent with independent Redis shards (--redis-shards A,B,C): three
standalone servers (tests/e2e/redis_topology.py), shared by the module's
tests, each of which starts with reset().

- exact decisions from two agents, clients spread evenly over the shards;
- a fourth shard moves about a quarter of the clients (jump consistent
  hash) and leaves the others where they were.
"""

import re

import fleet
from harness import wait_for
from redis_topology import Shards


def fixture_shards():
    return Shards(4)


def start(h, addrs, *args, name=None, threads=2):
    # (the tests read every variable of a decision: a rules file of theirs
    # says answer: full)
    full = () if ("-f" in args or "--rules" in args) else ("--answer", "full")
    a = h.agent("--threads", str(threads), "--redis-shards", addrs, "--redis-timeout", "1000",
                *full, *args, name=name)
    n = addrs.count(",") + 1
    wait_for(lambda: len(re.findall(r"redis: worker \d+ ready", a.log())) >= threads * n
             or not a.alive(), 10, "%s's workers to be ready on every shard" % a.name)
    assert a.alive(), a.log()
    return a


def keys_on(shards, i):
    with shards.client(i) as c:
        return set(c.command("KEYS", "{????}????????"))


def test_exact_and_even(h, shards):
    shards.reset()
    three = ",".join(shards.addrs().split(",")[:3])
    agents = [start(h, three, "--limit", "3/1h", name="agent%d" % i) for i in (1, 2)]
    clients = ["e-%03d" % i for i in range(300)]
    got = fleet.counts(fleet.burst([a.port for a in agents], clients, per_key=5))
    wrong = {k: c for k, c in got.items() if c != (3, 2, 0)}
    assert not wrong, sorted(wrong.items())[:5]
    sizes = [len(keys_on(shards, i)) for i in range(3)]
    assert sum(sizes) == 300, sizes
    # 100 expected each; 60..140 is five standard deviations either way
    assert all(60 <= n <= 140 for n in sizes), sizes


def test_a_new_shard_moves_a_quarter(h, shards):
    shards.reset()
    addrs = shards.addrs().split(",")
    clients = ["m-%03d" % i for i in range(400)]
    a = start(h, ",".join(addrs[:3]), "--limit", "3/1h", name="three")
    fleet.burst([a.port], clients, per_key=1)
    before = [keys_on(shards, i) for i in range(3)]
    h.stop(a)
    b = start(h, ",".join(addrs[:4]), "--limit", "3/1h", name="four")
    got = fleet.counts(fleet.burst([b.port], clients, per_key=1))
    after = [keys_on(shards, i) for i in range(4)]
    moved = len(after[3])
    # the clients on the new shard start fresh: 2 left after this request
    print("  a fourth shard took %d of 400 clients" % moved)
    assert 60 <= moved <= 140, moved
    # nobody moved between the old shards
    for i in range(3):
        assert after[i] == before[i], i
    assert all(c[0] == 1 for c in got.values())


def test_layers_across_shards(h, shards):
    """A rule with layers whose keys live on several shards: each part is
    decided on its own shard and a refused decision gives back what its
    other parts took, so the answers are those of one server (test_stack's
    scenario, which a lost refund would fail: a client refused by its
    address's layer keeps its own bucket)."""
    import harness
    import test_stack
    from harness import http_get

    shards.reset()
    three = ",".join(shards.addrs().split(",")[:3])
    mport = harness.free_port()
    a = start(h, three, "--rules", test_stack.rules_file(h), "--hash-key-file",
              test_stack.fixed_key_file(h), "--metrics", "127.0.0.1:%d" % mport, threads=1)
    s = test_stack.Spop(a.port)
    test_stack.check_stack(s)
    s.close()
    text = http_get(mport, "/metrics").text
    split = int(re.search(r"^spoa_rl_redis_split_total (\d+)$", text, re.M).group(1))
    lost = int(re.search(r"^spoa_rl_redis_refunds_lost_total (\d+)$", text, re.M).group(1))
    refunds = int(re.search(r"^spoa_rl_redis_refunds_total (\d+)$", text, re.M).group(1))
    # (the fixed key places these clients so that refused decisions were
    # made in parts, and refunded)
    assert split > 0 and refunds > 0 and lost == 0, (split, refunds, lost)


def test_packed_layers_across_shards(h, shards):
    """test_layers_across_shards with --redis-packed: the parts decided on
    each shard and the refunds of a refused decision on packed buckets."""
    import harness
    import test_stack
    from harness import http_get

    shards.reset()
    three = ",".join(shards.addrs().split(",")[:3])
    mport = harness.free_port()
    a = start(h, three, "--rules", test_stack.rules_file(h), "--hash-key-file",
              test_stack.fixed_key_file(h), "--metrics", "127.0.0.1:%d" % mport,
              "--redis-packed", threads=1)
    s = test_stack.Spop(a.port)
    test_stack.check_stack(s)
    s.close()
    text = http_get(mport, "/metrics").text
    refunds = int(re.search(r"^spoa_rl_redis_refunds_total (\d+)$", text, re.M).group(1))
    assert refunds > 0
    zsets = 0
    for i in range(3):
        with shards.client(i) as c:
            zsets += sum(1 for k in c.command("KEYS", "*") if c.command("TYPE", k) == b"zset")
    assert zsets > 0


def test_refund_gives_back_places_and_logs_on_shards(h, shards):
    """A decision split over shards and refused by the part on another
    shard gives back its concurrency place and its log's entry (a place
    kept would refuse the client until max_duration)."""
    import harness
    import test_stack
    from harness import http_get

    shards.reset()
    three = ",".join(shards.addrs().split(",")[:3])
    mport = harness.free_port()
    a = start(h, three, "--rules", test_stack.rules_file(h, test_stack.PLACES_RULES),
              "--hash-key-file", test_stack.fixed_key_file(h), "--metrics",
              "127.0.0.1:%d" % mport, threads=1)
    s = test_stack.PlacesSpop(a.port)
    test_stack.check_places_given_back(s)
    s.close()
    text = http_get(mport, "/metrics").text
    refunds = int(re.search(r"^spoa_rl_redis_refunds_total (\d+)$", text, re.M).group(1))
    lost = int(re.search(r"^spoa_rl_redis_refunds_lost_total (\d+)$", text, re.M).group(1))
    # (the fixed key puts some of these clients and addresses apart)
    assert refunds > 0 and lost == 0, (refunds, lost)


def test_concurrency_on_shards(h, shards):
    """Concurrency places on shards (test_concurrency's scenario)."""
    import test_concurrency

    shards.reset()
    three = ",".join(shards.addrs().split(",")[:3])
    a = start(h, three, "--rules", test_concurrency.rules_file(h), "--hash-key-file",
              h.hash_key_file(), threads=1)
    s = test_concurrency.Spop(a.port)
    test_concurrency.check_places(s)
    s.c.close()


def test_penalty_on_shards(h, shards):
    """The penalty box on shards (test_penalty's scenario)."""
    import test_penalty

    shards.reset()
    three = ",".join(shards.addrs().split(",")[:3])
    a = start(h, three, "--rules", test_penalty.rules_file(h), "--hash-key-file",
              h.hash_key_file(), threads=1)
    s = test_penalty.Spop(a.port)
    test_penalty.check_penalties(s)
    s.c.close()


def test_leases_on_shards(h, shards):
    from test_lease import check_topology

    shards.reset()
    addrs = shards.addrs()
    check_topology(h, lambda *args, name: start(h, addrs, *args, name=name), "lease-shards")
