#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Benchmarks the agent with the SPOP load generator and writes BENCHMARKS.md.

    python3 bench/run.py --build build [--quick]
                         [--only memory|redis|lease|saturation|haproxy|instructions]
                         [--haproxy BIN,BIN...] [--rows LIST] [--update]
                         [--output FILE]

Every configuration runs in the same invocation, so the ratios between them
hold even on a noisy shared machine. Each run starts a fresh agent on a free
loopback port (fresh buckets, so the 429 counts can be checked exactly), runs
build/spop-bench against it and stops the agent whatever happens. The median
run of each configuration is reported; the configurations run round by
round (run 1 of each, then run 2, ...). The Redis store's configurations
(bench/redis_bench.py) follow the in-memory ones, each run with a fresh
redis-server as well; then bench/lease_bench.py measures what leased tokens
(--lease) save, and bench/saturation_bench.py offers a multi-limit rules file
0.8, 1.2, 1.5 and 2 times what Redis decides (who decides then: Redis, the
local bucket, or open). After the in-memory runs, bench/instructions.py counts
the agent's instructions per decision, per protocol-only answer and per
request of an adaptive backend or a charged rule (two messages) under
callgrind (skipped without valgrind). Last, bench/haproxy_bench.py measures
the whole path through a real HAProxy with wrk (skipped without wrk).
bench/figures.py then draws the throughputs and latency distributions as SVG
files beside the report (bench-figures/ beside BENCHMARKS.md), which the
report shows.

The HAProxy rows run on each binary --haproxy lists (comma-separated names
or paths, e.g. `--haproxy haproxy,/usr/local/bin/haproxy34`), a table each;
without it on the one HAPROXY names, else Debian's. `--only haproxy
--update` measures them alone and replaces only the "Through HAProxy"
section (and its Checks paragraph) of BENCHMARKS.md, keeping the others,
with a line under the header saying which command made it.

The report may end with notes written by hand: from a line that starts
with NOTES_MARK to the end of the file. Writing the report again keeps
them as they are, after the sections it generates.

Exit status: 0 when every run was clean and every count was as expected,
1 otherwise (the report is written either way), 2 on bad usage.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import types

import figures
import haproxy_bench
import instructions
import lease_bench
import redis_bench
import redis_instructions
import saturation_bench

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The generator's shape: what one HAProxy 3.x process with 8 connections to
# the agent would send (3.x keeps at most 20 NOTIFYs in flight each).
GEN_ARGS = ["--conns", "8", "--inflight", "20", "--threads", "1"]
# Runs end on --duration; the request bound only guards against a runaway.
MAX_REQUESTS = "100000000"
HIGH_LIMIT = "1000000000/1h"
LOW_QUOTA, LOW_KEYS = 100, 100

OPEN_LOOP = ("half", "quarter")
# configuration 2's answers/s over the baseline's aimed at
TARGET_MEM1 = 0.7

AGENT_START_S = 10.0
AGENT_STOP_S = 5.0

# The first line of the report's hand-written notes (see kept_notes()).
NOTES_MARK = "<!-- Notes on the figures: written by hand."


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rel(path):
    """A path relative to the repository root when it lies inside it."""
    p = os.path.relpath(os.path.abspath(path), ROOT)
    return path if p.startswith("..") else p


class Agent:
    """One agent process on a loopback port, stopped on exit from `with`."""

    def __init__(self, binary, args, logdir):
        self.binary = binary
        self.args = args
        self.logdir = logdir
        self.proc = None
        self.port = None
        self.log_path = None
        self.exit_code = None

    def cmdline(self):
        return [rel(self.binary), "-l", "127.0.0.1:%d" % self.port] + self.args

    def log_tail(self, n=15):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def __enter__(self):
        # A port found free can be taken before the agent binds it; retry.
        for attempt in range(3):
            self.port = free_port()
            self.log_path = os.path.join(self.logdir, "agent-%d.log" % self.port)
            log = open(self.log_path, "wb")
            try:
                self.proc = subprocess.Popen(
                    [self.binary, "-l", "127.0.0.1:%d" % self.port] + self.args,
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=ROOT)
            finally:
                log.close()
            deadline = time.monotonic() + AGENT_START_S
            while time.monotonic() < deadline:
                with open(self.log_path, errors="replace") as f:
                    if "listening on" in f.read():
                        return self
                if self.proc.poll() is not None:
                    break
                time.sleep(0.02)
            self.stop()
            tail = self.log_tail()
            if "in use" not in tail.lower() or attempt == 2:
                raise RuntimeError("agent did not start: %s\n%s"
                                   % (" ".join(self.cmdline()), tail))
        raise RuntimeError("agent did not start")

    def stop(self):
        if self.proc is None:
            return
        if redis_bench.terminate(self.proc, AGENT_STOP_S):
            self.exit_code = "killed after %.0f s" % AGENT_STOP_S
        if self.exit_code is None:
            self.exit_code = self.proc.returncode
        self.proc = None

    def __exit__(self, *exc):
        self.stop()
        return False


def proc_times_s(pid):
    """(user, system) CPU seconds used so far by a process, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick
    except (OSError, IndexError, ValueError):
        return None


def proc_cpu_s(pid):
    """CPU seconds (user + system) used so far by a process, or None."""
    t = proc_times_s(pid)
    return None if t is None else t[0] + t[1]


def children_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_bench(bench, agent_pid, port, args, duration):
    """Runs the generator once; returns (result, None) or (None, error). The
    result also holds the CPU share (percent of one CPU) of both sides."""
    cmd = [bench, "--addr", "127.0.0.1:%d" % port] + args + ["--json"]
    a0, g0, t0 = proc_cpu_s(agent_pid), children_cpu_s(), time.monotonic()
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=duration + 60, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return None, "spop-bench did not finish in %.0f s" % (duration + 60)
    a1, g1, wall = proc_cpu_s(agent_pid), children_cpu_s(), time.monotonic() - t0
    res = None
    lines = p.stdout.strip().splitlines()
    if lines:
        try:
            res = json.loads(lines[-1])
        except ValueError:
            res = None
    if res is None:
        return None, "spop-bench exit %d, no result: %s" % (
            p.returncode, p.stderr.strip()[-600:])
    res["exit"] = p.returncode
    res["agent_cpu"] = 100 * (a1 - a0) / wall if a0 is not None and a1 is not None else None
    res["gen_cpu"] = 100 * (g1 - g0) / wall
    res["stderr"] = p.stderr.strip()
    return res, None


def configurations():
    """(key, title, agent args, generator args, expectation). Generator args
    may be a function of the results so far (open loop rate)."""
    common = ["--requests", MAX_REQUESTS] + GEN_ARGS
    # the open loop's whole latency histogram, for its figure
    share = lambda f: lambda done: common + [
        "--rate", "%d" % max(1, round(done["mem1"]["rps"] * f)), "--histogram"]
    return [
        ("base", "baseline: protocol and I/O only (`--message noop`), agent -t 1",
         ["-t", "1", "--limit", HIGH_LIMIT], common + ["--message", "noop"], "none"),
        ("mem1", "check-rate, in-memory store, nothing refused, agent -t 1",
         ["-t", "1", "--limit", HIGH_LIMIT], common, "pass"),
        ("mem2", "check-rate, in-memory store, nothing refused, agent -t 2",
         ["-t", "2", "--limit", HIGH_LIMIT], common, "pass"),
        ("low", "check-rate, %d keys at %d/1h: most answers are 429, agent -t 1"
         % (LOW_KEYS, LOW_QUOTA),
         ["-t", "1", "--limit", "%d/1h" % LOW_QUOTA],
         common + ["--keys", str(LOW_KEYS)], "low"),
        ("half", "open loop at 50% of configuration 2, agent -t 1",
         ["-t", "1", "--limit", HIGH_LIMIT], share(0.5), "pass"),
        ("quarter", "open loop at 25% of configuration 2, agent -t 1",
         ["-t", "1", "--limit", HIGH_LIMIT], share(0.25), "pass"),
    ]


def check(res, expect):
    """Returns a list of problems with one run's result."""
    bad = []
    n = res["requests"]
    if res["exit"] != 0:
        bad.append("spop-bench exit status %d" % res["exit"])
    if res["errors"] or res.get("lost"):
        bad.append("%d errors, %d requests unanswered" % (res["errors"], res.get("lost", 0)))
    if n == 0:
        bad.append("no request answered")
    if expect == "none" and (res["passed"] or res["limited"]):
        bad.append("noop answered with a status (%d passed, %d limited)"
                   % (res["passed"], res["limited"]))
    if expect == "pass" and (res["limited"] or res["passed"] != n):
        bad.append("expected %d passed and 0 limited, got %d and %d"
                   % (n, res["passed"], res["limited"]))
    if expect == "low":
        # Fresh buckets of LOW_QUOTA tokens per key, refilled far slower
        # than the run lasts: exactly keys * quota requests pass.
        allowed = min(n, LOW_KEYS * LOW_QUOTA)
        if res["passed"] != allowed or res["limited"] != n - allowed:
            bad.append("expected %d passed and %d limited, got %d and %d"
                       % (allowed, n - allowed, res["passed"], res["limited"]))
    return bad


def pick_median(runs, open_loop):
    """The median run: by throughput for closed loops (lower middle when
    even), by p99 for the open loop (upper middle when even)."""
    if open_loop:
        ordered = sorted(runs, key=lambda r: r["p99_us"])
        return ordered[len(ordered) // 2]
    ordered = sorted(runs, key=lambda r: r["rps"])
    return ordered[(len(ordered) - 1) // 2]


def machine():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        ncpu = len(os.sched_getaffinity(0))
    except AttributeError:
        ncpu = os.cpu_count()
    return ncpu, model


def cmd_output(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=ROOT)
        out = (p.stdout or p.stderr).strip()
        return out.splitlines()[0] if p.returncode == 0 and out else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def commit():
    head = cmd_output(["git", "rev-parse", "--short", "HEAD"])
    if head and cmd_output(["git", "status", "--porcelain", "--", "agent", "tools",
                            "Makefile"]):
        head += " with uncommitted changes to the sources"
    return head


def fmt_us(v):
    return "%.0f" % v if v >= 100 else "%.1f" % v


def in_memory_section(rows, ncpu, only, figs=None):
    """The in-memory store's table, its figures, how to read it and its
    commands."""
    if not rows:
        return ["Not run (`--only %s`)." % only, ""]
    L = []
    L.append("| # | configuration | answers/s | vs baseline | p50 us | p99 us | p99.9 us "
             "| 429 answers | CPU agent / generator | all runs (answers/s) |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    base = rows[0]["median"]["rps"] if rows and rows[0].get("median") else 0
    for i, row in enumerate(rows, 1):
        m = row.get("median")
        if not m:
            L.append("| %d | %s | failed | | | | | | | |" % (i, row["title"]))
            continue
        # An open loop's throughput is the rate it was told to send at.
        ratio = "%.2fx" % (m["rps"] / base) if base and not row["open"] else "-"
        cpu = "%s / %.0f%%" % ("?" if m["agent_cpu"] is None else "%.0f%%" % m["agent_cpu"],
                               m["gen_cpu"])
        L.append("| %d | %s | %.0f | %s | %s | %s | %s | %d of %d | %s | %s |" % (
            i, row["title"], m["rps"], ratio, fmt_us(m["p50_us"]), fmt_us(m["p99_us"]),
            fmt_us(m["p999_us"]), m["limited"], m["requests"], cpu,
            ", ".join("%.0f" % r["rps"] for r in row["runs"])))
    L.append("")
    one = rows[1].get("median") if len(rows) > 1 and rows[1]["key"] == "mem1" else None
    if base and one:
        ratio = one["rps"] / base
        L.append("- Configuration 2 (decisions in memory, one worker) answers %.2fx the "
                 "baseline's answers/s: the target of at least %.2fx is %s." % (
                     ratio, TARGET_MEM1, "met" if ratio >= TARGET_MEM1 else "NOT met"))
        L.append("")
    L.extend(figures.links(figs, "memory-throughput", "memory-latency"))
    L.append("### How to read it")
    L.append("")
    L.append("- The machine has %d CPU%s, shared by the agent, the load generator "
             "(one thread) and whatever else runs on it; the last column shows the "
             "spread between runs. Configurations 1 to 4 run round by round (run 1 of "
             "each, then run 2, ...), and 5 and 6 after them the same way, so that a "
             "spell of other work on the machine hits the baseline and the decisions "
             "alike. With `-t 2` the agent's two workers and the "
             "generator compete for %d CPU%s, so configuration 3 shows contention, "
             "not how the agent scales on a machine with cores to spare."
             % (ncpu, "s" if ncpu != 1 else "", ncpu, "s" if ncpu != 1 else ""))
    L.append("- One answer is one NOTIFY acknowledged. In configuration 1 the agent "
             "ACKs an unknown message without deciding (protocol and I/O cost only); "
             "in the others each answer is one rate-limit decision against the "
             "in-memory store (no Redis).")
    L.append("- CPU is what each process used during the median run, in percent of "
             "one CPU. A generator near 100% would make a figure the generator's "
             "limit rather than the agent's; when both sides stay well under their "
             "share, they were waiting on each other or on other work on the machine.")
    L.append("- The generator behaves like one HAProxy 3.x process: `%s` (8 connections, "
             "at most 20 NOTIFYs in flight on each, fresh odd stream-ids, one write "
             "per batch of frames). Closed-loop latencies are therefore mostly "
             "queueing: 160 requests in flight at R answers/s wait about 160/R s "
             "(Little's law)." % " ".join(GEN_ARGS))
    L.append("- Configurations 5 and 6 send on a fixed timetable (a fraction of "
             "configuration 2's throughput, spread evenly over the connections) and "
             "measure each latency from the scheduled send time, so stalls are not "
             "hidden (no coordinated omission); they are the latency figures to "
             "quote. Requests then arrive one at a time instead of in batches, so "
             "both sides make a read and a write per request: that costs several "
             "times the CPU per request of the closed loop, and 50% of the "
             "closed-loop peak is close to saturation on this machine (see the CPU "
             "column).")
    L.append("- Configuration 4 starts each run with fresh buckets: %d keys x %d "
             "tokens pass, everything after is 429; the counts are checked exactly."
             % (LOW_KEYS, LOW_QUOTA))
    L.append("")
    L.append("### Commands")
    L.append("")
    L.append("For each configuration, the median run's exact commands (the port is "
             "picked free at run time):")
    L.append("")
    for i, row in enumerate(rows, 1):
        m = row.get("median")
        L += redis_bench.command_block(i, row["title"], [m["agent_cmd"], m["bench_cmd"]]
                                       if m else None)
    return L


def command(meta):
    """The command that makes the report, as the report and figures say it."""
    return "python3 bench/run.py --build %s%s%s%s%s" % (
        meta["build"], " --quick" if meta["quick"] else "",
        " --only " + meta["only"] if meta["only"] else "",
        " --haproxy " + meta["haproxy"] if meta.get("haproxy") else "",
        " --update" if meta.get("update") else "")


UPDATABLE = {"haproxy": ("## Through HAProxy", "HAProxy runs:"),
             "saturation": ("## Redis saturation", "Saturation runs:"),
             "instructions": ("## Instructions per answer (callgrind)", "Instruction counts:")}


def saturation_checks(problems, res=None):
    """The Checks paragraph of the saturation runs."""
    bad = [p for p in problems if p.startswith("Redis saturation")]
    if bad:
        return "Saturation runs: FAILED: %s." % "; ".join(bad)
    opened = sum(r["open"] for runs in (res or {}).get("rows", {}).values() for _, r in runs)
    return ("Saturation runs: %d decisions answered open while Redis answered, over every "
            "run of every row." % opened)


def haproxy_checks(problems):
    """The Checks paragraph of the HAProxy runs."""
    if problems:
        return "HAProxy runs: FAILED: %s." % "; ".join(problems)
    return ("HAProxy runs: every answer 2xx, no socket error, a decision per request in "
            "M and R and none in F and A (after the warm-up), none refused or degraded, "
            "every open-loop request answered, every agent stopped cleanly on SIGTERM.")


def spliced(text, meta, heading, section, para_start, para):
    """The report text with its section under heading replaced by section
    (lines), the Checks paragraph that starts with para_start by para, and
    a line under the header saying which command made that section; None
    when the report has no such section or no Checks."""
    lines = text.rstrip("\n").split("\n")
    heads = [i for i, ln in enumerate(lines) if ln.startswith("## ")]
    if heading not in [lines[i] for i in heads] or "## Checks" not in lines:
        return None
    i = lines.index(heading)
    j = next(k for k in heads if k > i)
    body = list(section)
    while body and not body[-1]:
        body.pop()
    lines[i:j] = body + [""]
    c = lines.index("## Checks")
    end = next((k for k in range(c + 1, len(lines)) if lines[k].startswith("## ")
                or lines[k].startswith(NOTES_MARK)), len(lines))
    k = next((k for k in range(c, end) if lines[k].startswith(para_start)), None)
    if k is None:
        # before the blank line that ends the section
        k = end
        while k > c + 1 and not lines[k - 1]:
            k -= 1
        lines[k:k] = ["", para]
    else:
        e = k
        while e < end and lines[e]:
            e += 1
        lines[k:e] = [para]
    what = "- %s: made alone by `%s`, %s, commit %s, %s" % (
        heading[3:], command(meta), meta["date"], meta["commit"] or "unknown",
        meta.get("detail") or "%d runs of %g s" % (meta["runs"], meta["duration"]))
    prefix = "- %s: made alone by" % heading[3:]
    old = [n for n, ln in enumerate(lines[:heads[0]]) if ln.startswith(prefix)]
    if old:
        lines[old[0]] = what
    else:
        n = max(n for n, ln in enumerate(lines[:heads[0]]) if ln.startswith("- "))
        lines.insert(n + 1, what)
    return "\n".join(lines) + "\n"


def kept_notes(path):
    """The hand-written notes that end the report at path: the lines from
    the first that starts with NOTES_MARK to the end, or [] when the file
    or the mark is missing."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return []
    for i, line in enumerate(lines):
        if line.startswith(NOTES_MARK):
            notes = lines[i:]
            while notes and not notes[-1].strip():
                notes.pop()
            return notes
    return []


def write_report(path, meta, rows, problems, redis_lines, insn_lines, haproxy_lines,
                 ctx=None, figs=None, lease_lines=()):
    ncpu, model = meta["machine"]
    notes = kept_notes(path)
    L = []
    L.append("# Benchmarks")
    L.append("")
    if notes:
        L.append("Generated by `%s` (`make bench`); do not edit, except the notes at "
                 "the end, written by hand, which the next run keeps." % command(meta))
    else:
        L.append("Generated by `%s` (`make bench`); do not edit." % command(meta))
    L.append("")
    L.append("- Date: %s" % meta["date"])
    L.append("- Machine: %d CPU%s, %s; Linux %s" % (
        ncpu, "s" if ncpu != 1 else "", model, meta["kernel"]))
    if meta["version"]:
        L.append("- Agent: `%s`" % meta["version"])
    if meta["commit"]:
        L.append("- Commit: %s" % meta["commit"])
    L.append("- Runs: %d per configuration of %g s each; the median run is shown%s"
             % (meta["runs"], meta["duration"],
                " (quick mode: a smoke check, not figures to compare)" if meta["quick"] else ""))
    if meta.get("steal") is not None:
        L.append("- CPU time stolen by the virtual machine's host over the whole invocation: "
                 "%.1f%% (steal in /proc/stat; the machine's CPUs ran nothing of ours then)"
                 % meta["steal"])
    L.append("")
    L.append("## In-memory store")
    L.append("")
    L.extend(in_memory_section(rows, ncpu, meta["only"], figs))
    L.extend(insn_lines)
    L.extend(redis_lines)
    L.extend(lease_lines)
    L.extend(haproxy_lines)
    L.append("## Checks")
    L.append("")
    if problems:
        for p in problems:
            L.append("- FAILED: %s" % p)
    else:
        if rows:
            L.append("All runs: no protocol error, every request answered, every agent "
                     "stopped cleanly on SIGTERM, and the status counts were as expected "
                     "(no 429 where the limit is high; exactly %d passes in configuration "
                     "4)." % (LOW_KEYS * LOW_QUOTA))
            L.append("")
        if redis_lines:
            L.append("Redis runs: no decision degraded, timed out or answered without "
                     "Redis; the agent's calls equal Redis's FCALL count, none failed and "
                     "none found the library missing; the library Redis held after each "
                     "run (every master of a cluster) is the text of %s, and so is the "
                     "copy built into the agent when it can be found; every answer came "
                     "from Redis or the "
                     "local cache; every redis-benchmark EVALSHA of the naive script "
                     "succeeded, on keys of the expected shape, spending tokens; exactly "
                     "%d passes for the flooding client; one string key of the agent's "
                     "shape per limit of a client in the memory runs (M1p: the sets "
                     "of their members), each with an expiry on a Redis without "
                     "maxmemory and none on the one that evicts (M1n)."
                     % (redis_bench.LIBRARY, redis_bench.CACHE_QUOTA))
            if getattr(ctx, "cluster_rows", False):
                L.append("")
                L.append("Redis Cluster runs: the same checks, with FCALL counted on "
                         "every master; every master ran calls; exactly %d passes "
                         "for %d clients at %d/1h (CL), whose keys were found on every "
                         "master and nowhere twice."
                         % (redis_bench.CLUSTER_KEYS * redis_bench.CLUSTER_QUOTA,
                            redis_bench.CLUSTER_KEYS, redis_bench.CLUSTER_QUOTA))
            L.append("")
        if getattr(ctx, "sat_rows", None):
            L.append(saturation_checks(problems, ctx.sat_rows))
            L.append("")
        if getattr(ctx, "haproxy_rows", False):
            L.append(haproxy_checks([]))
            L.append("")
    if notes:
        while L and not L[-1]:
            L.pop()
        L.append("")
        L.extend(notes)
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("--quick", action="store_true",
                    help="2 runs of 2 s each: a smoke check")
    ap.add_argument("--only", choices=("memory", "redis", "lease", "saturation", "haproxy",
                                       "instructions"),
                    help="run only the in-memory, the Redis, the leased tokens', the "
                    "saturation or the HAProxy configurations, or only the agent's "
                    "instruction counts (callgrind)")
    ap.add_argument("--haproxy", metavar="LIST",
                    help="the HAProxy binaries the HAProxy rows run on, comma-separated "
                    "names or paths, a table each (default: the one HAPROXY names, else "
                    "haproxy on the PATH)")
    ap.add_argument("--rows", metavar="LIST",
                    help="with --only haproxy: only these rows, comma-separated (e.g. "
                    "F,M,T: SPOP over TLS against plaintext); the report goes to "
                    "BUILD/BENCHMARKS-haproxy.md")
    ap.add_argument("--update", action="store_true",
                    help="with --only: replace that section (and its checks) in the "
                    "report, BENCHMARKS.md unless --output says otherwise, keeping the "
                    "others as they are")
    ap.add_argument("--output", help="report path (default BENCHMARKS.md at the "
                    "repository root; BUILD/BENCHMARKS-quick.md with --quick, "
                    "BUILD/BENCHMARKS-ONLY.md with --only)")
    a = ap.parse_args()

    build = a.build if os.path.isabs(a.build) else os.path.join(ROOT, a.build)
    agent_bin = os.path.join(build, "spoa-ratelimit")
    bench_bin = os.path.join(build, "spop-bench")
    for b in (agent_bin, bench_bin):
        if not os.access(b, os.X_OK):
            print("bench: %s is missing; run `make agent tools` first" % rel(b),
                  file=sys.stderr)
            return 2
    if a.rows and (a.only != "haproxy" or a.update):
        print("bench: --rows goes with --only haproxy, without --update", file=sys.stderr)
        return 2
    if a.update and a.only not in UPDATABLE:
        print("bench: --update needs --only %s" % " or ".join(sorted(UPDATABLE)),
              file=sys.stderr)
        return 2
    if a.output:
        out = a.output
    elif a.update:
        out = os.path.join(ROOT, "BENCHMARKS.md")
    elif a.quick:
        out = os.path.join(build, "BENCHMARKS-quick.md")
    elif a.only:
        # a partial report must not replace the full one
        out = os.path.join(build, "BENCHMARKS-%s.md" % a.only)
    else:
        out = os.path.join(ROOT, "BENCHMARKS.md")
    runs, duration = (2, 2.0) if a.quick else (3, 8.0)
    if a.update:
        try:
            with open(out, encoding="utf-8") as f:
                old_report = f.read()
        except OSError as e:
            print("bench: --update: %s" % e, file=sys.stderr)
            return 2
        if UPDATABLE[a.only][0] not in old_report.split("\n"):
            print("bench: --update: %s has no line %r" % (rel(out), UPDATABLE[a.only][0]),
                  file=sys.stderr)
            return 2

    # SIGTERM must unwind through the `with Agent` blocks like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    meta = {
        "build": rel(a.build) if os.path.isabs(a.build) else a.build,
        "quick": a.quick,
        "only": a.only,
        "haproxy": a.haproxy,
        "update": a.update,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "kernel": platform.release(),
        "version": cmd_output([agent_bin, "--version"]),
        "commit": commit(),
        "runs": runs,
        "duration": duration,
        # what a section made alone says of its runs, when not runs x duration
        "detail": "one callgrind run per figure" if a.only == "instructions" else None,
    }
    steal0 = redis_bench.machine_idle()
    rows, problems, done = [], [], {}
    confs = configurations() if a.only in (None, "memory") else []
    redis_rows = None
    with tempfile.TemporaryDirectory(prefix="spoa-bench-") as logdir:
        ctx = types.SimpleNamespace(
            root=ROOT, agent_bin=agent_bin, bench_bin=bench_bin, logdir=logdir,
            runs=runs, duration=duration, quick=a.quick, problems=problems,
            gen_args=GEN_ARGS, max_requests=MAX_REQUESTS, high_limit=HIGH_LIMIT,
            Agent=Agent, run_bench=run_bench, check=check, pick_median=pick_median,
            free_port=free_port, children_cpu_s=children_cpu_s, proc_cpu_s=proc_cpu_s,
            proc_times_s=proc_times_s,
            rel=rel, fmt_us=fmt_us, memory=done, haproxy_list=a.haproxy,
            rows=[r.strip() for r in a.rows.split(",")] if a.rows else None)

        def once(row, r):
            """Run r of row: appends its result, or records why there is none."""
            label = "[%d/%d] %s, run %d/%d" % (row["ci"], len(confs), row["key"], r + 1,
                                               runs)
            try:
                with Agent(agent_bin, row["agent_args"], logdir) as ag:
                    res, err = run_bench(bench_bin, ag.proc.pid, ag.port, row["gen"],
                                         duration)
                    agent_cmd = " ".join(shlex.quote(x) for x in ag.cmdline())
                    port = ag.port
                stop = ag.exit_code
            except RuntimeError as e:
                problems.append("%s: %s" % (label, e))
                print("%s: %s" % (label, e), file=sys.stderr)
                return
            if res is None:
                problems.append("%s: %s" % (label, err))
                print("%s: %s" % (label, err), file=sys.stderr)
                return
            bad = check(res, row["expect"])
            if stop != 0:
                bad.append("agent exit status on SIGTERM: %s" % stop)
            for b in bad:
                problems.append("%s: %s" % (label, b))
            res["agent_cmd"] = agent_cmd
            res["bench_cmd"] = " ".join(shlex.quote(x) for x in
                                        [rel(bench_bin), "--addr",
                                         "127.0.0.1:%d" % port] + row["gen"] + ["--json"])
            row["runs"].append(res)
            print("%s: %.0f/s p50 %s us p99 %s us, 429 %d of %d%s" % (
                label, res["rps"], fmt_us(res["p50_us"]), fmt_us(res["p99_us"]),
                res["limited"], res["requests"],
                "" if not bad else "  PROBLEM: " + "; ".join(bad)), flush=True)
            if bad and res["stderr"]:
                print(res["stderr"], file=sys.stderr)

        # Round by round (run 1 of every closed loop, then run 2, ...), so
        # that a spell of load from elsewhere on the machine hits the
        # baseline and the decisions alike; the open loops, whose rate is a
        # share of configuration 2's median, then do the same.
        for is_open in (False, True):
            group = []
            for ci, (key, title, agent_args, gen, expect) in enumerate(confs, 1):
                if (key in OPEN_LOOP) != is_open:
                    continue
                row = {"key": key, "title": title, "runs": [], "open": is_open,
                       "agent_args": agent_args, "expect": expect, "ci": ci}
                rows.append(row)
                if callable(gen):
                    if "mem1" not in done:
                        problems.append("%s: skipped, configuration 2 has no result" % title)
                        continue
                    gen = gen(done)
                row["gen"] = gen + ["--duration", "%g" % duration]
                group.append(row)
            redis_bench.interleave(ctx, group, runs, one=once)
            done.update((row["key"], row["median"]) for row in group if row["runs"])
        insn_lines = []
        insn = None
        if a.only in (None, "memory", "instructions"):
            # After the timed runs, so that valgrind's CPU disturbs none of them.
            insn, why = instructions.run(agent_bin, bench_bin)
            if insn is None and not instructions.missing_tool():
                problems.append("instructions per answer: %s" % why)
            print("instructions per answer: %s" % (
                why if insn is None else
                "%d per decision, %d per ACK of an unknown message"
                % (insn["decision"], insn["unknown"])), flush=True)
            insn_lines = instructions.report_lines(insn, why)
        if a.only in (None, "redis"):
            redis_rows = redis_bench.run(ctx)
            # after the timed runs, as the agent's counts above
            rlines, why = redis_instructions.report_lines()
            if why:
                problems.append("Redis instructions per decision: %s" % why)
            insn_lines += rlines
        lease_rows = lease_bench.run(ctx) if a.only in (None, "lease") else None
        sat_rows = (saturation_bench.run(ctx) if a.only in (None, "saturation")
                    else None)
        ctx.sat_rows = sat_rows
        haproxy_rows = None
        if a.only in (None, "haproxy"):
            haproxy_rows = haproxy_bench.run(ctx)
            if "skipped" in haproxy_rows:
                print("HAProxy configurations skipped: %s" % haproxy_rows["skipped"],
                      flush=True)
            else:
                ctx.haproxy_rows = any(r["runs"] for v in haproxy_rows["versions"]
                                       if v["binary"] for r in v["rows"].values())
    steal1 = redis_bench.machine_idle()
    if steal0 and steal1 and steal1[2] > steal0[2]:
        meta["steal"] = 100 * (steal1[1] - steal0[1]) / (steal1[2] - steal0[2])
    # A figure that cannot be drawn must not cost the report of the runs.
    try:
        ctx.figures = figures.draw(
            out, "`%s` (make bench), %s, commit %s; %d runs of %g s per row" % (
                command(meta), meta["date"], meta["commit"] or "unknown", runs, duration),
            rows, redis_rows, haproxy_rows, redis_bench.TARGETS_VS_R1,
            dict(haproxy_bench.TARGETS),
            # --update replaces one section: only its figure (the
            # saturation rows have none), the others' left as they are
            names=(("haproxy-throughput",) if a.only == "haproxy" else ())
            if a.update else None)
    except Exception as e:  # noqa: BLE001  (any bug in drawing)
        traceback.print_exc()
        problems.append("figures: not drawn: %s: %s" % (type(e).__name__, e))
        ctx.figures = {}
    redis_lines = redis_bench.report(ctx, redis_rows) if redis_rows is not None else []
    lease_lines = lease_bench.report(ctx, lease_rows) if lease_rows is not None else []
    if sat_rows is not None:
        lease_lines = lease_lines + saturation_bench.report(ctx, sat_rows)
    haproxy_lines = (haproxy_bench.report(ctx, haproxy_rows)
                     if haproxy_rows is not None else [])
    if a.update and a.only == "instructions":
        text = spliced(old_report, meta, UPDATABLE[a.only][0], insn_lines,
                       UPDATABLE[a.only][1], "Instruction counts: %s." % (
                           "every request of every figure answered" if insn else
                           "FAILED: not measured"))
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    elif a.update and a.only == "saturation":
        text = spliced(old_report, meta, UPDATABLE[a.only][0],
                       saturation_bench.report(ctx, sat_rows), UPDATABLE[a.only][1],
                       saturation_checks(problems, sat_rows))
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    elif a.update:
        text = spliced(old_report, meta, UPDATABLE[a.only][0], haproxy_lines,
                       UPDATABLE[a.only][1], haproxy_checks(problems))
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        write_report(out, meta, rows, problems, redis_lines, insn_lines, haproxy_lines, ctx,
                     ctx.figures, lease_lines)
    print("bench: wrote %s" % rel(out))
    if ctx.figures:
        print("bench: drew %s" % ", ".join(
            rel(os.path.join(os.path.dirname(os.path.abspath(out)), p))
            for p, _ in ctx.figures.values()))
    if problems:
        print("bench: %d problem(s):" % len(problems), file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
