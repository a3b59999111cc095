"""Where a run's held-out reward is heading: ScaleRL's saturating curve of reward against compute.

ScaleRL (arXiv 2510.13786) fits the pass rate ``R`` of a run against the compute ``C`` it has
spent with a sigmoid in ``log C``::

    R(C) = A / (1 + (C_mid / C) ** B)

``A`` is the asymptote (the reward the recipe saturates at), ``B`` how sharply it rises and
``C_mid`` the compute at which it reaches half of ``A``. Fitted on a run's first part, the curve
says where the run will end and how much compute a target reward takes, with a bootstrap band
(the fit repeated on resampled points) that is honest about how little an early fit knows.

The fit is a least-squares search, deterministic and with no optimiser to diverge: for each
``(B, log C_mid)`` on a grid the best ``A`` in [0, 1] has a closed form, and the grid is refined
twice around the best cell.

>>> truth = Curve(a=0.8, b=1.5, c_mid=1e5)
>>> xs = [1e3 * 2 ** i for i in range(11)]
>>> fit = fit_curve(xs, [truth(x) for x in xs])
>>> round(fit.a, 2), round(fit.b, 1), round(fit.c_mid / 1e5, 1)
(0.8, 1.5, 1.0)
>>> round(truth.compute_for(0.4)), truth.compute_for(0.9) is None
(100000, True)
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

MIN_POINTS = 4
"""Fewest held-out results (at distinct compute) a forecast is fitted on."""
B_RANGE = (0.1, 6.0)
"""The steepness searched (ScaleRL's fits fall well inside it)."""
DECADES_BEYOND = 4.0
"""How far past the largest compute seen ``C_mid`` may lie, in decades (an early fit extrapolates)."""


@dataclass(frozen=True)
class Curve:
    """``R(C) = a / (1 + (c_mid / C) ** b)``."""

    a: float
    """Asymptote: the reward the run saturates at."""
    b: float
    """Steepness in log-compute."""
    c_mid: float
    """Compute at half the asymptote."""

    def __call__(self, c: float) -> float:
        return self.a / (1.0 + (self.c_mid / c) ** self.b) if c > 0 else 0.0

    def compute_for(self, target: float) -> float | None:
        """The compute at which the curve reaches ``target``; None when it never does (at or
        above the asymptote)."""
        if not 0 < target < self.a:
            return None
        return self.c_mid / (self.a / target - 1.0) ** (1.0 / self.b)


def _best_on_grid(logx: np.ndarray, y: np.ndarray, bs: np.ndarray, us: np.ndarray) -> tuple[float, float, float, float]:
    """``(sse, a, b, u)`` of the best cell of the grid ``bs`` x ``us`` (``u = log C_mid``)."""
    f = 1.0 / (1.0 + np.exp(bs[:, None, None] * (us[None, :, None] - logx[None, None, :])))  # (nb, nu, n)
    ff = (f * f).sum(axis=2)
    a = np.clip((f * y).sum(axis=2) / np.maximum(ff, 1e-300), 0.0, 1.0)
    sse = ((y - a[:, :, None] * f) ** 2).sum(axis=2)
    i, j = np.unravel_index(int(np.argmin(sse)), sse.shape)
    return float(sse[i, j]), float(a[i, j]), float(bs[i]), float(us[j])


def fit_curve(compute: Sequence[float], reward: Sequence[float]) -> Curve:
    """The least-squares curve through ``(compute, reward)`` points (compute > 0)."""
    x = np.asarray(compute, dtype=float)
    y = np.asarray(reward, dtype=float)
    keep = (x > 0) & np.isfinite(x) & np.isfinite(y)
    logx, y = np.log(x[keep]), y[keep]
    if logx.size == 0:
        raise ValueError("no point with positive compute")
    lo_u, hi_u = float(logx.min()) - 2 * math.log(10), float(logx.max()) + DECADES_BEYOND * math.log(10)
    bs, us = np.linspace(*B_RANGE, 40), np.linspace(lo_u, hi_u, 60)
    _, a, b, u = _best_on_grid(logx, y, bs, us)
    for _ in range(2):  # refine around the best cell
        db, du = bs[1] - bs[0], us[1] - us[0]
        bs = np.linspace(max(B_RANGE[0], b - db), min(B_RANGE[1], b + db), 21)
        us = np.linspace(u - du, u + du, 21)
        _, a, b, u = _best_on_grid(logx, y, bs, us)
    return Curve(a=a, b=b, c_mid=math.exp(u))


@dataclass(frozen=True)
class Forecast:
    """A fitted curve and its bootstrap band, or why there is none."""

    used: int
    """Held-out results the fit used."""
    curve: Curve | None = None
    """The fit on every point (None: too few points)."""
    asymptote_band: tuple[float, float] | None = None
    """5th and 95th percentile of ``a`` over the bootstrap fits."""
    target: float | None = None
    """The target reward asked about."""
    compute_to_target: float | None = None
    """Compute at which the fit reaches ``target`` (None: never, or no target)."""
    compute_band: tuple[float | None, float | None] | None = None
    """5th and 95th percentile of that compute over the bootstrap fits (None: the fit never
    reaches it in more than 5% of them)."""
    reach_share: float | None = None
    """Share of the bootstrap fits that reach ``target`` at all."""
    at: float | None = None
    """A compute asked about (a budget's end, where the run ends)."""
    predicted: float | None = None
    """The fit's reward at ``at``."""
    predicted_band: tuple[float, float] | None = None
    """5th and 95th percentile of the reward at ``at`` over the bootstrap fits."""
    note: str = ""
    """Why there is no curve, when there is none."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["curve"] = asdict(self.curve) if self.curve is not None else None
        return d


def _percentiles(values: list[float], lo: float = 5.0, hi: float = 95.0) -> tuple[float, float]:
    return float(np.percentile(values, lo)), float(np.percentile(values, hi))


def forecast(compute: Sequence[float], reward: Sequence[float], *, target: float | None = None, at: float | None = None,
             draws: int = 100, seed: int = 0) -> Forecast:
    """The curve through the points and a bootstrap band (``draws`` fits on points resampled with
    replacement, the generator seeded: the same points give the same band); with ``target``, the
    compute to reach it; with ``at``, the reward predicted there."""
    pairs = [(float(c), float(r)) for c, r in zip(compute, reward) if c > 0 and math.isfinite(c) and math.isfinite(r)]
    if len({c for c, _ in pairs}) < MIN_POINTS:
        return Forecast(used=len(pairs), target=target,
                        note=f"{len({c for c, _ in pairs})} held-out results at distinct compute; a forecast needs {MIN_POINTS}")
    xs, ys = [c for c, _ in pairs], [r for _, r in pairs]
    curve = fit_curve(xs, ys)
    rng = np.random.default_rng(seed)
    fits = []
    for _ in range(draws):
        idx = rng.integers(0, len(pairs), len(pairs))
        if len({xs[i] for i in idx}) >= 3:
            fits.append(fit_curve([xs[i] for i in idx], [ys[i] for i in idx]))
    band = _percentiles([f.a for f in fits]) if fits else None
    prediction: dict[str, Any] = {}
    if at is not None and at > 0:
        prediction = {"at": at, "predicted": curve(at), "predicted_band": _percentiles([f(at) for f in fits]) if fits else None}
    result = Forecast(used=len(pairs), curve=curve, asymptote_band=band, target=target, **prediction)
    if target is None or not fits:
        return result
    reached = [c for f in fits if (c := f.compute_for(target)) is not None]
    share = len(reached) / len(fits)
    lo, hi = _percentiles(reached) if reached else (None, None)
    if share < 0.95:
        hi = None  # in more than 5% of the fits the target is never reached: no upper bound
    return dataclasses.replace(result, compute_to_target=curve.compute_for(target), compute_band=(lo, hi), reach_share=share)
