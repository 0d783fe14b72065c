# SPDX-License-Identifier: Apache-2.0
"""The benchmark figures (bench/figures.py, bench/svg.py): drawn from fixed
results, they are well-formed SVG with a title, a description, labelled axes,
a bar per median and a dot per run at the right heights, the same bytes
every time, linked from the report by relative paths; and the histogram
spop-bench exports for them (--histogram) gives back its own percentiles;
spop-bench --then gives each request's place back in a second message."""

import json
import math
import os
import re
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
    for key, rps in (("H", 30000), ("F", 24000), ("A", 20000), ("M", 22000), ("R", 19000),
                     ("S", 28000)):
        runs = [{"rps": rps + d} for d in (-500, 0, 300)]
        rows[key] = {"key": key, "runs": runs, "median": runs[1]}
    return rows


def haproxy_result():
    """Two HAProxy versions: 2.6 as haproxy_rows(), 3.4 slower in M."""
    other = haproxy_rows()
    for r in other["M"]["runs"]:
        r["rps"] -= 6000
    return {"versions": [
        {"name": None, "binary": "/usr/sbin/haproxy", "version": "HAProxy 2.6.12",
         "rows": haproxy_rows()},
        {"name": "haproxy34", "binary": "/usr/local/bin/haproxy34",
         "version": "HAProxy 3.4.0", "rows": other}]}


def draw(folder, report="BENCHMARKS.md"):
    return figures.draw(os.path.join(folder, report), SOURCE, memory_rows(), redis_rows(),
                        haproxy_result(), {"R2": 1.0, "R3": 0.4, "R2w": 1.0, "R3w": 0.4},
                        {"M": 0.90, "R": 0.85})


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
        # every row against F of its own HAProxy: a bar per version
        assert "HTTP requests/s (wrk)" in t and "1.25x" in t and "0.92x" in t, t
        assert "0.67x" in t and "1.17x" in t and "S" in t, t
        assert "2.6.12" in t and "3.4.0" in t, t
        assert len(with_class(root, "rect", "bar")) == 12
        # M and R, each version
        assert len(with_class(root, "line", "target")) == 4
        # one version: a single series, F's rate as the baseline
        one = figures.haproxy_throughput({"versions": haproxy_result()["versions"][:1]},
                                         {"M": 0.9})
        assert one["baseline"] == (24000, "F, the SPOE floor: 24k/s"), one["baseline"]
        assert len(one["series"]) == 1


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


THEN_RULES = {
    # a target no request reaches: every request is admitted and timed
    "adaptive": 'limits: ["1000000/1h"]\n'
                "shedding: { adaptive: { target: 60s, max: 100000, timeout: 1h } }\n",
    "charge": "tiers:\n  default: standard\n"
              '  standard: { limits: ["1000000/1h"], cost: 10, charge: response }\n',
}


def then_agent(h, which):
    path = os.path.join(h.dir, "rules-%s.yaml" % which)
    with open(path, "w") as f:
        f.write(THEN_RULES[which])
    mport = harness.free_port()
    a = h.agent("--rules", path, "--threads", "1", "--metrics", "127.0.0.1:%d" % mport)
    return "127.0.0.1:%d" % a.port, lambda name: float(re.search(
        r"^%s (\S+)$" % re.escape(name), harness.http_get(mport, "/metrics").text,
        re.M).group(1))


def test_spop_bench_then_gives_each_place_back(h):
    """--then: each admitted request's place comes back in a second message,
    as HAProxy's release (with request_id) or response (with cost) would."""
    addr, metric = then_agent(h, "adaptive")
    samples = 'spoa_rl_adaptive_samples_total{backend="app"}'
    r = spop_bench("--addr", addr, "--requests", "300", "--json")
    assert r.returncode == 0, r.stderr
    assert "then" not in json.loads(r.stdout.strip().splitlines()[-1])
    r = spop_bench("--addr", addr, "--requests", "500", "--inflight", "4", "--json",
                   "--then", "release")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["requests"] == res["then"] == res["passed"] == 500, res
    # every request was timed from its check-rate to its release
    assert metric(samples) == 500, metric(samples)
    assert metric('spoa_rl_adaptive_inflight{backend="app"}') == 0
    assert metric("spoa_rl_adaptive_untracked_total") == 0

    addr, metric = then_agent(h, "charge")
    r = spop_bench("--addr", addr, "--requests", "400", "--inflight", "4", "--json",
                   "--then", "response", "--then-cost", "7")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["requests"] == res["then"] == 400, res
    # each estimate of 10 settled at 7: 3 given back per request
    assert metric("spoa_rl_charge_settlements_total") == 400
    assert metric("spoa_rl_charge_given_tokens_total") == 400 * 3
    assert metric("spoa_rl_charge_invalid_total") == 0


def test_spop_bench_then_cost_needs_then():
    r = spop_bench("--addr", "127.0.0.1:1", "--then-cost", "5")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "--then" in r.stderr, r.stderr


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
    """R's CPU per request against F's and the rates they allow, worked
    by hand: F 20 + 2 + 15 = 37 us at 50000/s keeps 1.85 CPUs busy; R's
    45 us allow 41111/s there (0.82x), 44444/s on 2 CPUs; 0.85x of F
    (42500/s) takes 1.9125 CPUs, or 43.53 - 20 - 15 us for the agent and
    Redis at F's 1.85."""
    import haproxy_bench
    rows = {"F": {"median": {"rps": 50000, "cpu": {"haproxy": 100, "agent": 10, "wrk": 75}}},
            "R": {"median": {"rps": 40000, "cpu": {"haproxy": 80, "agent": 20, "redis": 20,
                                                   "wrk": 60}}}}
    b = haproxy_bench.cpu_budget(rows, "R", ncpu=2)
    assert b[:2] == ("20.0 + 2.0 + - + 15.0 = 37.0", "20.0 + 5.0 + 5.0 + 15.0 = 45.0"), b
    assert [round(x, 4) for x in b[2:]] == [1.85, 2, 41111.1111, 0.8222, 44444.4444, 0.8889,
                                            0.85, 1.9125, 95.625, 8.5294, 10.0], b
    # no target for F itself; nothing without a process's share or a floor
    assert haproxy_bench.cpu_budget(rows, "F", ncpu=2) is None
    rows_no_wrk = {"F": rows["F"], "R": {"median": dict(rows["R"]["median"], cpu={"haproxy": 80})}}
    assert haproxy_bench.cpu_budget(rows_no_wrk, "R", ncpu=2) is None
    assert haproxy_bench.cpu_budget({"F": {}, "R": rows["R"]}, "R", ncpu=2) is None


def test_haproxy_targets_against_f():
    """The targets, worked by hand from haproxy_rows(): M 22000 of F's
    24000 (0.92x, met at 0.90x), R 19000 (0.79x, not met at 0.85x); HAProxy
    CPU per request 12.0 us in M against 10.0 in F is +2.0 us, over the
    1.5 allowed, and +1.5 exactly is met; a row without a run is not
    measured."""
    import haproxy_bench
    rows = haproxy_rows()
    rows["F"]["median"]["haproxy_us"], rows["M"]["median"]["haproxy_us"] = 10.0, 12.0
    got = haproxy_bench.target_lines(rows)
    assert [(w, t, m) for w, _, t, m in got] == [
        ("M against F", ">= 0.90x", True), ("R against F", ">= 0.85x", False),
        ("HAProxy CPU per request in M", "<= F's + 1.5 us", False)], got
    assert got[0][1] == "0.92x (22000 against 24000 requests/s)", got[0]
    assert got[2][1] == "12.0 us against F's 10.0 (+2.0 us)", got[2]
    rows["M"]["median"]["haproxy_us"] = 11.5
    assert haproxy_bench.target_lines(rows)[2][3] is True
    del rows["R"]["median"]
    assert haproxy_bench.target_lines(rows)[1] == ("R against F", "not measured", ">= 0.85x",
                                                  None)
    assert haproxy_bench.row_target(rows, "M") == ">= 0.90x: met"
    # just under a target: three decimals, not the target itself
    assert haproxy_bench.ratio_text(0.8950, 0.90) == "0.895x"
    assert haproxy_bench.ratio_text(0.8950) == "0.90x"
    assert haproxy_bench.ratio_text(0.9049, 0.90) == "0.90x"
    assert haproxy_bench.row_target(rows, "S") == ""


def full_result():
    """haproxy_result() with every figure a report reads."""
    result = haproxy_result()
    for v in result["versions"]:
        for key, row in v["rows"].items():
            row["title"] = "row " + key
            for i, r in enumerate(row["runs"]):
                r.update(round=i, p50_us=900.0, p99_us=2000.0, requests=int(r["rps"] * 8),
                         haproxy_us=10.0 + (key == "M") * (1.0 if "2.6" in v["version"]
                                                            else 3.0),
                         cpu={"haproxy": 99.0, "agent": 5.0, "redis": None, "wrk": 50.0},
                         sys={}, idle=10.0, non2xx=0, socket_errors={}, metrics={},
                         cmds=["haproxy -db -f x.cfg", "wrk ..."], cfg="global\n")
            if key == "M":
                row["spoe_text"] = "[ratelimit]\nspoe-agent a\n"
        v["latency_rate"] = 11000
        v["latency"] = {k: {"rps": 11000.0, "p50_us": 300.0, "p90_us": 500.0, "p99_us": 900.0,
                            "p999_us": 2000.0, "max_us": 3000.0, "max_send_lag_us": 40.0,
                            "haproxy_us": 12.0, "cpu": {"haproxy": 50.0},
                            "cmds": ["http-open-loop --rate 11000"]}
                        for k in ("F", "M", "R")}
    return result


def test_haproxy_report_has_a_table_per_version():
    """The section: a summary line per HAProxy, then per version a heading
    naming it and its binary, a row per configuration with its ratio to F
    and its target, the three targets met or not, and the open loop's
    table; the profile command only where a target is not met."""
    import types
    import haproxy_bench
    ctx = types.SimpleNamespace(runs=3, duration=8.0, high_limit="1000000000/1h",
                                fmt_us=lambda v: "%.0f" % v, rel=lambda p: p,
                                bench_bin="build/spop-bench")
    L = haproxy_bench.report(ctx, full_result())
    text = "\n".join(L)
    assert L[0] == "## Through HAProxy"
    assert "| 2.6.12 | 30000 | 24000 | 0.92x | 0.79x | 1.17x | 0.83x | 10.0 / 11.0 / 10.0 " \
        "| 2 of 3 |" in L, text
    assert "| 3.4.0 | 30000 | 24000 | 0.67x | 0.79x | 1.17x | 0.83x | 10.0 / 13.0 / 10.0 " \
        "| 0 of 3 |" in L, text
    heads = [ln for ln in L if ln.startswith("### ")]
    assert heads == ["### HAProxy 2.6.12 (`/usr/sbin/haproxy`)",
                     "### HAProxy 3.4.0 (`/usr/local/bin/haproxy34`)",
                     "### How to read it", "### Configuration and commands"], heads
    v26 = text[text.index(heads[0]):text.index(heads[1])]
    v34 = text[text.index(heads[1]):text.index(heads[2])]
    for part in (v26, v34):
        for key in ("H", "F", "A", "M", "R", "S"):
            assert "\n| %s | row %s | " % (key, key) in part, (key, part)
        for key in ("F", "M", "R"):
            assert "\n| %s | 11000 | 300 | 500 | 900 | 2000 | 3000 | 40 | 12.0 |" % key \
                in part, (key, part)
    assert "| >= 0.90x: met | 11.0 |" in v26 and "| >= 0.90x: not met | 13.0 |" in v34
    assert "- M against F: 0.92x (22000 against 24000 requests/s); the target (>= 0.90x) " \
        "is met." in v26
    assert "- R against F: 0.79x (19000 against 24000 requests/s); the target (>= 0.85x) " \
        "is not met." in v26
    assert "- HAProxy CPU per request in M: 11.0 us against F's 10.0 (+1.0 us); the target " \
        "(<= F's + 1.5 us) is met." in v26
    assert "(+3.0 us); the target (<= F's + 1.5 us) is not met." in v34
    assert "bench/haproxy_profile.py --build build --haproxy /usr/local/bin/haproxy34" in v34
    # a version that could not run is said, not measured under another's name
    result = full_result()
    result["versions"].append({"name": "haproxy99", "binary": None,
                               "skipped": "HAPROXY=haproxy99: not found"})
    text = "\n".join(haproxy_bench.report(ctx, result))
    assert "### haproxy99\n\nSkipped: HAPROXY=haproxy99: not found." in text


def test_haproxy_names():
    """--haproxy lists the binaries, comma-separated, in order; without it
    the one HAPROXY names, else Debian's (None)."""
    import haproxy_bench
    assert haproxy_bench.haproxy_names("haproxy, /usr/local/bin/haproxy34,", "x") == [
        "haproxy", "/usr/local/bin/haproxy34"]
    assert haproxy_bench.haproxy_names(None, "haproxy32") == ["haproxy32"]
    assert haproxy_bench.haproxy_names(None, None) == [None]
    assert haproxy_bench.haproxy_names("", "") == [None]


def test_update_replaces_only_the_haproxy_section():
    """--only haproxy --update: the HAProxy section and its Checks paragraph
    are the new ones, every other line of the report stays, the header says
    which command made the section (once, however often it runs), and a
    report without the section is left to the caller."""
    run = bench_run_module()
    meta = {"build": "build", "quick": False, "only": "haproxy", "haproxy": "haproxy,haproxy34",
            "update": True, "date": "2026-12-04 05:00 UTC", "commit": "abc1234", "runs": 3,
            "duration": 8.0}
    old = "\n".join([
        "# Benchmarks", "", "Generated by `python3 bench/run.py --build build`.", "",
        "- Date: 2026-12-03", "- Runs: 3 per configuration", "", "## In-memory store", "",
        "memory table", "", "## Through HAProxy", "", "old haproxy table", "",
        "### How to read it", "", "old text", "", "## Checks", "", "All runs: fine.", "",
        "HAProxy runs: old", "paragraph.", "", "Other runs: fine.", "",
        run.NOTES_MARK + " -->", "", "## Notes on the figures", "", "hand-written", ""])
    section = ["## Through HAProxy", "", "new table", "", "### How to read it", "", "new", ""]
    para = run.haproxy_checks(["a problem"])
    text = run.spliced(old, meta, "## Through HAProxy", section, "HAProxy runs:", para)
    lines = text.split("\n")
    assert "old haproxy table" not in text and "old text" not in text
    assert "HAProxy runs: old" not in text and "paragraph." not in lines
    assert lines[lines.index("## Through HAProxy"):lines.index("## Checks")] == section
    assert "HAProxy runs: FAILED: a problem." in lines
    for keep in ("memory table", "All runs: fine.", "Other runs: fine.", "hand-written",
                 "Generated by `python3 bench/run.py --build build`."):
        assert keep in lines, keep
    made = ("- Through HAProxy: made alone by `python3 bench/run.py --build build --only "
            "haproxy --haproxy haproxy,haproxy34 --update`, 2026-12-04 05:00 UTC, commit "
            "abc1234, 3 runs of 8 s")
    assert lines[6] == made, lines[:8]
    again = run.spliced(text, dict(meta, date="2026-12-05 05:00 UTC"), "## Through HAProxy",
                        section, "HAProxy runs:", run.haproxy_checks([]))
    assert again.count("made alone by") == 1 and "2026-12-05" in again
    assert "HAProxy runs: every answer 2xx" in again and "FAILED" not in again
    assert again.split("\n")[:6] == lines[:6]
    assert run.spliced("# B\n\n## Checks\n", meta, "## Through HAProxy", section,
                       "HAProxy runs:", para) is None


def test_open_loop_generator_sends_its_timetable():
    """tools/http-open-loop against a loopback server that answers every
    request: exactly rate x duration requests sent, each answered once,
    the counts in its JSON line and exit status 0; a 429 in the answers
    is counted and makes it exit 1."""
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    port = srv.getsockname()[1]
    status = {"code": b"200 OK"}
    seen = []

    def serve(conn):
        buf = b""
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
                while b"\r\n\r\n" in buf:
                    req, buf = buf.split(b"\r\n\r\n", 1)
                    seen.append(req.split(b"X-Api-Key: ")[1])
                    conn.sendall(b"HTTP/1.1 " + status["code"] +
                                 b"\r\nContent-Length: 2\r\n\r\nok")

    def accept():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    exe = os.path.join(harness.BUILD, "http-open-loop")
    try:
        r = subprocess.run([exe, "--addr", "127.0.0.1:%d" % port, "--rate", "2000",
                            "--duration", "0.5", "--conns", "4", "--keys", "300"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        assert (res["sent"], res["answered"], res["lost"], res["non2xx"], res["errors"]) == (
            1000, 1000, 0, 0, 0), res
        assert res["p50_us"] <= res["p99_us"] <= res["p999_us"] <= res["max_us"], res
        # the clients in turn, from k00001: the first 100 four times, the others three
        import collections
        want = collections.Counter({b"k%05d" % k: 4 if k <= 100 else 3
                                    for k in range(1, 301)})
        assert collections.Counter(seen) == want, collections.Counter(seen).most_common(3)
        status["code"] = b"429 Too Many Requests"
        r = subprocess.run([exe, "--addr", "127.0.0.1:%d" % port, "--rate", "1000",
                            "--duration", "0.2"], capture_output=True, text=True, timeout=30)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        assert r.returncode == 1 and res["non2xx"] == res["answered"] == 200, (r.returncode,
                                                                                res)
        r = subprocess.run([exe, "--addr", "127.0.0.1:%d" % port], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 2 and "usage" in r.stderr, r
    finally:
        srv.close()


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


def test_instructions_report_two_message_rows():
    """The adaptive and charged requests show what they add to the plain
    decision measured in the same run, and are left out when not measured."""
    import instructions
    figures = {"decision": 3500, "unknown": 1300, "stacked": 7600,
               "adaptive": 8750, "charge": 7000}
    text = "\n".join(instructions.report_lines(figures, None))
    assert "| request of an adaptive backend" in text
    assert "| 8750 (+5250 on the plain decision: 2.50x) |" in text
    assert "| request of a `charge: response` rule" in text
    assert "| 7000 (+3500 on the plain decision: 2.00x) |" in text
    assert "--then release" in text and "--then response" in text
    del figures["adaptive"], figures["charge"]
    text = "\n".join(instructions.report_lines(figures, None))
    assert "adaptive" not in text and "charge" not in text and "--then" not in text


def test_tls_rows_state_the_agent_s_cost_against_plaintext():
    """R3t's agent CPU per decision against R3's, from the medians (the
    agent's share of a CPU over the decisions/s), with the 1.3x target on
    either side of the line; R2t against R2 without a target."""
    import redis_bench
    rows = {"R2": {"rps": 10000, "agent_cpu": 50.0, "cpu_per_decision": 4.0},
            "R2t": {"rps": 8000, "agent_cpu": 60.0, "cpu_per_decision": 6.0},
            "R3": {"rps": 20000, "agent_cpu": 40.0, "cpu_per_decision": 1.0},
            "R3t": {"rps": 20000, "agent_cpu": 52.0, "cpu_per_decision": 1.1}}
    v = redis_bench.tls_verdicts(rows.get)
    assert len(v) == 2, v
    assert v[0].startswith("R2t (one FCALL per decision over TLS): the agent's CPU per "
                           "decision 75.00 us against 50.00 us in plaintext (R2), 1.50x;"), v
    assert "target" not in v[0] and "6.0 us against 4.0 us, 1.50x" in v[0], v
    assert "26.00 us against 20.00 us in plaintext (R3), 1.30x; the target of <= 1.3x is " \
        "met" in v[1], v
    rows["R3t"]["agent_cpu"] = 54.0
    assert "1.35x; the target of <= 1.3x is NOT met" in redis_bench.tls_verdicts(rows.get)[1]
    del rows["R2t"]
    assert [x[:3] for x in redis_bench.tls_verdicts(rows.get)] == ["R3t"]


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


def test_committed_report_has_a_haproxy_table_per_version():
    """BENCHMARKS.md's HAProxy section as committed: a summary line and a
    section per HAProxy, 2.x and 3.x among them; in each, the rows H, F,
    A, M, R and S in order, M's and R's target cells agreeing with their
    ratio to F, the three targets stated as met or not, and the open
    loop's F, M and R with their percentiles."""
    import re
    import haproxy_bench
    with open(os.path.join(harness.ROOT, "BENCHMARKS.md"), encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    start = lines.index("## Through HAProxy")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    section = lines[start:end]
    # which command made it, when it was made alone
    if "--update" in text.split("## ")[1]:
        assert any(ln.startswith("- Through HAProxy: made alone by `python3 bench/run.py")
                   for ln in lines[:start]), lines[:12]
    heads = [i for i, ln in enumerate(section) if re.match(r"### HAProxy \S+ \(`", ln)]
    versions = [re.match(r"### HAProxy (\S+)", section[i]).group(1) for i in heads]
    assert any(v.startswith("2.") for v in versions) and \
        any(v.startswith("3.") for v in versions), versions
    for v in versions:
        assert any(ln.startswith("| %s | " % v) for ln in section), "no summary line " + v
    bounds = heads + [next(i for i, ln in enumerate(section) if ln == "### How to read it")]
    targets = dict(haproxy_bench.TARGETS)
    for v, a, b in zip(versions, bounds, bounds[1:]):
        part = section[a:b]
        rows = [ln.split(" | ") for ln in part if re.match(r"\| [HFAMRS] \| ", ln)
                and not re.match(r"\| [FMR] \| [\d.]+ \| [\d.]+ \| ", ln)]
        assert [r[0][2:] for r in rows] == list(haproxy_bench.ORDER), (v, rows)
        f_rps = float(rows[1][2])
        for r in rows:
            key = r[0][2:]
            if key in targets:
                # the requests/s are rounded to the unit: met or not from them
                ratio = float(r[2]) / f_rps
                assert abs(float(r[3].rstrip("x")) - ratio) < 0.006, (v, r)
                if abs(ratio - targets[key]) > 1e-4:
                    assert r[5] == ">= %.2fx: %s" % (targets[key], "met" if ratio >=
                                                     targets[key] else "not met"), (v, r)
                # a ratio under its target never shows as the target
                assert not (r[5].endswith("not met") and
                            r[3] == "%.2fx" % targets[key]), (v, r)
        said = [ln for ln in part if re.match(r"- (M against F|R against F|HAProxy CPU per "
                                               r"request in M): ", ln)]
        assert len(said) == 3 and all(re.search(r"is (met|not met|not measured)\.$", ln)
                                      for ln in said), (v, said)
        lat = [ln for ln in part if re.match(r"\| [FMR] \| [\d.]+ \| [\d.]+ \| ", ln)]
        assert [ln[2] for ln in lat] == ["F", "M", "R"], (v, lat)
        for ln in lat:
            p50, p90, p99, p999 = (float(x) for x in ln.split(" | ")[2:6])
            assert p50 <= p90 <= p99 <= p999, (v, ln)
