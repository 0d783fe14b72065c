#!/usr/bin/env python3
"""The demo behind `make demo`: Redis, the agent and HAProxy on loopback
ports chosen at run time, then traffic that shows what the agent does.
Everything it starts is stopped when it ends, whatever happens.

    python3 tools/demo.py --build build
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

import harness  # noqa: E402


def start_redis(h):
    port = harness.free_port()
    proc = harness.Proc("redis", ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--dir", h.dir],
                        os.path.join(h.dir, "redis.log"))
    h.procs.append(proc)
    harness.wait_port(port, 10, proc.popen)
    return port


def show(label, r):
    print("  %-34s -> %d  RateLimit: %-24s Retry-After: %s" % (
        label, r.status, r.headers.get("RateLimit", "-"), r.headers.get("Retry-After", "-")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    harness.BUILD = os.path.abspath(args.build)
    if shutil.which("redis-server") is None or shutil.which("haproxy") is None:
        print("demo: haproxy and redis-server are needed (make deps)", file=sys.stderr)
        return 1
    h = harness.Harness("demo")
    counts = {}
    try:
        redis_port = start_redis(h)
        agent = h.agent("--redis", "127.0.0.1:%d" % redis_port, "--limit", "5/10s",
                        "--limit", "100/1h", "-t", "2")
        app = h.backend()
        hp = h.haproxy(agent.port, app.port)
        print("demo: Redis on 127.0.0.1:%d, agent on 127.0.0.1:%d, HAProxy on 127.0.0.1:%d"
              % (redis_port, agent.port, hp.port))
        print("demo: every client may send 5 requests per 10 s and 100 per hour\n")
        print("client k1 sends 7 requests:")
        for i in range(7):
            r = harness.http_get(hp.port, "/api/items", {"X-Api-Key": "k1"})
            counts[r.status] = counts.get(r.status, 0) + 1
            show("GET /api/items (k1) #%d" % (i + 1), r)
        print("\nclient k2 has its own bucket:")
        r = harness.http_get(hp.port, "/api/items", {"X-Api-Key": "k2"})
        counts[r.status] = counts.get(r.status, 0) + 1
        show("GET /api/items (k2)", r)
        print("\nthe 429 body: %s" % harness.http_get(
            hp.port, "/", {"X-Api-Key": "k1"}).text.strip())
        print("\nsummary: %s" % ", ".join("%d x %d" % (n, s) for s, n in sorted(counts.items())))
        return 0 if counts.get(200) and counts.get(429) else 1
    finally:
        problems = h.close()
        for p in problems:
            print("demo: " + p, file=sys.stderr)
        h.remove()


if __name__ == "__main__":
    sys.exit(main())
