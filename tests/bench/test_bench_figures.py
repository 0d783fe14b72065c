"""The benchmark figures (bench/figures.py, bench/svg.py): drawn from fixed
results, they are well-formed SVG with a title, a description, labelled axes,
a bar per median and a dot per run at the right heights, the same bytes
every time, linked from the report by relative paths; and the histogram
spop-bench exports for them (--histogram) gives back its own percentiles."""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

import harness

sys.path.insert(0, os.path.join(harness.ROOT, "bench"))
import figures  # noqa: E402
import svg  # noqa: E402

NS = {"s": "http://www.w3.org/2000/svg"}
SOURCE = "`python3 bench/run.py --build build` (make bench), 2026-12-01 15:59 UTC, commit abc1234"


def hist(points):
    """A spop-bench histogram from {us: count}: buckets of 1 us."""
    return [[int(us * 1000), c] for us, c in sorted(points.items())]


def open_run(rps, spread):
    """An open-loop run: 1000 answers between 10 us and 10 ms."""
    h = hist({10: 500, 20: 400, 100 * spread: 90, 1000 * spread: 9, 10000: 1})
    return {"rps": rps, "requests": 1000, "hist_ns": h, "max_us": 9800.0,
            "p50_us": 10.0, "p90_us": 20.0, "p99_us": 100.0 * spread,
            "p999_us": 1000.0 * spread}


def memory_rows():
    rows = []
    for key, rps in (("base", [2177778, 2146188, 2094981]), ("mem1", [886336, 881934, 951623]),
                     ("mem2", [991298, 916142, 818863]), ("low", [701146, 1078303, 1023078])):
        runs = [{"rps": v} for v in rps]
        rows.append({"key": key, "title": key, "open": False, "runs": runs,
                     "median": sorted(runs, key=lambda r: r["rps"])[1]})
    for key, rps in (("half", 443162), ("quarter", 221582)):
        runs = [open_run(rps, s) for s in (1, 2, 3)]
        rows.append({"key": key, "title": key, "open": True, "runs": runs, "median": runs[1]})
    return rows


def redis_rows():
    rows = {}
    for key, rps, usec, cpu in (("R1", 75688, 11.6, 12.8), ("R2", 74234, 11.9, 12.6),
                                ("R3", 169633, 4.0, 4.6), ("C3", 151143, 6.0, 6.0)):
        runs = [{"rps": rps * f, "usec_per_decision": usec * f, "cpu_per_decision": cpu * f}
                for f in (0.9, 1.0, 1.1)]
        rows[key] = {"key": key, "runs": runs, "median": runs[1], "open": False}
    for key, rps in (("R5", 84814), ("N5", 84816), ("R6", 42407), ("N6", 42408)):
        runs = [open_run(rps, s) for s in (1, 2)]
        rows[key] = {"key": key, "runs": runs, "median": runs[0], "open": True}
    rows["R2w"] = {"key": "R2w", "runs": [], "open": False}  # every run failed
    return rows


def haproxy_rows():
    rows = {}
    for key, rps in (("H", 30000), ("F", 24000), ("A", 20000), ("M", 19000), ("R", 16000),
                     ("A200", 10000), ("M200", 9800), ("R200", 9000)):
        runs = [{"rps": rps + d} for d in (-500, 0, 300)]
        rows[key] = {"key": key, "runs": runs, "median": runs[1]}
    return rows


def draw(folder, report="BENCHMARKS.md"):
    return figures.draw(os.path.join(folder, report), SOURCE, memory_rows(), redis_rows(),
                        haproxy_rows(), {"R2": 1.0, "R3": 0.4, "R2w": 1.0, "R3w": 0.4},
                        {"M": 0.95, "R": 0.8})


def parse(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    root = ET.fromstring(text)
    assert root.tag == "{%s}svg" % NS["s"], root.tag
    return text, root


def texts(root):
    return [t.text for t in root.iter("{%s}text" % NS["s"])]


def with_class(root, tag, cls):
    return [e for e in root.iter("{%s}%s" % (NS["s"], tag)) if e.get("class") == cls]


def test_figures_are_written_under_stable_names_and_linked():
    with tempfile.TemporaryDirectory() as d:
        figs = draw(d)
        assert sorted(figs) == sorted(figures.FIGURES), figs
        assert sorted(os.listdir(os.path.join(d, "bench-figures"))) == sorted(
            n + ".svg" for n in figures.FIGURES)
        for name, (path, title) in figs.items():
            assert path == "bench-figures/%s.svg" % name, path
            text, root = parse(os.path.join(d, path))
            assert root.find("s:title", NS).text == title
            desc = root.find("s:desc", NS).text
            assert "python3 bench/run.py --build build" in desc and "2026-12-01" in desc, desc
            assert len(text) < 40000, (name, len(text))
        lines = figures.links(figs, "redis-throughput", "no-such-figure", "redis-cost")
        assert lines == ["![%s](bench-figures/redis-throughput.svg)"
                         % figs["redis-throughput"][1], "",
                         "![%s](bench-figures/redis-cost.svg)" % figs["redis-cost"][1], ""]
        # another report in the same folder keeps figures of its own
        other = figures.draw(os.path.join(d, "BENCHMARKS-quick.md"), SOURCE, memory_rows(),
                             None, None)
        assert sorted(other) == ["memory-latency", "memory-throughput"], other
        assert other["memory-latency"][0] == "BENCHMARKS-quick-figures/memory-latency.svg"


def test_same_input_same_bytes_and_stale_figures_removed():
    with tempfile.TemporaryDirectory() as d:
        draw(d)
        folder = os.path.join(d, "bench-figures")
        first = {n: open(os.path.join(folder, n), "rb").read() for n in os.listdir(folder)}
        draw(d)
        again = {n: open(os.path.join(folder, n), "rb").read() for n in os.listdir(folder)}
        assert first == again
        # a run without Redis and HAProxy leaves no figure of them behind
        figs = figures.draw(os.path.join(d, "BENCHMARKS.md"), SOURCE, memory_rows(), {}, None)
        assert sorted(os.listdir(folder)) == ["memory-latency.svg", "memory-throughput.svg"]
        assert sorted(figs) == ["memory-latency", "memory-throughput"]


def bar_scale(root):
    """(value -> y) of a bar chart, from two of its y tick labels and grid lines."""
    grid = [e for e in root.iter("{%s}line" % NS["s"]) if e.get("stroke") == svg.GRID]
    ys = sorted({float(e.get("y1")) for e in grid}, reverse=True)
    labels = [t for t in root.iter("{%s}text" % NS["s"]) if t.get("text-anchor") == "end"
              and t.get("fill") == svg.MUTED]
    assert labels[0].text == "0", labels[0].text
    return ys[0], ys[1], labels[1].text


def test_bars_and_runs_stand_at_their_values():
    with tempfile.TemporaryDirectory() as d:
        draw(d)
        _, root = parse(os.path.join(d, "bench-figures", "memory-throughput.svg"))
        bars = with_class(root, "rect", "bar")
        runs = with_class(root, "circle", "run")
        # the closed-loop rows only (an open loop's rate is the one it was given)
        assert len(bars) == 4 and len(runs) == 12, (len(bars), len(runs))
        y0, y1, label = bar_scale(root)
        unit = {"k": 1e3, "M": 1e6}[label[-1]] * float(label[:-1])
        val = lambda y: (y0 - y) / (y0 - y1) * unit
        rows = memory_rows()
        for bar, row in zip(bars, rows):
            assert abs(val(float(bar.get("y"))) - row["median"]["rps"]) < 0.002 * unit
        for dot, run in zip(runs, [r for row in rows[:4] for r in row["runs"]]):
            assert abs(val(float(dot.get("cy"))) - run["rps"]) < 0.002 * unit
        t = texts(root)
        assert "answers/s (NOTIFYs acknowledged)" in t, t
        assert "0.41x" in t and "886k" in t and "baseline (1): 2.15M/s" in t, t
        bold = [e.text for e in root.iter("{%s}text" % NS["s"]) if e.get("font-weight")]
        assert bold[1:] == ["1", "2", "3", "4"], bold

        _, root = parse(os.path.join(d, "bench-figures", "redis-cost.svg"))
        # two measures per row, R2w without a run, targets on R2 and R3
        assert len(with_class(root, "rect", "bar")) == 8
        assert len(with_class(root, "line", "target")) == 2
        assert texts(root).count("no run") == 2
        assert "Redis \u00b5s per decision" in texts(root)

        _, root = parse(os.path.join(d, "bench-figures", "haproxy-throughput.svg"))
        t = texts(root)
        assert "0.95x" in t and "A, the answer floor: 20k/s" in t, t
        assert "HTTP requests/s (wrk)" in t and "1.20x" in t, t
        # the rows with 200 connections against A200, not A
        assert "0.98x" in t and "0.90x" in t and "A, 200" in t, t
        assert len(with_class(root, "line", "target")) == 2


def test_quantile_and_curve():
    h = hist({10: 500, 20: 400, 100: 90, 1000: 9, 10000: 1})
    assert figures.quantile(h, 0.5, 9800.0) == 10.0
    assert figures.quantile(h, 0.9, 9800.0) == 20.0
    assert figures.quantile(h, 0.99, 9800.0) == 100.0
    assert figures.quantile(h, 0.999, 9800.0) == 1000.0
    # the top bucket's bound is above the maximum: the maximum it is
    assert figures.quantile(h, 1.0, 9800.0) == 9800.0
    c = figures.latency_curve(open_run(1, 1))
    assert len(c) == figures.CURVE_SAMPLES + 1
    assert c[0] == (0.0, 10.0) and c[-1] == (3.0, 9800.0), (c[0], c[-1])
    assert all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(c, c[1:]))
    # without a histogram: through the percentiles spop-bench prints
    r = {"requests": 100000, "p50_us": 50.0, "p90_us": 90.0, "p99_us": 300.0,
         "p999_us": 900.0, "max_us": 2000.0}
    assert figures.latency_curve(r) == [(math.log10(2), 50.0), (1.0, 90.0), (2.0, 300.0),
                                        (3.0, 900.0), (5.0, 2000.0)]


def test_latency_figure_has_every_run_and_axes():
    with tempfile.TemporaryDirectory() as d:
        draw(d)
        _, root = parse(os.path.join(d, "bench-figures", "redis-latency.svg"))
        assert len(with_class(root, "path", "median")) == 4
        assert len(with_class(root, "path", "run")) == 4
        assert len(with_class(root, "line", "hline")) == 1
        t = texts(root)
        for label in ("latency (log scale)", "50", "90", "99", "99.9", "10 \u00b5s", "1 ms",
                      "10 ms", "R5: Redis, 84.8k/s", "N6: in memory, same timetable, 42.4k/s"):
            assert label in t, (label, t)
        # higher percentiles never lower: y (downwards) never grows along a curve
        for p in with_class(root, "path", "median"):
            ys = [float(c.split()[1]) for c in p.get("d")[1:].split(" L")]
            assert all(b <= a for a, b in zip(ys, ys[1:])), ys


def test_command_block():
    """The commands of a report's row: its key and title, then its lines in
    a code block indented under it, or that no run succeeded."""
    import redis_bench
    assert redis_bench.command_block("R3", "batched", ["redis-server", "# a note"]) == [
        "R3. batched", "", "   ```", "   redis-server", "   # a note", "   ```", ""]
    assert redis_bench.command_block(2, "memory", None) == [
        "2. memory", "", "   ```", "   (no successful run)", "   ```", ""]


def test_svg_helpers():
    assert [svg.si(v) for v in (0, 12.63, 886336, 2146188, 999700, 1e9)] == [
        "0", "12.6", "886k", "2.15M", "1M", "1G"]
    assert svg.linear_ticks(2.5e6) == [0, 5e5, 1e6, 1.5e6, 2e6, 2.5e6]
    assert svg.linear_ticks(12) == [0, 2.5, 5, 7.5, 10, 12.5]
    assert svg.linear_ticks(13) == [0, 5, 10, 15]
    assert [svg.duration_us(v) for v in (20, 1000, 2500, 3e6)] == [
        "20 \u00b5s", "1 ms", "2.5 ms", "3 s"]
    assert [svg.nines_label(x) for x in (0, math.log10(2), 1, 3, 5)] == [
        "0", "50", "90", "99.9", "99.999"]
    assert svg.num(-0.04) == "0" and svg.num(2.0) == "2" and svg.num(2.25) == "2.2"
    # text is escaped
    out = svg.bar_chart("a < b & c", "d", "e", [("x", [])],
                        [{"name": "n", "bars": [{"median": 1, "runs": [1]}]}])
    ET.fromstring(out)
    assert "a &lt; b &amp; c" in out


def spop_bench(*args):
    return subprocess.run([os.path.join(harness.BUILD, "spop-bench")] + list(args),
                          capture_output=True, text=True, timeout=30)


def test_spop_bench_histogram_gives_its_percentiles(h):
    a = h.agent("--limit", "1000000/1h")
    addr = "127.0.0.1:%d" % a.port
    r = spop_bench("--addr", addr, "--requests", "3000", "--rate", "20000", "--json",
                   "--histogram")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    hs = res["hist_ns"]
    assert sum(c for _, c in hs) == res["requests"] == 3000, res["requests"]
    assert all(c > 0 for _, c in hs)
    assert all(a[0] < b[0] for a, b in zip(hs, hs[1:])), "buckets not in order"
    assert hs[-1][0] >= res["max_us"] * 1000 - 100, (hs[-1], res["max_us"])
    for q, key in ((0.5, "p50_us"), (0.9, "p90_us"), (0.99, "p99_us"), (0.999, "p999_us")):
        assert "%.1f" % figures.quantile(hs, q, res["max_us"]) == "%.1f" % res[key], (key, res)
    # without the flag the line is what it was
    r = spop_bench("--addr", addr, "--requests", "500", "--json")
    assert r.returncode == 0, r.stderr
    assert "hist_ns" not in json.loads(r.stdout.strip().splitlines()[-1])


def test_spop_bench_histogram_needs_json():
    r = spop_bench("--addr", "127.0.0.1:1", "--histogram")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "--histogram" in r.stderr and "--json" in r.stderr, r.stderr


def test_haproxy_call_split():
    """R's round trip split into the agent's time per call and Redis's, from
    the metrics and commandstats a run keeps; nothing without them."""
    import haproxy_bench
    res = {"metrics": {"spoa_rl_redis_call_duration_seconds_count": 1000,
                       "spoa_rl_redis_call_duration_seconds_sum": 0.15,
                       "spoa_rl_decisions_total": 21000},
           "fcall": (1000, 50000)}
    per_call, agent_us, redis_us, rest = haproxy_bench.call_split(res)
    assert (per_call, round(agent_us), round(redis_us), round(rest)) == (21.0, 150, 50, 100)
    assert haproxy_bench.call_split(dict(res, fcall=None)) is None
    assert haproxy_bench.call_split(dict(res, fcall=(0, 0))) is None
    assert haproxy_bench.call_split({"metrics": {}, "fcall": (1, 1)}) is None


def test_haproxy_cpu_waits():
    """The run-queue waits of an R run: HAProxy's share of the run, the
    agent's and Redis's per call; nothing when a process's is missing."""
    import haproxy_bench
    res = {"metrics": {"spoa_rl_redis_call_duration_seconds_count": 2000},
           "waited": {"haproxy": 0.5, "agent": 0.1, "redis": 0.06, "wrk": 0.2},
           "wall": 5.0}
    share, agent_us, redis_us = haproxy_bench.cpu_waits(res)
    assert (round(share), round(agent_us), round(redis_us)) == (10, 50, 30)
    assert haproxy_bench.cpu_waits(dict(res, waited=dict(res["waited"], redis=None))) is None
    assert haproxy_bench.cpu_waits(dict(res, metrics={})) is None
    assert haproxy_bench.cpu_waits(dict(res, wall=0)) is None


def test_haproxy_cpu_budget():
    """R's CPU per request against A's and the rates they allow, worked
    by hand: A 20 + 2 + 15 = 37 us at 50000/s keeps 1.85 CPUs busy; R's
    45 us allow 41111/s there (0.82x), 44444/s on 2 CPUs; 0.8x of A
    (40000/s) takes 1.8 CPUs, or 46.25 - 20 - 15 us for the agent and
    Redis at A's 1.85."""
    import haproxy_bench
    rows = {"A": {"median": {"rps": 50000, "cpu": {"haproxy": 100, "agent": 10, "wrk": 75}}},
            "R": {"median": {"rps": 40000, "cpu": {"haproxy": 80, "agent": 20, "redis": 20,
                                                   "wrk": 60}}}}
    b = haproxy_bench.cpu_budget(rows, "R", ncpu=2)
    assert b[:2] == ("20.0 + 2.0 + - + 15.0 = 37.0", "20.0 + 5.0 + 5.0 + 15.0 = 45.0"), b
    assert [round(x, 4) for x in b[2:]] == [1.85, 2, 41111.1111, 0.8222, 44444.4444, 0.8889,
                                            0.8, 1.8, 90.0, 11.25, 10.0], b
    # no target for A itself; nothing without a process's share or a floor
    assert haproxy_bench.cpu_budget(rows, "A", ncpu=2) is None
    rows_no_wrk = {"A": rows["A"], "R": {"median": dict(rows["R"]["median"], cpu={"haproxy": 80})}}
    assert haproxy_bench.cpu_budget(rows_no_wrk, "R", ncpu=2) is None
    assert haproxy_bench.cpu_budget({"A": {}, "R": rows["R"]}, "R", ncpu=2) is None


def test_haproxy_binary_is_the_one_named():
    """HAPROXY names the HAProxy the rows measure, as for the end-to-end
    tests; a name that finds nothing skips them rather than measuring
    Debian's under it."""
    import haproxy_bench
    assert haproxy_bench.haproxy_binary(harness.HAPROXY)[0] == shutil.which(harness.HAPROXY)
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "haproxy-x")
        with open(exe, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(exe, 0o755)
        assert haproxy_bench.haproxy_binary(exe) == (exe, None)
        missing = os.path.join(d, "haproxy-y")
        assert haproxy_bench.haproxy_binary(missing) == (None, "HAPROXY=%s: not found" % missing)
    assert haproxy_bench.haproxy_binary(None)[0] == haproxy_bench.tool("haproxy",
                                                                       "/usr/sbin/haproxy")


def test_sched_s_reads_schedstat():
    """A process's time on a CPU and waiting for one, which the HAProxy
    rows take their waits from: seconds, not negative, where the kernel
    keeps schedstat; None for a process that is not."""
    import redis_bench
    t = redis_bench.sched_s(os.getpid())
    if os.path.exists("/proc/self/schedstat"):
        assert t is not None and t[0] > 0 and t[1] >= 0
    assert redis_bench.sched_s(2 ** 22 + 1) is None


def bench_run_module():
    """bench/run.py, loaded by its path: this directory has a run.py of its
    own."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "bench_run", os.path.join(harness.ROOT, "bench", "run.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_key_floor_measures_keys_with_an_expiry():
    """The floor the memory section sets beside M1: keys of the agent's
    shape holding a small integer, each with an expiry, written to a fresh
    redis-server. Each costs Redis its two table entries, its name and its
    share of the tables: between 64 and 160 bytes at any count that fills
    a table of Redis 7.0 by more than a third."""
    import types
    import redis_bench
    with tempfile.TemporaryDirectory() as d:
        ctx = types.SimpleNamespace(logdir=d, free_port=harness.free_port)
        floor, why = redis_bench.key_floor(ctx, 12000)
    assert why is None and 64 < floor < 160, (floor, why)
    assert redis_bench.floor_command(12000) == (
        "python3 -c 'for i in range(12000): print(\"SET {%04d}%08d 5 PX 3600000\" % "
        "(i % 10000, i))' | redis-cli -p PORT --pipe")
    line = redis_bench.floor_line(101.4, 117.2)
    assert "cost 101 bytes each" in line and "no layout of a key per client with an " \
        "expiry meets the target of <= 100 here; M1 holds 117, 16 bytes more" in line, line
    line = redis_bench.floor_line(99.6, None)
    assert "can meet the target of <= 100 here only with a value" in line, line
    assert "M1 holds" not in line, line


def test_proc_times_s_splits_a_process_s_cpu():
    """The HAProxy rows take CPU and system time from one reading: user
    and system seconds, not negative, the system part growing while the
    process makes system calls, their sum what proc_cpu_s gives; None for
    a process that is not."""
    bench_run = bench_run_module()
    u0, s0 = bench_run.proc_times_s(os.getpid())
    assert u0 >= 0 and s0 >= 0
    deadline = time.monotonic() + 10
    while bench_run.proc_times_s(os.getpid())[1] <= s0 and time.monotonic() < deadline:
        with open("/proc/self/stat") as f:
            f.read()
    u1, s1 = bench_run.proc_times_s(os.getpid())
    assert s1 > s0 and u1 >= u0
    t = bench_run.proc_cpu_s(os.getpid())
    assert u1 + s1 <= t <= u1 + s1 + 1.0
    assert bench_run.proc_times_s(2 ** 22 + 1) is None
    assert bench_run.proc_cpu_s(2 ** 22 + 1) is None


def test_sleeps_counts_a_process_going_to_sleep():
    """The HAProxy rows' sleeps per request: a process that sleeps between
    two readings is counted once more for each sleep; None for a process
    that is not."""
    import redis_bench
    n0 = redis_bench.sleeps(os.getpid())
    for _ in range(3):
        time.sleep(0.002)
    n1 = redis_bench.sleeps(os.getpid())
    assert n0 is not None and n1 - n0 >= 3, (n0, n1)
    assert redis_bench.sleeps(2 ** 22 + 1) is None


def test_during_takes_each_process_s_growth():
    """A run's per-process figures are what each reading grew by between
    the run's two readings; a process either reading missed has None."""
    import haproxy_bench
    before = {"haproxy": (1.0, 0.25), "agent": (0.5, 0.0), "redis": None}
    after = {"haproxy": (3.0, 0.75), "agent": None, "redis": (2.0, 1.0)}
    assert haproxy_bench.during(before, after, lambda v: v[1]) == {
        "haproxy": 0.5, "agent": None, "redis": None}
    assert haproxy_bench.during({"wrk": 7}, {"wrk": 10}) == {"wrk": 3}


def test_sleeps_per_request():
    """Worked by hand: A's HAProxy slept 1000 times over 10000 requests
    (0.10 a request) and its agent 700 (0.07); R's agent 3000 of 10000 and
    Redis 2000. Rows without HAProxy's or the agent's figure are left out,
    and a missing Redis is a dash in the report line."""
    import haproxy_bench
    rows = {"A": {"median": {"requests": 10000,
                             "sleeps": {"haproxy": 1000, "agent": 700}}},
            "M": {"median": {"requests": 10000, "sleeps": {"haproxy": 900, "agent": None}}},
            "R": {"median": {"requests": 10000,
                             "sleeps": {"haproxy": 1500, "agent": 3000, "redis": 2000}}}}
    got = haproxy_bench.sleeps_per_request(rows)
    assert [k for k, _ in got] == ["A", "R"]
    assert got[0][1] == {"haproxy": 0.1, "agent": 0.07}
    assert got[1][1] == {"haproxy": 0.15, "agent": 0.3, "redis": 0.2}
    assert haproxy_bench.sleeps_per_request({"A": {"median": {"requests": 0}}}) == []


def test_kernel_per_request():
    """Worked by hand: A at 50000 requests/s, HAProxy at 100% of a CPU
    (20 us a request), 50% of it system time (10 us); its agent at 10%, 6%
    system (2.0 and 1.2 us). M at 40000/s, its agent 10% and 5% (2.5 and
    1.25 us); R at 32000/s, its agent 16% and 12% (5.0 and 3.75 us), Redis
    20% and 6.4% (6.25 and 2.0 us). So the agent spends 2.5 us more per
    request in R than in M, all 2.5 of them in the kernel. A row without
    the system times (or without the agent's) is left out, and without M
    there is no difference."""
    import haproxy_bench
    a = {"rps": 50000, "cpu": {"haproxy": 100, "agent": 10, "redis": None, "wrk": 75},
         "sys": {"haproxy": 50, "agent": 6, "redis": None}}
    m = {"rps": 40000, "cpu": {"haproxy": 80, "agent": 10}, "sys": {"haproxy": 40, "agent": 5}}
    r = {"rps": 32000, "cpu": {"haproxy": 64, "agent": 16, "redis": 20},
         "sys": {"haproxy": 32, "agent": 12, "redis": 6.4}}
    got, extra = haproxy_bench.kernel_per_request(
        {"A": {"median": a}, "M": {"median": m}, "R": {"median": r}})
    assert [k for k, _ in got] == ["A", "M", "R"]
    assert got[0][1] == {"haproxy": (20.0, 10.0), "agent": (2.0, 1.2)}
    assert got[2][1] == {"haproxy": (20.0, 10.0), "agent": (5.0, 3.75), "redis": (6.25, 2.0)}
    assert [round(v, 9) for v in extra] == [2.5, 2.5]
    got, extra = haproxy_bench.kernel_per_request(
        {"A": {"median": a}, "M": {"median": dict(m, sys={})}, "R": {"median": r}})
    assert [k for k, _ in got] == ["A", "R"] and extra is None
    assert haproxy_bench.kernel_per_request({"A": {"median": {"rps": 0}}}) == ([], None)


def test_instructions_report_redis_row():
    """The callgrind section shows the decision with Redis beside the
    in-memory one when it was measured, and leaves the row out when not."""
    import instructions
    figures = {"decision": 3500, "unknown": 1300, "stacked": 7600, "redis": 5250}
    text = "\n".join(instructions.report_lines(figures, None))
    assert "| check-rate decision with Redis" in text
    assert "| 5250 (1.50x the in-memory decision) |" in text
    assert "takes 3500 instructions: the target of at most 3500 is met." in text
    figures["decision"] = 3501
    assert "the target of at most 3500 is NOT met." in "\n".join(
        instructions.report_lines(figures, None))
    del figures["redis"]
    assert "with Redis" not in "\n".join(instructions.report_lines(figures, None))
    assert "--redis" not in "\n".join(instructions.report_lines(figures, None))


def test_in_memory_report_states_its_target():
    """The in-memory section says whether configuration 2 reaches 0.7x of
    the baseline, from the medians, on either side of the line."""
    run = bench_run_module()

    def row(key, rps):
        m = {"rps": rps, "p50_us": 50.0, "p99_us": 90.0, "p999_us": 200.0, "limited": 0,
             "requests": 1000, "agent_cmd": "a", "bench_cmd": "b", "agent_cpu": 90.0,
             "gen_cpu": 99.0}
        return {"key": key, "title": key, "open": False, "runs": [m], "median": m}

    text = "\n".join(run.in_memory_section([row("base", 1000), row("mem1", 700)], 2, None))
    assert "answers 0.70x the baseline's answers/s: the target of at least 0.70x is met." \
        in text, text
    text = "\n".join(run.in_memory_section([row("base", 1000), row("mem1", 690)], 2, None))
    assert "answers 0.69x the baseline's answers/s: the target of at least 0.70x is NOT met." \
        in text, text


def test_interleave_runs_round_by_round():
    """The rows of a section (the in-memory ones with a run function of
    their own) run 1 of every row, then 2 of every row; each row with runs
    gets the median run, a row without none."""
    import types
    import redis_bench
    order = []
    rows = [{"key": k, "open": False, "runs": []} for k in ("a", "b", "c")]

    def one(row, r):
        order.append((row["key"], r))
        if row["key"] != "c":
            row["runs"].append({"rps": 10 * r + (row["key"] == "b")})

    ctx = types.SimpleNamespace(pick_median=bench_run_module().pick_median)
    redis_bench.interleave(ctx, rows, 3, one=one)
    assert order == [(k, r) for r in range(3) for k in ("a", "b", "c")], order
    assert rows[0]["median"] == {"rps": 10} and rows[1]["median"] == {"rps": 11}
    assert "median" not in rows[2]


def test_report_keeps_its_hand_written_notes():
    """bench/run.py writes BENCHMARKS.md anew each run; the notes written
    by hand at its end (from run.NOTES_MARK on) come through unchanged,
    once, after the generated sections, and the committed report has them."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "bench_run", os.path.join(harness.ROOT, "bench", "run.py"))
    run = importlib.util.module_from_spec(spec)  # not tests/e2e/run.py, the runner
    spec.loader.exec_module(run)
    meta = {"build": "build", "quick": False, "only": None, "date": "2026-12-01 15:59 UTC",
            "machine": (2, "Test CPU"), "kernel": "6.1", "version": "spoa-ratelimit 0.0",
            "commit": "abc1234", "runs": 3, "duration": 8.0}
    notes = [run.NOTES_MARK + " bench/run.py keeps this. -->", "", "## Notes on the figures",
             "", "Hand-written: 1.23x, [a link](#notes-on-the-figures).", "",
             "```", "## not a heading of the report", "```"]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "BENCHMARKS.md")
        run.write_report(path, meta, [], [], [], [], [])
        with open(path, encoding="utf-8") as f:
            plain = f.read()
        assert run.NOTES_MARK not in plain and "do not edit." in plain, plain[:300]
        # an older report, generated sections then the notes
        with open(path, "w", encoding="utf-8") as f:
            f.write("# Benchmarks\n\nOld generated text: 9.99x.\n\n" + "\n".join(notes) + "\n\n")
        for _ in range(2):
            run.write_report(path, meta, [], [], [], [], [])
            with open(path, encoding="utf-8") as f:
                text = f.read()
            assert "Old generated text" not in text, text[:300]
            assert text.count(run.NOTES_MARK) == 1, text
            assert text.endswith("\n\n" + "\n".join(notes) + "\n"), text[-400:]
            assert text.index("## Checks") < text.index(run.NOTES_MARK)
            assert "except the notes at the end" in text.split("\n")[2], text[:300]
    with open(os.path.join(harness.ROOT, "BENCHMARKS.md"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    marks = [i for i, line in enumerate(lines) if line.startswith(run.NOTES_MARK)]
    assert len(marks) == 1, "BENCHMARKS.md: %d lines start with the notes' mark" % len(marks)
    assert "## Checks" in lines[:marks[0]], "BENCHMARKS.md: the notes come before Checks"
