"""The run page's first reward chart, drawn on the server as SVG.

A cold visit spends most of its time before the first chart downloading and compiling plotly.js
(docs/browser.md, "Measured"). The page therefore arrives with the reward chart already drawn:
the same bucketed series ``GET /api/runs/<id>/series`` returns (``controlplane.runs.series``), one
line per visible domain smoothed as the page smooths it (debiased EMA, 0.6) with its raw line
faint behind it, in the page's palette, on the y range and step axis plotly uses, with tick labels
and a legend. ``run_detail.js`` replaces it in place with plotly's chart once plotly.js has loaded.

Everything here is numbers, colours from a fixed palette, and domain names that the template
escapes; the SVG carries no script and no event attribute, so the page's CSP is untouched.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from controlplane.runs import series as run_series

PALETTE = ["#3b5bdb", "#e8590c", "#2f9e44", "#c2255c", "#1098ad", "#f59f00", "#7048e8", "#5c940d", "#d6336c", "#495057"]
"""run_detail.js's PALETTE: a domain's colour is its place among the chart's keys."""
SMOOTHING = 0.6
"""run_detail.js's default smoothing."""
Y_RANGE = (0.0, 1.05)
"""The reward chart's fixed y range (run_detail.js, CHARTS["chart-reward"].yrange)."""
VIEW = 1000
"""The SVG's user units per axis (it is stretched to the plot area; strokes do not scale)."""


@dataclass
class Line:
    """One domain's line: its label, colour, and the smoothed and raw lines as SVG path data."""

    label: str
    color: str
    smooth: str
    raw: str


@dataclass
class Tick:
    """A tick: its label and its place along the axis in percent of the plot area."""

    label: str
    pct: str


@dataclass
class Sketch:
    """What the template draws (runs/_reward_sketch.html)."""

    lines: list[Line] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    points: int = 0


def ema(values: list[float], alpha: float) -> list[float]:
    """The debiased exponential moving average run_detail.js draws.

    >>> [round(v, 3) for v in ema([0.0, 1.0, 1.0], 0.5)]
    [0.0, 0.667, 0.857]
    """
    out, acc, weight = [], 0.0, 0.0
    for v in values:
        acc = alpha * acc + (1 - alpha) * v
        weight = alpha * weight + (1 - alpha)
        out.append(acc / weight)
    return out


def nice_ticks(lo: float, hi: float, target: int = 6) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten) between ``lo`` and ``hi``, about
    ``target`` of them, as plotly places them.

    >>> nice_ticks(0, 1.05)
    [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    >>> nice_ticks(1, 300)
    [50, 100, 150, 200, 250, 300]
    """
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / target
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9)
    return [round(i * step, 10) for i in range(first, math.floor(hi / step + 1e-9) + 1)]


def _label(v: float) -> str:
    return f"{v:g}" if abs(v) < 1e6 else f"{v:.3g}"


def _points(steps: list[int], values: list[float], x0: float, span: float) -> list[tuple[int, int]]:
    """The points in view units (y down), non-finite values and consecutive repeats dropped."""
    y_lo, y_hi = Y_RANGE
    out: list[tuple[int, int]] = []
    for s, v in zip(steps, values):
        if v is None or not math.isfinite(v):
            continue
        point = (round((s - x0) / span * VIEW), round((y_hi - min(max(v, y_lo), y_hi)) / (y_hi - y_lo) * VIEW))
        if not out or point != out[-1]:
            out.append(point)
    return out


def path_data(points: list[tuple[int, int]]) -> str:
    """An SVG path through ``points``: the first absolute, then relative moves (a few bytes a
    point: a 12-domain chart of 782 buckets is most of the page's HTML otherwise).

    >>> path_data([(0, 500), (2, 480), (3, 495)])
    'M0 500l2-20 1 15'
    """
    if not points:
        return ""
    (x, y), out = points[0], [f"M{points[0][0]} {points[0][1]}l"]
    for i, (px, py) in enumerate(points[1:]):
        dx, dy = px - x, py - y
        out.append(f"{'' if i == 0 or dx < 0 else ' '}{dx}{'' if dy < 0 else ' '}{dy}")
        x, y = px, py
    return "".join(out) if len(points) > 1 else out[0][:-1]


def reward_sketch(view: dict, keys: list[str]) -> Sketch | None:
    """The reward chart of ``view`` (what ``controlplane.runs.series.series`` returns for
    ``keys``), or None when no key has a point (the page then waits for plotly as before)."""
    present = [(i, k) for i, k in enumerate(keys) if view["series"].get(k, {}).get("step")]
    if not present:
        return None
    x0 = min(view["series"][k]["step"][0] for _, k in present)
    x1 = max(view["series"][k]["step"][-1] for _, k in present)
    span = max(x1 - x0, 1)
    sketch = Sketch()
    for i, key in present:
        s = view["series"][key]
        sketch.points += len(s["step"])
        sketch.lines.append(Line(label=key.removeprefix("reward/"), color=PALETTE[i % len(PALETTE)],
                                 smooth=path_data(_points(s["step"], ema(s["last"], SMOOTHING), x0, span)),
                                 raw=path_data(_points(s["step"], s["last"], x0, span))))
    ticks = nice_ticks(x0, x1) if x1 > x0 else [x0]
    sketch.x_ticks = [Tick(_label(t), f"{(t - x0) / span * 100:.2f}") for t in ticks]
    y_lo, y_hi = Y_RANGE
    sketch.y_ticks = [Tick(_label(t), f"{(y_hi - t) / (y_hi - y_lo) * 100:.2f}") for t in nice_ticks(y_lo, y_hi)]
    return sketch


def run_reward_sketch(run, keys: list[str]) -> Sketch | None:
    """The run's first reward chart for the visible domains' ``keys`` (one bucketed read)."""
    if not keys:
        return None
    return reward_sketch(run_series.series(run=run, keys=keys), keys)
