#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Offered load around Redis's capacity: who decides.

    python3 bench/saturation_bench.py [--build build] [--duration 20]
                                      [--shares 0.8,1.2,1.5,2] [--threads 1]
                                      [--hz N] [--soak SECONDS [--sample S]
                                      [--mem-max-keys N]] [--log FILE]

A rules file of two limits per client (600/1m token bucket, 20/1s log)
and two layers (one for every client, one per address), hot keys
(spop-bench --hot-keys 5 --hot-share 40 over 300000 clients), one agent on
one fresh redis-server per row, run with `hz 100` (docs/redis.md, "Key
expiry": at Redis's default hz 10 its expiry of the limiter's keys holds
it 25 ms at a time, longer than the deadline). One more row, "0.8x hz 10",
offers 0.8x to a Redis at its default hz; --hz sets the others' hz.

C0 measures Redis's capacity: closed loop (8 connections, 20 in flight
each) with a deadline so long (--redis-timeout 1000) that Redis decides
every request; the capacity is the decisions Redis made per second. Then
one row per share of it, open loop at share x capacity, with the default
deadline (20 ms). Each row reports the decisions made by Redis (replies),
by the agent's refusal cache, by the rule's local bucket (saturated),
and answered open (degraded but not saturated: the failure policy, open
here), the breaker's skips, spop-bench's p50 and p99 (from the scheduled
time, and from the send), the decisions the agent answered more than 5 ms
after their deadline, and Redis's CPU (INFO cpu over the row, in % of one
CPU). bench/run.py runs the same rows round by round (`make bench`,
`--only saturation`).

--soak: one long row at 0.8x with --lease 1s, the agent's RSS and its
local buckets (spoa_rl_memory_keys, log chunks) sampled every --sample
seconds.

Targets: at 0.8x, every decision by Redis (or its refusal cache); at
every load, none answered open while Redis answers; p99 within the
deadline. Loopback only, ports picked at run time; every process is
stopped whatever happens.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from resp import Client  # noqa: E402

RULES = """\
identity: [api_key, ip]
on_store_failure: open
layers:
  everyone: { identity: global, limits: ["100000000/1m"] }
  per-address: { identity: ip, limits: ["1200/1m"] }
limits:
  - "600/1m"
  - { rate: "20/1s", algorithm: log }
stack: [everyone, per-address]
"""

GEN = ["--conns", "8", "--inflight", "20", "--keys", "300000", "--hot-keys", "5",
       "--hot-share", "40", "--requests", "1000000000"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait(pred, seconds, what):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for " + what)


class Procs:
    def __init__(self):
        self.procs = []

    def start(self, argv, log):
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        return False


def metrics(mport):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % mport, timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            name, _, labels = name.partition("{")
            le = [x for x in labels.split(",") if x.startswith('le="')]
            if le:
                # a histogram's bucket, by its bound: NAME@BOUND
                name += "@" + le[0][4:].split('"', 1)[0]
            out[name] = out.get(name, 0) + float(value)
    return out


def redis_cpu(port):
    with Client("127.0.0.1", port) as c:
        info = c.command("INFO", "cpu").decode()
    v = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    return float(v["used_cpu_sys"]) + float(v["used_cpu_user"])


def cpu_wait(pid):
    """(ns the process's threads waited runnable for a CPU, monotonic ns
    now): /proc/PID/task/*/schedstat's second field, summed; None once
    it is gone."""
    total = 0
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                total += int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return total, time.monotonic_ns()


def wait_share(first, last):
    """The share (%) of the time between two cpu_wait() readings that a
    process waited for a CPU (summed over its threads); -1 unknown."""
    if not first or not last or last[1] <= first[1]:
        return -1
    return 100.0 * (last[0] - first[0]) / (last[1] - first[1])


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def row(args, tmp, timeout_ms, rate, agent_args=(), sample_s=0, hz=None):
    """One agent on one fresh Redis (at hz, else args.hz) under
    spop-bench: its figures (with sample_s, the agent's RSS every
    sample_s seconds in res["rss_kb"])."""
    rules = os.path.join(tmp, "rules.yaml")
    with open(rules, "w") as f:
        f.write(RULES)
    key = os.path.join(tmp, "hash.key")
    with open(key, "wb") as f:
        f.write(os.urandom(32))
    os.chmod(key, 0o600)
    with Procs() as procs, open(os.path.join(tmp, "log"), "ab") as log:
        rport, aport, mport = free_port(), free_port(), free_port()
        rp = procs.start(["redis-server", "--port", str(rport), "--bind", "127.0.0.1",
                     "--save", "", "--appendonly", "no", "--hz", str(hz or args.hz)], log)
        def ping():
            with Client("127.0.0.1", rport) as c:
                return c.command("PING")
        wait(ping, 5, "redis-server")
        agent = procs.start([os.path.join(args.build, "spoa-ratelimit"), "-l", "127.0.0.1:%d" % aport,
                     "-t", str(args.threads), "--rules", rules, "--redis",
                     "127.0.0.1:%d" % rport, "--redis-timeout", str(timeout_ms),
                     "--hash-key-file", key, "--metrics", "127.0.0.1:%d" % mport]
                            + list(agent_args), log)
        wait(lambda: metrics(mport).get("spoa_rl_ready") == 1, 10, "the agent")
        m0, c0, t0 = metrics(mport), redis_cpu(rport), time.monotonic()
        w0 = {"agent": cpu_wait(agent.pid), "redis": cpu_wait(rp.pid)}
        gen = GEN + ["--duration", str(args.duration)] + (["--rate", str(rate)] if rate else [])
        gp = subprocess.Popen([os.path.join(args.build, "spop-bench"), "--addr",
                               "127.0.0.1:%d" % aport, "--json"] + gen,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        rss, keys = [], []
        gen_first = gen_last = cpu_wait(gp.pid)
        next_sample = time.monotonic()
        # the generator's wait for a CPU is read while it runs, every 0.5 s
        while gp.poll() is None:
            gen_last = cpu_wait(gp.pid) or gen_last
            if sample_s and time.monotonic() >= next_sample:
                next_sample += sample_s
                rss.append(rss_kb(agent.pid))
                try:
                    g = metrics(mport)
                    keys.append((int(g.get("spoa_rl_memory_keys", 0)),
                                 int(g.get("spoa_rl_memory_log_chunks", 0))))
                except OSError:
                    keys.append((-1, -1))
            try:
                gp.wait(0.5)
            except subprocess.TimeoutExpired:
                pass
        out, err = gp.communicate(timeout=args.duration + 120)
        r = subprocess.CompletedProcess(gp.args, gp.returncode, out, err)
        # past what the machine answers, an open loop's backlog grows until
        # requests go unanswered: counted (lost), not fatal
        if not r.stdout.strip():
            raise RuntimeError("spop-bench: " + r.stderr[-500:])
        wall = time.monotonic() - t0
        m1, c1 = metrics(mport), redis_cpu(rport)
        waits = (wait_share(w0["agent"], cpu_wait(agent.pid)),
                 wait_share(w0["redis"], cpu_wait(rp.pid)),
                 wait_share(gen_first, gen_last))
    res = json.loads(r.stdout.strip().splitlines()[-1])
    d = {k: m1.get(k, 0) - m0.get(k, 0) for k in m1}
    sat = d.get("spoa_rl_saturated_total", 0)
    res.update(redis=d.get("spoa_rl_redis_replies_total", 0),
               cache=d.get("spoa_rl_local_refusals_total", 0), local=sat,
               open=d.get("spoa_rl_degraded_total", 0) - sat,
               skips=d.get("spoa_rl_redis_breaker_skips_total", 0),
               trips=d.get("spoa_rl_redis_breaker_trips_total", 0),
               unavailable=d.get("spoa_rl_redis_unavailable_total", 0),
               # in the agent past deadline + 5 ms: saturated ones answered
               # late, or Redis's replies read late
               late=sum(d.get(h + "_count", 0) - d.get(h + "_bucket@0.025", 0)
                        for h in ("spoa_rl_redis_queue_wait_seconds",
                                  "spoa_rl_redis_decision_duration_seconds")),
               redis_cpu=100 * (c1 - c0) / wall, argv=gen, rss_kb=rss, mem_keys=keys,
               cpu_wait=waits)
    return res


SHARES = (0.8, 1.2, 1.5, 2.0)
# one more row: 0.8x to a Redis at its default hz (10)
DEFAULT_HZ = "0.8x hz 10"
ROWS = SHARES + (DEFAULT_HZ,)


def row_load(name):
    """A row's share of C0 and its Redis's hz (None: the bench's)."""
    return (0.8, 10) if name == DEFAULT_HZ else (name, None)


def row_name(name):
    return name if name == DEFAULT_HZ else "%.1fx" % name


COLUMNS = ("| row | offered/s | answered/s | by Redis | by refusal cache | by local bucket "
           "(saturated) | open | breaker skips | unanswered | p50 us | p99 us "
           "| p99 from send us | in the agent past 25 ms | Redis CPU "
           "| waiting for a CPU: agent, Redis, generator |")


def table_row(name, rate, r):
    return ("| %s | %d | %.0f | %d | %d | %d | %d | %d | %d | %.0f | %.0f | %.0f | %d | %.0f%% "
            "| %.0f%%, %.0f%%, %.0f%% |"
            % ((name, rate, r["rps"], r["redis"], r["cache"], r["local"], r["open"],
                r["skips"], r["lost"], r["p50_us"], r["p99_us"], r["sent_p99_us"], r["late"],
                r["redis_cpu"]) + tuple(r["cpu_wait"])))


def run(ctx):
    """bench/run.py's saturation rows (--only saturation): C0 then each
    share, round by round (a fresh Redis and agent per run). Returns
    {"capacity": [per round], "rows": {share: [(rate, result) per round]}}."""
    import shutil
    out = {"capacity": [], "rows": {s: [] for s in ROWS}}
    if shutil.which("redis-server") is None:
        ctx.problems.append("Redis saturation: skipped, redis-server is not installed")
        return out
    args = argparse.Namespace(build=os.path.dirname(ctx.agent_bin), threads=1,
                              duration=ctx.duration, hz=100)
    rounds = 1 if ctx.quick else ctx.runs
    with tempfile.TemporaryDirectory(prefix="rl-saturation-", dir=ctx.logdir) as tmp:
        for n in range(rounds):
            try:
                c0 = row(args, tmp, 1000, 0)
                capacity = c0["redis"] / c0["seconds"]
                out["capacity"].append(capacity)
                for name in ROWS:
                    share, hz = row_load(name)
                    rate = max(1, round(capacity * share))
                    r = row(args, tmp, 20, rate, hz=hz)
                    out["rows"][name].append((rate, r))
                    if r["open"]:
                        ctx.problems.append("Redis saturation, round %d, %s: %d decisions "
                                            "answered open while Redis answered"
                                            % (n + 1, row_name(name), r["open"]))
                    print("saturation round %d/%d %s: %s" % (n + 1, rounds, row_name(name),
                                                             table_row("", rate, r)),
                          flush=True)
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                ctx.problems.append("Redis saturation, round %d: %s" % (n + 1, e))
    return out


def report(ctx, res):
    """The report's section: each share's median run by p99."""
    L = ["## Redis saturation", ""]
    if not res["capacity"]:
        return L + ["Not run.", ""]
    caps = sorted(res["capacity"])
    # the round of the median capacity, whole: its rows offer shares of one C0
    mid = res["capacity"].index(caps[len(caps) // 2])
    L.append("Offered load around what Redis decides, for a rules file of two limits "
             "per client (`600/1m` token bucket, `20/1s` log) and two layers (global, "
             "per address), hot keys: who decides. C0 measures Redis's capacity in a "
             "closed loop with a 1 s deadline (median of the rounds: %.0f decisions/s by "
             "Redis); each row then offers a share of it in an open loop with the "
             "default 20 ms deadline, round by round (%d rounds of %g s; the round of the "
             "median C0 is shown, the others' open decisions are in the Checks). A fresh "
             "redis-server and agent (`-t 1`) per run, Redis with `hz 100` as "
             "docs/redis.md advises (\"Key expiry\"); the row \"0.8x hz 10\" offers 0.8x to "
             "a Redis at its default hz 10, whose expiry of the limiter's keys holds it "
             "25 ms at a time, past the deadline. The shares are of the decisions Redis "
             "makes, applied to every request offered, about 40%% of which the refusal "
             "cache answers. C0 is bounded by this machine's two CPUs, which Redis, the "
             "agent and the generator share (the last column), more than by Redis alone. "
             "Past about 1.2x the generator cannot keep to its schedule (answered/s below "
             "offered/s at 2x) and its requests wait for one of its 160 places: p50 and "
             "p99 from the schedule then measure that backlog, and the agent's own time "
             "is p99 from the send." % (
                 caps[len(caps) // 2], len(caps), ctx.duration))
    L.append("")
    L.append(COLUMNS)
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in ROWS:
        if mid < len(res["rows"].get(name, ())):
            rate, r = res["rows"][name][mid]
            L.append(table_row(row_name(name), rate, r))
    L.append("")
    L.append("- **by Redis**: decisions Redis made; **by refusal cache**: refused by the "
             "agent's cache of clients Redis refused; **by local bucket**: saturated, "
             "their deadline passed while Redis kept answering (docs/redis.md, \"When "
             "Redis is busy\"); **open**: answered by the failure mode (`open` here) "
             "while Redis answered, the figure that must stay 0.")
    L.append("- **p50, p99**: spop-bench's, from each request's scheduled time (open "
             "loop); **p99 from send**: from the moment it was written, which leaves out "
             "the time a request waited for one of the 8 x 20 places in flight (as "
             "behind HAProxy's own limit) or for the generator's thread. **in the agent "
             "past 25 ms**: decisions answered (by Redis or the local bucket) more than "
             "5 ms after their deadline, from the agent's histograms.")
    L.append("- **Redis CPU**: INFO cpu over the run, in % of one CPU. **waiting for a CPU**: "
             "the share of the run each process was ready to run but waited for a CPU "
             "(/proc/PID/task/*/schedstat, its threads summed): Redis, the agent and the "
             "generator share this machine's two CPUs with each other, and the time they "
             "wait is in the latencies.")
    L.append("- Command: `python3 bench/saturation_bench.py --duration %g` (one round; "
             "`--soak SECONDS` for the soak in the notes below), generator "
             "`spop-bench --rate R %s`." % (ctx.duration, " ".join(GEN[:-2])))
    L.append("")
    return L


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shares", default="0.8,1.2,1.5,2")
    ap.add_argument("--hz", type=int, default=100,
                    help="the Redis servers' hz (default 100; Redis's own default is 10)")
    ap.add_argument("--soak", type=float, default=0,
                    help="instead of the rows: SECONDS at 0.8x with --lease 1s, "
                         "the agent's RSS sampled every --sample seconds")
    ap.add_argument("--sample", type=int, default=30,
                    help="with --soak: seconds between samples (default 30)")
    ap.add_argument("--mem-max-keys", type=int,
                    help="with --soak: the agent's --mem-max-keys (the local buckets' bound)")
    ap.add_argument("--log", help="keep the agent's and Redis's output in this file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rl-saturation-") as tmp:
        if args.log:
            os.symlink(os.path.abspath(args.log), os.path.join(tmp, "log"))
        c0 = row(args, tmp, 1000, 0)
        capacity = c0["redis"] / c0["seconds"]
        print("C0 closed loop, --redis-timeout 1000, hz %d: %.0f decisions/s by Redis, Redis "
              "CPU %.0f%%" % (args.hz, capacity, c0["redis_cpu"]), flush=True)
        if args.soak:
            args.duration = args.soak
            rate = max(1, round(capacity * 0.8))
            more = ["--mem-max-keys", str(args.mem_max_keys)] if args.mem_max_keys else []
            r = row(args, tmp, 20, rate, ["--lease", "1s"] + more, sample_s=args.sample)
            rss = r["rss_kb"]
            print("soak %.0f s at 0.8x (%d/s), --lease 1s: %d answered (%.0f/s), %d by Redis, "
                  "%d by the refusal cache, %d saturated, %d open (%d breaker skips after %d trips, "
                  "%d with the queue full), %d unanswered; p50 %.0f us, "
                  "p99 %.0f us (from the send: p50 %.0f us, p99 %.0f us; %d in the agent past 25 ms); "
                  "Redis CPU %.0f%%; waiting for a CPU: agent %.0f%%, Redis %.0f%%, generator "
                  "%.0f%%; agent RSS (kB, every %d s): %s"
                  % ((args.soak, rate, r["requests"], r["rps"], r["redis"], r["cache"],
                      r["local"], r["open"], r["skips"], r["trips"], r["unavailable"],
                      r["lost"], r["p50_us"], r["p99_us"], r["sent_p50_us"], r["sent_p99_us"],
                      r["late"], r["redis_cpu"]) + tuple(r["cpu_wait"])
                     + (args.sample, " ".join(str(x) for x in rss))),
                  flush=True)
            print("local buckets and log chunks in memory (every %d s): %s"
                  % (args.sample, " ".join("%d/%d" % k for k in r["mem_keys"])), flush=True)
            return
        print("\n" + COLUMNS)
        print("|---" * (COLUMNS.count("|") - 1) + "|")
        for share in [float(x) for x in args.shares.split(",")]:
            rate = max(1, round(capacity * share))
            r = row(args, tmp, 20, rate)
            print(table_row("%.1fx" % share, rate, r), flush=True)


if __name__ == "__main__":
    main()
