#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where HAProxy's CPU goes, per function, with the agent deciding (M)
against the SPOE floor (F): HAProxy runs under callgrind, with the
configuration and SPOE file of bench/haproxy_bench.py's rows (its
`timeout processing` raised for callgrind's pace), and a fixed number of
requests goes through it, a few connections with one in flight each; the instructions HAProxy ran for
them are split by function (self cost, `callgrind_annotate
--inclusive=no`) and divided by the requests.

    python3 bench/haproxy_profile.py --build build [--haproxy BIN,BIN...]
                                     [--requests N] [--top N] [--keep DIR]

Prints, per HAProxy, its instructions per request in F and in M and the
functions whose cost per request differs most between them. Instructions
are what callgrind counts, not time: a wake-up's cost in the kernel is not
in them (`perf` has no hardware counters on the bench's virtual machine);
the HAProxy rows' system time per request says how large that part is.
Instrumentation is switched on after the warm-up request and off after
the last answer (`callgrind_control -i`), so HAProxy's start and stop are
not counted. Loopback only; every process is stopped whatever happens.
Exit status 0, 1 when a run failed, 2 on bad usage or a missing tool.
"""

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import haproxy_bench  # noqa: E402


def _bench_run():
    """bench/run.py, by its path: tests/e2e, which redis_bench puts first
    on the path, has a run.py of its own."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_run", os.path.join(HERE, "run.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench_run = _bench_run()

ROWS = ("F", "M")
# Few requests in flight: HAProxy under callgrind runs some 50 times
# slower, and its SPOE `timeout processing` (50 ms) counts from the queue.
CONNS = 4

def send(port, n, conns=CONNS):
    """n GET requests over conns keep-alive connections, one in flight on
    each, clients by X-Api-Key in turn; returns (answers, non-2xx)."""
    import http.client
    import threading
    counts = [[0, 0] for _ in range(conns)]

    def one(i):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for k in range(i, n, conns):
            c.request("GET", "/", headers={"X-Api-Key": "k%05d" % (k % haproxy_bench.KEYS + 1)})
            r = c.getresponse()
            r.read()
            counts[i][0] += 1
            counts[i][1] += not 200 <= r.status < 300
        c.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


class ProfiledHAProxy(haproxy_bench.HAProxy):
    """HAProxy under callgrind, instrumentation off until switched on."""

    def __init__(self, *args, out=None, **kw):
        super().__init__(*args, **kw)
        self.out = out

    def argv(self):
        return ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                "--callgrind-out-file=%s" % self.out] + super().argv()

    def _ready(self):
        # startup under valgrind is slow: the same check, a longer wait
        old = haproxy_bench.HAPROXY_START_S
        haproxy_bench.HAPROXY_START_S = 120.0
        try:
            return super()._ready()
        finally:
            haproxy_bench.HAPROXY_START_S = old


def instrument(pid, on):
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(pid)],
                   check=True, capture_output=True, timeout=60)


def per_function(path):
    """{function: instructions} of a callgrind file, self cost: the
    summary table of callgrind_annotate, without source annotation."""
    p = subprocess.run(["callgrind_annotate", "--inclusive=no", "--auto=no",
                        "--threshold=100", path],
                       capture_output=True, text=True, check=True, timeout=300)
    out = {}
    table = False
    for line in p.stdout.splitlines():
        if re.match(r"^\s*Ir\s+file:function", line):
            table = True
            continue
        if not table:
            continue
        if out and not line.strip():
            break
        m = re.match(r"^\s*([\d,]+)\s+(?:\([\s\d.]+%\)\s+)?(\S.*?)(?:\s+\[[^\]]*\])?$", line)
        if not m or ":" not in m.group(2):
            continue
        name = re.sub(r"\s+\([\d,]+x\)$", "", m.group(2).split(":", 1)[1])
        out[name] = out.get(name, 0) + int(m.group(1).replace(",", ""))
    return out


def profile_row(ctx, binary, key, n, workdir):
    """(requests answered, {function: instructions}) of one row."""
    rows = haproxy_bench.make_rows(ctx, workdir)
    row = rows[key]
    out = os.path.join(workdir, "callgrind-%s-%s.out" % (os.path.basename(binary), key))
    # HAProxy under callgrind is slow: its SPOE timeout long enough for it
    spoe = row["spoe_path"] + ".profile"
    with open(spoe, "w") as f:
        f.write(re.sub(r"timeout processing \S+", "timeout processing 5s", row["spoe_text"]))
    with contextlib.ExitStack() as stack:
        args = ["-t", "1", "--limit", bench_run.HIGH_LIMIT]
        ag = stack.enter_context(haproxy_bench.MemoryAgent(ctx, args))
        aport = ag.agent.port
        hp = stack.enter_context(ProfiledHAProxy(
            ctx, binary, workdir, lambda port: haproxy_bench.haproxy_cfg(port, spoe, aport),
            ag, out=out))
        instrument(hp.proc.pid, True)
        answers, bad = send(hp.port, n)
        instrument(hp.proc.pid, False)
        if bad:
            raise RuntimeError("%s %s: %d of %d answers not 2xx" % (binary, key, bad, answers))
    # HAProxy has stopped: callgrind wrote its file
    return answers, per_function(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--haproxy", help="comma-separated HAProxy binaries (default: HAPROXY, "
                    "else haproxy)")
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--keep", help="keep the callgrind files in this directory")
    a = ap.parse_args()
    for t in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if shutil.which(t) is None:
            print("haproxy_profile: %s is not installed" % t, file=sys.stderr)
            return 2
    build = a.build if os.path.isabs(a.build) else os.path.join(bench_run.ROOT, a.build)
    agent_bin = os.path.join(build, "spoa-ratelimit")
    if not os.access(agent_bin, os.X_OK):
        print("haproxy_profile: %s is missing; run `make agent`" % agent_bin, file=sys.stderr)
        return 2
    if not 100 <= a.requests <= 1000000:
        print("haproxy_profile: --requests between 100 and 1000000", file=sys.stderr)
        return 2
    status = 0
    with tempfile.TemporaryDirectory(prefix="spoa-profile-") as tmp:
        workdir = a.keep or tmp
        os.makedirs(workdir, exist_ok=True)
        ctx = types.SimpleNamespace(root=bench_run.ROOT, agent_bin=agent_bin, logdir=workdir,
                                    free_port=bench_run.free_port, Agent=bench_run.Agent)
        for name in haproxy_bench.haproxy_names(a.haproxy, os.environ.get("HAPROXY")):
            binary, why = haproxy_bench.haproxy_binary(name)
            if binary is None:
                print("%s: skipped, %s" % (name, why))
                status = 1
                continue
            version = haproxy_bench.haproxy_version(binary) or binary
            got = {}
            try:
                for key in ROWS:
                    got[key] = profile_row(ctx, binary, key, a.requests, workdir)
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                print("%s: %s" % (version, e))
                status = 1
                continue
            print(report(version, binary, got, a.top))
    return status


def report(version, binary, got, top):
    """The text of one HAProxy's profile: totals per request, then the
    functions whose cost per request differs most between M and F."""
    per = {k: {f: v / n for f, v in funcs.items()} for k, (n, funcs) in got.items()}
    tot = {k: sum(per[k].values()) for k in per}
    L = ["## %s (`%s`)" % (version, binary), "",
         "HAProxy's instructions per request (callgrind, self cost summed over every "
         "function): F %.0f over %d requests, M %.0f over %d: M - F = %+.0f." % (
             tot["F"], got["F"][0], tot["M"], got["M"][0], tot["M"] - tot["F"]), "",
         "| function | F per request | M per request | M - F |", "|---|---:|---:|---:|"]
    names = set(per["F"]) | set(per["M"])
    diff = sorted(names, key=lambda f: -abs(per["M"].get(f, 0) - per["F"].get(f, 0)))
    for f in diff[:top]:
        L.append("| `%s` | %.0f | %.0f | %+.0f |" % (
            f, per["F"].get(f, 0), per["M"].get(f, 0), per["M"].get(f, 0) - per["F"].get(f, 0)))
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    sys.exit(main())
