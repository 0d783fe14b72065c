# SPDX-License-Identifier: Apache-2.0
"""The penalty box (docs/rules.md, "Penalties"): responses of listed
statuses, or the rule's own refusals (never a shared layer's), counted
in a sliding window; at the limit the client is banned for a while:
every request of the rule gets 429 or 403, reason banned, Retry-After
until the ban ends. Raw SPOP in memory and on Redis, then the login
brute-force example through the real haproxy with a backend that
answers 401.
"""

import os
import time

import harness
import spop
from harness import http_get, wait_for
from redis_helper import RedisServer, redis_agent

RULES = """\
# the tests read every variable of a decision
answer: full
identity: [api_key, ip]
layers:
  gate: { identity: global, limits: ["5/1h"] }
endpoints:
  - name: gated
    match: { path: /gated }
    limits: ["1000/1m"]
    stack: [gate]
    penalty: { refusals: true, limit: "3/1m", ban: 5m }
  - name: login
    match: { path: /login }
    limits: ["100/1m"]
    penalty: { responses: [401, 403], limit: "3/1m", ban: 2s }
  - name: tight
    match: { path: /tight }
    limits: ["2/1h"]
    penalty: { refusals: true, limit: "3/1m", ban: 2s, status: 403 }
"""


def rules_file(h, text=RULES):
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


class Spop(spop.Session):
    def ask(self, key, path):
        return self.check_rate(api_key=key, path=path)

    def response(self, place, status):
        return self.notify([("response", [("place", place), ("status", status)])])


def check_penalties(s):
    # responses: the third 401 in a minute bans the client for 2 s
    v = s.ask("c1", "/login")
    assert v["status"] == 0 and v["rule"] == "login" and v["place"].startswith("login/"), v
    place = v["place"]
    for status in (200, 401, 500, 403):
        assert s.response(place, status) == {}
    assert s.ask("c1", "/login")["status"] == 0
    t0 = time.monotonic()
    assert s.response(place, 401) == {}
    v = s.ask("c1", "/login")
    assert v["status"] == 429 and v["reason"] == "banned", v
    assert v["retry_after"] == 2 and v["limit"] == 3 and v["remaining"] == 0, v
    assert "ratelimit" not in v and "place" not in v, v
    # another client is not banned, nor the client under another rule
    assert s.ask("c2", "/login")["status"] == 0
    assert s.ask("c1", "/tight")["status"] == 0
    while time.monotonic() - t0 < 2.1:
        time.sleep(0.05)
    assert s.ask("c1", "/login")["status"] == 0
    # refusals: c3 has 2 an hour at /tight; its third refusal bans it, 403
    for want in (0, 0, 429, 429, 429):
        v = s.ask("c3", "/tight")
        assert v["status"] == want and v["reason"] in ("ok", "limited"), (want, v)
    v = s.ask("c3", "/tight")
    assert v["status"] == 403 and v["reason"] == "banned" and v["retry_after"] == 2, v
    check_shared_layer(s)


def check_shared_layer(s):
    """Only the rule's own refusals count: a layer every client shares,
    spent by another client, refuses the victim as often as it asks and
    never puts it in the box."""
    for _ in range(5):
        assert s.ask("spender", "/gated")["status"] == 0
    for i in range(6):
        v = s.ask("victim", "/gated")
        assert v["status"] == 429 and v["reason"] == "limited" and v["rule"] == "gate", (i, v)


def test_penalty_in_memory(h):
    a = h.agent("--rules", rules_file(h), "--threads", "2")
    s = Spop(a.port)
    check_penalties(s)
    s.c.close()


def test_penalty_on_redis(h):
    redis = RedisServer(h)
    a = redis_agent(h, redis, "--rules", rules_file(h), "--threads", "2")
    s = Spop(a.port)
    check_penalties(s)
    s.c.close()


def test_login_bruteforce_through_haproxy(h):
    """haproxy-examples/login-bruteforce.cfg: a backend that answers 401 to
    every login; the fifth 401 in ten minutes bans the client's address
    from /login (403 with Retry-After), not from the rest of the site.
    (test_examples.py tries the ways around it.)"""
    rules = os.path.join(harness.ROOT, "examples", "rules-login.yaml")
    a = h.agent("--rules", rules, "--threads", "2")
    backend = h.backend()
    cfg = os.path.join(harness.ROOT, "haproxy-examples", "login-bruteforce.cfg")
    spoe = os.path.join(harness.ROOT, "spoe-conf", "ratelimit-penalty.conf")
    hp = h.haproxy(a.port, backend.port, cfg=cfg, env={"RL_SPOE_CONF": spoe})
    wait_for(lambda: hp.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 5,
             "agent1 UP in haproxy's stats")
    key = {"X-Api-Key": "guesser"}
    for i in range(5):
        r = http_get(hp.port, "/login/status-401", headers=key)
        assert r.status == 401, (i, r)
    # the fifth 401's response event counts once it has gone by
    deadline = time.monotonic() + 3
    while True:
        r = http_get(hp.port, "/login/status-401", headers=key)
        if r.status == 403 or time.monotonic() > deadline:
            break
    assert r.status == 403, r
    assert 890 <= int(r.headers["Retry-After"]) <= 900, r
    assert b'"error":"banned"' in r.body, r
    # the rest of the site, and other addresses, are not banned
    assert http_get(hp.port, "/", headers=key).status == 200
    assert http_get(hp.port, "/login/status-200", headers=key, source="127.0.0.2").status == 200


def test_penalty_in_shadow_mode(h):
    """Shadow mode: a banned request is answered as banned, marked shadow,
    and passes."""
    a = h.agent("--rules", rules_file(h, "shadow: true\n" + RULES))
    s = Spop(a.port)
    v = s.ask("c1", "/login")
    for _ in range(3):
        s.response(v["place"], 401)
    v = s.ask("c1", "/login")
    assert v["status"] == 0 and v["shadow"] is True and v["reason"] == "banned", v
    s.c.close()
