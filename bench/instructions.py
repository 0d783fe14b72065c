#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Counts the agent's instructions per answer with callgrind.

    python3 bench/instructions.py --build build [--json]

Timings on a shared machine move by tens of percent from one run to the
next; instruction counts hardly move, so they show what a change to the
request path costs. The agent (-t 1, the in-memory store, a limit no
request reaches) runs under `valgrind --tool=callgrind`, driven by
spop-bench with one connection and one request in flight. Each figure is

    (instructions for LONG requests - instructions for SHORT) / (LONG - SHORT)

so start-up, HELLO, the first sight of each key and shutdown cancel out and
what is left is the steady cost of one answer, protocol and system call
wrappers included. The figures: a check-rate decision, the ACK of an
unknown message (the protocol alone: the floor under any decision), a
decision of three stacked rules, a request of an adaptive backend and one
charged by its response (each two messages: check-rate, then the release
or response that gives the request's place back, as spop-bench --then
sends them), and a decision with Redis (a fresh
redis-server; spop-bench with 8 connections of 2 requests in flight, so
that calls carry several decisions: the agent's side of a decision in
Redis, the calls' formatting and replies included).

bench/run.py calls run() so that BENCHMARKS.md records them. Without
valgrind the measurement is skipped (exit status 0, the reason on stderr).
"""

import argparse
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types

import redis_bench

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SHORT, LONG = 2000, 12000
KEYS = "1000"
HIGH_LIMIT = "1000000000/1h"
# Under valgrind the agent starts and stops some 50 times slower.
START_S = 60.0
STOP_S = 60.0
BENCH_S = 300.0

MESSAGES = (("decision", "check-rate", None), ("unknown", "unknown", None))

# A decision of three rules: the default rule and two layers stacked on it,
# a global one (one bucket for every client) and one per address.
STACKED_RULES = """\
limits: ["%s"]
layers:
  everyone: { identity: global, limits: ["%s"] }
  address: { identity: ip, limits: ["%s"] }
stack: [everyone, address]
""" % (HIGH_LIMIT, HIGH_LIMIT, HIGH_LIMIT)

# Adaptive shedding (docs/rules.md): every admitted request is timed from
# its check-rate to its release; a target no request reaches and a max no
# window of requests in flight reaches, so that nothing is shed and the
# limit stays where it starts; a timeout no request reaches (no drops).
ADAPTIVE_RULES = """\
limits: ["%s"]
shedding:
  adaptive: { target: 60s, max: 1000000, timeout: 1h }
""" % HIGH_LIMIT

# charge: response (docs/rules.md): admitted at the rule's cost as the
# estimate, settled by the response's cost; less than the estimate, as
# with an LLM's max_tokens, so each settlement gives some back.
CHARGE_ESTIMATE, CHARGE_COST = 10, 7
CHARGE_RULES = """\
tiers:
  default: standard
  standard: { limits: ["%s"], cost: %d, charge: response }
""" % (HIGH_LIMIT, CHARGE_ESTIMATE)

# Figures of a request of two messages: (key, rules, spop-bench's options)
TWO_MESSAGES = (
    ("adaptive", ADAPTIVE_RULES, ("--then", "release")),
    ("charge", CHARGE_RULES, ("--then", "response", "--then-cost", str(CHARGE_COST))),
)


# The Redis row: in flight at once, so that a call carries several
# decisions; a deadline no call under callgrind reaches.
REDIS_CONNS, REDIS_INFLIGHT = 8, 2
REDIS_TIMEOUT_MS = "2000"


def missing_tool():
    """Why the measurement cannot run here, or None."""
    if shutil.which("valgrind") is None:
        return "valgrind is missing (Debian package valgrind)"
    return None


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(proc, port, deadline):
    """True once the agent accepts connections on port (it logs nothing
    with -q, so a bare connection is the sign; it costs the same in the
    short run as in the long one)."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def wait_redis_ready(proc, rd, deadline):
    """True once the agent's worker has loaded its library into the Redis
    rd (its connection is ready when it reads the reply: a second more
    covers that under callgrind; a query sent before would wait for it,
    not fail)."""
    while time.monotonic() < deadline and proc.poll() is None:
        if "cmdstat_function|load" in rd.info("commandstats"):
            time.sleep(1.0)
            return proc.poll() is None
        time.sleep(0.2)
    return False


def callgrind_total(path):
    """The instruction total of a callgrind output file."""
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    raise RuntimeError("%s holds no total" % path)


def count(agent_bin, bench_bin, message, requests, workdir, rules=None, rd=None,
          then=(), key=None):
    """Instructions the agent ran to serve `requests` answers of `message`
    (start and stop included), under `rules` (a rules file's text) or the
    one high limit; with the Redis rd (a redis_bench.RedisServer) when
    given; `then`: spop-bench's options for a second message per request
    (--then), which the agent must answer for each; `key` names the
    figure's files."""
    port = free_port()
    tag = key or "%s%s%s" % (message, "-rules" if rules else "", "-redis" if rd else "")
    out = os.path.join(workdir, "callgrind.%s.%d.%%p" % (tag, requests))
    log_path = os.path.join(workdir, "agent-%s-%d.log" % (tag, requests))
    if rules:
        path = os.path.join(workdir, "rules.yaml")
        with open(path, "w") as f:
            f.write(rules)
        limits = ["--rules", path]
    else:
        limits = ["--limit", HIGH_LIMIT]
    conns, inflight, mport = "1", "1", None
    if rd:
        mport = free_port()
        limits += ["--redis", rd.addr, "--redis-timeout",
                   REDIS_TIMEOUT_MS, "--metrics", "127.0.0.1:%d" % mport]
        conns, inflight = str(REDIS_CONNS), str(REDIS_INFLIGHT)
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
           agent_bin, "-t", "1", "-q", "--listen", "127.0.0.1:%d" % port] + limits
    with open(log_path, "wb") as log:
        agent = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                 cwd=ROOT)
    try:
        if not wait_listening(agent, port, time.monotonic() + START_S):
            raise RuntimeError("agent under callgrind did not start: see %s" % log_path)
        if rd and not wait_redis_ready(agent, rd, time.monotonic() + START_S):
            raise RuntimeError("agent under callgrind not ready with Redis: see %s"
                               % log_path)
        bench = subprocess.run(
            [bench_bin, "--addr", "127.0.0.1:%d" % port, "--conns", conns, "--inflight", inflight,
             "--requests", str(requests), "--duration", "%d" % BENCH_S, "--keys", KEYS,
             "--message", message, "--json"] + list(then),
            stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=BENCH_S + 60, cwd=ROOT)
        res = json.loads(bench.stdout.strip().splitlines()[-1]) if bench.stdout.strip() else {}
        if bench.returncode != 0 or res.get("requests") != requests or res.get("errors"):
            raise RuntimeError("spop-bench: exit %d, %s of %d answered: %s" % (
                bench.returncode, res.get("requests"), requests, bench.stderr.strip()[-400:]))
        if then and res.get("then") != requests:
            raise RuntimeError("spop-bench %s: %s of %d second messages answered "
                               "(an answer without a place?)" % (
                                   " ".join(then), res.get("then"), requests))
        if rd:
            m = redis_bench.agent_metrics(mport)
            # every decision Redis's: none timed out or went without it
            lost = (m.get("spoa_rl_redis_timeouts_total", 0) +
                    m.get("spoa_rl_redis_unavailable_total", 0))
            if lost or m.get("spoa_rl_redis_queries_total", 0) < requests:
                raise RuntimeError("with Redis under callgrind: %d of %d decisions timed "
                                   "out or went without Redis, %d asked" % (
                                       lost, requests,
                                       m.get("spoa_rl_redis_queries_total", 0)))
        agent.send_signal(signal.SIGTERM)
        agent.wait(STOP_S)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    if agent.returncode != 0:
        raise RuntimeError("agent under callgrind exited with %d: see %s"
                           % (agent.returncode, log_path))
    files = glob.glob(out.replace("%p", "*"))
    if len(files) != 1:
        raise RuntimeError("expected one callgrind output, found %d" % len(files))
    return callgrind_total(files[0])


def run(agent_bin, bench_bin):
    """Returns ({"decision": n, "unknown": n, "stacked": n, "adaptive": n,
    "charge": n[, "redis": n]}, None), or (None, why not). adaptive and
    charge are per request: both its messages."""
    why = missing_tool()
    if why:
        return None, why
    figures = {}
    with tempfile.TemporaryDirectory(prefix="spoa-callgrind-") as workdir:
        try:
            for key, message, rules in MESSAGES + (("stacked", "check-rate", STACKED_RULES),):
                short = count(agent_bin, bench_bin, message, SHORT, workdir, rules)
                long_ = count(agent_bin, bench_bin, message, LONG, workdir, rules)
                figures[key] = round((long_ - short) / (LONG - SHORT))
            for key, rules, then in TWO_MESSAGES:
                n = {requests: count(agent_bin, bench_bin, "check-rate", requests, workdir,
                                     rules, then=then, key=key)
                     for requests in (SHORT, LONG)}
                figures[key] = round((n[LONG] - n[SHORT]) / (LONG - SHORT))
            if shutil.which("redis-server"):
                n = {}
                ctx = types.SimpleNamespace(free_port=free_port, logdir=workdir)
                for requests in (SHORT, LONG):
                    # a fresh one each: both runs see their clients' keys new
                    with redis_bench.RedisServer(ctx) as rd:
                        n[requests] = count(agent_bin, bench_bin, "check-rate", requests,
                                            workdir, rd=rd)
                figures["redis"] = round((n[LONG] - n[SHORT]) / (LONG - SHORT))
        except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as e:
            return None, str(e)
    return figures, None


# instructions per in-memory check-rate decision aimed at
TARGET_DECISION = 3500


def report_lines(figures, why):
    """The Markdown section of BENCHMARKS.md."""
    L = ["## Instructions per answer (callgrind)", ""]
    if figures is None:
        L += ["Not measured: %s." % why, ""]
        return L
    L.append("| answer | instructions |")
    L.append("|---|---:|")
    L.append("| check-rate decision, in-memory store | %d |" % figures["decision"])
    L.append("| ACK of an unknown message (protocol only) | %d |" % figures["unknown"])
    if "stacked" in figures:
        L.append("| check-rate decision of three rules (a rule and two layers: global, "
                 "per address), in-memory store | %d (%.2fx the one-rule decision) |"
                 % (figures["stacked"], figures["stacked"] / figures["decision"]))
    if "adaptive" in figures:
        L.append("| request of an adaptive backend (`shedding.adaptive`): check-rate and "
                 "its `release`, in-memory store | %d (%+d on the plain decision: %.2fx) |"
                 % (figures["adaptive"], figures["adaptive"] - figures["decision"],
                    figures["adaptive"] / figures["decision"]))
    if "charge" in figures:
        L.append("| request of a `charge: response` rule: check-rate and its `response` "
                 "(cost %d for an estimate of %d), in-memory store | %d (%+d on the plain "
                 "decision: %.2fx) |" % (CHARGE_COST, CHARGE_ESTIMATE, figures["charge"],
                                         figures["charge"] - figures["decision"],
                                         figures["charge"] / figures["decision"]))
    if "redis" in figures:
        L.append("| check-rate decision with Redis (a fresh redis-server; %d connections of "
                 "%d in flight, so calls of several decisions) | %d (%.2fx the in-memory "
                 "decision) |" % (REDIS_CONNS, REDIS_INFLIGHT, figures["redis"],
                                  figures["redis"] / figures["decision"]))
    L.append("")
    L.append("- A check-rate decision in memory takes %d instructions: the target of at "
             "most %d is %s." % (figures["decision"], TARGET_DECISION,
                                 "met" if figures["decision"] <= TARGET_DECISION
                                 else "NOT met"))
    L.append("")
    L.append("The agent (`-t 1 --limit %s`) under `valgrind --tool=callgrind`, driven by "
             "`spop-bench --conns 1 --inflight 1 --keys %s`%s: (instructions for %d "
             "requests - instructions for %d) / %d, so start-up and shutdown cancel out. "
             "Unlike the timings above, these counts hardly depend on the load of the "
             "machine. Measured by `python3 bench/instructions.py`."
             % (HIGH_LIMIT, KEYS, " (with Redis: `--redis` to a fresh redis-server, "
                "`--conns %d --inflight %d`)" % (REDIS_CONNS, REDIS_INFLIGHT)
                if "redis" in figures else "", LONG, SHORT, LONG - SHORT))
    if "adaptive" in figures:
        L.append("")
        L.append("The adaptive and charged rows count a request whole: its check-rate and "
                 "the second message that gives its place back (`spop-bench --then release`, "
                 "with `backend` and `request_id` in check-rate as "
                 "spoe-conf/ratelimit-adaptive.conf sends them; `--then response "
                 "--then-cost %d`, as spoe-conf/ratelimit-llm.conf), so what the feature "
                 "costs per request is the row less the plain decision. Their rules: "
                 "`shedding.adaptive` with a target no request reaches (nothing shed); a "
                 "tier with `cost: %d` and `charge: response`, each response settling "
                 "%d back." % (CHARGE_COST, CHARGE_ESTIMATE, CHARGE_ESTIMATE - CHARGE_COST))
    L.append("")
    return L


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="build directory (default build)")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    a = ap.parse_args()
    agent_bin, bench_bin = (os.path.join(ROOT, a.build, name)
                            for name in ("spoa-ratelimit", "spop-bench"))
    missing = [b for b in (agent_bin, bench_bin) if not os.access(b, os.X_OK)]
    if missing:
        print("instructions: missing %s; run `make agent tools` first" % ", ".join(missing),
              file=sys.stderr)
        return 2
    figures, why = run(agent_bin, bench_bin)
    if figures is None:
        if missing_tool():
            print("instructions: skipped: %s" % why, file=sys.stderr)
            return 0
        print("instructions: failed: %s" % why, file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(figures))
    else:
        print("instructions per in-memory decision: %d" % figures["decision"])
        print("instructions per ACK of an unknown message: %d" % figures["unknown"])
        print("instructions per in-memory decision of three rules: %d" % figures["stacked"])
        print("instructions per request of an adaptive backend (check-rate and release): %d"
              % figures["adaptive"])
        print("instructions per request charged by its response (check-rate and "
              "response): %d" % figures["charge"])
        if "redis" in figures:
            print("instructions per decision with Redis: %d" % figures["redis"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
