# SPDX-License-Identifier: Apache-2.0
"""Reloading the rules file (SIGHUP) under traffic, through the real haproxy
(a copy of haproxy-examples/basic.cfg that also exports txn.rl.error), and
validating rules files with --check."""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import harness
from harness import http_get, wait_for

V1 = 'limits: ["50/10s"]\n'
V2 = 'limits: ["3/1m"]\n'
V1_POLICY = '"default";q=50;w=10'
V2_POLICY = '"default";q=3;w=60'
QUOTA = {V1_POLICY: 50, V2_POLICY: 3}
# Line 3 is wrong: the message must name it.
INVALID = 'limits: ["1/1m"]\nidentity: [api_key, ip]\nendpointz:\n  - name: x\n'

BAD_LOG_RE = re.compile(r"\d\dZ (error|warning): |disconnect, status|Sanitizer|"
                        r"runtime error|Assertion|Segmentation|Abort")


def write_atomically(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def spoe_conf(h):
    """spoe-conf/ratelimit.conf with `timeout processing 1s`: a request the
    agent drops or answers never still shows as txn.rl.error, but a machine
    busy with other work does not turn a late answer into a failure."""
    with open(harness.SPOE_CONF) as f:
        text = f.read()
    line = "    timeout processing 50ms\n"
    assert text.count(line) == 1, "ratelimit.conf changed: no single %r" % line
    path = os.path.join(h.dir, "ratelimit.conf")
    with open(path, "w") as f:
        f.write(text.replace(line, "    timeout processing 1s\n"))
    return path


def basic_cfg_with_error_header(h):
    """basic.cfg plus a response header that shows txn.rl.error, which
    HAProxy sets when the agent did not answer in time or failed."""
    with open(harness.BASIC_CFG) as f:
        cfg = f.read()
    anchor = "    default_backend app\n"
    assert cfg.count(anchor) == 1, "basic.cfg changed: no single default_backend line"
    cfg = cfg.replace(anchor, '    http-after-response set-header X-RL-Error "%[var(txn.rl.error)]"'
                      ' if { var(txn.rl.error) -m found }\n' + anchor)
    path = os.path.join(h.dir, "basic-error.cfg")
    with open(path, "w") as f:
        f.write(cfg)
    return path


class Traffic:
    """Threads that each send requests one after the other (a key per
    thread) until stop() or a bound in time and count, recording for each
    one when it was sent, when it was answered and the answer (or the
    exception)."""

    def __init__(self, port, threads=2, seconds=5.0, max_requests=4000):
        self.port = port
        self.stopping = threading.Event()
        self.records = []
        self.lock = threading.Lock()
        self.deadline = time.monotonic() + seconds
        self.max_requests = max_requests
        self.threads = [threading.Thread(target=self._run, args=("traffic-%d" % i,), daemon=True)
                        for i in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self, key):
        for _ in range(self.max_requests):
            if self.stopping.is_set() or time.monotonic() > self.deadline:
                return
            sent = time.monotonic()
            try:
                r = http_get(self.port, "/", headers={"X-Api-Key": key}, timeout=5)
            except Exception as e:  # noqa: BLE001 - any failure is the finding
                r = e
            with self.lock:
                self.records.append((sent, time.monotonic(), r))

    def answered(self):
        with self.lock:
            return len(self.records)

    def wait_more(self, n):
        """Waits until n more requests have been answered."""
        want = self.answered() + n
        wait_for(lambda: self.answered() >= want, 20, "%d more requests answered" % n)

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(10)
        assert not any(t.is_alive() for t in self.threads), "traffic threads did not stop"
        return self.records


def sighup_and_wait(agent, what, pattern):
    """SIGHUP to the agent; waits for a new log line matching pattern and
    returns it."""
    before = len(re.findall(pattern, agent.log(), re.M))
    agent.signal(signal.SIGHUP)

    def seen():
        found = re.findall(pattern, agent.log(), re.M)
        return found[before] if len(found) > before else None
    return wait_for(seen, 5, what, interval=0.01)


def test_reload_under_traffic_loses_no_request(h):
    rules = os.path.join(h.dir, "rules.yaml")
    write_atomically(rules, V1)
    agent = h.agent("--threads", "2", "-f", rules)
    backend = h.backend()
    # the clients' keys in the map: the SPOE file sends only those
    keys = h.tiers_map("warm", "after", "traffic-0", "traffic-1")
    hp = h.haproxy(agent.port, backend.port, cfg=basic_cfg_with_error_header(h),
                   env={"RL_SPOE_CONF": spoe_conf(h), "RL_TIERS_MAP": keys})
    wait_for(lambda: hp.server_stat("ratelimit-agents", "agent1")["status"] == "UP", 5,
             "agent1 UP in haproxy's stats")
    r = http_get(hp.port, "/", headers={"X-Api-Key": "warm"})
    assert r.status == 200 and r.headers.get("RateLimit-Policy") == V1_POLICY, r

    traffic = Traffic(hp.port, seconds=60)
    try:
        traffic.wait_more(20)
        # A valid file with another limit.
        write_atomically(rules, V2)
        t_signal = time.monotonic()
        line = sighup_and_wait(agent, "the agent to reload", r"^.*reloaded .*$")
        t_reloaded = time.monotonic()
        assert line.endswith("reloaded %s: 1 rule(s)" % rules), line
        traffic.wait_more(20)
        # An invalid file: the agent says where, the rules in force stay.
        write_atomically(rules, INVALID)
        line = sighup_and_wait(agent, "the agent to refuse the file", r"^.*reload failed.*$")
        assert line.endswith('reload failed, the rules in force stay: %s:3:1: unknown key '
                             '"endpointz" (expected one of: listen, threads, store, answer, listen_tls, '
                             'on_store_failure, identity, shadow, cost_argument, override_argument, limits, '
                             'tiers, endpoints, layers, stack, priorities, shedding, lease, paths, max_delayed)' % rules), line
        traffic.wait_more(20)
    finally:
        records = traffic.stop()

    errors = [r for _, _, r in records if not isinstance(r, harness.Response)]
    assert not errors, "requests failed: %r" % errors[:5]
    assert len(records) >= 50, "too little traffic to show anything: %d" % len(records)
    seen = {V1_POLICY: 0, V2_POLICY: 0}
    for sent, done, r in records:
        assert r.status in (200, 429), r
        assert r.headers.get("X-RL-Error") is None, r
        policy = r.headers.get("RateLimit-Policy")
        assert policy in seen, r
        seen[policy] += 1
        m = re.fullmatch(r'"default";r=(\d+);t=(\d+)', r.headers.get("RateLimit", ""))
        assert m, r
        # A bucket filled under the old limit never shows more than the new.
        assert int(m.group(1)) <= QUOTA[policy], r
        if done < t_signal:
            assert policy == V1_POLICY, r
        # Each worker takes the new rules at its next loop iteration after
        # the reload: a moment, even on a busy machine.
        if sent > t_reloaded + 0.25:
            assert policy == V2_POLICY, r
        if r.status == 429:
            assert int(r.headers["Retry-After"]) >= 1, r
    assert seen[V1_POLICY] > 0 and seen[V2_POLICY] > 0, seen

    # After the invalid file, the second file's limit is in force: a new
    # client gets three requests a minute.
    # t: the next token, 20 s away each time (full again 20 s per token).
    for remaining in (2, 1, 0):
        r = http_get(hp.port, "/", headers={"X-Api-Key": "after"})
        assert r.status == 200, r
        assert r.headers.get("RateLimit-Policy") == V2_POLICY, r
        assert r.headers.get("RateLimit") == '"default";r=%d;t=20' % remaining, r
    r = http_get(hp.port, "/", headers={"X-Api-Key": "after"})
    assert r.status == 429, r
    assert r.headers.get("Retry-After") == "20", r
    assert r.headers.get("RateLimit-Policy") == V2_POLICY, r
    assert r.headers.get("RateLimit") == '"default";r=0;t=20', r

    # Every request forwarded reached the application once.
    passed = 1 + sum(1 for _, _, r in records if r.status == 200) + 3
    assert backend.count == passed, (backend.count, passed)
    assert agent.alive()
    # The refused file is the only error the agent logged.
    bad = [line for line in agent.log().splitlines() if BAD_LOG_RE.search(line)]
    assert len(bad) == 1 and "reload failed" in bad[0], bad


def check(path):
    binary = os.path.join(harness.BUILD, "spoa-ratelimit")
    if not os.access(binary, os.X_OK):
        raise RuntimeError("%s is missing: build it with `make agent`" % binary)
    return subprocess.run([binary, "--check", "-f", path], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=10)


def test_check_validates_rules_files():
    d = tempfile.mkdtemp(prefix="rl-e2e-check-")
    try:
        good = os.path.join(d, "good.yaml")
        bad = os.path.join(d, "bad.yaml")
        with open(good, "w") as f:
            f.write(V2)
        with open(bad, "w") as f:
            f.write(INVALID)
        p = check(good)
        assert p.returncode == 0, p
        assert p.stdout == "%s: ok, 1 rule(s)\n" % good, p
        assert p.stderr == "", p
        p = check(bad)
        assert p.returncode == 1, p
        assert p.stdout == "", p
        assert p.stderr.startswith('spoa-ratelimit: %s:3:1: unknown key "endpointz"' % bad), p
        p = check(os.path.join(d, "missing.yaml"))
        assert p.returncode == 1, p
        assert p.stderr.startswith("spoa-ratelimit: %s: " % os.path.join(d, "missing.yaml")), p
        # Paths are matched normalised: a condition no normal form equals
        # is refused as at start and on reload, and taken with paths: raw.
        upper = os.path.join(d, "upper.yaml")
        endpoint = 'endpoints: [ { name: e, match: { path: /Login }, limits: ["5/1m"] } ]\n'
        with open(upper, "w") as f:
            f.write(endpoint)
        p = check(upper)
        assert p.returncode == 1, p
        assert p.stderr == ('spoa-ratelimit: %s:1:40: endpoints[0].match.path: "/Login": paths '
                            'are matched normalised, write "/login" (or paths: raw)\n' % upper), p
        with open(upper, "w") as f:
            f.write("paths: raw\n" + endpoint)
        p = check(upper)
        assert p.returncode == 0 and p.stdout == "%s: ok, 2 rule(s)\n" % upper, p
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_rules_fifo_never_blocks_the_agent(h):
    """A FIFO at the rules path (or anything else that is not a regular
    file) is refused at once: `--check` exits 1, a reload fails and keeps
    the rules in force while /metrics answers and SIGTERM stops the agent;
    nothing waits for a writer that never comes."""
    rules = os.path.join(h.dir, "rules.yaml")
    fifo = os.path.join(h.dir, "rules.fifo")
    os.mkfifo(fifo)
    p = check(fifo)
    assert p.returncode == 1, p
    assert p.stderr == "spoa-ratelimit: %s: not a regular file\n" % fifo, p
    with open(rules, "w") as f:
        f.write(V2)
    mport = harness.free_port()
    a = h.agent("--rules", rules, "--metrics", "127.0.0.1:%d" % mport)
    os.replace(fifo, rules)
    a.signal(signal.SIGHUP)
    wait_for(lambda: "reload failed, the rules in force stay: %s: not a regular file" % rules
             in a.log(), 5, "the reload to fail")
    r = http_get(mport, "/metrics", timeout=2)
    assert "spoa_rl_reload_failures_total 1\n" in r.text, r.text
    assert "spoa_rl_rules_generation 1\n" in r.text, r.text
    assert a.stop(timeout=5) == 0, a.log()
