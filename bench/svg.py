# SPDX-License-Identifier: Apache-2.0
"""A small SVG writer for the benchmark figures (bench/figures.py): bar
charts with every run as a dot beside its median bar, and latency
percentile curves on log scales.

Plain text out, nothing to install. The same input gives the same bytes:
coordinates are written with one decimal, labels with fixed formats, and
nothing depends on the time or on the order of a set, so a figure kept
under version control changes only when what it shows does.

bar_chart() and percentile_chart() return the document as a string.
"""

import math
from xml.sax.saxutils import escape, quoteattr

WIDTH = 720
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
# Paul Tol's "bright" scheme: told apart with the common colour-vision
# deficiencies, and in grey.
PALETTE = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377")
INK, MUTED, GRID, BACK = "#222222", "#666666", "#e2e2e2", "#ffffff"

# Plot area margins: the y labels on the left, the title and legend above,
# the category labels (or the x axis) below.
LEFT, RIGHT, TOP, BOTTOM = 84, 20, 64, 66


def num(v):
    """A coordinate: one decimal, none when it is .0, never "-0"."""
    s = "%.1f" % v
    if s.endswith(".0"):
        s = s[:-2]
    return "0" if s == "-0" else s


def si(v):
    """A quantity in three significant digits with k, M or G: 886336 is
    886k, 2146188 is 2.15M, 12.63 is 12.6."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")):
        if abs(v) >= div * 0.9995 or div == 1.0:
            s = "%.3g" % (v / div)
            if "e" not in s:
                return s + suffix
    return "%.3g" % v


def duration_us(v):
    """A latency given in microseconds, in us, ms or s: 20 us, 1.5 ms."""
    if v < 1000:
        return "%g \u00b5s" % float("%.3g" % v)
    if v < 1e6:
        return "%g ms" % float("%.3g" % (v / 1e3))
    return "%g s" % float("%.3g" % (v / 1e6))


def text_width(s, size):
    """About how wide s is in a sans-serif font of size px: enough to lay
    out a legend without a font at hand."""
    return 0.58 * size * len(s)


def linear_ticks(top, n=5):
    """Ticks from 0 to at least top, about n steps of 1, 2, 2.5 or 5 times a
    power of ten."""
    if not top > 0:
        top = 1.0
    raw = top / n
    p = 10.0 ** math.floor(math.log10(raw))
    step = next(m * p for m in (1, 2, 2.5, 5, 10) if m * p >= raw * (1 - 1e-9))
    k = int(math.ceil(top / step - 1e-9))
    return [i * step for i in range(k + 1)]


class Doc:
    """An SVG document: elements appended in order, written by render()."""

    def __init__(self, width, height, title, desc):
        self.width, self.height = width, height
        self.title, self.desc = title, desc
        self.parts = []

    def el(self, tag, body=None, **attrs):
        """Appends <tag attrs>body</tag>; an attribute named class_ is class,
        stroke_width is stroke-width; None values are left out."""
        a = "".join(" %s=%s" % (k.rstrip("_").replace("_", "-"),
                                quoteattr(v if isinstance(v, str) else num(v)))
                    for k, v in attrs.items() if v is not None)
        if body is None:
            self.parts.append("<%s%s/>" % (tag, a))
        else:
            self.parts.append("<%s%s>%s</%s>" % (tag, a, escape(body), tag))

    def text(self, x, y, s, size=12, anchor=None, fill=INK, weight=None, rotate=False,
             class_=None):
        self.el("text", s, x=x, y=y, font_size=size if size != 12 else None,
                text_anchor=anchor, fill=fill if fill != INK else None, font_weight=weight,
                transform="rotate(-90 %s %s)" % (num(x), num(y)) if rotate else None,
                class_=class_)

    def line(self, x1, y1, x2, y2, stroke=INK, width=1, dash=None, class_=None):
        self.el("line", x1=x1, y1=y1, x2=x2, y2=y2, stroke=stroke,
                stroke_width=width if width != 1 else None, stroke_dasharray=dash,
                class_=class_)

    def path(self, points, stroke, width=1.5, dash=None, opacity=None, class_=None):
        """A polyline through points, consecutive repeats (after rounding)
        left out."""
        cmds, last = [], None
        for x, y in points:
            p = (num(x), num(y))
            if p != last:
                cmds.append(("M" if last is None else "L") + p[0] + " " + p[1])
                last = p
        self.el("path", d=" ".join(cmds), fill="none", stroke=stroke, stroke_width=width,
                stroke_dasharray=dash, stroke_opacity=opacity,
                stroke_linejoin="round", class_=class_)

    def render(self):
        head = ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
                'viewBox="0 0 %d %d" font-family=%s font-size="12" fill="%s">'
                % (self.width, self.height, self.width, self.height, quoteattr(FONT), INK))
        # a background of its own, so that the figure reads on a dark page
        return "\n".join(
            [head, "<title>%s</title>" % escape(self.title),
             "<desc>%s</desc>" % escape(self.desc),
             '<rect width="%d" height="%d" fill="%s"/>' % (self.width, self.height, BACK)]
            + self.parts + ["</svg>"]) + "\n"


def _frame(doc, title, legend):
    """The title, and the legend under it, in as many lines as it needs:
    (label, kind, colour, dash) with kind "box", "line", "dot" or "mark".
    Returns the top of the plot area, below the legend."""
    doc.text(16, 24, title, size=15, weight="bold")
    x, y = LEFT, 46
    for label, kind, colour, dash in legend:
        w = (12 if kind in ("box", "dot") else 22) + 5 + text_width(label, 11)
        if x > LEFT and x + w > WIDTH - RIGHT:
            x, y = LEFT, y + 17
        if kind == "box":
            doc.el("rect", x=x, y=y - 10, width=12, height=12, fill=colour)
            w = 12
        elif kind == "dot":
            doc.el("circle", cx=x + 6, cy=y - 4, r=3, fill=BACK, stroke=colour,
                   stroke_width=1.5)
            w = 12
        else:
            doc.line(x, y - 4, x + 22, y - 4, stroke=colour, width=2, dash=dash)
            w = 22
        doc.text(x + w + 5, y, label, size=11)
        x += w + 5 + text_width(label, 11) + 18
    return TOP + y - 46


def bar_chart(title, desc, y_label, categories, series, baseline=None, height=400):
    """Bars of each category's median, one per series, every run as a dot
    beside its bar.

    categories: [(label, [sublabel lines])].
    series: [{"name", "bars": [bar or None per category]}], a bar being
      {"median": v, "runs": [v, ...], "note": text above the value or None,
       "target": v or None (drawn as a dashed mark across the bar)}.
    baseline: (value, label) drawn as a dashed line across the plot and
      labelled in the legend, or None.
    """
    legend = [(s["name"], "box", PALETTE[i % len(PALETTE)], None)
              for i, s in enumerate(series)] if len(series) > 1 else []
    legend.append(("one run", "dot", INK, None))
    if any(b and b.get("target") for s in series for b in s["bars"]):
        legend.append(("target", "mark", INK, "4 3"))
    if baseline:
        legend.append((baseline[1], "line", MUTED, "6 4"))
    doc = Doc(WIDTH, height, title, desc)
    pl, pr, pt, pb = LEFT, WIDTH - RIGHT, _frame(doc, title, legend), height - BOTTOM
    values = [0.0]
    for s in series:
        for b in s["bars"]:
            if b:
                values += [b["median"]] + list(b["runs"]) + (
                    [b["target"]] if b.get("target") else [])
    if baseline:
        values.append(baseline[0])
    ticks = linear_ticks(max(values) * 1.18)
    top = ticks[-1]
    y = lambda v: pb - (pb - pt) * v / top

    for t in ticks:
        doc.line(pl, y(t), pr, y(t), stroke=GRID)
        doc.text(pl - 6, y(t) + 4, si(t), size=11, anchor="end", fill=MUTED)
    doc.text(22, (pt + pb) / 2, y_label, anchor="middle", rotate=True)

    slot = (pr - pl) / max(1, len(categories))
    sub = slot * 0.84 / max(1, len(series))
    bw = sub * 0.6
    for ci, (label, sublabels) in enumerate(categories):
        x0 = pl + slot * ci + slot * 0.08
        doc.text(pl + slot * (ci + 0.5), pb + 17, label, anchor="middle", weight="bold")
        for li, s in enumerate(sublabels):
            doc.text(pl + slot * (ci + 0.5), pb + 31 + 12 * li, s, size=10, anchor="middle",
                     fill=MUTED)
        for si_, s in enumerate(series):
            colour = PALETTE[si_ % len(PALETTE)]
            b = s["bars"][ci]
            bx = x0 + sub * si_
            if not b:
                doc.text(bx + bw / 2, pb - 6, "no run", size=10, anchor="middle", fill=MUTED)
                continue
            doc.el("rect", x=bx, y=y(b["median"]), width=bw, height=pb - y(b["median"]),
                   fill=colour, class_="bar")
            # the runs, in order, a little apart so that equal ones show
            dx = bx + bw + (sub - bw) / 2
            n = len(b["runs"])
            for ri, v in enumerate(b["runs"]):
                doc.el("circle", cx=dx + (ri - (n - 1) / 2) * 3.5, cy=y(v), r=3,
                       fill=BACK, stroke=INK, stroke_width=1.2, class_="run")
            if b.get("target"):
                doc.line(bx - 3, y(b["target"]), bx + bw + 3, y(b["target"]), width=2,
                         dash="4 3", class_="target")
            # on the bar, or on its target mark when that is just above it
            ty = y(b["median"]) - 5
            if b.get("target") and 0 <= y(b["median"]) - y(b["target"]) < 26:
                ty = y(b["target"]) - 5
            doc.text(bx + bw / 2, ty, si(b["median"]), size=10, anchor="middle")
            if b.get("note"):
                doc.text(bx + bw / 2, ty - 12, b["note"], size=10, anchor="middle",
                         fill=MUTED)
    if baseline:
        doc.line(pl, y(baseline[0]), pr, y(baseline[0]), stroke=MUTED, dash="6 4",
                 class_="baseline")
    doc.line(pl, pb, pr, pb)
    doc.line(pl, pt, pl, pb)
    return doc.render()


def nines_label(x):
    """The percentile at x on a scale of nines: 0 is p0, 1 is p90, 2 is
    p99, 3 is p99.9."""
    if x == 0:
        return "0"
    return ("%.6f" % (100 * (1 - 10.0 ** -x))).rstrip("0").rstrip(".")


def percentile_chart(title, desc, series, hlines=(), height=420):
    """Latency against percentile: x spaced by nines (p90, p99, p99.9 one
    step apart), y on a log scale, one curve per run.

    series: [{"name", "colour", "dash", "curves": [[(x, us), ...] per run],
              "median": index of the median run's curve}]; the median run is
      drawn bold with a dot at its last point (the maximum), the others thin.
    hlines: [(us, label)] dashed reference lines, labelled in the legend.
    """
    doc = Doc(WIDTH, height, title, desc)
    legend = [(s["name"], "line", s["colour"], s.get("dash")) for s in series] + [
        (label, "line", MUTED, "6 4") for _, label in hlines]
    pl, pr, pt, pb = LEFT, WIDTH - RIGHT, _frame(doc, title, legend), height - BOTTOM
    pts = [p for s in series for c in s["curves"] for p in c]
    vals = [max(v, 1.0) for _, v in pts] + [v for v, _ in hlines]
    lo = 10.0 ** math.floor(math.log10(min(vals))) if vals else 1.0
    hi = 10.0 ** math.ceil(math.log10(max(vals))) if vals else 10.0
    if hi <= lo:
        hi = lo * 10
    x_max = max([math.ceil(x - 1e-9) for x, _ in pts] + [3])
    X = lambda x: pl + (pr - pl) * x / x_max
    Y = lambda v: pb - (pb - pt) * (math.log10(max(v, lo)) - math.log10(lo)) / (
        math.log10(hi) - math.log10(lo))

    d = lo
    while d <= hi * 1.0001:
        for m in (1, 2, 5):
            v = d * m
            if v > hi * 1.0001:
                break
            doc.line(pl, Y(v), pr, Y(v), stroke=GRID, width=1 if m == 1 else 0.5)
            if m == 1 or (hi / lo <= 100):
                doc.text(pl - 6, Y(v) + 4, duration_us(v), size=11, anchor="end",
                         fill=MUTED)
        d *= 10
    for x in [0, math.log10(2)] + list(range(1, x_max + 1)):
        doc.line(X(x), pt, X(x), pb, stroke=GRID)
        doc.text(X(x), pb + 16, nines_label(x), size=11, anchor="middle", fill=MUTED)
    doc.text(22, (pt + pb) / 2, "latency (log scale)", anchor="middle", rotate=True)
    doc.text((pl + pr) / 2, pb + 40, "percentile (%), one step per nine: "
             "90, 99, 99.9, ...; a curve ends at its run's maximum", anchor="middle")
    for v, label in hlines:
        doc.line(pl, Y(v), pr, Y(v), stroke=MUTED, dash="6 4", class_="hline")
    for s in series:
        for i, c in enumerate(s["curves"]):
            if i != s["median"]:
                doc.path([(X(x), Y(v)) for x, v in c], s["colour"], width=1,
                         dash=s.get("dash"), opacity="0.45", class_="run")
        c = s["curves"][s["median"]]
        doc.path([(X(x), Y(v)) for x, v in c], s["colour"], width=2.2,
                 dash=s.get("dash"), class_="median")
        doc.el("circle", cx=X(c[-1][0]), cy=Y(c[-1][1]), r=3, fill=s["colour"],
               class_="max")
    doc.line(pl, pb, pr, pb)
    doc.line(pl, pt, pl, pb)
    return doc.render()
