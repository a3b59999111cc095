"""Compute accounting: what runs, their domains and teams consumed (``UsageRecord`` rows, written
by the driver with each step: workers/usage.py says what each figure counts), and a projection for
a running run: time and compute to finish at the current rate, and per domain what one more point
of reward costs at the current slope."""
from __future__ import annotations

import csv
import io
from datetime import date, datetime, time, timedelta
from datetime import timezone as dt_timezone
from decimal import Decimal
from typing import Any

from django.apps import apps
from django.conf import settings
from django.db.models import QuerySet, Sum
from django.utils import timezone

from controlplane.common.errors import FieldError, InvalidInput
from controlplane.runs.cost import PARTS, Prices, add_costs, amount_text, as_json, cost, exact, prices_from_pools, round_amount
from controlplane.runs.models import MetricPoint, Run, RunState, UsageRecord

USAGE_FIELDS = ("generated_tokens", "trained_tokens", "completions", "wall_s", "cpu_s", "gpu_s", "sandbox_s",
                "judge_calls", "judge_tokens")
"""The additive figures of a usage row; ``outcomes`` (verification outcome -> count) adds per key."""
COST_FIELDS = tuple(figure for _, figure, _, _ in PARTS)
"""The figures that have a price (controlplane/runs/cost.py)."""
INT_FIELDS = frozenset({"generated_tokens", "trained_tokens", "completions", "judge_calls", "judge_tokens"})
RATE_STEPS = 20
"""The projection's rate: the mean of the last this many steps."""
SLOPE_STEPS = 50
"""A domain's reward slope: least squares over its last this many steps."""
POINT = 0.01
"""One point of reward: 0.01 on the 0-1 reward scale."""


def _blank() -> dict[str, Any]:
    return {**{f: 0 for f in USAGE_FIELDS}, "outcomes": {}, "verifications": 0}


def _round(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (int(v) if k in INT_FIELDS else round(float(v), 3)) if k in USAGE_FIELDS else v for k, v in row.items()}


def _fold(rows, key) -> dict[Any, dict[str, Any]]:
    """Sum usage rows (dicts of a values() query) by ``key(row)``."""
    out: dict[Any, dict[str, Any]] = {}
    for r in rows:
        acc = out.setdefault(key(r), _blank())
        for f in USAGE_FIELDS:
            acc[f] += r[f] or 0
        for outcome, n in (r["outcomes"] or {}).items():
            acc["outcomes"][outcome] = acc["outcomes"].get(outcome, 0) + n
            acc["verifications"] += n
    return {k: _round(v) for k, v in out.items()}


def _rows(qs: QuerySet) -> list[dict]:
    return list(qs.values("run_id", "run__name", "domain", "step", *USAGE_FIELDS, "outcomes"))


def current_prices() -> Prices:
    """The platform admin's prices, from the resource pools (read through the app registry: this
    app imports nothing of the scheduling app), in ``TEMPER_CURRENCY``; the rule that picks one
    price per kind is :func:`controlplane.runs.cost.prices_from_pools`."""
    pools = apps.get_model("scheduling", "ResourcePool").objects.values_list("kind", "price")
    return prices_from_pools(pools, settings.TEMPER_CURRENCY)


@exact
def _costs(rows: list[dict], key, prices: Prices) -> dict[Any, dict[str, Decimal | None]]:
    """The exact cost of usage rows summed by ``key(row)``: the priced figures summed exactly
    (each as the decimal it prints as), then priced once per key (a cost is linear in them)."""
    sums: dict[Any, dict[str, Any]] = {}
    for r in rows:
        acc = sums.setdefault(key(r), dict.fromkeys(COST_FIELDS, 0))
        for f in COST_FIELDS:
            if v := r[f]:
                acc[f] += Decimal(repr(v)) if isinstance(v, float) else v
    return {k: cost(acc, prices, rounded=False) for k, acc in sums.items()}


@exact
def run_cost(run: Run, rows: list[dict], prices: Prices) -> dict[str, Any]:
    """The run's cost in money: totals, per domain (what its domains' rows record: sandbox and
    judge), ``shared`` (the steps' own rows: GPU and CPU, not split among domains), per step (a
    series), and its money budget and what is left of it (None where a price is missing)."""
    totals = add_costs(_costs(rows, lambda r: "all", prices).values())
    budget = run.budget_cost
    left = None if budget is None or totals["total"] is None else max(budget - totals["total"], Decimal(0))
    return {
        "currency": prices.currency, "prices": prices.as_dict(), "totals": as_json(totals),
        "domains": {d: as_json(c) for d, c in sorted(_costs([r for r in rows if r["domain"]], lambda r: r["domain"], prices).items())},
        "shared": as_json(add_costs(_costs([r for r in rows if not r["domain"]], lambda r: "", prices).values())),
        "steps": [{"step": step, "total": as_json(c)["total"]} for step, c in sorted(_costs(rows, lambda r: r["step"], prices).items())],
        "budget": amount_text(budget), "budget_left": None if left is None else str(round_amount(left)),
    }


def run_usage(run: Run, prices: Prices | None = None) -> dict[str, Any]:
    """The run's totals, per domain, its cost (:func:`run_cost`, at ``prices`` or the current
    ones) and (while it runs) its projection."""
    rows = _rows(UsageRecord.objects.filter(run=run))
    totals = _fold(rows, lambda r: "all").get("all", _round(_blank()))
    domains = {k: v for k, v in _fold([r for r in rows if r["domain"]], lambda r: r["domain"]).items()}
    money, ahead = run_cost(run, rows, prices or current_prices()), projection(run, rows)
    if ahead is not None:
        ahead["cost_to_finish"] = cost_to_finish(money["steps"], ahead["steps_left"])
    return {"run": run.id, "totals": totals, "domains": domains, "cost": money, "projection": ahead}


@exact
def cost_to_finish(steps: list[dict[str, Any]], left: int) -> str | None:
    """What the steps left cost at the mean cost of the last ``RATE_STEPS`` steps (the rate the
    projection uses); None where one of those has an unknown cost or there is none.

    >>> cost_to_finish([{"step": 1, "total": "1.000000"}, {"step": 2, "total": "2.000000"}], 10)
    '15.000000'
    >>> cost_to_finish([{"step": 1, "total": None}], 10) is None
    True
    """
    recent = [s["total"] for s in steps[-RATE_STEPS:]]
    if not recent or any(t is None for t in recent):
        return None
    return str(round_amount(sum(Decimal(t) for t in recent) / len(recent) * left))


def run_cost_sum(run: Run, prices: Prices | None = None) -> dict[str, Decimal | None]:
    """What ``run`` has cost so far per part and in all, exact (None: a figure it used has no
    price): the money budget's check after each step."""
    rows = list(UsageRecord.objects.filter(run=run).values(*COST_FIELDS))
    return add_costs(_costs(rows, lambda r: "", prices or current_prices()).values())


def _slope(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of value over step; None for fewer than 3 points.

    >>> _slope([(1, 0.1), (2, 0.2), (3, 0.3)])
    0.1
    >>> _slope([(1, 0.5), (2, 0.5)]) is None
    True
    """
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(s for s, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((s - mx) ** 2 for s, _ in points)
    if var == 0:
        return None
    return round(sum((s - mx) * (v - my) for s, v in points) / var, 12)


def projection(run: Run, rows: list[dict] | None = None) -> dict[str, Any] | None:
    """For a running (or paused, queued) run with steps recorded: steps left, seconds to finish
    and the GPU and CPU seconds that takes at the mean of its last ``RATE_STEPS`` steps; per
    domain the reward slope per step over its last ``SLOPE_STEPS`` steps and, when it is rising,
    what one more point (``POINT``) of reward costs: steps, seconds, GPU and CPU seconds, and the
    domain's generated tokens. None for a run that has ended or has no step yet."""
    if run.state in (RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED) or run.current_step <= 0:
        return None
    rows = rows if rows is not None else _rows(UsageRecord.objects.filter(run=run))
    steps = sorted({r["step"] for r in rows if not r["domain"]})[-RATE_STEPS:]
    if not steps:
        return None
    recent = [r for r in rows if r["step"] in set(steps)]
    per_step = {f: sum(r[f] or 0 for r in recent if not r["domain"]) / len(steps) for f in ("wall_s", "cpu_s", "gpu_s")}
    left = max(run.budget_steps - run.current_step, 0)
    out: dict[str, Any] = {
        "steps_left": left, "seconds_per_step": round(per_step["wall_s"], 3),
        "eta_s": round(left * per_step["wall_s"], 1), "gpu_s_to_finish": round(left * per_step["gpu_s"], 1),
        "cpu_s_to_finish": round(left * per_step["cpu_s"], 1), "rate_steps": len(steps), "domains": {},
    }
    tokens = {d: v["generated_tokens"] / len(steps) for d, v in _fold([r for r in recent if r["domain"]], lambda r: r["domain"]).items()}
    lo = max(run.current_step - SLOPE_STEPS, 0)
    series: dict[str, list[tuple[int, float]]] = {}
    for domain, step, value in (MetricPoint.objects.filter(run=run, key__startswith="reward/", step__gt=lo)
                                .exclude(domain="").values_list("domain", "step", "value")):
        series.setdefault(domain, []).append((step, value))
    for domain, points in sorted(series.items()):
        slope = _slope(sorted(points))
        entry: dict[str, Any] = {"slope_per_step": slope, "per_point": None}
        if slope is not None and slope > 0:
            n = POINT / slope
            entry["per_point"] = {"steps": round(n, 1), "seconds": round(n * per_step["wall_s"], 1),
                                  "gpu_s": round(n * per_step["gpu_s"], 1), "cpu_s": round(n * per_step["cpu_s"], 1),
                                  "generated_tokens": int(n * tokens.get(domain, 0))}
        else:
            entry["note"] = "not improving at its current slope" if slope is not None else "too few steps yet"
        out["domains"][domain] = entry
    return out


def team_usage(team_id: int, *, start: datetime | None = None, end: datetime | None = None,
               prices: Prices | None = None) -> dict[str, Any]:
    """A team's usage in ``[start, end)`` (by when each step was recorded): totals, per run and
    per domain, each with its cost at ``prices`` (the current ones by default). The totals are the
    sum of the per-run figures, which are the sums of their steps; a domain's cost is its sandbox
    and judge parts (GPU and CPU time is the steps', not split among domains)."""
    qs = UsageRecord.objects.filter(team_id=team_id)
    if start is not None:
        qs = qs.filter(at__gte=start)
    if end is not None:
        qs = qs.filter(at__lt=end)
    rows = _rows(qs)
    prices = prices or current_prices()
    per_run = _fold(rows, lambda r: (r["run_id"], r["run__name"]))
    run_costs = _costs(rows, lambda r: (r["run_id"], r["run__name"]), prices)
    domains = [r for r in rows if r["domain"]]
    domain_costs = _costs(domains, lambda r: r["domain"], prices)
    return {
        "currency": prices.currency, "prices": prices.as_dict(),
        "totals": {**_fold(rows, lambda r: "all").get("all", _round(_blank())), "cost": as_json(add_costs(run_costs.values()))},
        "runs": [{"run": rid, "name": name, **figures, "cost": as_json(run_costs[(rid, name)])}
                 for (rid, name), figures in sorted(per_run.items())],
        "domains": [{"domain": d, **figures, "cost": as_json(domain_costs[d])}
                    for d, figures in sorted(_fold(domains, lambda r: r["domain"]).items())],
    }


COST_COLUMNS = tuple(part for part, *_ in PARTS) + ("total",)
"""The CSV's cost columns (``cost_gpu`` ... ``cost_total``), in the report's currency."""


def usage_csv(report: dict[str, Any]) -> str:
    """A team report as CSV: one line per run, then one per domain, then the total; each with
    its cost per part and in all (empty: unknown, a figure without a price) and the currency."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["kind", "run", "name", "domain", *USAGE_FIELDS, "verifications", *[f"cost_{c}" for c in COST_COLUMNS], "currency"])

    def money(row: dict) -> list:
        return [*["" if row["cost"][c] is None else row["cost"][c] for c in COST_COLUMNS], report["currency"]]

    for r in report["runs"]:
        w.writerow(["run", r["run"], r["name"], "", *[r[f] for f in USAGE_FIELDS], r["verifications"], *money(r)])
    for d in report["domains"]:
        w.writerow(["domain", "", "", d["domain"], *[d[f] for f in USAGE_FIELDS], d["verifications"], *money(d)])
    t = report["totals"]
    w.writerow(["total", "", "", "", *[t[f] for f in USAGE_FIELDS], t["verifications"], *money(t)])
    return buf.getvalue()


def run_usage_totals(run_ids: list[int]) -> dict[int, dict[str, Any]]:
    """Totals for several runs in one query (the home list, the team page)."""
    agg = (UsageRecord.objects.filter(run_id__in=run_ids).values("run_id")
           .annotate(**{f: Sum(f) for f in USAGE_FIELDS}))
    return {a["run_id"]: _round({f: a[f] or 0 for f in USAGE_FIELDS}) for a in agg}


MAX_RANGE_DAYS = 3660


REPORT_FROM = datetime(1970, 1, 1, tzinfo=dt_timezone.utc)
REPORT_TO = datetime(9000, 1, 1, tzinfo=dt_timezone.utc)
"""The dates a report may start or end at (past either end a date overflows Python's or the
database's calendar: 9999-12-31 as an end is the day after)."""


def parse_range(start: str, end: str) -> tuple[datetime | None, datetime | None]:
    """``start`` and ``end`` of a report as aware datetimes (UTC when no zone is given); a bare
    date ``end`` includes that day. Errors name the parameter.

    >>> parse_range("2026-11-01", "2026-11-30")
    (datetime.datetime(2026, 11, 1, 0, 0, tzinfo=datetime.timezone.utc), datetime.datetime(2026, 12, 1, 0, 0, tzinfo=datetime.timezone.utc))
    >>> parse_range("", "")
    (None, None)
    >>> parse_range("yesterday", "")
    Traceback (most recent call last):
    ...
    controlplane.common.errors.InvalidInput: start: must be an ISO date (2026-11-30) or date and time (2026-11-30T12:00:00Z)
    >>> parse_range("", "9999-12-31")
    Traceback (most recent call last):
    ...
    controlplane.common.errors.InvalidInput: end: must be from 1970-01-01 to 9000-01-01
    """
    def one(name: str, text: str, is_end: bool) -> datetime | None:
        text = text.strip()
        if not text:
            return None
        try:
            if len(text) == 10:
                day = date.fromisoformat(text)
                value = datetime.combine(day + timedelta(days=1) if is_end else day, time.min)
            else:
                value = datetime.fromisoformat(text.replace("Z", "+00:00"))
            value = value if timezone.is_aware(value) else value.replace(tzinfo=dt_timezone.utc)
            in_range = REPORT_FROM <= value.astimezone(dt_timezone.utc) <= REPORT_TO
        except ValueError:
            raise InvalidInput.one(name, "must be an ISO date (2026-11-30) or date and time (2026-11-30T12:00:00Z)") from None
        except OverflowError:  # the day after 9999-12-31, or a zone that moves 0001-01-01 before year 1
            in_range = False
        if not in_range:
            raise InvalidInput.one(name, f"must be from {REPORT_FROM:%Y-%m-%d} to {REPORT_TO:%Y-%m-%d}")
        return value

    lo, hi = one("start", start, False), one("end", end, True)
    errors = []
    if lo is not None and hi is not None:
        if hi <= lo:
            errors.append(FieldError("end", "must be after start"))
        elif (hi - lo).days > MAX_RANGE_DAYS:
            errors.append(FieldError("end", f"the range may span {MAX_RANGE_DAYS} days at most"))
    if errors:
        raise InvalidInput(errors)
    return lo, hi
