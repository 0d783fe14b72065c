# SPDX-License-Identifier: Apache-2.0
"""Concurrency limits (docs/rules.md, "Concurrency"): at most N requests of
a client in flight, counted from check-rate (with request_id) to the
release message, or to the rule's max_duration when none comes. Raw SPOP
in memory and on Redis; then through the real haproxy with a slow backend
(haproxy-examples/concurrency.cfg): parallel requests, a response that
frees a place, a server timeout whose release never comes.
"""

import os
import re
import threading
import time

import harness
import spop
from harness import http_get, wait_for
from redis_helper import RedisServer, redis_agent

RULES = """\
# the tests read every variable of a decision
answer: full
identity: [api_key, ip]
tiers:
  argument: tier
  default: free
  free: { limits: ["100/1h"], concurrency: 2, max_duration: 2s }
"""
PLACE_RE = re.compile(r"^free/[0-9a-f]{32}$")


def rules_file(h, text=RULES):
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


class Spop(spop.Session):
    def ask(self, key, rid):
        return self.check_rate([("request_id", rid)] if rid is not None else (), api_key=key)

    def release(self, place, rid, arg="place"):
        return self.notify([("release", [(arg, place), ("request_id", rid)])])


def check_places(s):
    v = s.ask("c1", "r1")
    # allowed: the rate limit speaks; the place is named for the release
    assert v["status"] == 0 and v["limit"] == 100 and v["remaining"] == 99, v
    assert PLACE_RE.match(v["place"]) and v["rule"] == "free", v
    assert v["policy"] == '"free";q=100;w=3600', v
    place = v["place"]
    v = s.ask("c1", "r2")
    assert v["status"] == 0 and v["place"] == place, v
    # two in flight: the third is refused, reason concurrency, no RateLimit
    v = s.ask("c1", "r3")
    assert v["status"] == 429 and v["reason"] == "concurrency", v
    assert v["retry_after"] == 1 and v["limit"] == 2 and v["remaining"] == 0, v
    assert "ratelimit" not in v and "place" not in v, v
    # another client has its own places
    assert s.ask("c2", "r3")["status"] == 0
    # a release gives back its own place (an ACK without variables)
    assert s.release(place, "r1") == {}
    v = s.ask("c1", "r3")
    assert v["status"] == 0 and v["remaining"] == 97, v  # r3 refused took nothing
    assert s.ask("c1", "r4")["reason"] == "concurrency"
    # a release that names nothing, twice, or is malformed changes nothing
    assert s.release(place, "r1") == {}
    assert s.release("free/zz", "r2") == {}
    assert s.release("gone/" + "0" * 32, "r2") == {}
    assert s.ask("c1", "r4")["reason"] == "concurrency"
    # without request_id the limit cannot be kept: not counted
    v = s.ask("c1", None)
    assert v["status"] == 0 and "place" not in v, v
    # r2 and r3 never released: their places end 2 s after they were taken
    time.sleep(2.1)
    v = s.ask("c1", "r5")
    assert v["status"] == 0 and v["place"] == place, v
    assert s.ask("c1", "r6")["status"] == 0
    assert s.ask("c1", "r7")["reason"] == "concurrency"
    # the argument's name before 0.3, slot, still gives a place back
    assert s.release(place, "r5", arg="slot") == {}
    assert s.ask("c1", "r7")["status"] == 0
    assert s.ask("c1", "r8")["reason"] == "concurrency"


def test_concurrency_in_memory(h):
    a = h.agent("--rules", rules_file(h), "--threads", "2")
    s = Spop(a.port)
    check_places(s)
    s.c.close()


def test_concurrency_on_redis(h):
    redis = RedisServer(h)
    a = redis_agent(h, redis, "--rules", rules_file(h), "--threads", "2")
    s = Spop(a.port)
    check_places(s)
    s.c.close()
    # one key per client's places, none left once every place ended
    time.sleep(2.1)
    s = Spop(a.port)
    v = s.ask("c9", "x")
    assert s.release(v["place"], "x") == {}
    # left: the rate limits' keys (token buckets: digits), no place
    wait_for(lambda: all((redis.command("GET", k) or b"0").isdigit() for k in redis.rl_keys()),
             3, "the places to be given back")
    s.c.close()


@harness.serial
def test_concurrency_through_haproxy(h):
    """Three requests of one client at once to a slow backend (concurrency
    2): two reach it, one gets 429 concurrency with Retry-After 1; once
    they are answered, the client may send two again. A response that
    never comes (the server too slow for `timeout server`: 504 from HAProxy,
    no release) keeps its place until max_duration (4 s here). The
    margins are a second or more: a busy machine slows the backend."""
    mport = harness.free_port()
    a = h.agent("--rules", rules_file(h, RULES.replace("max_duration: 2s", "max_duration: 4s")),
                "--threads", "2", "--metrics", "127.0.0.1:%d" % mport)
    a.mport = mport
    backend = h.backend()
    cfg = os.path.join(harness.ROOT, "haproxy-examples", "concurrency.cfg")
    spoe = os.path.join(harness.ROOT, "spoe-conf", "ratelimit-concurrency.conf")
    hp = h.haproxy(a.port, backend.port, cfg=cfg,
                   env={"RL_SPOE_CONF": spoe, "RL_SERVER_TIMEOUT": "1500ms"})
    wait_for(lambda: hp.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 5,
             "agent1 UP in haproxy's stats")
    key = {"X-Api-Key": "slowpoke"}
    out = []

    def get(path):
        out.append(http_get(hp.port, path, headers=key, timeout=10))

    threads = [threading.Thread(target=get, args=("/slow-500",)) for _ in range(3)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join(10)
    statuses = sorted(r.status for r in out)
    assert statuses == [200, 200, 429], [(r.status, r.body) for r in out]
    refused = [r for r in out if r.status == 429][0]
    assert refused.headers["Retry-After"] == "1", refused
    assert b'"error":"concurrency"' in refused.body, refused
    assert backend.most_inflight == 2, backend.most_inflight
    # both answered: their releases gave the places back
    wait_for(lambda: metric(a, "spoa_rl_releases_total") >= 2, 3, "two releases")
    out.clear()
    threads = [threading.Thread(target=get, args=("/slow-200",)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert [r.status for r in out] == [200, 200], out
    wait_for(lambda: metric(a, "spoa_rl_releases_total") >= 4, 3, "four releases")
    # A response too slow: 504 from HAProxy, and no release; with the
    # second place taken too, a third request is refused until the lost
    # place ends, 4 s after it was taken.
    t0 = time.monotonic()
    r = http_get(hp.port, "/slow-3000", headers=key, timeout=10)
    assert r.status == 504, r
    out.clear()
    holder = threading.Thread(target=get, args=("/slow-500",))
    holder.start()
    time.sleep(0.2)
    r = http_get(hp.port, "/", headers=key)
    assert r.status == 429 and time.monotonic() - t0 < 3.9, r
    holder.join(10)
    assert out[0].status == 200, out
    # the 504's place is still taken, the other given back: one left
    r = http_get(hp.port, "/", headers=key)
    assert r.status == 200, r
    while time.monotonic() - t0 < 4.1:
        time.sleep(0.05)
    out.clear()
    threads = [threading.Thread(target=get, args=("/slow-300",)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert [r.status for r in out] == [200, 200], out


def metric(a, name):
    m = re.search(r"^%s (\d+)$" % name, http_get(a.mport, "/metrics").text, re.M)
    return int(m.group(1)) if m else -1


def test_concurrency_in_shadow_mode_and_without_the_store(h):
    """Shadow mode: a request over the places is answered as refused
    (reason concurrency, shadow) and passes. Without Redis, the local
    failure policy keeps the places in the agent's memory."""
    shadow = rules_file(h, "shadow: true\n" + RULES)
    a = h.agent("--rules", shadow)
    s = Spop(a.port)
    assert s.ask("c1", "r1")["status"] == 0
    assert s.ask("c1", "r2")["status"] == 0
    v = s.ask("c1", "r3")
    assert v["status"] == 0 and v["shadow"] is True and v["reason"] == "concurrency", v
    s.close()

    local = os.path.join(h.dir, "local.yaml")
    with open(local, "w") as f:
        f.write("on_store_failure: local\n" + RULES)
    dead = harness.free_port()
    b = h.agent("--rules", local, "--redis", "127.0.0.1:%d" % dead, "--redis-timeout", "50")
    s = Spop(b.port)
    got = [s.ask("c1", "r%d" % i) for i in range(3)]
    assert [v["status"] for v in got] == [0, 0, 429], got
    assert all(v["degraded"] for v in got) and got[2]["reason"] == "concurrency", got
    assert s.release(got[0]["place"], "r0") == {}
    assert s.ask("c1", "r9")["status"] == 0
    s.close()


BOTH_RULES = """\
# the tests read every variable of a decision
answer: full
identity: [api_key, ip]
tiers:
  argument: tier
  default: free
  free:
    limits: ["100/1h"]
    concurrency: 1
    max_duration: 10m
    penalty: { responses: [401], limit: "2/1m", ban: 1m }
"""


def check_release_and_response(s):
    """One NOTIFY with a release and a response message (an operator using
    both SPOE files gets them on one on-http-response event): the place is
    given back and the status counted, in either order."""
    v = s.ask("c1", "r1")
    assert v["status"] == 0 and v["place"].startswith("free/"), v
    place = v["place"]
    assert s.notify([("response", [("place", place), ("status", 401)]),
                     ("release", [("place", place), ("request_id", "r1")])]) == {}
    # the place came back (concurrency 1), and the first 401 counted
    v = s.ask("c1", "r2")
    assert v["status"] == 0 and v["reason"] == "ok", v
    assert s.notify([("release", [("place", place), ("request_id", "r2")]),
                     ("response", [("place", place), ("status", 401)])]) == {}
    # the second 401 of the minute bans the client
    v = s.ask("c1", "r3")
    assert v["status"] == 429 and v["reason"] == "banned", v


def test_release_and_response_in_one_notify(h):
    a = h.agent("--rules", rules_file(h, BOTH_RULES))
    s = Spop(a.port)
    check_release_and_response(s)
    s.close()


def test_release_and_response_in_one_notify_on_redis(h):
    redis = RedisServer(h)
    a = redis_agent(h, redis, "--rules", rules_file(h, BOTH_RULES))
    s = Spop(a.port)
    check_release_and_response(s)
    s.close()


def test_full_pool_of_places_in_memory(h):
    """A pool of places with no room (--mem-max-keys 16: 2 places in each
    of 16 shards, held by other clients) cannot count a request: it is
    counted in spoa_rl_memory_full_total and its rule's failure policy
    decides (closed: 503; open: forwarded, degraded). Places whose clients
    never came back are taken again once they have ended."""
    rules = rules_file(h, """\
identity: [api_key]
on_store_failure: closed
tiers:
  default: free
  free: { limits: ["1000/1h"], concurrency: 1, max_duration: 5s }
endpoints:
  - name: open
    match: { path: /open }
    limits: ["1000/1h"]
    concurrency: 1
    max_duration: 5s
    on_store_failure: open
""")
    mport = harness.free_port()
    a = h.agent("--rules", rules, "--mem-max-keys", "16", "--metrics", "127.0.0.1:%d" % mport)
    a.mport = mport
    s = Spop(a.port)
    # 400 clients in 16 shards of 2 places: every shard full
    for i in range(400):
        s.ask("holder%d" % i, "h%d" % i)
    full = metric(a, "spoa_rl_memory_full_total")
    v = s.ask("newcomer", "n1")
    assert v["status"] == 503 and v["reason"] == "store_down" and v["degraded"], v
    v = s.check_rate([("request_id", "n2")], api_key="newcomer", path="/open")
    assert v["status"] == 0 and v["degraded"] and "place" not in v, v
    assert metric(a, "spoa_rl_memory_full_total") == full + 2
    # the holders' places end after 5 s and go to whoever comes
    n = iter(range(3, 1000))
    v = wait_for(lambda: (lambda v: v if v["status"] == 0 else None)(s.ask("newcomer",
                                                                           "n%d" % next(n))),
                 15, "the newcomer to get an ended place")
    assert not v.get("degraded") and v["place"].startswith("free/"), v
    v = s.ask("newcomer", "x")
    assert v["status"] == 429 and v["reason"] == "concurrency", v
    s.c.close()
