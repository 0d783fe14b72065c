# SPDX-License-Identifier: Apache-2.0
"""`make demo` keeps working: tools/demo.py runs to the end, exits 0, shows
the answers it is meant to show, and leaves nothing running."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import harness

DEMO = os.path.join(harness.ROOT, "tools", "demo.py")
BACKEND_PY = os.path.join(harness.ROOT, "tools", "demo", "backend.py")
TIMEOUT = 60

# The summary table: row label -> (200, 429, 503, other). The free client
# passes 10 of 12 (10/1m in tools/demo/rules.yaml), the pro client 12; under
# load P3 and P2 are shed, P1 and P0 pass, 4 rounds each.
EXPECTED = {
    "free client key-free-alice": (10, 2, 0, 0),
    "pro client key-pro-bob": (12, 0, 0, 0),
    "P3 test traffic": (0, 0, 4, 0),
    "P2 reads": (0, 0, 4, 0),
    "P1 writes": (4, 0, 0, 0),
    "P0 payments": (4, 0, 0, 0),
}
LOAD_ROW = "load generator key-ent-loadgen"


def run_demo():
    """Runs the demo; returns (exit code, output). On a timeout the demo is
    asked to stop (SIGTERM: it stops what it started), then killed."""
    for prog in ("redis-server", harness.HAPROXY):
        if shutil.which(prog) is None:
            raise harness.Skip("%s is not installed" % prog)
    if not os.access(os.path.join(harness.BUILD, "spoa-ratelimit"), os.X_OK):
        raise harness.Skip("the agent is not built in %s" % harness.BUILD)
    proc = subprocess.Popen([sys.executable, DEMO, "--build", harness.BUILD],
                            cwd=harness.ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        try:
            out, _ = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=20)
            raise AssertionError("the demo ran longer than %ds:\n%s"
                                 % (TIMEOUT, out.decode("utf-8", "replace")))
        return proc.returncode, out.decode("utf-8", "replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def summary_rows(out):
    rows = {}
    for line in out.splitlines():
        m = re.fullmatch(r"   (.+?)\s{2,}(?:GET|POST) \S+(?:, X-Test: 1)?\s+"
                         r"(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", line)
        if m:
            rows[m.group(1)] = tuple(int(m.group(i)) for i in range(2, 6))
    return rows


def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


def test_demo_shows_200_429_503():
    rc, out = run_demo()
    assert rc == 0, "exit %d:\n%s" % (rc, out)
    rows = summary_rows(out)
    for label, want in EXPECTED.items():
        assert rows.get(label) == want, (label, rows.get(label), out)
    load = rows.get(LOAD_ROW)
    assert load is not None and load[0] > 0 and load[1:] == (0, 0, 0), (load, out)
    # The 429s carry Retry-After and RateLimit; the 503s Retry-After: 1.
    # (t: the next token of 10/1m, when a request passes again: Retry-After)
    limited = re.findall(r"^   #1[12]\s+429  Retry-After: (\d+)  RateLimit: "
                         r"\"free-1m\";r=0;t=(\d+)$", out, re.M)
    assert len(limited) == 2 and all(1 <= int(s) <= 6 and s == t for s, t in limited), out
    assert re.search(r'^     RateLimit-Policy: "free-1m";q=10;w=60, "free-1h";q=100;w=3600$',
                     out, re.M), out
    rounds = re.findall(r"^   round \d: P3 503 shed Retry-After: 1 \| P2 503 shed Retry-After: 1"
                        r" \| P1 200 ok \| P0 200 ok$", out, re.M)
    assert len(rounds) == 4, out
    assert re.search(r"^demo: ok in \d+\.\d s", out, re.M), out
    # Nothing it started is left: its ports no longer accept.
    ports = [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", out)]
    assert len(ports) >= 4, out
    for port in ports:
        assert refused(port), "port %d still accepts after the demo:\n%s" % (port, out)


def test_the_application_releases_held_requests(h):
    """tools/demo/backend.py: a request held by X-Delay (30 s) is answered
    as soon as a request with X-Release: 1 comes, which the demo sends to
    end its load. The release is sent again until the held request is
    answered, in case it came before the held request began to wait; the
    held one cannot be answered in time otherwise."""
    app = harness.Proc("backend", [sys.executable, BACKEND_PY, "--listen", "127.0.0.1:0"],
                       os.path.join(h.dir, "backend.log"))
    h.procs.append(app)
    m = harness.wait_for(lambda: re.search(r"listening on 127\.0\.0\.1:(\d+)", app.log()), 10,
                         "the application to listen")
    port = int(m.group(1))
    harness.wait_port(port, 10, app.popen)
    held = []
    t = threading.Thread(target=lambda: held.append(harness.http_get(
        port, "/api/orders", {"X-Delay": "30"}, method="POST", timeout=40)), daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while t.is_alive() and time.monotonic() < deadline:
        r = harness.http_get(port, "/api/payments", {"X-Release": "1"}, method="POST")
        assert r.status == 200, r.status
        t.join(0.2)
    assert not t.is_alive(), "the held request was not released"
    assert held[0].status == 200, held[0].status
