# SPDX-License-Identifier: Apache-2.0
"""The agent on a Redis Cluster whose nodes ask for a password
(requirepass): the agent's own question for the slot map (CLUSTER SLOTS,
agent/store/redis/redis_slots.c) goes after an AUTH, with `--redis-password`
alone (AUTH password) and with `--redis-user` (AUTH user password); its
decisions are then exact on every master. With a wrong password it gets
no map and says why."""

import os
import re

import fleet
from harness import wait_for
from redis_topology import Cluster

PASSWORD = "s3cret"


def fixture_cluster():
    return Cluster(masters=3, replicas_per_master=0, password=PASSWORD)


def start(h, cluster, *auth, name):
    path = os.path.join(h.dir, "rules-%s.yaml" % name)
    with open(path, "w") as f:
        f.write("answer: full\nlimits: [3/1h]\non_store_failure: open\n")
    return h.agent("--threads", "1", "--redis-cluster", cluster.seeds(2), "--redis-timeout",
                   "1000", "-f", path, *auth, name=name)


def test_slot_map_and_decisions_behind_auth(h, cluster):
    for n, auth in enumerate((("--redis-password", PASSWORD),
                              ("--redis-user", "default", "--redis-password", PASSWORD))):
        cluster.reset()
        a = start(h, cluster, *auth, name="agent%d" % n)
        wait_for(lambda: re.search(r"cluster: worker 0: 3 masters serve 16384", a.log())
                 or not a.alive(), 10, "the slot map with %s" % (auth,))
        assert a.alive(), a.log()
        clients = ["a%d-%02d" % (n, i) for i in range(60)]
        got = fleet.counts(fleet.burst([a.port], clients, per_key=5))
        wrong = {k: c for k, c in got.items() if c != (3, 2, 0)}
        assert not wrong, (auth, sorted(wrong.items())[:5])
        by_master = cluster.keys_by_master()
        assert len(by_master) == 3, {p: len(ks) for p, ks in by_master.items()}
        a.stop()


def test_wrong_password_gets_no_map(h, cluster):
    cluster.reset()
    a = start(h, cluster, "--redis-password", "not-" + PASSWORD, name="wrong")
    wait_for(lambda: re.search(r"Redis at \S+ refused the user or password", a.log())
             or not a.alive(), 10, "the agent to say the password was refused")
    assert a.alive(), a.log()
    assert not re.search(r"masters serve", a.log()), a.log()
    # without a map every decision goes to the failure policy (open)
    got = fleet.counts(fleet.burst([a.port], ["w-%02d" % i for i in range(5)], per_key=2))
    assert all(c == (0, 0, 2) for c in got.values()), got
