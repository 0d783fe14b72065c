# SPDX-License-Identifier: Apache-2.0
"""Charging what the response says (docs/rules.md, "Charging what the
response says"): a request of a rule with `charge: response` is admitted
at its estimate, and the response message's cost argument settles it:
more is taken (the key into debt, at most a capacity, its next requests
refused with the Retry-After that pays it), less is given back. Raw SPOP
in memory, on Redis (keys and packed buckets), on independent shards, a
Cluster and Sentinel, and two agents on one Redis; then
through the real haproxy (haproxy-examples/llm-gateway.cfg) with a
backend that says what each request cost in x-tokens-used.
"""

import json
import os
import re
import time

import harness
import spop
from harness import http_get, wait_for
from redis_helper import (RedisServer, cluster_metrics_agent, metrics_agent,
                          sentinel_metrics_agent)
from redis_topology import Cluster, Sentinel

# 10 a minute: a token every 6 s, so the seconds a test takes move no
# figure below by a whole token
RULES = """\
# the tests read every variable of a decision
answer: full
identity: [api_key, ip]
cost_argument: tokens
tiers:
  default: standard
  standard: { limits: ["10/1m"], charge: response }
endpoints:
  - name: fixed
    match: { path: /fixed }
    limits: [{ rate: "10/1m", algorithm: fixed }]
    charge: response
  - name: sliding
    match: { path: /sliding }
    limits: [{ rate: "10/1m", algorithm: sliding }]
    charge: response
  - name: plain
    match: { path: /plain }
    limits: ["10/1m"]
"""
PLACE_RE = re.compile(r"^standard/[0-9a-f]{32}/(\d+)/\d+/[0-9a-f]{16}$")


def rules_file(h, text=RULES):
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def agent_with_metrics(h, *args, redis=None):
    return metrics_agent(h, "--rules", rules_file(h), *args, redis=redis)


def metric(a, name):
    m = re.search(r"^%s (\d+)$" % name, http_get(a.mport, "/metrics").text, re.M)
    return int(m.group(1)) if m else -1


def ask(s, key, path="/", tokens=None):
    return s.check_rate([("tokens", tokens)] if tokens is not None else (), api_key=key,
                        path=path)


def respond(s, place, cost=None):
    args = [("place", place)]
    if cost is not None:
        args.append(("cost", cost))
    return s.notify([("response", args)])


CHARGE_METRICS = ("spoa_rl_charge_settlements_total", "spoa_rl_charge_invalid_total",
                  "spoa_rl_charge_taken_tokens_total", "spoa_rl_charge_given_tokens_total")


def counters(a):
    """The agent's charge counters as they grow from now on."""
    base = {n: metric(a, n) for n in CHARGE_METRICS}
    return lambda name: metric(a, name) - base[name]


def settled(count, n):
    """Waits for the n-th settlement (Redis: sent, and its reply read,
    before the next decision's call on the same connection anyway)."""
    wait_for(lambda: count("spoa_rl_charge_settlements_total") >= n, 5, "%d settlements" % n)


def away_from_a_minute_boundary():
    """Windows count by the minute: a check of one window starts at
    least 3 s before it ends (Redis's clock is this machine's)."""
    left = 60 - time.time() % 60
    if left < 3:
        time.sleep(left + 0.1)


def check_bucket(s, count, keys, wait=False):
    """A token bucket 10/1m, with the client keys keys[0..3] fresh; count
    reads the agent's charge counters (counters())."""
    alice, bob, carol, dave = keys

    def settle_wait(n):
        if wait:
            settled(count, n)

    # admitted at 1; the response says 15: 14 more, 5 in debt, and the
    # next request waits for 6 tokens (36 s)
    v = ask(s, alice)
    m = PLACE_RE.match(v.get("place", ""))
    assert v["status"] == 0 and v["remaining"] == 9 and m and m.group(1) == "1", v
    assert respond(s, v["place"], 15) == {}
    settle_wait(1)
    v = ask(s, alice)
    assert v["status"] == 429 and v["reason"] == "limited" and v["retry_after"] == 36, v
    # admitted at 5 (the estimate, tokens); the response says 1: 4 back
    v = ask(s, bob, tokens=5)
    assert v["status"] == 0 and v["remaining"] == 5, v
    assert PLACE_RE.match(v["place"]).group(1) == "5", v
    assert respond(s, v["place"], 1) == {}
    settle_wait(2)
    v = ask(s, bob)
    assert v["status"] == 0 and v["remaining"] == 8, v
    # a cost missing, not a number or negative settles nothing
    place = v["place"]
    for bad in ("abc", -3, None, "", "1e3"):
        assert respond(s, place, bad) == {}
    wait_for(lambda: count("spoa_rl_charge_invalid_total") == 5, 5, "5 invalid costs")
    v = ask(s, bob)
    assert v["status"] == 0 and v["remaining"] == 7, v
    # a string of digits (a header's value): 2 admitted, 12 said
    v = ask(s, carol, tokens=2)
    assert respond(s, v["place"], "12") == {}
    settle_wait(3)
    v = ask(s, carol)
    assert v["status"] == 429 and v["retry_after"] == 18, v
    # the debt's bound: a capacity beyond empty, whatever the response says
    v = ask(s, dave)
    assert respond(s, v["place"], 1000) == {}
    settle_wait(4)
    v = ask(s, dave)
    assert v["status"] == 429 and v["retry_after"] == 66, v
    assert count("spoa_rl_charge_settlements_total") == 4
    assert count("spoa_rl_charge_taken_tokens_total") == 14 + 10 + 999
    assert count("spoa_rl_charge_given_tokens_total") == 4
    # a rule without charge takes the plain place (none here) and
    # answers as ever
    v = ask(s, dave, path="/plain")
    assert v["status"] == 0 and "place" not in v and v["remaining"] == 9, v


def check_windows(s, count, keys, wait=False):
    """A fixed and a sliding window 10/1m: less back in the take's window,
    more counted up to twice the quota."""
    n = 0

    def settle_wait(k):
        if wait:
            settled(count, k)

    for path, key in (("/fixed", keys[0]), ("/sliding", keys[1])):
        away_from_a_minute_boundary()
        v = ask(s, key, path=path, tokens=8)
        assert v["status"] == 0 and v["remaining"] == 2, (path, v)
        assert respond(s, v["place"], 1) == {}
        n += 1
        settle_wait(n)
        v = ask(s, key, path=path)
        assert v["status"] == 0 and v["remaining"] == 8, (path, v)
        assert respond(s, v["place"], 20) == {}
        n += 1
        settle_wait(n)
        v = ask(s, key, path=path)
        assert v["status"] == 429 and v["reason"] == "limited", (path, v)


def test_charge_in_memory(h):
    a = agent_with_metrics(h, "--admin")
    rules = {r["name"]: r for r in json.loads(http_get(a.mport, "/admin/rules").text)["rules"]}
    assert rules["standard"]["charge"] == "response" and "charge" not in rules["plain"], rules
    s = spop.Session(a.port)
    check_bucket(s, counters(a), ["alice", "bob", "carol", "dave"])
    check_windows(s, counters(a), ["erin", "frank"])
    s.close()


def test_charge_on_redis(h):
    redis = RedisServer(h)
    a = agent_with_metrics(h, redis=redis)
    s = spop.Session(a.port)
    check_bucket(s, counters(a), ["alice", "bob", "carol", "dave"], wait=True)
    check_windows(s, counters(a), ["erin", "frank"], wait=True)
    assert metric(a, "spoa_rl_redis_charges_lost_total") == 0
    s.close()


def test_charge_on_redis_packed(h):
    """--redis-packed: the token buckets are members of sorted sets; a
    settlement moves their score (and the set's expiry) as a key's."""
    redis = RedisServer(h)
    a = agent_with_metrics(h, "--redis-packed", redis=redis)
    s = spop.Session(a.port)
    check_bucket(s, counters(a), ["alice", "bob", "carol", "dave"], wait=True)
    assert metric(a, "spoa_rl_redis_charges_lost_total") == 0
    # every bucket of the sets is a member, none a key of its own
    assert redis.command("KEYS", "*~*"), redis.rl_keys()
    s.close()


def test_charge_on_shards(h):
    """Two independent shards: each settlement goes to the shard of its
    client's key, as the decision did (8 clients over the two)."""
    shards = [RedisServer(h, name="redis%d" % i) for i in (1, 2)]
    mport = harness.free_port()
    a = h.agent("--threads", "1", "--metrics", "127.0.0.1:%d" % mport, "--rules", rules_file(h),
                "--redis-shards", ",".join(r.addr for r in shards),
                "--hash-key-file", h.hash_key_file())
    a.mport = mport
    wait_for(lambda: len(re.findall(r"redis: worker \d+ ready", a.log())) >= 2, 10,
             "the agent's worker ready on both shards")
    s = spop.Session(a.port)
    for i in range(2):
        keys = ["s%d-%s" % (i, k) for k in ("alice", "bob", "carol", "dave")]
        check_bucket(s, counters(a), keys, wait=True)
    assert all(r.rl_keys() for r in shards), "both shards hold clients"
    assert metric(a, "spoa_rl_redis_charges_lost_total") == 0
    s.close()


def fixture_cluster():
    return Cluster(masters=3, replicas_per_master=0)


def test_charge_on_cluster(h, cluster):
    """A Cluster: each settlement goes to the master of its client's slot
    (the keys of 8 clients spread over the 3 masters)."""
    cluster.reset()
    a = cluster_metrics_agent(h, cluster, "--rules", rules_file(h))
    s = spop.Session(a.port)
    for i in range(2):
        keys = ["c%d-%s" % (i, k) for k in ("alice", "bob", "carol", "dave")]
        check_bucket(s, counters(a), keys, wait=True)
    assert metric(a, "spoa_rl_redis_charges_lost_total") == 0
    s.close()


def test_charge_across_two_agents_on_one_redis(h):
    """Two agents on one Redis (HAProxy may send a request's response
    message to another agent than its check-rate): the settlement one
    makes, the other sees at once, exactly."""
    redis = RedisServer(h)
    a = agent_with_metrics(h, redis=redis)
    b = agent_with_metrics(h, redis=redis)
    sa, sb = spop.Session(a.port), spop.Session(b.port)
    v = ask(sa, "alice")
    assert v["status"] == 0 and v["remaining"] == 9, v
    assert respond(sb, v["place"], 15) == {}
    wait_for(lambda: metric(b, "spoa_rl_charge_settlements_total") == 1, 5, "b's settlement")
    # a decision on b's connection to Redis: its settlement ran before it
    assert ask(sb, "nobody")["status"] == 0
    v = ask(sa, "alice")
    assert v["status"] == 429 and v["retry_after"] == 36, v
    v = ask(sb, "bob", tokens=5)
    assert v["status"] == 0 and v["remaining"] == 5, v
    assert respond(sa, v["place"], 1) == {}
    wait_for(lambda: metric(a, "spoa_rl_charge_settlements_total") == 1, 5, "a's settlement")
    assert ask(sa, "nobody")["status"] == 0
    v = ask(sb, "bob")
    assert v["status"] == 0 and v["remaining"] == 8, v
    v = ask(sa, "bob")
    assert v["status"] == 0 and v["remaining"] == 7, v
    sa.close()
    sb.close()


LLM_RULES = """\
identity: [api_key, ip]
cost_argument: tokens
tiers:
  default: standard
  standard: { limits: ["10/1m"], cost: 2, charge: response }
"""


@harness.serial
def test_charge_through_haproxy(h):
    """haproxy-examples/llm-gateway.cfg as shipped, its SPOE file (with a
    longer processing timeout) and a backend that says what each request
    cost (x-tokens-used): a completion that cost more than its estimate
    puts the key in debt, and its next request gets 429 with the
    Retry-After that pays it; one that cost less gives back; an unknown
    key is refused by HAProxy."""
    mport = harness.free_port()
    a = h.agent("--rules", rules_file(h, LLM_RULES), "--threads", "1", "--metrics",
                "127.0.0.1:%d" % mport)
    a.mport = mport
    backend = h.backend()
    keys = os.path.join(h.dir, "keys.map")
    with open(keys, "w") as f:
        f.write("sk-alice alice\nsk-bob bob\n")
    spoe = os.path.join(h.dir, "llm.conf")
    with open(os.path.join(harness.ROOT, "spoe-conf", "ratelimit-llm.conf")) as f:
        text = f.read()
    assert "timeout processing 50ms" in text
    with open(spoe, "w") as f:
        f.write(text.replace("timeout processing 50ms", "timeout processing 1s"))
    cfg = os.path.join(harness.ROOT, "haproxy-examples", "llm-gateway.cfg")
    hp = h.haproxy(a.port, backend.port, cfg=cfg,
                   env={"RL_SPOE_CONF": spoe, "RL_KEYS_MAP": keys})
    wait_for(lambda: hp.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 5,
             "agent1 UP in haproxy's stats")
    r = http_get(hp.port, "/v1/chat/tokens-1", headers={"X-Api-Key": "sk-nobody"})
    assert r.status == 401, r
    alice = {"X-Api-Key": "sk-alice"}
    # estimate 2 (the rule's cost), cost 14: 12 more, 4 in debt, and a
    # request of 2 waits for 6 tokens (36 s)
    r = http_get(hp.port, "/v1/chat/tokens-14", headers=alice)
    assert r.status == 200 and "r=8;" in r.headers["RateLimit"], (r, r.headers["RateLimit"])
    wait_for(lambda: metric(a, "spoa_rl_charge_settlements_total") == 1, 5, "a settlement")
    r = http_get(hp.port, "/v1/chat/tokens-1", headers=alice)
    assert r.status == 429 and r.headers["Retry-After"] == "36", r
    # estimate 6 (max_tokens), cost 1: 5 given back
    bob = {"X-Api-Key": "sk-bob"}
    r = http_get(hp.port, "/v1/chat/tokens-1?max_tokens=6", headers=bob)
    assert r.status == 200 and "r=4;" in r.headers["RateLimit"], (r, r.headers["RateLimit"])
    wait_for(lambda: metric(a, "spoa_rl_charge_settlements_total") == 2, 5, "two settlements")
    r = http_get(hp.port, "/v1/chat/tokens-1?max_tokens=1", headers=bob)
    assert r.status == 200 and "r=8;" in r.headers["RateLimit"], (r, r.headers["RateLimit"])
    # a response without the header settles nothing
    r = http_get(hp.port, "/v1/chat", headers=bob)
    assert r.status == 200, r
    wait_for(lambda: metric(a, "spoa_rl_charge_invalid_total") == 1, 5, "an invalid cost")
    assert metric(a, "spoa_rl_charge_taken_tokens_total") == 12
    assert metric(a, "spoa_rl_charge_given_tokens_total") == 5


def fixture_sentinel():
    return Sentinel(sentinels=3)


def test_charge_on_sentinel(h, sentinel):
    """Sentinel: settlements go to the master it names."""
    sentinel.reset()
    a = sentinel_metrics_agent(h, sentinel, "--rules", rules_file(h))
    s = spop.Session(a.port)
    check_bucket(s, counters(a), ["alice", "bob", "carol", "dave"], wait=True)
    assert metric(a, "spoa_rl_redis_charges_lost_total") == 0
    s.close()
