# SPDX-License-Identifier: Apache-2.0
"""Adaptive shedding (docs/rules.md, "Adaptive shedding") through the real
haproxy with the shipped example (haproxy-examples/adaptive.cfg,
spoe-conf/ratelimit-adaptive.conf, examples/rules-adaptive.yaml with
test bounds) and a backend whose latency the test sets while traffic
runs: a bounded load of P0..P3 requests (a few dozen threads, each one
request at a time). When the latency steps from 10 ms to 300 ms the
limit falls, P3 and P2 are shed while P0 and P1 pass, and the limit comes
back when the latency does; in shadow mode nothing is shed but the
answers say what would have been; two agents in front of one backend
whose latency grows with its queue each fall to a part of what it takes.
"""

import http.server
import json
import os
import re
import threading
import time

import harness
import spop
from harness import http_get, series, wait_for

RULES = os.path.join(harness.ROOT, "examples", "rules-adaptive.yaml")
SPOE = os.path.join(harness.ROOT, "spoe-conf", "ratelimit-adaptive.conf")
CFG = os.path.join(harness.ROOT, "haproxy-examples", "adaptive.cfg")

# What the requests of each priority are (examples/rules-adaptive.yaml).
KINDS = {
    0: ("GET", "/api/payments", {}),
    1: ("POST", "/orders", {"Content-Length": "0"}),
    2: ("GET", "/items", {}),
    3: ("GET", "/items", {"X-Test": "1"}),
}


class LatencyBackend(harness.HttpServer):
    """Answers 200 "ok\\n" after `latency` seconds, which the test may change
    at any time; with `slots`, at most that many requests are served at
    once (the others wait their turn, so latency grows with the queue)."""

    def __init__(self, latency, slots=None):
        self.latency = latency
        self.sem = threading.Semaphore(slots) if slots else None
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                if n:
                    self.rfile.read(n)
                if backend.sem:
                    with backend.sem:
                        time.sleep(backend.latency)
                else:
                    time.sleep(backend.latency)
                harness.answer_ok(self)

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        self.serve(Handler, request_queue_size=128)


class Load:
    """workers[p] threads sending requests of priority p, one at a time,
    until stop(); a refused one waits 50 ms before the next (the load stays
    bounded). Each answer is kept as (priority, status, X-RL-Reason)."""

    def __init__(self, port, workers):
        self.port = port
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.results = []
        self.threads = [threading.Thread(target=self.run, args=(p,), daemon=True)
                        for p, n in workers.items() for _ in range(n)]
        for t in self.threads:
            t.start()

    def run(self, p):
        method, path, headers = KINDS[p]
        while not self.done.is_set():
            try:
                r = http_get(self.port, path, method=method, headers=headers, timeout=10)
            except OSError:
                continue
            with self.lock:
                self.results.append((p, r.status, r.headers.get("X-RL-Reason")))
            if r.status != 200:
                time.sleep(0.05)

    def mark(self):
        with self.lock:
            return len(self.results)

    def since(self, mark):
        with self.lock:
            return self.results[mark:]

    def stop(self):
        self.done.set()
        for t in self.threads:
            t.join(15)


def rules(h, name="rules.yaml", **changes):
    """The shipped rules with some of shedding.adaptive's values changed."""
    with open(RULES) as f:
        text = f.read()
    for key, (old, new) in changes.items():
        line = "    %s: %s" % (key, old)
        assert text.count(line) == 1, (key, line)
        text = text.replace(line, "    %s: %s" % (key, new))
    # one client sends all: a rate it never reaches
    rate = 'limits: ["600/1m"]'
    assert text.count(rate) == 1
    text = text.replace(rate, 'limits: ["100000/1s"]')
    path = os.path.join(h.dir, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def spoe_copy(h):
    """The shipped SPOE file with `timeout processing` 1s: 50 ms suit a
    production agent, not a test machine busy with other work."""
    with open(SPOE) as f:
        text = f.read()
    line = "    timeout processing 50ms\n"
    assert text.count(line) == 1
    path = os.path.join(h.dir, "ratelimit-adaptive.conf")
    with open(path, "w") as f:
        f.write(text.replace(line, "    timeout processing 1s\n"))
    return path


def start(h, rules_path, backend, name="haproxy"):
    mport = harness.free_port()
    a = h.agent("--threads", "2", "-f", rules_path, "--metrics", "127.0.0.1:%d" % mport,
                "--admin")
    a.mport = mport
    hp = h.haproxy(a.port, backend.port, cfg=CFG, name=name,
                   env={"RL_SPOE_CONF": spoe_copy(h)})
    wait_for(lambda: hp.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 10,
             "agent1 UP in haproxy's stats")
    return a, hp


def limit(a):
    return series(a.mport, "spoa_rl_adaptive_limit", backend="app")


def counts(results):
    """{(priority, status): n}"""
    out = {}
    for p, st, _ in results:
        out[(p, st)] = out.get((p, st), 0) + 1
    return out


# Limit 12 at 300 ms (min: the fixed point at that latency is 4): P3 is
# shed at 12 in flight, P2 at 15, P1 at 18. The P2s stop at 15 in
# flight, and with one P0 and two P1 workers besides, a P1 finds at most
# 15 + 1 + 1 = 17 in flight: P1 is never shed, by arithmetic, not by
# timing. 16 P2 and 8 P3 workers push past 15 and 12.
WORKERS = {0: 1, 1: 2, 2: 16, 3: 8}


@harness.serial
def test_latency_step_sheds_p3_then_p2_and_recovers(h):
    backend = LatencyBackend(0.01)
    h.backends.append(backend)
    a, hp = start(h, rules(h, min=("5", "12"), max=("500", "200")), backend)
    view = json.loads(http_get(a.mport, "/admin/rules").text)["shedding"]["adaptive"]
    assert view == {"target_ms": 100.0, "min": 12, "max": 200, "initial": 200,
                    "timeout_ms": 30000, "backend": "backend"}, view
    load = Load(hp.port, WORKERS)
    try:
        # 10 ms (and what this machine adds, well under the 100 ms
        # target): requests measured, the limit near its max, nothing shed
        wait_for(lambda: (series(a.mport, "spoa_rl_adaptive_samples_total", backend="app")
                          or 0) > 200, 20, "200 samples at 10 ms")
        assert limit(a) >= 150, limit(a)
        before = load.mark()
        assert all(st == 200 for _, st, _ in load.since(0)), counts(load.since(0))

        backend.latency = 0.3
        wait_for(lambda: limit(a) <= 20, 30, "the limit to fall under 20 at 300 ms")
        wait_for(lambda: limit(a) == 12, 30, "the limit at its min")
        step = load.mark()
        # P3 and P2 shed; P0 and P1 pass
        wait_for(lambda: counts(load.since(step)).get((2, 503), 0) >= 5 and
                 counts(load.since(step)).get((3, 503), 0) >= 5, 30,
                 "P2 and P3 shed at 300 ms")
        slow = load.since(before)
        c = counts(slow)
        assert c.get((0, 503), 0) == 0 and c.get((1, 503), 0) == 0, c
        assert c.get((0, 200), 0) > 0 and c.get((1, 200), 0) > 0, c
        assert all(reason == "shed" for p, st, reason in slow if st == 503), \
            [r for r in slow if r[1] == 503][:5]
        assert all(st in (200, 503) for _, st, _ in slow), c
        shed = series(a.mport, "spoa_rl_adaptive_shed_total", backend="app")
        assert shed >= c.get((2, 503), 0) + c.get((3, 503), 0), (shed, c)
        inflight = series(a.mport, "spoa_rl_adaptive_inflight", backend="app")
        assert inflight <= 18, inflight

        # back to 10 ms: the limit climbs, P3 passes again
        backend.latency = 0.01
        wait_for(lambda: limit(a) >= 30, 60, "the limit to climb back at 10 ms")
        back = load.mark()
        wait_for(lambda: counts(load.since(back)).get((3, 200), 0) >= 20, 30,
                 "P3 to pass again")
    finally:
        load.stop()
    # every admitted request was released: none left in flight, none dropped
    wait_for(lambda: series(a.mport, "spoa_rl_adaptive_inflight", backend="app") == 0, 10,
             "no request left in flight")
    assert series(a.mport, "spoa_rl_adaptive_drops_total", backend="app") == 0


# (not alone: at 300 ms against a 100 ms target, a busy machine only makes
# the limit fall sooner, and shadow mode sheds nothing whatever it is)
def test_shadow_mode_reports_without_shedding(h):
    backend = LatencyBackend(0.3)
    h.backends.append(backend)
    path = rules(h, min=("5", "12"), max=("500", "40"))
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("shedding:\n", "shedding:\n  shadow: true\n", 1))
    a, hp = start(h, path, backend)
    load = Load(hp.port, WORKERS)
    try:
        wait_for(lambda: limit(a) == 12, 40, "the limit at its min")
        mark = load.mark()
        wait_for(lambda: sum(1 for _, st, reason in load.since(mark)
                             if st == 200 and reason == "shed") >= 10, 30,
                 "answers that say they would have been shed")
    finally:
        load.stop()
    c = counts(load.since(0))
    assert all(st == 200 for (_, st) in c), c
    assert series(a.mport, "spoa_rl_adaptive_shed_total", backend="app") == 0


@harness.serial
def test_two_agents_each_take_a_share(h):
    """One backend that serves 4 requests at once in 20 ms each: its
    latency is its queue. Two HAProxy and agent pairs in front of it, each
    with its own load of P0 and P3: each agent's limit falls from its max
    and stays above min (each converges on a part of what the backend
    takes), and P0 always passes."""
    backend = LatencyBackend(0.02, slots=4)
    h.backends.append(backend)
    path = rules(h, target=("100ms", "60ms"), min=("5", "2"), max=("500", "100"))
    a1, hp1 = start(h, path, backend)
    a2, hp2 = start(h, path, backend, name="haproxy2")
    loads = [Load(hp.port, {0: 2, 3: 14}) for hp in (hp1, hp2)]
    try:
        for a in (a1, a2):
            wait_for(lambda: limit(a) is not None and limit(a) <= 30, 40,
                     "%s's limit to fall" % a.name)
        mark = [l.mark() for l in loads]
        for l, m in zip(loads, mark):
            wait_for(lambda: counts(l.since(m)).get((3, 503), 0) >= 5, 30, "P3 shed")
            wait_for(lambda: counts(l.since(m)).get((3, 200), 0) >= 5, 30, "P3 admitted")
    finally:
        for l in loads:
            l.stop()
    for l in loads:
        c = counts(l.since(0))
        assert c.get((0, 503), 0) == 0 and c.get((0, 200), 0) > 0, c


def untracked(mport):
    m = re.search(r"^spoa_rl_adaptive_untracked_total (\d+)$", http_get(mport, "/metrics").text,
                  re.M)
    return int(m.group(1))


SPOP_RULES = """\
# the tests read every variable of a decision
answer: full
identity: [api_key]
tiers:
  argument: tier
  default: free
  free: { limits: ["100/1h"] }
  tiny: { limits: ["1/1h"] }
priorities:
  default: 3
  classes:
    - { priority: 0, match: { path: /p0 } }
    - { priority: 1, match: { path: /p1 } }
    - { priority: 2, match: { path: /p2 } }
shedding:
  retry_after: 3s
  adaptive: { target: 1s, min: 2, max: 2, timeout: 2s }
"""


def test_places_and_releases_over_spop(h):
    """Raw SPOP on two connections to an agent of two workers, limit 2
    (min = max): P3 shed at 2 in flight, P2 and P1 at 3, P0 never; the
    answer of an admitted request names the place `adaptive`, a release
    on the other connection frees it; a request its rate refuses leaves
    no place behind; no request_id or no backend: neither counted nor
    shed; a release that never comes is dropped after the timeout."""
    path = os.path.join(h.dir, "rules.yaml")
    with open(path, "w") as f:
        f.write(SPOP_RULES)
    mport = harness.free_port()
    a = h.agent("--threads", "2", "-f", path, "--metrics", "127.0.0.1:%d" % mport, "--admin")
    s1, s2 = spop.Session(a.port), spop.Session(a.port)

    def explain(query):
        return json.loads(http_get(mport, "/admin/explain?api_key=k&" + query).text)

    def ask(s, rid, p="/", backend="app", **kw):
        extra = [("backend", backend)] if backend else []
        if rid:
            extra.append(("request_id", rid))
        return s.check_rate(extra, api_key="k", path=p, **kw)

    def inflight():
        return series(mport, "spoa_rl_adaptive_inflight", backend="app")

    v = ask(s1, "r1")
    assert v["status"] == 0 and v["place"] == "adaptive", v
    assert ask(s2, "r2")["status"] == 0
    v = ask(s1, "r3")
    assert v["status"] == 503 and v["reason"] == "shed" and v["retry_after"] == 3, v
    assert "place" not in v, v
    assert ask(s1, "r4", p="/p2")["status"] == 0
    assert ask(s1, "r5", p="/p2")["reason"] == "shed"
    assert ask(s1, "r5", p="/p1")["reason"] == "shed"
    assert all(ask(s2, "z%d" % i, p="/p0")["status"] == 0 for i in range(3))
    assert inflight() == 6
    # asked without spending: the backend as the agent sees it now
    assert explain("backend=app&path=/p2")["adaptive"] == {
        "backend": "app", "limit": 2, "in_flight": 6, "shed": True}
    assert explain("backend=app&path=/p0")["adaptive"]["shed"] is False
    assert explain("backend=other")["adaptive"] == {
        "backend": "other", "limit": 2, "in_flight": 0, "shed": False}
    assert "adaptive" not in explain("path=/p2")
    assert inflight() == 6
    # released on the other connection (the other worker, or not)
    s2.notify([("release", [("place", "adaptive"), ("request_id", "r1")])])
    for i in range(3):
        s1.notify([("release", [("place", "adaptive"), ("request_id", "z%d" % i)])])
    wait_for(lambda: inflight() == 2, 5, "four releases")
    assert series(mport, "spoa_rl_adaptive_samples_total", backend="app") == 4
    assert ask(s1, "r6", p="/p1")["status"] == 0
    # refused by its rate: given back at once
    assert ask(s1, "t1", p="/p0", tier="tiny")["status"] == 0
    v = ask(s1, "t2", p="/p0", tier="tiny")
    assert v["status"] == 429 and "place" not in v, v
    assert inflight() == 4
    # untracked: no request_id, or no backend
    before = untracked(mport)
    v = ask(s1, None)
    assert v["status"] == 0 and "place" not in v, v
    v = ask(s1, "u1", backend=None)
    assert v["status"] == 0 and "place" not in v, v
    assert untracked(mport) == before + 1
    assert inflight() == 4
    # r2, r4, r6, t1 never released: dropped 2 s after their check-rate
    wait_for(lambda: inflight() == 0, 10, "the lost releases dropped")
    assert series(mport, "spoa_rl_adaptive_drops_total", backend="app") == 4
    assert ask(s1, "r7")["status"] == 0
    s1.close()
    s2.close()
