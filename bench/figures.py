# SPDX-License-Identifier: Apache-2.0
"""The pictures of the benchmark report, drawn by bench/run.py after the
runs as SVG files in a folder beside the report (bench-figures/ beside
BENCHMARKS.md), under names that never change, and linked from it.

  memory-throughput   the in-memory store's closed-loop rows against the
                      protocol-only baseline, answers/s
  memory-latency      its open-loop rows (5 and 6): latency by percentile
  redis-throughput    R1, R2, R2w, R3, R3w, C3: decisions/s against R1
  redis-cost          the same rows: Redis us per decision (in the top-level
                      command, and Redis CPU) against R1, with the targets
  redis-latency       R5, N5, R6, N6: latency by percentile
  haproxy-throughput  H, F, A, M, R, S: requests/s against F, a bar per
                      HAProxy version, with the targets

A bar is the median run, as in the tables; every run is a dot beside it,
so the spread shows. A latency curve is drawn from the run's whole
histogram (spop-bench --histogram) when it has one, else through p50,
p90, p99, p99.9 and the maximum.

draw() writes the files and returns what links() turns into Markdown.
"""

import math
import os

import svg

FIGURES = ("memory-throughput", "memory-latency", "redis-throughput", "redis-cost",
           "redis-latency", "haproxy-throughput")
# Points per latency curve: a few pixels apart across the plot.
CURVE_SAMPLES = 200

MEMORY_LABELS = {"base": ["protocol only", "(noop), -t 1"], "mem1": ["decisions", "-t 1"],
                 "mem2": ["decisions", "-t 2"], "low": ["mostly 429", "-t 1"]}
OPEN_SHARES = {"half": "50%", "quarter": "25%"}
REDIS_LABELS = {"R1": ["redis-benchmark,", "naive script"], "R2": ["1 per call"],
                "R2w": ["1 per call,", "whole interval"], "R3": ["batched"],
                "R3w": ["batched,", "whole interval"], "C3": ["batched,", "cluster"]}
HAPROXY_LABELS = {"H": ["no SPOE filter"], "F": ["SPOE floor, no", "variables"],
                  "A": ["same answer,", "no decision"],
                  "M": ["in-memory", "store"], "R": ["Redis store"],
                  "S": ["stick table,", "no SPOE"]}
HAPROXY_ORDER = ("H", "F", "A", "M", "R", "S")


def figures_dir(report):
    """The folder of a report's figures: bench-figures/ beside BENCHMARKS.md,
    NAME-figures/ beside any other NAME.md (so that a quick or partial
    report in the same folder keeps figures of its own)."""
    stem = os.path.splitext(os.path.basename(report))[0]
    return os.path.join(os.path.dirname(os.path.abspath(report)),
                        "bench-figures" if stem == "BENCHMARKS" else stem + "-figures")


def quantile(hist_ns, q, max_us):
    """The latency in us at quantile q (0..1) of a spop-bench histogram
    ([[highest ns in the bucket, count], ...], lowest first), as spop-bench
    computes its own percentiles: the top of the bucket that holds rank
    ceil(q * count), never above the run's maximum."""
    total = sum(c for _, c in hist_ns)
    if not total:
        return 0.0
    rank = max(1, math.ceil(q * total))
    seen = 0
    for upper, c in hist_ns:
        seen += c
        if seen >= rank:
            return min(upper / 1e3, max_us)
    return max_us


def latency_curve(res):
    """[(x, us)] of one run, x on a scale of nines (0 is p0, 1 p90, 2 p99),
    ending at the run's maximum, placed at log10(requests): the last rank
    a scale of nines can show."""
    n = res.get("requests") or 0
    x_end = math.log10(n) if n > 1 else 1.0
    hist = res.get("hist_ns")
    if hist:
        pts = [(x_end * k / CURVE_SAMPLES,
                quantile(hist, 1 - 10.0 ** (-x_end * k / CURVE_SAMPLES), res["max_us"]))
               for k in range(CURVE_SAMPLES)]
    else:
        pts = [(x, res[key]) for x, key in ((math.log10(2), "p50_us"), (1.0, "p90_us"),
                                           (2.0, "p99_us"), (3.0, "p999_us"))
               if x < x_end and res.get(key) is not None]
    return pts + [(x_end, res["max_us"])]


def _bar(row, value, base=None, target=None):
    """A bar of one row: its median run's value, every run's, the ratio to
    base as its note. None when the row has no median run or no value."""
    m = row.get("median") if row else None
    if not m or value(m) is None:
        return None
    runs = [value(r) for r in row["runs"] if value(r) is not None]
    note = "%.2fx" % (value(m) / base) if base else None
    return {"median": value(m), "runs": runs, "note": note, "target": target}


def _curves(row):
    """The runs' latency curves and the index of the median run's."""
    runs = row["runs"]
    return [latency_curve(r) for r in runs], runs.index(row["median"])


def memory_throughput(rows):
    closed = [r for r in rows if not r["open"]]
    if not closed or not closed[0].get("median"):
        return None
    base = closed[0]["median"]["rps"]
    rps = lambda r: r["rps"]
    return dict(
        title="In-memory store: answers/s against the protocol-only baseline",
        y_label="answers/s (NOTIFYs acknowledged)",
        categories=[(str(rows.index(r) + 1), MEMORY_LABELS.get(r.get("key"), []))
                    for r in closed],
        series=[{"name": "answers/s",
                 "bars": [_bar(r, rps, None if i == 0 else base)
                          for i, r in enumerate(closed)]}],
        baseline=(base, "baseline (1): %s/s" % svg.si(base)))


def memory_latency(rows):
    opened = [r for r in rows if r["open"] and r.get("median")]
    if not opened:
        return None
    series = []
    for i, r in enumerate(opened):
        curves, med = _curves(r)
        series.append({"name": "%d: open loop at %s/s (%s of 2)" % (
            rows.index(r) + 1, svg.si(r["median"]["rps"]), OPEN_SHARES.get(r.get("key"), "?")),
            "colour": svg.PALETTE[i], "curves": curves, "median": med})
    return dict(kind="percentile",
                title="In-memory store: latency at a set rate (open loop)", series=series)


def redis_throughput(rows):
    keys = [k for k in ("R1", "R2", "R2w", "R3", "R3w", "C3") if k in rows]
    r1 = rows.get("R1", {}).get("median")
    if not keys or not any(rows[k].get("median") for k in keys):
        return None
    rps = lambda r: r["rps"]
    return dict(
        title="Redis store: decisions/s against R1 (redis-benchmark, naive script)",
        y_label="decisions/s",
        categories=[(k, REDIS_LABELS.get(k, [])) for k in keys],
        series=[{"name": "decisions/s",
                 "bars": [_bar(rows[k], rps, r1["rps"] if r1 and k != "R1" else None)
                          for k in keys]}],
        baseline=(r1["rps"], "R1, the naive script: %s/s" % svg.si(r1["rps"])) if r1 else None)


def redis_cost(rows, targets):
    keys = [k for k in ("R1", "R2", "R2w", "R3", "R3w", "C3") if k in rows]
    r1 = rows.get("R1", {}).get("median")
    series = []
    for name, field in (("in the top-level command (INFO commandstats)", "usec_per_decision"),
                        ("Redis CPU (INFO cpu)", "cpu_per_decision")):
        base = r1.get(field) if r1 else None
        value = lambda r, f=field: r.get(f)
        bars = []
        for k in keys:
            t = targets.get(k)
            bars.append(_bar(rows[k], value, base if k != "R1" else None,
                             base * t if base and t and field == "usec_per_decision"
                             else None))
        series.append({"name": name, "bars": bars})
    if not any(b for s in series for b in s["bars"]):
        return None
    base = r1.get("usec_per_decision") if r1 else None
    return dict(
        title="Redis store: what a decision costs Redis, against R1",
        y_label="Redis \u00b5s per decision",
        categories=[(k, REDIS_LABELS.get(k, [])) for k in keys], series=series,
        baseline=(base, "R1 in the command: %s \u00b5s" % svg.si(base)) if base else None)


def redis_latency(rows):
    series = []
    for k, colour, dash in (("R5", 0, None), ("N5", 0, "5 3"), ("R6", 1, None),
                            ("N6", 1, "5 3")):
        r = rows.get(k)
        if not r or not r.get("median"):
            continue
        curves, med = _curves(r)
        what = "Redis" if k.startswith("R") else "in memory, same timetable"
        series.append({"name": "%s: %s, %s/s" % (k, what, svg.si(r["median"]["rps"])),
                       "colour": svg.PALETTE[colour], "dash": dash, "curves": curves,
                       "median": med})
    if not series:
        return None
    return dict(kind="percentile", title="Redis store: latency at a set rate (open loop)",
                series=series, hlines=[(1000.0, "1 ms: R5's p99 target")])


def haproxy_versions(result):
    """[(label, rows)] of the HAProxy section's result: its versions that
    ran, or one unnamed version for a bare {key: row} of one HAProxy."""
    if not result or "skipped" in result:
        return []
    if "versions" not in result:
        return [("", result)]
    return [(v["version"].replace("HAProxy ", ""), v["rows"]) for v in result["versions"]
            if v.get("binary")]


def haproxy_throughput(result, targets):
    versions = haproxy_versions(result)
    keys = [k for k in HAPROXY_ORDER if any(k in rows for _, rows in versions)]
    if not any(rows.get(k, {}).get("median") for _, rows in versions for k in keys):
        return None
    rps = lambda r: r["rps"]
    series = []
    for label, rows in versions:
        f = rows.get("F", {}).get("median")
        base = f["rps"] if f else None
        series.append({"name": label or "requests/s", "bars": [
            _bar(rows.get(k), rps, base if k != "F" else None,
                 base * targets[k] if base and k in targets else None) for k in keys]})
    f = versions[0][1].get("F", {}).get("median") if len(versions) == 1 else None
    return dict(
        title="Through HAProxy: requests/s against F, the SPOE floor",
        y_label="HTTP requests/s (wrk)",
        categories=[(k, HAPROXY_LABELS.get(k, [])) for k in keys],
        series=series,
        baseline=(f["rps"], "F, the SPOE floor: %s/s" % svg.si(f["rps"])) if f else None)


def render(spec, desc):
    """The SVG text of one figure's spec."""
    if spec.get("kind") == "percentile":
        return svg.percentile_chart(spec["title"], desc, spec["series"],
                                    spec.get("hlines", ()))
    return svg.bar_chart(spec["title"], desc, spec["y_label"], spec["categories"],
                         spec["series"], spec.get("baseline"))


def draw(report, source, memory_rows, redis_rows, haproxy_rows, redis_targets=None,
         haproxy_targets=None, names=None):
    """Writes the figures the rows allow into figures_dir(report) and
    removes those of FIGURES that this run could not draw, so that the
    folder matches the report. source says how the figures were made
    (the command, the date); it goes into each file's <desc>. Returns
    {name: (path relative to the report's folder, title)}. With names, only
    those figures are drawn (or removed), the others left as they are."""
    specs = {
        "memory-throughput": memory_throughput(memory_rows or []),
        "memory-latency": memory_latency(memory_rows or []),
        "redis-throughput": redis_throughput(redis_rows or {}),
        "redis-cost": redis_cost(redis_rows or {}, redis_targets or {}),
        "redis-latency": redis_latency(redis_rows or {}),
        "haproxy-throughput": haproxy_throughput(haproxy_rows or {}, haproxy_targets or {}),
    }
    folder = figures_dir(report)
    os.makedirs(folder, exist_ok=True)
    out = {}
    for name in FIGURES:
        if names is not None and name not in names:
            continue
        path = os.path.join(folder, name + ".svg")
        spec = specs[name]
        if spec is None:
            if os.path.exists(path):
                os.remove(path)
            continue
        desc = ("%s. Made by %s. A bar is the median run, a dot each run." % (
            spec["title"], source) if spec.get("kind") != "percentile" else
            "%s. Made by %s. A bold curve is the median run (by p99), thin ones the "
            "others; each ends at its run's maximum." % (spec["title"], source))
        text = render(spec, desc)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        out[name] = (os.path.relpath(path, os.path.dirname(os.path.abspath(report))),
                     spec["title"])
    return out


def links(figs, *names):
    """Markdown lines showing the named figures that were drawn."""
    L = []
    for name in names:
        if figs and name in figs:
            path, title = figs[name]
            L += ["![%s](%s)" % (title, path.replace(os.sep, "/")), ""]
    return L
