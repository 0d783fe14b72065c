# SPDX-License-Identifier: Apache-2.0
"""A busy Redis is not a dead one.

Under load from build/spop-bench (several connections, hot keys, a rules
file of two limits of two algorithms and a global layer), a real
redis-server is made slow in short spells (CLIENT PAUSE of 30 to 50 ms,
again and again): decisions then miss the 20 ms deadline while Redis
keeps answering. None may be answered by the failure policy (open here):
the circuit breaker never opens (no skips, no trips), and every decision
made without Redis is a saturated one, made by the rule's local bucket.

(Redis ends a CLIENT PAUSE at its next timer tick, 100 ms apart at the
default `hz 10`: the server runs with `--hz 100` so that a 40 ms pause
lasts about 40 ms, not up to 140.)

A Redis stopped (SIGSTOP) under the same load is a dead one: the breaker
opens, and Redis decides again once it is back (how fast is
test_hardening's test_breaker_closes_within_a_second_of_recovery).

Redis's own key expiry holds it 25 ms at a time at the default hz 10,
more than the 20 ms deadline: the agent says so (its log and
spoa_rl_redis_expiry_stall_seconds), and when many keys expire under
load, the decisions it holds up are saturated ones too.
"""

import json
import os
import re
import subprocess
import threading
import time

import harness
from harness import http_get, wait_for
from redis_helper import RedisServer, redis_agent

RULES = """\
answer: full
identity: [api_key]
on_store_failure: open
layers:
  everyone: { identity: global, limits: ["100000000/1m"] }
limits:
  - "6000000/1m"
  - { rate: "1000/1s", algorithm: log }
stack: [everyone]
"""


def start(h, redis, *more):
    path = os.path.join(h.dir, "saturation.yaml")
    with open(path, "w") as f:
        f.write(RULES)
    mport = harness.free_port()
    a = redis_agent(h, redis, "--rules", path, "--threads", "1", "--redis-timeout", "20",
                    "--metrics", "127.0.0.1:%d" % mport, *more)
    a.mport = mport
    return a


def metrics(a):
    """{series name with its labels: value} of the agent's /metrics."""
    out = {}
    for line in http_get(a.mport, "/metrics").text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def saturated(m):
    return sum(v for k, v in m.items() if k.startswith("spoa_rl_saturated_total{"))


def bench(a, seconds):
    """spop-bench, closed loop, on agent a for `seconds`: its JSON summary."""
    r = subprocess.run([os.path.join(harness.BUILD, "spop-bench"), "--addr",
                        "127.0.0.1:%d" % a.port, "--threads", "1", "--conns", "4",
                        "--inflight", "16", "--keys", "20000", "--hot-keys", "5",
                        "--hot-share", "40", "--duration", str(seconds), "--json"],
                       capture_output=True, text=True, timeout=seconds + 60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def in_background(fn):
    """Runs fn() in a thread; returns a function that waits for it and
    returns its result (or raises what it raised)."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 (raised again below)
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def join():
        t.join(120)
        assert not t.is_alive(), "still running"
        if "error" in box:
            raise box["error"]
        return box.get("value")
    return join


@harness.serial
def test_slow_spells_are_saturation_not_failure(h):
    redis = RedisServer(h, extra=["--hz", "100"])
    a = start(h, redis)
    done = in_background(lambda: bench(a, 4))
    wait_for(lambda: metrics(a).get("spoa_rl_redis_replies_total", 0) > 1000, 10,
             "Redis deciding under load")
    spells = 0
    with redis.client(timeout=5) as c:
        while saturated(metrics(a)) == 0 or spells < 20:
            assert spells < 200, "no decision saturated after 200 spells"
            # a spell of 30 to 50 ms, then Redis answers for 60 ms (the
            # load's rhythm, not a wait for a condition)
            c.command("CLIENT", "PAUSE", str(30 + 10 * (spells % 3)), "ALL")
            spells += 1
            time.sleep(0.11)
    summary = done()
    m = metrics(a)
    sat = saturated(m)
    print("  %d spells; %d decisions, %d saturated, %d replies from Redis, %d timeouts"
          % (spells, summary.get("requests", -1), sat, m["spoa_rl_redis_replies_total"],
             m["spoa_rl_redis_timeouts_total"]))
    assert sat > 0, m
    # not one decision forwarded by the failure policy while Redis answered
    assert m["spoa_rl_redis_breaker_skips_total"] == 0, m
    assert m["spoa_rl_redis_breaker_trips_total"] == 0, m
    assert m["spoa_rl_degraded_total"] == sat, (m["spoa_rl_degraded_total"], sat)
    assert m["spoa_rl_store_down_total"] == 0, m
    # the saturated ones waited in the agent up to their deadline
    assert m['spoa_rl_redis_queue_wait_seconds_bucket{le="+Inf"}'] > \
        m['spoa_rl_redis_queue_wait_seconds_bucket{le="0.01"}'], m
    assert "deciding without Redis" not in a.log()
    assert a.alive()


@harness.serial
def test_stopped_redis_opens_the_breaker_and_closes_it(h):
    redis = RedisServer(h)
    a = start(h, redis)
    done = in_background(lambda: bench(a, 4))
    wait_for(lambda: metrics(a).get("spoa_rl_redis_replies_total", 0) > 1000, 10,
             "Redis deciding under load")
    redis.pause()
    try:
        wait_for(lambda: metrics(a)["spoa_rl_redis_breaker_skips_total"] > 100, 10,
                 "decisions skipping a stopped Redis")
    finally:
        redis.resume()
    m = metrics(a)
    assert m["spoa_rl_redis_breaker_trips_total"] >= 1, m
    assert "deciding without Redis" in a.log()
    replies = m["spoa_rl_redis_replies_total"]
    wait_for(lambda: metrics(a)["spoa_rl_redis_replies_total"] > replies + 1000, 10,
             "Redis deciding again")
    wait_for(lambda: "Redis answers again" in a.log(), 5, "the breaker to close")
    done()
    assert a.alive()


EXPIRING = """
for i = 1, 20000 do
  redis.call('SET', 'expiring:' .. ARGV[1] .. ':' .. i, 'x', 'PX', ARGV[2])
end
return 1
"""


def test_key_expiry_longer_than_the_deadline_is_said_and_is_saturation(h):
    redis = RedisServer(h)  # Redis's default hz 10
    a = start(h, redis, "--redis-info-interval", "200ms")
    node = redis.addr

    def stall():
        return metrics(a).get('spoa_rl_redis_expiry_stall_seconds{node="%s"}' % node)

    wait_for(lambda: stall() == 0.025, 5, "the server's key expiry read")
    wait_for(lambda: "its key expiry may hold it 25.0 ms at a time (hz 10)" in a.log(), 5,
             "the warning")
    # 300,000 keys that expire together while the load runs: Redis's
    # expiry then runs to its 25 ms cap, again and again
    with redis.client(timeout=10) as c:
        for n in range(15):
            c.command("EVAL", EXPIRING, "0", str(n), "1500")
        capped = int(re.search(r"expired_time_cap_reached_count:(\d+)",
                               c.command("INFO", "stats").decode()).group(1))
    before = metrics(a)
    bench(a, 4)
    m = metrics(a)
    with redis.client() as c:
        info = c.command("INFO", "stats").decode()
        assert int(c.command("DBSIZE")) < 300000
    after = int(re.search(r"expired_time_cap_reached_count:(\d+)", info).group(1))
    sat = saturated(m) - saturated(before)
    print("  expiry cycles stopped at their cap: %d; %d decisions saturated" % (after - capped, sat))
    assert after > capped, info
    assert sat > 0, m
    # held up by the expiry, not failed: nothing forwarded by the policy
    assert m["spoa_rl_redis_breaker_trips_total"] == 0, m
    assert m["spoa_rl_degraded_total"] == saturated(m), m
    # the advice taken: 2.5 ms, said within the deadline
    with redis.client() as c:
        c.command("CONFIG", "SET", "hz", "100")
    wait_for(lambda: stall() == 0.0025, 5, "hz 100 read")
    wait_for(lambda: "its key expiry holds it at most 2.5 ms (hz 100)" in a.log(), 5,
             "the all-clear")
    assert a.alive()
