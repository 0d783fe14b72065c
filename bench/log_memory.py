#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Measures what a sliding log (algorithm: log) costs Redis: memory per
client and time per decision, as the log fills (a token bucket's first,
for comparison).

    python3 bench/log_memory.py [--batch N] [--json]

A redis-server started here on a free loopback port (no persistence)
loads the decision library; for each configuration, CLIENTS clients each
make REQUESTS requests of cost 1 through rl3_decide, in rounds of one
request per client, BATCH clients per call as the agent batches them
(--redis-batch, 64 by default): each round adds one entry to every log
(the requests of a call share a microsecond; a client is in one call per
round). The limit is QUOTA/1h, so nothing leaves the window or expires
meanwhile.

Memory: used_memory (INFO memory) before and after, over the clients, as
`make bench` measures the other algorithms (BENCHMARKS.md, "Redis memory
per tracked client"); a key's value length (STRLEN) and MEMORY USAGE for
comparison. Time: Redis's own time in FCALL (INFO commandstats) per
decision, over the last tenth of the rounds (logs nearly full, each
request allowed), then over rounds of requests that the full logs refuse
(the bisection that finds when enough entries leave).

The agent names a client's key "{TTTT}LLLLLLLL" (14 bytes); so do the keys
here. Exit status 0, or 2 when redis-server is missing.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import harness  # noqa: E402
import lua_scripts  # noqa: E402
import mpack  # noqa: E402
from resp import Client  # noqa: E402

LOG = 3
HOUR_US = 3600 * 1000000
TOKEN = 0
# (algorithm, quota, requests per client, clients); a token bucket first,
# for comparison
CONFIGS = ((TOKEN, 10, 10, 20000), (LOG, 10, 1, 20000), (LOG, 10, 10, 20000),
           (LOG, 100, 100, 5000), (LOG, 1000, 100, 5000), (LOG, 1000, 1000, 1000))


def start_redis(tmp):
    port = harness.free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", tmp],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    harness.wait_port(port, timeout=5.0, proc=proc)
    return proc, Client("127.0.0.1", port, timeout=60.0)


def used_memory(c):
    info = c.command("INFO", "memory").decode()
    return int(next(ln.split(":")[1] for ln in info.splitlines()
                    if ln.startswith("used_memory:")))


def fcall_usec(c):
    for ln in c.command("INFO", "commandstats").decode().splitlines():
        if ln.startswith("cmdstat_fcall:"):
            return int(dict(kv.split("=") for kv in ln.split(":", 1)[1].split(","))["usec"])
    return 0


def rounds(c, calls, n):
    """n rounds of the calls; returns Redis's FCALL microseconds for them."""
    before = fcall_usec(c)
    for _ in range(n):
        for args in calls:
            c.command("FCALL", "rl3_decide", 0, *args)
    return fcall_usec(c) - before


def measure(c, algo, quota, requests, clients, batch, tag):
    rule = mpack.packb([[algo, quota, HOUR_US, 0]])
    keys = ["{%04x}%08x" % (tag, i) for i in range(clients)]
    calls = []
    for a in range(0, clients, batch):
        part = keys[a:a + batch]
        req = struct.pack(">H", 1) + b"".join(struct.pack(">IIH", i + 1, 1, 1)
                                              for i in range(len(part)))
        calls.append([req, rule] + part)
    mem0 = used_memory(c)
    tail = max(1, requests // 10)
    rounds(c, calls, requests - tail)
    allowed_us = rounds(c, calls, tail) / (tail * clients)
    mem1 = used_memory(c)
    sample = keys[clients // 2]
    out = {
        "algorithm": "log" if algo == LOG else "token",
        "quota": quota, "requests": requests, "clients": clients,
        "bytes_per_client": (mem1 - mem0) / clients,
        "value_bytes": c.command("STRLEN", sample),
        "memory_usage": c.command("MEMORY", "USAGE", sample, "SAMPLES", "0"),
        "allowed_us": allowed_us,
    }
    if requests == quota:
        out["refused_us"] = rounds(c, calls, 3) / (3 * clients)
    c.command("FLUSHALL")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=64,
                    help="requests per call (1 to 4096; the agent's --redis-batch)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if shutil.which("redis-server") is None:
        print("redis-server is not installed", file=sys.stderr)
        return 2
    if not 1 <= a.batch <= 4096:
        ap.error("--batch: 1 to 4096")
    tmp = tempfile.mkdtemp(prefix="rl-log-memory-")
    proc, c = start_redis(tmp)
    try:
        c.command("FUNCTION", "LOAD", "REPLACE", lua_scripts.library())
        rows = [measure(c, al, q, k, n, a.batch, i) for i, (al, q, k, n) in enumerate(CONFIGS)]
        version = c.command("INFO", "server").decode().split("redis_version:")[1].split()[0]
    finally:
        c.close()
        proc.terminate()
        proc.wait(timeout=5)
        shutil.rmtree(tmp, ignore_errors=True)
    if a.json:
        print(json.dumps({"redis": version, "rows": rows}, indent=1))
        return 0
    print("Redis %s, limits QUOTA/1h, %d requests per call" % (version, a.batch))
    print("| algorithm | quota | requests per client | clients | bytes per client (used_memory) "
          "| value bytes | MEMORY USAGE | Redis us per allowed decision | per refused decision |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| %s | %d | %d | %d | %.0f | %d | %d | %.1f | %s |" % (
            r["algorithm"], r["quota"], r["requests"], r["clients"], r["bytes_per_client"], r["value_bytes"],
            r["memory_usage"], r["allowed_us"],
            "%.1f" % r["refused_us"] if "refused_us" in r else "-"))
    return 0


if __name__ == "__main__":
    t0 = time.monotonic()
    rc = main()
    print("(%.1f s)" % (time.monotonic() - t0), file=sys.stderr)
    sys.exit(rc)
