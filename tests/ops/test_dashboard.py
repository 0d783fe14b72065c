# SPDX-License-Identifier: Apache-2.0
"""The metrics as a monitoring stack reads them: an agent on Redis with a
rules file of several rules, driven over raw SPOP into refusals, shadow
refusals, sheds and near-limit answers, then

- its /metrics text through `promtool check metrics` (the per-rule series
  included), and
- a real Prometheus scraping it every second, against which every query of
  the Grafana dashboard (dashboards/spoa-ratelimit.json), with Grafana's
  variables given values, must parse and return data.

Both skip when Debian's prometheus package (prometheus, promtool) is not
installed. Everything listens on loopback ports picked at run time and is
stopped with the harness.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import urllib.error
import urllib.parse
import urllib.request

import harness
from harness import ROOT, http_get, wait_for
from redis_helper import RedisServer
import spop
from spop import Conn

DASHBOARD = os.path.join(ROOT, "dashboards", "spoa-ratelimit.json")

RULES = """\
# the tests read every variable of a decision
answer: full
identity: [api_key]
tiers:
  argument: tier
  default: free
  free: { limits: ["5/1m"] }
  pro: { limits: ["1000/1m"] }
  trial: { limits: ["3/1m"], shadow: true }
endpoints:
  - name: search
    match: { path: /api/search }
    limits: ["20/1m"]
priorities:
  default: 2
  classes:
    - priority: 3
      match: { path: /api/reports }
shedding:
  adaptive: { target: 50ms, min: 2, max: 100 }
"""

# What Grafana puts in place of its variables before a query leaves it.
VARIABLES = {
    "$__rate_interval": "30s",
    "$__interval": "5s",
    "$__range": "1m",
    "${instance}": ".*",
    "$instance": ".*",
}


def tool(name):
    path = shutil.which(name)
    if path is None:
        raise harness.Skip("%s is not installed (Debian package prometheus)" % name)
    return path


def start(h):
    """Redis and an agent on it with RULES, metrics on a free port."""
    redis = RedisServer(h)
    rules = os.path.join(h.dir, "rules.yaml")
    with open(rules, "w") as f:
        f.write(RULES)
    mport = harness.free_port()
    a = h.agent("--threads", "2", "--redis", redis.addr, "--hash-key-file", h.hash_key_file(),
                "--rules", rules, "--metrics", "127.0.0.1:%d" % mport)
    a.mport = mport
    a.rules = rules
    wait_for(lambda: len(set(re.findall(r"redis: worker (\d+) ready", a.log()))) >= 2
             or not a.alive(), 5, "the agent's workers to be ready with Redis")
    assert a.alive(), a.log()
    return a


def traffic(a, tag):
    """One round of every kind of answer; `tag` keeps its clients apart
    from the other rounds'. Returns the ACKs' variables by kind."""
    out = {}
    with Conn(a.port, timeout=5) as c:
        c.handshake()
        sid = [0]

        def ask(key, tier=None, path="/", load=(10, 90)):
            sid[0] += 1
            return c.check_rate(sid[0], 1, api_key=key + tag, tier=tier, path=path,
                                be_in_use=load[0], be_free=load[1])

        # free, 5/1m: five allowed (the last leaves none: near the limit), three refused
        out["free"] = [ask("f") for _ in range(8)]
        out["pro"] = [ask("p", tier="pro") for _ in range(3)]
        # trial, 3/1m in shadow mode: two would have been refused
        out["trial"] = [ask("t", tier="trial") for _ in range(5)]
        out["search"] = [ask("s", path="/api/search") for _ in range(3)]
        # P3 at a load of 90%: over its 70% threshold
        out["shed"] = [ask("r", path="/api/reports", load=(90, 10)) for _ in range(3)]
        # adaptive shedding: two requests to backend app, one released
        out["adaptive"] = []
        for i in range(2):
            sid[0] += 1
            args = spop.check_rate_args(api_key="a" + tag, tier="pro") + [
                ("backend", "app"), ("request_id", "ad%s-%d" % (tag, i))]
            c.send(spop.notify(sid[0], 1, [("check-rate", args)]))
            out["adaptive"].append(spop.as_read(c.expect(spop.ACK).vars()))
        sid[0] += 1
        c.send(spop.notify(sid[0], 1, [("release", [
            ("place", out["adaptive"][0]["place"]), ("request_id", "ad%s-0" % tag)])]))
        c.expect(spop.ACK)
        # the last figures the agent sees: a load of 25%
        ask("p", tier="pro", load=(25, 75))
    return out


def check_traffic(out):
    assert [v["status"] for v in out["free"]] == [0] * 5 + [429] * 3, out["free"]
    assert [v["reason"] for v in out["trial"]] == ["ok"] * 3 + ["limited"] * 2, out["trial"]
    assert [v["shadow"] for v in out["trial"]] == [False] * 3 + [True] * 2, out["trial"]
    assert all(v["rule"] == "search" for v in out["search"]), out["search"]
    assert [v["status"] for v in out["shed"]] == [503] * 3, out["shed"]
    assert [v["place"] for v in out["adaptive"]] == ["adaptive"] * 2, out["adaptive"]


def series(text):
    """{name{labels}: value} of an exposition text."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
    return out


def test_metrics_pass_promtool(h):
    promtool = tool("promtool")
    a = start(h)
    check_traffic(traffic(a, "1"))
    # the server's memory and keys, read a second after the start
    wait_for(lambda: "spoa_rl_redis_used_memory_bytes{" in http_get(a.mport, "/metrics").text,
             10, "Redis's memory read")
    text = http_get(a.mport, "/metrics").text
    s = series(text)
    assert s['spoa_rl_decisions_total{rule="free"}'] == 11, text  # 8 + 3 shed
    assert s['spoa_rl_limited_total{rule="free"}'] == 3, text
    assert s['spoa_rl_near_limit_total{rule="free"}'] == 1, text
    assert s['spoa_rl_shadow_total{rule="trial"}'] == 2, text
    assert s['spoa_rl_limited_total{rule="trial"}'] == 0, text
    assert s['spoa_rl_decisions_total{rule="search"}'] == 3, text
    assert s['spoa_rl_shed_total{rule="free",priority="3"}'] == 3, text
    assert s['spoa_rl_shed_total{rule="free",priority="2"}'] == 0, text
    assert s['spoa_rl_decisions_total{rule="pro"}'] == 6, text
    assert s['spoa_rl_adaptive_limit{backend="app"}'] == 100, text
    assert s['spoa_rl_adaptive_inflight{backend="app"}'] == 1, text
    assert s['spoa_rl_adaptive_samples_total{backend="app"}'] == 1, text
    assert s["spoa_rl_backend_load"] == 0.25, text
    assert s['spoa_rl_shed_threshold{priority="3"}'] == 0.7, text
    assert s["spoa_rl_redis_call_duration_seconds_count"] > 0, text
    # distinct clients: free decided for f1 and r1 (shed), the others for one each
    assert s['spoa_rl_clients_estimate{rule="free"}'] == 2, text
    assert s['spoa_rl_clients_estimate{rule="pro"}'] == 2, text  # p1 and a1
    assert s['spoa_rl_clients_estimate{rule="search"}'] == 1, text
    node = [k for k in s if k.startswith("spoa_rl_redis_used_memory_bytes{")]
    assert len(node) == 1 and s[node[0]] > 100000, text
    assert s[node[0].replace("used_memory", "maxmemory")] == 0, text
    assert s[node[0].replace("used_memory_bytes", "keys")] > 0, text
    assert s[node[0].replace("used_memory_bytes", "info_failures_total")] == 0, text
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), \
        "promtool check metrics: exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr)


def dashboard_exprs():
    """Every query of the dashboard, and its panel's title."""
    with open(DASHBOARD) as f:
        dash = json.load(f)
    uids = set(re.findall(r'"uid":\s*"([^"]*)"', json.dumps(dash["panels"])))
    assert uids == {"${datasource}"}, "panels must use the $datasource variable: %s" % uids
    names = {v["name"]: v for v in dash["templating"]["list"]}
    assert names["datasource"]["type"] == "datasource", names
    assert names["datasource"]["query"] == "prometheus", names
    out = []
    ids = set()
    for p in dash["panels"]:
        assert p["id"] not in ids, "panel id %d twice" % p["id"]
        ids.add(p["id"])
        for t in p.get("targets", []):
            assert t["datasource"]["uid"] == "${datasource}", (p["title"], t)
            out.append((p["title"], t["expr"]))
    assert len(out) >= 20, out
    return out


def substitute(expr):
    for k in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(k, VARIABLES[k])
    assert "$" not in expr, "a variable the test does not know: %s" % expr
    return expr


class Prometheus:
    """prometheus on a free loopback port, scraping `target` every second
    into a storage directory of the test's own."""

    def __init__(self, h, binary, target):
        self.port = harness.free_port()
        d = os.path.join(h.dir, "prometheus")
        os.makedirs(d)
        cfg = os.path.join(d, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: spoa-ratelimit\n"
                    "    static_configs:\n      - targets: ['%s']\n" % target)
        self.proc = harness.Proc("prometheus", [
            binary, "--config.file=" + cfg, "--storage.tsdb.path=" + os.path.join(d, "data"),
            "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn",
            "--storage.tsdb.retention.time=1h"], os.path.join(h.dir, "prometheus.log"), cwd=d)
        h.procs.append(self.proc)
        wait_for(lambda: self._ready() or not self.proc.alive(), 15, "prometheus to be ready")
        assert self.proc.alive(), self.proc.log()[-2000:]

    def _ready(self):
        try:
            return http_get(self.port, "/-/ready", timeout=1).status == 200
        except OSError:
            return False

    def query(self, expr):
        """The result of an instant query; raises on an error answer."""
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (
            self.port, urllib.parse.urlencode({"query": expr}))
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise AssertionError("%s: HTTP %d %s" % (expr, e.code, e.read()[:500]))
        assert body.get("status") == "success", (expr, body)
        return body["data"]["result"]


def test_dashboard_queries_on_prometheus(h):
    binary = tool("prometheus")
    exprs = dashboard_exprs()
    a = start(h)
    check_traffic(traffic(a, "1"))
    prom = Prometheus(h, binary, "127.0.0.1:%d" % a.mport)
    up = 'up{job="spoa-ratelimit"}'
    wait_for(lambda: prom.query(up) and prom.query(up)[0]["value"][1] == "1", 10,
             "the agent scraped")
    # A reload keeps the rules' counts (by name), and a second round of
    # traffic after it moves every rate.
    before = prom.query('spoa_rl_decisions_total{rule="free"}')[0]["value"][1]
    a.signal(signal.SIGHUP)
    wait_for(lambda: "reloaded" in a.log(), 5, "the agent to reload")
    check_traffic(traffic(a, "2"))
    wait_for(lambda: prom.query('spoa_rl_rules_generation') and
             prom.query('spoa_rl_rules_generation')[0]["value"][1] == "2" and
             float(prom.query('spoa_rl_decisions_total{rule="free"}')[0]["value"][1]) ==
             float(before) + 11, 10, "the second round scraped")
    # rate() needs two samples in its range: a few more scrapes
    wait_for(lambda: float(prom.query("count_over_time(spoa_rl_rules_generation[1m])")
                           [0]["value"][1]) >= 4, 10, "four scrapes")
    empty = []
    for title, expr in exprs:
        if not prom.query(substitute(expr)):
            empty.append("%s: %s" % (title, expr))
    assert not empty, "queries without data:\n" + "\n".join(empty)
    # what a few of them say
    top = prom.query(substitute(
        "topk(10, sum by (rule) (increase(spoa_rl_limited_total[$__range])))"))
    assert {r["metric"]["rule"] for r in top} >= {"free"}, top
    load = prom.query("max(spoa_rl_backend_load)")
    assert float(load[0]["value"][1]) == 0.25, load
    # the store's panels: Redis up (by server) and Ready, both 1 here
    panels = {t: e for t, e in exprs}
    up = prom.query(substitute(panels["Redis up"]))
    assert [float(r["value"][1]) for r in up] == [1.0], up
    assert up[0]["metric"]["node"].startswith("127.0.0.1:"), up
    ready = prom.query(substitute(panels["Ready"]))
    assert float(ready[0]["value"][1]) == 1.0, ready
    clients = prom.query(substitute(panels["Distinct clients by rule"]))
    assert {r["metric"]["rule"]: float(r["value"][1]) for r in clients}["free"] == 4.0, clients
    keys = prom.query(substitute(panels["Redis keys by server"]))
    assert [r["metric"]["node"] for r in keys] == [up[0]["metric"]["node"]], keys
