# SPDX-License-Identifier: Apache-2.0
"""Asking without spending: GET /admin/explain (in memory and with Redis)
and --explain on the command line (docs/operations.md, docs/rules.md)."""

import json
import os
import subprocess

import harness
import spop
from harness import http_get
from redis_helper import RedisServer, redis_agent

RULES = """\
# the tests read every variable of a decision
answer: full
identity: [api_key, ip]
layers:
  per-ip:
    identity: ip
    limits: ["50/1h"]
tiers:
  argument: tier
  default: free
  free: { limits: ["5/1h"], stack: [per-ip] }
  pro: { limits: ["100/1h", "1000/1d"], max_override: "1000/1h" }
endpoints:
  - name: login
    match: { path: /login }
    limits: ["2/1h"]
    delay: 2s
priorities:
  default: 2
  classes:
    - priority: 0
      match: { path: /pay }
"""

AGENT = os.path.join(harness.BUILD, "spoa-ratelimit")
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


def rules_file(h, text=RULES):
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def explain(mport, query):
    r = http_get(mport, "/admin/explain?" + query)
    return r.status, json.loads(r.text)


def limits(info):
    return [(l["rule"], l["name"], l["quota"], l["period"], l["remaining"])
            for l in info["limits"]]


def spend_and_look(h, a, mport, store):
    """A client that spent 2 of its 5 is shown 3 left, as often as it is
    asked, and its next check-rate finds them."""
    s = spop.Session(a.port)
    for _ in range(2):
        assert s.check_rate(api_key="k1", ip="10.0.0.1")["status"] == 0
    for _ in range(2):  # asking takes nothing
        status, info = explain(mport, "api_key=k1&ip=10.0.0.1")
        assert status == 200, info
        assert info["store"] == store and info["rule"] == "free", info
        assert info["tier"] == "free" and info["endpoint"] is None, info
        assert info["priority"] == 2 and info["cost"] == 1, info
        assert info["identity"] == "api_key" and info["value"] == "k1", info
        assert info["layers"] == [{"name": "per-ip", "scope": "arguments",
                                   "identity": "ip", "value": "10.0.0.1"}], info
        assert limits(info) == [("free", "free", 5, "1h", 3),
                                ("per-ip", "per-ip", 50, "1h", 48)], info
        assert all(0 < l["reset"] <= 3600 for l in info["limits"]), info
    v = s.check_rate(api_key="k1", ip="10.0.0.1")
    assert v["status"] == 0 and v["remaining"] == 2, v
    # the endpoint a path matches, and the priority class
    status, info = explain(mport, "api_key=k1&ip=10.0.0.1&path=/login")
    assert status == 200 and info["rule"] == "login" and info["endpoint"] == "login", info
    assert info["tier"] == "free" and limits(info) == [("login", "login", 2, "1h", 2)], info
    status, info = explain(mport, "api_key=k2&tier=pro&path=/pay")
    assert status == 200 and info["rule"] == "pro" and info["priority"] == 0, info
    assert info["layers"] == [] and limits(info) == [("pro", "pro-1h", 100, "1h", 100),
                                                     ("pro", "pro-1d", 1000, "1d", 1000)], info
    # another client's look did not touch k1's buckets
    status, info = explain(mport, "api_key=k1&ip=10.0.0.1")
    assert limits(info)[0][4] == 2, info
    s.close()


def test_explain_memory(h):
    mport = harness.free_port()
    a = h.agent("-f", rules_file(h), "--metrics", "127.0.0.1:%d" % mport, "--admin")
    spend_and_look(h, a, mport, "memory")
    # an operator's override applies, as in a decision
    r = http_get(mport, "/admin/override?api_key=k3&limit=500/1h", method="PUT")
    assert r.status == 200, r.text
    status, info = explain(mport, "api_key=k3&tier=pro")
    assert status == 200 and info["overridden"] and info["rule"] == "pro", info
    assert [(l["quota"], l["period"], l["remaining"]) for l in info["limits"]] == \
        [(500, "1h", 500)], info
    status, info = explain(mport, "api_key=k4&tier=pro")
    assert not info["overridden"] and limits(info)[0][2] == 100, info


def test_explain_redis(h):
    redis = RedisServer(h)
    mport = harness.free_port()
    a = redis_agent(h, redis, "-f", rules_file(h), "--metrics", "127.0.0.1:%d" % mport,
                    "--admin")
    spend_and_look(h, a, mport, "redis")
    # a look writes nothing: the keys are those the two clients' checks made
    before = sorted(redis.rl_keys())
    assert explain(mport, "api_key=never-seen&ip=10.9.9.9")[0] == 200
    assert sorted(redis.rl_keys()) == before


def test_explain_errors(h):
    mport = harness.free_port()
    a = h.agent("-f", rules_file(h), "--metrics", "127.0.0.1:%d" % mport, "--admin")
    status, info = explain(mport, "api_kye=k1")
    assert status == 400 and "api_kye" in info["error"] and "api_key" in info["error"], info
    status, info = explain(mport, "path=/login")
    assert status == 400 and "identity arguments" in info["error"], info
    status, info = explain(mport, "")
    assert status == 400 and "error" in info, info
    assert http_get(mport, "/admin/explain?api_key=k1", method="POST").status == 404
    # without --admin, no /admin/ at all
    mport2 = harness.free_port()
    h.agent("-f", rules_file(h), "--metrics", "127.0.0.1:%d" % mport2)
    assert http_get(mport2, "/admin/explain?api_key=k1").status == 404
    assert a.alive()


def run_explain(*args):
    return subprocess.run([AGENT, *args], capture_output=True, text=True, timeout=10)


def test_explain_command_line(h):
    path = rules_file(h)
    r = run_explain("-f", path, "--explain", "api_key=k1", "ip=10.0.0.1", "path=/login")
    assert r.returncode == 0, r
    info = json.loads(r.stdout)
    assert info["rule"] == "login" and info["tier"] == "free", info
    assert limits(info) == [("login", "login", 2, "1h", 2)], info
    assert info["delay"] == "2s", info
    r = run_explain("-f", path, "--explain", "api_key=k1", "ip=10.0.0.1")
    info = json.loads(r.stdout)
    assert info["layers"][0]["name"] == "per-ip" and limits(info)[1][4] == 50, info
    assert info["delay"] is None, info
    # the load figures as HAProxy sends them: P2 is shed at 99%, P0 never
    busy = ("be_in_use=99", "be_free=1")
    r = run_explain("-f", path, "--explain", "api_key=k1", *busy)
    assert json.loads(r.stdout)["shed"] is True, r
    r = run_explain("-f", path, "--explain", "api_key=k1", "path=/pay", *busy)
    assert json.loads(r.stdout)["shed"] is False, r
    r = run_explain("-f", path, "--explain", "api_key=k1", "be_in_use=1", "be_free=99")
    assert json.loads(r.stdout)["shed"] is False, r
    assert "shed" not in info, info
    # a misspelt argument, an operand without '=', no client: exit 1
    r = run_explain("-f", path, "--explain", "api_kye=k1")
    assert r.returncode == 1 and r.stdout == "" and "api_kye" in r.stderr, r
    r = run_explain("-f", path, "--explain", "api_key")
    assert r.returncode == 1 and "not ARG=VALUE" in r.stderr, r
    r = run_explain("-f", path, "--explain", "path=/login")
    assert r.returncode == 1 and "identity arguments" in r.stderr, r
    # operands without --explain are still refused
    r = run_explain("-f", path, "api_key=k1")
    assert r.returncode == 2 and "unexpected argument" in r.stderr, r


# The shipped rules files: which tier, endpoint and priority a request gets.
SHIPPED = [
    ("rules.yaml", ["api_key=k", "tier=pro"], "pro", "pro", None, 2),
    ("rules.yaml", ["api_key=k", "method=POST", "path=/api/search"], "search", "free",
     "search", 1),
    ("rules.yaml", ["ip=10.0.0.1", "method=POST", "path=/api/payments", "tier=enterprise"],
     "payments", "enterprise", "payments", 0),
    ("rules.yaml", ["api_key=k", "tier=nosuch"], "free", "free", None, 2),
    ("rules-tiers.yaml", ["api_key=k", "path=/api/export"], "export-free", "free",
     "export-free", 2),
    ("rules-layers.yaml", ["ip=10.0.0.1", "path=/api/search"], "search", "free", "search", 2),
]


def test_explain_shipped_rules_files(h):
    for name, args, rule, tier, endpoint, priority in SHIPPED:
        r = run_explain("-f", os.path.join(EXAMPLES, name), "--explain", *args)
        assert r.returncode == 0, (name, args, r)
        info = json.loads(r.stdout)
        got = (info["rule"], info["tier"], info["endpoint"], info["priority"])
        assert got == (rule, tier, endpoint, priority), (name, args, info)
        assert all(l["remaining"] == l["quota"] for l in info["limits"]
                   if "remaining" in l), info
