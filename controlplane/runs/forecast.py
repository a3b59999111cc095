"""A run's forecast: each domain's held-out reward against the compute the run had spent when it
was measured, fitted with ScaleRL's curve (:mod:`trainer.forecast`): where the domain saturates,
with a bootstrap band, and how much compute a target reward takes.

The held-out results are the run's periodic evaluations (``eval/reward/<domain>`` metric points);
the compute at an evaluation is the run's total through that step (``UsageRecord``): generated
tokens, GPU-seconds or CPU-seconds. A fit is kept (in the process) until the run records a step.
"""
from __future__ import annotations

import bisect
import math
import threading
from typing import Any

from collections import OrderedDict

from django.db.models import Sum

from controlplane.common.errors import FieldError, InvalidInput
from controlplane.runs.models import MetricPoint, Run, UsageRecord
from trainer.forecast import Fits, fits

COMPUTE: dict[str, tuple[str, str]] = {
    "tokens": ("generated_tokens", "generated tokens"),
    "gpu_s": ("gpu_s", "GPU-seconds"),
    "cpu_s": ("cpu_s", "CPU-seconds"),
}
"""The compute a forecast is drawn against: the usage figure summed through each step, and its name."""
EVAL_PREFIX = "eval/reward/"
DRAWS = 100
"""Bootstrap fits per domain."""
CURVE_POINTS = 40
"""Points of the fitted curve returned for a chart, log-spaced."""
CACHED = 64
"""Runs' fits kept in this process (a page view refits only when the run recorded a step since)."""
_fits: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
_fits_lock = threading.Lock()


def parse_options(target: str | float | None, compute: str | None) -> tuple[float | None, str]:
    """``(target, compute)`` from a request's values; InvalidInput names each bad one."""
    errors = []
    value: float | None = None
    if target not in (None, ""):
        try:
            value = float(target)
        except (TypeError, ValueError):
            value = math.nan
        if not (0 < value < 1):  # nan fails too
            errors.append(FieldError("target", f"must be a reward between 0 and 1 (exclusive), got {target!r}"))
    compute = compute or "tokens"
    if compute not in COMPUTE:
        errors.append(FieldError("compute", f"must be one of {', '.join(COMPUTE)}, got {compute!r}"))
    if errors:
        raise InvalidInput(errors)
    return value, compute


def _spent(run: Run, field: str) -> tuple[list[int], list[float]]:
    """Steps and the run's cumulative ``field`` through each (every usage row counts: a step done
    again after a resume spent its compute again)."""
    steps, totals, total = [], [], 0.0
    for row in UsageRecord.objects.filter(run=run).values("step").annotate(v=Sum(field)).order_by("step"):
        total += float(row["v"] or 0)
        steps.append(row["step"])
        totals.append(total)
    return steps, totals


def _curve_points(fit: Fits, lo: float, hi: float) -> tuple[list[list[float]], list[list[float]]]:
    """The fitted curve at ``CURVE_POINTS`` log-spaced computes from ``lo`` to ``hi`` (``[c, R]``),
    and its bootstrap band there (``[c, low, high]``; empty without bootstrap fits)."""
    cs = [lo * (hi / lo) ** (i / (CURVE_POINTS - 1)) for i in range(CURVE_POINTS)]
    bands = [(c, fit.band_at(c)) for c in cs]
    return ([[c, round(fit.curve(c), 6)] for c in cs],
            [[c, round(band[0], 6), round(band[1], 6)] for c, band in bands if band is not None])


def _run_fits(run: Run, compute: str) -> dict[str, Any]:
    """The run's results per domain against its compute and their fits. Two queries every time
    (the compute per step, the evaluations), whether the fits are kept from an earlier call or not:
    they are refitted only when those changed (a new step recorded)."""
    steps, totals = _spent(run, COMPUTE[compute][0])
    rows = list(MetricPoint.objects.filter(run=run, key__startswith=EVAL_PREFIX).exclude(key=f"{EVAL_PREFIX}mean")
                .order_by("step", "id").values_list("id", "key", "step", "value"))
    key = (run.id, compute, len(rows), max((r[0] for r in rows), default=None), len(steps), totals[-1] if totals else 0.0)
    with _fits_lock:
        if (hit := _fits.get(key)) is not None:
            return hit
    series: dict[str, list[tuple[float, float]]] = {}
    for _, metric, step, value in rows:
        i = bisect.bisect_right(steps, step) - 1
        if i >= 0:
            series.setdefault(metric.removeprefix(EVAL_PREFIX), []).append((totals[i], value))
    out = {"spent": totals[-1] if totals else 0.0,
           # the compute at the budget's end, at the rate so far (the steps recorded, their compute)
           "at_end": totals[-1] / max(steps[-1], 1) * run.budget_steps if steps and run.budget_steps else None,
           "domains": {d: (points, fits([c for c, _ in points], [r for _, r in points], draws=DRAWS))
                       for d, points in sorted(series.items())}}
    with _fits_lock:
        _fits[key] = out
        while len(_fits) > CACHED:
            _fits.popitem(last=False)
    return out


def run_forecast(run: Run, *, target: float | None = None, compute: str = "tokens") -> dict[str, Any]:
    """Per domain with held-out results: the points, the fitted curve (asymptote with its band,
    steepness, compute at half the asymptote, start), the reward it predicts at the budget's end
    (the compute spent so far, per step, times the step budget) with its band, the compute to
    ``target`` with its band, and the curve sampled for a chart with its band (``curve_points``
    ``[c, R]``, ``curve_band`` ``[c, low, high]``); or the note that says why there is no fit yet."""
    fitted = _run_fits(run, compute)
    domains = []
    for domain, (points, fit) in fitted["domains"].items():
        f = fit.forecast(target=target, at=fitted["at_end"])
        entry: dict[str, Any] = {"domain": domain, "points": [[c, r] for c, r in points], **f.to_dict()}
        if f.curve is not None:
            spent = max(c for c, _ in points)
            entry["curve_points"], entry["curve_band"] = _curve_points(
                fit, min(c for c, _ in points if c > 0), max(10 * spent, 1.2 * (f.compute_to_target or 0.0)))
            entry["final"] = {"compute": spent, "reward": round(points[-1][1], 6)}
        domains.append(entry)
    return {"run": run.id, "compute": compute, "compute_label": COMPUTE[compute][1], "target": target,
            "spent": fitted["spent"], "domains": domains}


ASYMPTOTE_KEY = "forecast/asymptote/"
ASYMPTOTE_HIGH_KEY = "forecast/asymptote_high/"
"""The metric keys a forecast writes at each evaluation (domain appended): the fitted asymptote
and the upper end of its band. An alert rule ``below`` on ``forecast/asymptote_high/*`` with the
target as threshold is "forecast below target": even the band's optimistic end saturates under it."""


def run_record_forecast(*, run: Run, step: int) -> int:
    """After the run's evaluation at ``step``: each fitted domain's asymptote and its band's upper
    end as metric points at the step (the charts and the alert rules read them); idempotent (a
    point the step has already is kept). Returns how many points the forecast gives."""
    fits = [d for d in run_forecast(run)["domains"] if d["curve"] is not None and d["asymptote_band"]]
    points = [MetricPoint(run=run, step=step, domain=d["domain"], key=f"{prefix}{d['domain']}", value=round(value, 6))
              for d in fits for prefix, value in ((ASYMPTOTE_KEY, d["curve"]["a"]), (ASYMPTOTE_HIGH_KEY, d["asymptote_band"][1]))]
    MetricPoint.objects.bulk_create(points, ignore_conflicts=True)
    return len(points)
