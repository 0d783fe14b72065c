# SPDX-License-Identifier: Apache-2.0
"""Delay instead of refusal (docs/rules.md, "Delay instead of refusal"): a
request its rates refuse, that would pass within its rule's delay, is
held by the agent and answered when its token is due, decided again then.
Raw SPOP in memory and on Redis standalone, independent shards (with a
global layer: a decision in parts), a Cluster and Sentinel (1/1s with
delay 1s: the second request of a second is admitted about a second
later, the third refused; other requests, on the same connection and on
others, answered meanwhile);
max_delayed; then through the real haproxy with the shipped example
(haproxy-examples/delay.cfg, spoe-conf/ratelimit-delay.conf,
examples/rules-delay.yaml).
"""

import os
import re
import shutil
import signal
import threading
import time

import harness
import spop
from harness import http_get, wait_for
from redis_helper import (RedisServer, cluster_metrics_agent, metrics_agent,
                          sentinel_metrics_agent)
from redis_topology import Cluster, Sentinel

RULES = """\
answer: full
identity: [api_key]
max_delayed: %d
tiers:
  default: slow
  slow: { limits: ["1/1s"], delay: 1s }
endpoints:
  - name: nodelay
    match: { path: /nodelay }
    limits: ["1/1s"]
"""


def rules_file(h, max_delayed=1024):
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write(RULES % max_delayed)
    return path


def metric(a, name):
    m = re.search(r"^%s (\d+(?:\.\d+)?)$" % re.escape(name), http_get(a.mport, "/metrics").text,
                  re.M)
    return float(m.group(1)) if m else -1


class Pipe:
    """One SPOP connection whose NOTIFYs go out without waiting for their
    ACKs (HAProxy's pipelining); ACKs are collected by stream id with the
    time each was read."""

    def __init__(self, port):
        self.c = spop.Conn(port, timeout=5.0)
        self.c.handshake()
        self.sid = 0
        self.acks = {}

    def send(self, key, path="/"):
        self.sid += 1
        self.c.send(spop.check_rate(self.sid, 1, api_key=key, path=path))
        return self.sid

    def wait(self, sid, timeout=5.0):
        deadline = time.monotonic() + timeout
        while sid not in self.acks:
            f = self.c.expect(spop.ACK, max(0.01, deadline - time.monotonic()))
            self.acks[f.sid] = (time.monotonic(), spop.as_read(f.vars()))
        return self.acks[sid]

    def close(self):
        self.c.close()


def check_delay(a):
    """The second request of k1 in the same second is held and admitted
    when its token is due (about a second later); the third, held behind
    it, finds the token taken and is refused; a request of another client
    on the same connection, and one on another connection, are answered
    before the held one; a rule without delay refuses at once."""
    p = Pipe(a.port)
    other = spop.Session(a.port)
    t0 = time.monotonic()
    _, v = p.wait(p.send("k1"))
    assert v["status"] == 0, v
    second = p.send("k1")
    third = p.send("k1")
    # meanwhile: another client on the same connection, and on another
    mine = p.send("k2")
    t_mine, v = p.wait(mine)
    assert v["status"] == 0, v
    v = other.check_rate(api_key="k3")
    t_other = time.monotonic()
    assert v["status"] == 0, v
    # a rule without a delay refuses at once, while the others wait
    v = other.check_rate(api_key="k4", path="/nodelay")
    assert v["status"] == 0, v
    v = other.check_rate(api_key="k4", path="/nodelay")
    assert v["status"] == 429 and v["reason"] == "limited", v
    t2, v2 = p.wait(second)
    t3, v3 = p.wait(third)
    assert t_mine < t2 and t_other < t2, (t_mine, t_other, t2)
    # admitted when its token came: about a second after the first
    assert t2 - t0 >= 0.8, t2 - t0
    assert v2["status"] == 0 and v2["rule"] == "slow", v2
    assert v3["status"] == 429 and v3["reason"] == "limited" and v3["retry_after"] >= 1, v3
    assert t3 >= t2
    p.close()
    other.close()
    wait_for(lambda: metric(a, 'spoa_rl_delayed_total{rule="slow"}') == 2, 5,
             "both held requests counted")
    assert metric(a, "spoa_rl_delay_seconds_count") == 2
    # both waited about a second: neither under 0.5 s
    assert metric(a, 'spoa_rl_delay_seconds_bucket{le="0.5"}') == 0
    assert metric(a, "spoa_rl_delay_held") == 0
    assert metric(a, 'spoa_rl_limited_total{rule="slow"}') == 1


def test_delay_in_memory(h):
    check_delay(metrics_agent(h, "--rules", rules_file(h)))


def test_delay_on_redis(h):
    redis = RedisServer(h)
    check_delay(metrics_agent(h, "--rules", rules_file(h), redis=redis))


def test_delay_on_shards_with_a_layer(h):
    """Two independent shards, and a global layer stacked on the rule: a
    decision in parts on two servers (refunded when refused), decided
    again in parts when its token is due."""
    shards = [RedisServer(h, name="redis%d" % i) for i in (1, 2)]
    path = rules_file(h)
    with open(path) as f:
        text = f.read()
    text = text.replace("  slow: { limits: [\"1/1s\"], delay: 1s }",
                        "  slow: { limits: [\"1/1s\"], delay: 1s, stack: [everyone] }")
    text += "layers:\n  everyone: { identity: global, limits: [\"1000/1s\"] }\n"
    with open(path, "w") as f:
        f.write(text)
    mport = harness.free_port()
    a = h.agent("--threads", "1", "--metrics", "127.0.0.1:%d" % mport, "--rules", path,
                "--redis-shards", ",".join(r.addr for r in shards),
                "--hash-key-file", h.hash_key_file())
    a.mport = mport
    wait_for(lambda: len(re.findall(r"redis: worker \d+ ready", a.log())) >= 2, 10,
             "the agent's worker ready on both shards")
    check_delay(a)


def fixture_cluster():
    return Cluster(masters=3, replicas_per_master=0)


def test_delay_on_cluster(h, cluster):
    """A Redis Cluster: the held request decided again on its slot's master."""
    cluster.reset()
    a = cluster_metrics_agent(h, cluster, "--rules", rules_file(h))
    check_delay(a)


def fixture_sentinel():
    return Sentinel(sentinels=3)


def test_delay_on_sentinel(h, sentinel):
    """Sentinel: the held request decided again on the master it names."""
    sentinel.reset()
    a = sentinel_metrics_agent(h, sentinel, "--rules", rules_file(h))
    check_delay(a)


def test_max_delayed(h):
    """max_delayed: 2 (one worker): two clients' second requests are held;
    a third client's is refused at once, counted, while the two wait."""
    a = metrics_agent(h, "--rules", rules_file(h, max_delayed=2))
    p = Pipe(a.port)
    for k in ("k1", "k2", "k3"):
        assert p.wait(p.send(k))[1]["status"] == 0
    held = [p.send("k1"), p.send("k2")]
    t_full, v = p.wait(p.send("k3"))
    assert v["status"] == 429 and v["reason"] == "limited", v
    assert metric(a, "spoa_rl_delay_full_total") == 1
    assert metric(a, "spoa_rl_delay_held") == 2
    for sid in held:
        t, v = p.wait(sid)
        assert v["status"] == 0 and t > t_full, v
    assert metric(a, "spoa_rl_delay_held") == 0
    p.close()


def check_gone(a):
    """A held request whose connection closes before it is due takes no
    token: when it would have been due, the client's token is still there
    for the next request, admitted without being held (had the held one
    taken it, the next would be held until the token after), and the held
    one is counted as gone."""
    p = Pipe(a.port)
    other = Pipe(a.port)
    assert p.wait(p.send("k1"))[1]["status"] == 0
    p.send("k1")  # refused, held until the next token (2 s)
    wait_for(lambda: metric(a, "spoa_rl_delay_held") == 1, 5, "the request to be held")
    p.close()
    # both answered: the first, and the held one
    wait_for(lambda: harness.series(a.mport, "spoa_rl_decisions_total", rule="t") == 2, 10,
             "the held request to be decided")
    assert metric(a, "spoa_rl_delay_gone_total") == 1
    held = harness.series(a.mport, "spoa_rl_delayed_total", rule="t")
    # the token that came at 2 s lasts until 4 s: taken now, not held
    _, v = other.wait(other.send("k1"))
    assert v["status"] == 0, v
    assert harness.series(a.mport, "spoa_rl_delayed_total", rule="t") == held
    assert metric(a, "spoa_rl_delay_held") == 0
    other.close()


GONE_RULES = ('answer: full\nidentity: [api_key]\n'
              'tiers: { t: { limits: ["1/2s"], delay: 3s } }\n')


def test_held_with_its_connection_gone(h):
    path = os.path.join(h.dir, "gone.yaml")
    with open(path, "w") as f:
        f.write(GONE_RULES)
    check_gone(metrics_agent(h, "--rules", path))


def test_held_with_its_connection_gone_on_redis(h):
    path = os.path.join(h.dir, "gone.yaml")
    with open(path, "w") as f:
        f.write(GONE_RULES)
    check_gone(metrics_agent(h, "--rules", path, redis=RedisServer(h)))


def test_held_when_stopping(h):
    """SIGTERM while a request is held for much longer than the grace time
    (3 s): it is answered, refused with a Retry-After, before the agent
    disconnects and exits 0."""
    path = os.path.join(h.dir, "long.yaml")
    with open(path, "w") as f:
        f.write('answer: full\nidentity: [api_key]\n'
                'tiers: { t: { limits: ["1/30s"], delay: 30s } }\n')
    a = metrics_agent(h, "--rules", path)
    p = Pipe(a.port)
    assert p.wait(p.send("k1"))[1]["status"] == 0
    held = p.send("k1")
    wait_for(lambda: metric(a, "spoa_rl_delay_held") == 1, 5, "the request to be held")
    a.signal(signal.SIGTERM)
    _, v = p.wait(held, timeout=10.0)
    assert v["status"] == 429 and v["reason"] == "limited" and v["retry_after"] >= 20, v
    assert a.popen.wait(10) == 0
    p.close()


@harness.serial
def test_delay_through_haproxy(h):
    """The shipped example (5/1s, delay 1s, timeout processing 2s): five
    requests of a client pass, then of twelve sent at once about five are
    held and admitted as their tokens come, the others refused at once;
    never more admitted than the rate allows in the time taken."""
    a = metrics_agent(h, "-f", os.path.join(harness.ROOT, "examples", "rules-delay.yaml"))
    backend = h.backend()
    # the test's own copy of the SPOE file, as shipped (its 2s must exceed the delay)
    spoe = os.path.join(h.dir, "ratelimit-delay.conf")
    shutil.copy(os.path.join(harness.ROOT, "spoe-conf", "ratelimit-delay.conf"), spoe)
    hp = h.haproxy(a.port, backend.port,
                   cfg=os.path.join(harness.ROOT, "haproxy-examples", "delay.cfg"),
                   env={"RL_SPOE_CONF": spoe})
    wait_for(lambda: hp.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 10,
             "agent1 UP in haproxy's stats")
    t0 = time.monotonic()
    for _ in range(5):
        r = http_get(hp.port, "/")
        assert r.status == 200, r
    out = []

    def one():
        out.append(http_get(hp.port, "/", timeout=5.0))

    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    statuses = sorted(r.status for r in out)
    admitted = statuses.count(200)
    assert set(statuses) <= {200, 429}, statuses
    assert admitted >= 3, statuses
    assert 5 + admitted <= 5 + 5 * elapsed + 1, (statuses, elapsed)
    assert statuses.count(429) >= 1, statuses
    assert all(r.headers.get("Retry-After") for r in out if r.status == 429), out
    assert metric(a, 'spoa_rl_delayed_total{rule="standard"}') >= admitted
