# SPDX-License-Identifier: Apache-2.0
"""Leased tokens (--lease): what they save, run by bench/run.py after the
Redis store's configurations and like them (a fresh redis-server and fresh
agents for every run, runs interleaved round by round, the median shown).

  H0  one hot client at 20x its limit from two agents on one Redis: each
      agent `-t 1 --limit 1000/1s`, one open-loop generator per agent at
      10000/s, all requests from the one client (`--keys 1`)
  HL  H0 with `--lease 100ms`
  N   H0's timetable on two agents with the in-memory store (no Redis):
      the latency the machine, the generators and the SPOP path give by
      themselves, which HL's p99 is held against
  M0  a realistic mix on one agent `-t 1 --limit 100000/1m`: 5 hot clients
      take half of 40000 requests/s, 100000 cold ones the other half
  ML  M0 with `--lease 100ms`

Targets (the issue's): in HL, at most one Redis call (FCALL) per 20
decisions and a p99 within 2x of N's; in ML, the Redis CPU saved against
M0 is reported. Every run checks that the hot client never got more than
its bucket allows over the run (one bucket in Redis for both agents), that
no decision was degraded, that every answer came from Redis, the local
refusal cache or a lease, that Redis ran no more FCALLs than the agent's
decisions calls plus one return per lease, and that the library Redis holds
after the run is ratelimit.lua.

run(ctx) returns the rows; report(ctx, rows) returns the Markdown lines.
"""

import json
import math
import os
import shutil
import subprocess
import time

import redis_bench
from redis_bench import RedisAgent, RedisServer, Window, quote
from resp import ProtocolError, RespError

import lua_scripts  # tests/e2e, on the path redis_bench set

LEASE = "100ms"
# The hot client: 1000 tokens, 1000 more per second, asked 20000 times a
# second (10000/s from each of two agents).
HOT_LIMIT, HOT_QUOTA, HOT_REFILL = "1000/1s", 1000, 1000.0
HOT_AGENTS, HOT_RATE = 2, 10000
# The mix. 100000/1m refills 1667 tokens/s on top of 100000: a hot client
# (4000/s) spends at most 4000 * 8 s = 32000 of them in a run, a cold one
# (20000/s over 100000 clients: one request every 5 s) a token or two, so
# nothing is refused (every answer is checked to pass) and the figures are
# the cost of deciding, not of refusing; yet the hot clients ask 400 tokens
# per 100 ms, far above the lease's threshold (LEASE_MIN, 4), and a lease
# (10% of 100000 at most) holds what they ask for in an interval.
MIX_QUOTA, MIX_RATE = 100000, 40000
MIX_LIMIT = "%d/1m" % MIX_QUOTA
MIX_KEYS, MIX_HOT_KEYS, MIX_HOT_SHARE = 100000, 5, 50

CALLS_TARGET = 20            # decisions per FCALL, at least (HL)
P99_TARGET = 2.0             # HL's p99 against N's, at most

LEASE_METRICS = ("grants", "tokens", "decisions", "waits", "returned_tokens",
                 "dropped_tokens")


# ---- one run -----------------------------------------------------------------

def merged_quantile(hists, max_us, q):
    """Quantile q (0..1) in us of several spop-bench histograms together,
    as spop-bench's own hist_quantile: the top of the bucket that holds
    the rank, never above the largest maximum."""
    counts = {}
    for h in hists:
        for upper, n in h:
            counts[upper] = counts.get(upper, 0) + n
    total = sum(counts.values())
    if not total:
        return None
    rank, seen = max(1, math.ceil(q * total)), 0
    for upper in sorted(counts):
        seen += counts[upper]
        if seen >= rank:
            return min(upper / 1e3, max_us)
    return max_us


def generators(ctx, ports, gen, duration):
    """One spop-bench per port, all at once. Returns (outputs, wall, CPU of
    the generators in percent of one CPU) or raises RuntimeError."""
    procs = []
    g0, t0 = ctx.children_cpu_s(), time.monotonic()
    try:
        for i, port in enumerate(ports):
            out = open(os.path.join(ctx.logdir, "lease-gen-%d-%d.json" % (port, i)), "w+")
            err = open(os.path.join(ctx.logdir, "lease-gen-%d-%d.err" % (port, i)), "w+")
            procs.append((subprocess.Popen(
                [ctx.bench_bin, "--addr", "127.0.0.1:%d" % port] + gen + ["--json"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=ctx.root), out, err))
        outs = []
        for p, out, err in procs:
            try:
                p.wait(duration + 60)
            except subprocess.TimeoutExpired:
                raise RuntimeError("spop-bench did not finish in %.0f s" % (duration + 60))
            out.seek(0)
            err.seek(0)
            lines = out.read().strip().splitlines()
            try:
                res = json.loads(lines[-1]) if lines else None
            except ValueError:
                res = None
            if res is None:
                raise RuntimeError("spop-bench exit %d, no result: %s"
                                   % (p.returncode, err.read().strip()[-600:]))
            res["exit"] = p.returncode
            res["stderr"] = err.read().strip()
            outs.append(res)
    finally:
        for p, out, err in procs:
            redis_bench.terminate(p, 1.0)
            out.close()
            err.close()
    wall = time.monotonic() - t0
    return outs, wall, 100 * (ctx.children_cpu_s() - g0) / wall


def summarize(res, outs, wall, agents_cpu):
    """The generators' figures, together."""
    res["requests"] = sum(o["requests"] for o in outs)
    res["passed"] = sum(o["passed"] for o in outs)
    res["limited"] = sum(o["limited"] for o in outs)
    res["errors"] = sum(o["errors"] for o in outs)
    res["lost"] = sum(o.get("lost", 0) for o in outs)
    res["exit"] = max(o["exit"] for o in outs)
    res["rps"] = sum(o["rps"] for o in outs)
    res["wall"] = wall
    res["shortest"] = min(o["seconds"] for o in outs)
    max_us = max(o["max_us"] for o in outs)
    hists = [o.get("hist_ns", []) for o in outs]
    res["p50_us"] = merged_quantile(hists, max_us, 0.50)
    res["p99_us"] = merged_quantile(hists, max_us, 0.99)
    res["p999_us"] = merged_quantile(hists, max_us, 0.999)
    res["agent_cpu"] = agents_cpu
    res["stderr"] = "\n".join(o["stderr"] for o in outs if o["stderr"])


def redis_once(ctx, agent_args, gen, nagents, duration):
    """One run: a fresh redis-server, `nagents` fresh agents on it (each
    with --metrics), one generator per agent at once. Returns the result."""
    with RedisServer(ctx) as rd:
        agents = []
        try:
            for _ in range(nagents):
                ag = RedisAgent(ctx, agent_args + ["--redis", rd.addr])
                ag.__enter__()
                agents.append(ag)
            m0 = [ag.metrics() for ag in agents]
            s0 = rd.command_stats("fcall")
            a0 = [ctx.proc_cpu_s(ag.agent.proc.pid) for ag in agents]
            win = Window(rd)
            win.start()
            outs, wall, gen_cpu = generators(ctx, [ag.agent.port for ag in agents], gen,
                                             duration)
            res = {"gen_cpu": gen_cpu}
            win.stop(res)
            a1 = [ctx.proc_cpu_s(ag.agent.proc.pid) for ag in agents]
            s1 = rd.command_stats("fcall")
            m1 = [ag.metrics() for ag in agents]
            summarize(res, outs, wall, None if None in a0 + a1 else
                      100 * sum(y - x for x, y in zip(a0, a1)) / wall)
            res["agent_cmds"] = [quote(ag.agent.cmdline()) for ag in agents]
            res["bench_cmds"] = [quote([ctx.rel(ctx.bench_bin), "--addr",
                                        "127.0.0.1:%d" % ag.agent.port] + gen + ["--json"])
                                 for ag in agents]
            res["library"] = [ag.library for ag in agents]
            res["library_code"] = rd.library_code()
        finally:
            for ag in agents:
                ag.__exit__(None, None, None)
        res["agent_exit"] = [ag.agent.exit_code for ag in agents]
        res["redis_cmd"] = rd.cmdline()
        res["redis_port"] = rd.port
    d = {}
    for x, y in zip(m0, m1):
        for k in y:
            d[k] = d.get(k, 0) + y[k] - x.get(k, 0)
    g = lambda name: int(d.get(name, 0))
    res["calls"] = g("spoa_rl_redis_calls_total")
    res["replies"] = g("spoa_rl_redis_replies_total")
    res["local"] = g("spoa_rl_local_refusals_total")
    res["degraded"] = g("spoa_rl_degraded_total")
    res["timeouts"] = g("spoa_rl_redis_timeouts_total")
    res["unavailable"] = g("spoa_rl_redis_unavailable_total")
    res["redis_errors"] = g("spoa_rl_redis_errors_total")
    res["library_missing"] = g("spoa_rl_redis_library_missing_total")
    res["lease"] = {k: g("spoa_rl_lease_%s_total" % k) for k in LEASE_METRICS}
    res["fcall"] = s1[0] - s0[0]
    res["failed"] = s1[2] - s0[2]
    n = res["requests"]
    res["fcall_per_decision"] = res["fcall"] / n if n else None
    res["cpu_per_decision"] = 1e6 * res["redis_cpu_s"] / n if n else None
    return res


def memory_once(ctx, agent_args, gen, nagents, duration):
    """One run of `nagents` agents with the in-memory store (no Redis), one
    generator each, at once."""
    agents = []
    try:
        for _ in range(nagents):
            ag = ctx.Agent(ctx.agent_bin, agent_args, ctx.logdir)
            ag.__enter__()
            agents.append(ag)
        a0 = [ctx.proc_cpu_s(ag.proc.pid) for ag in agents]
        i0 = redis_bench.machine_idle()
        outs, wall, gen_cpu = generators(ctx, [ag.port for ag in agents], gen, duration)
        i1 = redis_bench.machine_idle()
        a1 = [ctx.proc_cpu_s(ag.proc.pid) for ag in agents]
        res = {"gen_cpu": gen_cpu, "redis_cpu": None, "redis_wait": None}
        summarize(res, outs, wall, None if None in a0 + a1 else
                  100 * sum(y - x for x, y in zip(a0, a1)) / wall)
        res["agent_cmds"] = [quote(ag.cmdline()) for ag in agents]
        res["bench_cmds"] = [quote([ctx.rel(ctx.bench_bin), "--addr", "127.0.0.1:%d" % ag.port]
                                   + gen + ["--json"]) for ag in agents]
    finally:
        for ag in agents:
            ag.stop()
    res["agent_exit"] = [ag.exit_code for ag in agents]
    ok = i0 and i1 and i1[2] > i0[2]
    res["idle"] = 100 * (i1[0] - i0[0]) / (i1[2] - i0[2]) if ok else None
    res["steal"] = 100 * (i1[1] - i0[1]) / (i1[2] - i0[2]) if ok else None
    return res


# ---- checks --------------------------------------------------------------------

def hot_allowance(res, buckets):
    """What `buckets` buckets of HOT_LIMIT allow over the run: full at the
    start, refilled for as long as the generators ran."""
    return buckets * (HOT_QUOTA + HOT_REFILL * res["wall"])


def common_checks(res):
    bad = []
    if res["exit"] != 0:
        bad.append("spop-bench exit status %d" % res["exit"])
    if res["errors"] or res["lost"]:
        bad.append("%d errors, %d requests unanswered" % (res["errors"], res["lost"]))
    if res["requests"] == 0:
        bad.append("no request answered")
    if any(x != 0 for x in res["agent_exit"]):
        bad.append("agent exit status on SIGTERM: %s" % res["agent_exit"])
    return bad


def redis_checks(res, library, leased):
    """What every Redis run must show; `library` the text of
    ratelimit.lua."""
    bad = []
    if res["degraded"] or res["timeouts"] or res["unavailable"] or res["redis_errors"]:
        bad.append("%d decisions degraded (%d past the deadline, %d without Redis, "
                   "%d error replies)" % (res["degraded"], res["timeouts"],
                                          res["unavailable"], res["redis_errors"]))
    if res["failed"]:
        bad.append("%d FCALL failed in Redis" % res["failed"])
    if res["library_missing"]:
        bad.append("%d calls found no library in Redis" % res["library_missing"])
    if any(x != lua_scripts.LIBRARY_NAME for x in res["library"]):
        bad.append("the agents say they loaded %s, not %r"
                   % (res["library"], lua_scripts.LIBRARY_NAME))
    if res["library_code"] != library:
        bad.append("the library Redis holds after the run is not the text of %s"
                   % redis_bench.LIBRARY)
    ls = res["lease"]
    answered = res["replies"] + res["local"] + ls["decisions"] + ls["waits"]
    if answered != res["requests"]:
        bad.append("%d answers, but %d from Redis, %d from the local cache and %d + %d "
                   "from leases" % (res["requests"], res["replies"], res["local"],
                                    ls["decisions"], ls["waits"]))
    # Redis runs the agents' decision calls and, with leases, at most one
    # return (rl8_return) per lease
    returns = res["fcall"] - res["calls"]
    if returns < 0 or returns > (ls["grants"] if leased else 0):
        bad.append("Redis ran %d FCALL, the agents sent %d decision calls and had %d "
                   "leases" % (res["fcall"], res["calls"], ls["grants"]))
    if not leased and (ls["grants"] or ls["decisions"] or ls["waits"]):
        bad.append("lease counters moved without --lease: %s" % ls)
    if leased and not ls["decisions"]:
        bad.append("no decision came from a lease")
    return bad


def hot_checks(res, buckets):
    allowed = hot_allowance(res, buckets)
    if res["passed"] > allowed:
        return ["%d passed, more than the %.0f the bucket%s allow%s over %.2f s"
                % (res["passed"], allowed, "s" if buckets > 1 else "",
                   "" if buckets > 1 else "s", res["wall"])]
    return []


def mix_checks(res):
    if res["limited"] or res["passed"] != res["requests"]:
        return ["expected %d passed and 0 limited, got %d and %d"
                % (res["requests"], res["passed"], res["limited"])]
    return []


# ---- the rows --------------------------------------------------------------------

def pick(runs, by):
    """The median run by `by` (the upper middle when even)."""
    ordered = sorted(runs, key=lambda r: r[by] if r.get(by) is not None else float("inf"))
    return ordered[len(ordered) // 2]


def _f(v, fmt="%.1f"):
    return "-" if v is None else fmt % v


def do_run(ctx, row, r, runs):
    label = "[%s] %s, run %d/%d" % (row["key"], row["short"], r + 1, runs)
    try:
        res = row["once"]()
    except (RuntimeError, OSError, ConnectionError, ProtocolError, RespError) as e:
        ctx.problems.append("%s: %s" % (label, e))
        print("%s: %s" % (label, e), flush=True)
        return
    bad = row["checks"](res)
    for b in bad:
        ctx.problems.append("%s: %s" % (label, b))
    row["runs"].append(res)
    lease = res.get("lease")
    print("%s: %.0f decisions/s, passed %d of %d, p50 %s us p99 %s us%s%s%s" % (
        label, res["rps"], res["passed"], res["requests"], _f(res["p50_us"]),
        _f(res["p99_us"]),
        "" if "fcall" not in res else
        ", %d FCALL (1 per %.0f decisions), Redis CPU %s us per decision" % (
            res["fcall"], res["requests"] / res["fcall"] if res["fcall"] else 0,
            _f(res["cpu_per_decision"], "%.2f")),
        "" if not lease or not lease["grants"] else
        ", %d leases, %.1f%% of decisions from leases" % (
            lease["grants"], 100.0 * lease["decisions"] / res["requests"]),
        "" if not bad else "  PROBLEM: " + "; ".join(bad)), flush=True)
    if bad and res.get("stderr"):
        print(res["stderr"], flush=True)


def run(ctx):
    """Runs H0, HL, N, M0 and ML, interleaved; returns the rows."""
    rows = {}
    if shutil.which("redis-server") is None:
        ctx.problems.append("Leased tokens: skipped, redis-server is not installed")
        return rows
    library = lua_scripts.library().encode()
    rounds = 1 if ctx.quick else ctx.runs
    duration = ctx.duration
    ctx.lease_rounds = rounds
    ctx.lease_duration = duration
    common = ["--requests", ctx.max_requests] + ctx.gen_args
    tail = ["--histogram", "--duration", "%g" % duration]
    hot_gen = common + ["--rate", str(HOT_RATE), "--keys", "1"] + tail
    mix_gen = common + ["--rate", str(MIX_RATE), "--keys", str(MIX_KEYS),
                        "--hot-keys", str(MIX_HOT_KEYS), "--hot-share",
                        str(MIX_HOT_SHARE)] + tail
    base = ["-t", "1", "--redis-timeout", redis_bench.REDIS_TIMEOUT_MS]
    lease = ["--lease", LEASE]

    def row(key, short, title, once, checks, median_by):
        rows[key] = {"key": key, "short": short, "title": title, "runs": [], "once": once,
                     "checks": checks, "median_by": median_by}
        return rows[key]

    def hot(leased):
        args = base + ["--limit", HOT_LIMIT] + (lease if leased else [])
        return lambda: redis_once(ctx, args, hot_gen, HOT_AGENTS, duration)

    def mix(leased):
        args = base + ["--limit", MIX_LIMIT] + (lease if leased else [])
        return lambda: redis_once(ctx, args, mix_gen, 1, duration)

    def redis_row_checks(leased, more):
        return lambda res: (common_checks(res) + redis_checks(res, library, leased)
                            + more(res))

    order = [
        row("H0", "hot client, no lease",
            "one client at 20x `--limit %s` from %d agents, no lease" % (HOT_LIMIT, HOT_AGENTS),
            hot(False), redis_row_checks(False, lambda res: hot_checks(res, 1)), "p99_us"),
        row("HL", "hot client, lease",
            "H0 with `--lease %s`" % LEASE,
            hot(True), redis_row_checks(True, lambda res: hot_checks(res, 1)), "p99_us"),
        row("N", "hot client, in memory",
            "H0's timetable, in-memory store (no Redis): %d agents, a bucket each" % HOT_AGENTS,
            lambda: memory_once(ctx, ["-t", "1", "--limit", HOT_LIMIT], hot_gen,
                                HOT_AGENTS, duration),
            lambda res: common_checks(res) + hot_checks(res, HOT_AGENTS), "p99_us"),
        row("M0", "mix, no lease",
            "%d hot clients take %d%% of %d/s, %d cold ones the rest, `--limit %s`, no lease"
            % (MIX_HOT_KEYS, MIX_HOT_SHARE, MIX_RATE, MIX_KEYS, MIX_LIMIT),
            mix(False), redis_row_checks(False, mix_checks), "cpu_per_decision"),
        row("ML", "mix, lease", "M0 with `--lease %s`" % LEASE,
            mix(True), redis_row_checks(True, mix_checks), "cpu_per_decision"),
    ]
    for r in range(rounds):
        for rw in order:
            do_run(ctx, rw, r, rounds)
    for rw in order:
        if rw["runs"]:
            rw["median"] = pick(rw["runs"], rw["median_by"])
    return rows


# ---- report ------------------------------------------------------------------------

def _cpu(v):
    return "-" if v is None else "%.0f%%" % v


def _per_call(m):
    """FCALL calls per decision as "1/N"."""
    if not m.get("fcall"):
        return "0" if m.get("fcall") == 0 else "-"
    return "1/%.0f" % (m["requests"] / m["fcall"])


def _calls_target(m):
    if m.get("fcall") is None:
        return "-"
    ok = m["fcall"] * CALLS_TARGET <= m["requests"]
    return "%s (target <= 1/%d: %s)" % (_per_call(m), CALLS_TARGET, "met" if ok else "NOT met")


def _saved(x):
    """A ratio of Redis CPU against M0's, in words."""
    return "%.0f%% saved" % (100 * (1 - x)) if x <= 1 else "%.0f%% more" % (100 * (x - 1))


def _from_leases(m):
    ls = m.get("lease")
    if not ls or not m["requests"]:
        return "-"
    return "%.1f%%" % (100.0 * ls["decisions"] / m["requests"])


def report(ctx, rows):
    """The "Leased tokens" section of BENCHMARKS.md, as a list of lines."""
    L = ["## Leased tokens", ""]
    if not rows:
        L += ["Not run (see Checks).", ""]
        return L
    med = lambda k: rows.get(k, {}).get("median")
    rounds, duration = ctx.lease_rounds, ctx.lease_duration
    L.append("With `--lease D` (Redis store only, see `agent/store/lease.h`) the Redis call "
             "that decides a busy client's request also takes up to k more tokens of its "
             "buckets, which the worker spends on the client's next requests without asking "
             "Redis, for at most D; what is left goes back. Leased tokens are taken, so the "
             "fleet never admits more than Redis counted. Each run: a fresh `redis-server` "
             "(no persistence) and fresh agents (`-t 1 --redis-timeout %s`, `--metrics` on a "
             "free port), open-loop generators (%s, `--histogram`) for %g s. The runs of all "
             "five rows are interleaved (the first run of each, then the second of each, ...), "
             "%d round%s; the median run is shown (by p99 for H0, HL and N, by Redis CPU per "
             "decision for M0 and ML) and every run is listed."
             % (redis_bench.REDIS_TIMEOUT_MS, " ".join(ctx.gen_args), duration, rounds,
                "s" if rounds != 1 else ""))
    L.append("")

    L.append("### A hot client")
    L.append("")
    L.append("One client (`--keys 1`: `key-000000`) asks 20 times its limit: two agents "
             "`--limit %s` on the same Redis, each with its own generator at %d/s (together "
             "%d/s, 20x the 1000/s refill). Passed is checked against what the one bucket in "
             "Redis allows over the run (%d at first, %g per second of the generators' wall "
             "time); N has a bucket per agent. \"FCALL calls per decision\" is Redis's "
             "`cmdstat_fcall` calls (decisions and lease returns, INFO commandstats) over the "
             "decisions made (answers); p50 and p99 are of both generators' histograms merged, "
             "counted from each request's scheduled time. Targets: HL at most one FCALL per "
             "%d decisions; HL's p99 within %gx of N's (the in-memory store on the same "
             "timetable)." % (HOT_LIMIT, HOT_RATE, HOT_RATE * HOT_AGENTS, HOT_QUOTA,
                              HOT_REFILL, CALLS_TARGET, P99_TARGET))
    L.append("")
    L.append("| # | configuration | decisions/s | passed (of the bucket's allowance) "
             "| FCALL calls per decision | p50 us | p99 us | p99 vs N | from leases "
             "| leases (tokens) | refused while waiting for a lease | CPU Redis / agents / "
             "generators | all runs (p99 us; FCALL per decision) |")
    L.append("|---|---|---:|---:|---|---:|---:|---|---:|---:|---:|---:|---|")
    n = med("N")
    for key in ("H0", "HL", "N"):
        rw = rows.get(key)
        if not rw:
            continue
        m = rw.get("median")
        if not m:
            L.append("| %s | %s | failed | | | | | | | | | | |" % (key, rw["title"]))
            continue
        allowed = hot_allowance(m, HOT_AGENTS if key == "N" else 1)
        vs_n = "-"
        if key != "N" and n and n["p99_us"] and m["p99_us"]:
            x = m["p99_us"] / n["p99_us"]
            vs_n = "%.2fx%s" % (x, "" if key != "HL" else " (target <= %gx: %s)" % (
                P99_TARGET, "met" if x <= P99_TARGET else "NOT met"))
        ls = m.get("lease")
        L.append("| %s | %s | %.0f | %d of %.0f (%.1f%%) | %s | %s | %s | %s | %s | %s | %s "
                 "| %s / %s / %s | %s |" % (
                     key, rw["title"], m["rps"], m["passed"], allowed,
                     100.0 * m["passed"] / allowed,
                     _calls_target(m) if key == "HL" else _per_call(m),
                     _f(m["p50_us"]), _f(m["p99_us"]), vs_n, _from_leases(m),
                     "-" if not ls else "%d (%d)" % (ls["grants"], ls["tokens"]),
                     "-" if not ls else "%d" % ls["waits"],
                     _cpu(m.get("redis_cpu")), _cpu(m["agent_cpu"]), _cpu(m["gen_cpu"]),
                     ", ".join("%s; %s" % (_f(r["p99_us"]), _per_call(r)) for r in rw["runs"])))
    L.append("")
    h0, hl = med("H0"), med("HL")
    if hl:
        v = ("HL: %d FCALL calls for %d decisions, one per %.0f (%d decision calls, %d "
             "lease returns): the target of at most one per %d is %s. %s of the decisions "
             "(%d of the %d that passed) came from %d leases of %d tokens in all; %d "
             "requests were refused by the agents while they waited for a lease's tokens, "
             "%d by the local refusal cache, %d were decided in Redis." % (
                 hl["fcall"], hl["requests"],
                 hl["requests"] / hl["fcall"] if hl["fcall"] else float("inf"),
                 hl["calls"], hl["fcall"] - hl["calls"], CALLS_TARGET,
                 "met" if hl["fcall"] * CALLS_TARGET <= hl["requests"] else "NOT met",
                 _from_leases(hl), hl["lease"]["decisions"], hl["passed"],
                 hl["lease"]["grants"], hl["lease"]["tokens"],
                 hl["lease"]["waits"], hl["local"], hl["replies"]))
        if h0 and h0["fcall"]:
            v += (" Without leases (H0) it was one FCALL per %.0f decisions: batching and "
                  "the local refusal cache already spare Redis the refused requests, and "
                  "leases %s the calls (%.1fx)." % (
                      h0["requests"] / h0["fcall"],
                      "cut" if hl["fcall"] < h0["fcall"] else "do not cut",
                      h0["fcall"] / hl["fcall"] if hl["fcall"] else float("inf")))
        if n and n["p99_us"] and hl["p99_us"]:
            x = hl["p99_us"] / n["p99_us"]
            v += (" Latency: HL's p99 is %s us against N's %s us on the same timetable, "
                  "%.2fx: the target of at most %gx is %s%s." % (
                      _f(hl["p99_us"]), _f(n["p99_us"]), x, P99_TARGET,
                      "met" if x <= P99_TARGET else "NOT met",
                      "" if not h0 or not h0["p99_us"] else
                      " (H0, without leases: %s us, %.2fx)" % (
                          _f(h0["p99_us"]), h0["p99_us"] / n["p99_us"])))
        allowed = hot_allowance(hl, 1)
        v += (" The client got %d of the %.0f the bucket allowed (%.1f%%)%s: leased "
              "tokens are taken, so a lease held by the other agent or being given back "
              "shows as an early refusal, never as an admission over the limit." % (
                  hl["passed"], allowed, 100.0 * hl["passed"] / allowed,
                  "" if not h0 else ", against %d of %.0f (%.1f%%) without leases" % (
                      h0["passed"], hot_allowance(h0, 1),
                      100.0 * h0["passed"] / hot_allowance(h0, 1))))
        L.append("- " + v)
        L.append("")

    L.append("### A realistic mix")
    L.append("")
    L.append("One agent `-t 1 --limit %s`, one generator at %d/s: `--hot-keys %d --hot-share "
             "%d` sends %d%% of the requests to %d hot clients (`hot-000000` ...; %d/s each), "
             "the rest round-robin over %d cold clients (`--keys %d`: one request every %.0f s "
             "each). With `%s` (%.0f tokens a second on top of %d) nothing is refused in a "
             "run, which every run checks, while the hot clients ask far above a lease's "
             "threshold: leases can only pay where clients are busy, and this shows what "
             "they save when most clients are not. \"Redis CPU us per decision\" is Redis's "
             "CPU over the run (INFO cpu `used_cpu_sys + used_cpu_user`) divided by the "
             "decisions. No numeric target: the saving is ML's Redis CPU against M0's." % (
                 MIX_LIMIT, MIX_RATE, MIX_HOT_KEYS, MIX_HOT_SHARE, MIX_HOT_SHARE,
                 MIX_HOT_KEYS, MIX_RATE * MIX_HOT_SHARE // 100 // MIX_HOT_KEYS, MIX_KEYS,
                 MIX_KEYS, MIX_KEYS / (MIX_RATE * (100 - MIX_HOT_SHARE) / 100.0),
                 MIX_LIMIT, MIX_QUOTA / 60.0, MIX_QUOTA))
    L.append("")
    L.append("| # | configuration | decisions/s | Redis CPU us per decision | vs M0 "
             "| Redis CPU (% of one CPU) | Redis waiting for a CPU | FCALL calls per decision "
             "| p50 us | p99 us "
             "| from leases | leases (tokens) | CPU agent / generator "
             "| all runs (Redis CPU us per decision; p99 us) |")
    L.append("|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    m0 = med("M0")
    for key in ("M0", "ML"):
        rw = rows.get(key)
        if not rw:
            continue
        m = rw.get("median")
        if not m:
            L.append("| %s | %s | failed | | | | | | | | | | | |" % (key, rw["title"]))
            continue
        vs = "-"
        if key == "ML" and m0 and m0.get("cpu_per_decision") and m.get("cpu_per_decision"):
            x = m["cpu_per_decision"] / m0["cpu_per_decision"]
            vs = "%.2fx (%s)" % (x, _saved(x))
        ls = m.get("lease")
        L.append("| %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s "
                 "| %s |" % (
                     key, rw["title"], m["rps"], _f(m["cpu_per_decision"], "%.2f"), vs,
                     _cpu(m["redis_cpu"]), _cpu(m.get("redis_wait")), _per_call(m),
                     _f(m["p50_us"]), _f(m["p99_us"]), _from_leases(m),
                     "-" if not ls else "%d (%d)" % (ls["grants"], ls["tokens"]),
                     _cpu(m["agent_cpu"]), _cpu(m["gen_cpu"]),
                     ", ".join("%s; %s" % (_f(r["cpu_per_decision"], "%.2f"), _f(r["p99_us"]))
                               for r in rw["runs"])))
    L.append("")
    ml = med("ML")
    if m0 and ml and m0.get("cpu_per_decision") and ml.get("cpu_per_decision"):
        x = ml["cpu_per_decision"] / m0["cpu_per_decision"]
        pairs = [r["cpu_per_decision"] / s["cpu_per_decision"]
                 for s, r in zip(rows["M0"]["runs"], rows["ML"]["runs"])
                 if s.get("cpu_per_decision") and r.get("cpu_per_decision")]
        hot_share = MIX_HOT_SHARE / 100.0
        L.append("- ML: Redis used %.2f us of CPU per decision against M0's %.2f: %.2fx, "
                 "%s of Redis's CPU (round by round: %s). %s of ML's decisions "
                 "came from leases, of the %.0f%% the hot clients asked; Redis ran one FCALL "
                 "per %.1f decisions against one per %.1f in M0 (the calls that decide carried "
                 "%.1f decisions each against %.1f: with the hot clients' requests answered "
                 "from leases, the cold ones leave in smaller batches, and each call has a "
                 "cost of its own), and used %s%% of one CPU against %s%%." % (
                     ml["cpu_per_decision"], m0["cpu_per_decision"], x, _saved(x),
                     ", ".join("%.2fx" % p for p in pairs), _from_leases(ml),
                     100 * hot_share,
                     ml["requests"] / ml["fcall"] if ml["fcall"] else float("inf"),
                     m0["requests"] / m0["fcall"] if m0["fcall"] else float("inf"),
                     ml["replies"] / ml["calls"] if ml["calls"] else 0,
                     m0["replies"] / m0["calls"] if m0["calls"] else 0,
                     _f(ml["redis_cpu"], "%.0f"), _f(m0["redis_cpu"], "%.0f")))
        if m0.get("p99_us") and ml.get("p99_us"):
            L.append("- Latency of the mix: p99 %s us with leases, %s us without (%.2fx)."
                     % (_f(ml["p99_us"]), _f(m0["p99_us"]), ml["p99_us"] / m0["p99_us"]))
        L.append("")

    L.append("### How to read it")
    L.append("")
    L.append("- \"From leases\" is `spoa_rl_lease_decisions_total` over the decisions: "
             "requests allowed from a lease without a Redis call. \"Leases (tokens)\" is "
             "`spoa_rl_lease_grants_total` (`spoa_rl_lease_tokens_total`); \"refused while "
             "waiting\" is `spoa_rl_lease_waits_total`: requests refused by an agent after "
             "Redis refused the client, until a lease's worth of tokens is back. All are "
             "the agents' counters (`--metrics`), summed over the agents, as a difference "
             "over the run.")
    L.append("- Every Redis run checks: no decision degraded, past its deadline, without "
             "Redis or answered with an error; no FCALL failed; every answer came from Redis, "
             "the local refusal cache or a lease (the counts add up to the answers); Redis "
             "ran the agents' decision calls and, with leases, at most one return per lease "
             "(without leases, exactly the decision calls, and no lease counter moved); with "
             "leases, some decisions came from one; the library Redis held after the run is "
             "the text of %s; every agent stopped cleanly on SIGTERM. H0, HL and N: the "
             "client got no more than its bucket(s) allow over the run. M0 and ML: every "
             "request passed." % redis_bench.LIBRARY)
    L.append("- The machine's CPUs are shared by Redis, the agents and the generators (five "
             "processes in H0 and HL); CPU columns are percent of one CPU during the run "
             "(Redis: INFO cpu; agents: /proc, summed; generators: rusage, summed). \"Redis "
             "waiting for a CPU\" is the time its threads were runnable but not running "
             "(/proc/PID/task/*/schedstat). Redis's CPU per decision depends on how many "
             "decisions a call carries, and that on how long the previous call took: on a "
             "busy machine calls come back later and carry more, so the round-by-round "
             "ratios say more than one run's figure.")
    L.append("")

    L.append("### Commands")
    L.append("")
    L.append("The median run's exact commands (ports are picked free at run time; the "
             "generators of one run start together):")
    L.append("")
    for key in ("H0", "HL", "N", "M0", "ML"):
        rw = rows.get(key)
        if not rw:
            continue
        m = rw.get("median")
        lines = None
        if m:
            amp = " &" if len(m["bench_cmds"]) > 1 else ""
            lines = ([m["redis_cmd"]] if m.get("redis_cmd") else []) + m["agent_cmds"] + [
                c + amp for c in m["bench_cmds"]]
            if m.get("redis_cmd"):
                lines.append("# FCALL calls: INFO commandstats (cmdstat_fcall) before and "
                             "after; CPU: INFO cpu; the agents' /metrics before and after")
        L += redis_bench.command_block(key, rw["title"], lines)
    return L
