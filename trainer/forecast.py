"""Where a run's held-out reward is heading: ScaleRL's saturating curve of reward against compute.

ScaleRL (arXiv 2510.13786) fits the pass rate ``R`` of a run against the compute ``C`` it has
spent with a sigmoid in ``log C``::

    R(C) = R0 + (A - R0) / (1 + (C_mid / C) ** B)

``A`` is the asymptote (the reward the recipe saturates at), ``B`` how sharply it rises, ``C_mid``
the compute at which it is half way from ``R0`` to ``A``, and ``R0`` where it starts (a run from
a fine-tuned base does not start at 0; with ``R0 = 0`` this is ``A / (1 + (C_mid / C) ** B)``).
Fitted on a run's first part, the curve says where the run will end and how much compute a
target reward takes, with a bootstrap band (the fit repeated on resampled results) that is honest
about how little an early fit knows.

The fit is a least-squares search, deterministic and with no optimiser to diverge: for each
``(B, log C_mid)`` on a grid the best ``R0`` and ``A`` (0 <= R0 <= A <= 1) have a closed form,
and the grid is refined twice around the best cell. More than :data:`MAX_POINTS` results are
averaged into that many log-spaced bins of compute first.

>>> truth = Curve(a=0.8, b=1.5, c_mid=1e5)
>>> xs = [1e3 * 2 ** i for i in range(11)]
>>> fit = fit_curve(xs, [truth(x) for x in xs])
>>> round(fit.a, 2), round(fit.b, 1), round(fit.c_mid / 1e5, 1), round(fit.r0, 2)
(0.8, 1.5, 1.0, 0.0)
>>> round(truth.compute_for(0.4)), truth.compute_for(0.9) is None
(100000, True)
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

MIN_POINTS = 4
"""Fewest held-out results (at distinct compute) a forecast is fitted on."""
MAX_POINTS = 64
"""More results than this are averaged into this many log-spaced bins of compute."""
B_RANGE = (0.1, 6.0)
"""The steepness searched (ScaleRL's fits fall well inside it)."""
DECADES_BEYOND = 4.0
"""How far past the largest compute seen ``C_mid`` may lie, in decades (an early fit extrapolates)."""
MAX_LOG_COMPUTE = 700.0
"""``log C`` beyond which a compute is "never" (``exp`` overflows a float past about 709)."""


@dataclass(frozen=True)
class Curve:
    """``R(C) = r0 + (a - r0) / (1 + (c_mid / C) ** b)``."""

    a: float
    """Asymptote: the reward the run saturates at."""
    b: float
    """Steepness in log-compute."""
    c_mid: float
    """Compute half way from ``r0`` to ``a``."""
    r0: float = 0.0
    """The reward at no compute."""

    def __call__(self, c: float) -> float:
        if c <= 0:
            return self.r0
        z = self.b * (math.log(self.c_mid) - math.log(c))
        return self.r0 + (self.a - self.r0) / (1.0 + math.exp(min(z, MAX_LOG_COMPUTE)))

    def compute_for(self, target: float) -> float | None:
        """The compute at which the curve reaches ``target`` (0 when it starts there); None when
        it never does (at or above the asymptote, or beyond any compute a float holds)."""
        if target <= self.r0:
            return 0.0
        if target >= self.a:
            return None
        log_c = math.log(self.c_mid) - math.log((self.a - target) / (target - self.r0)) / self.b
        return math.exp(log_c) if log_c < MAX_LOG_COMPUTE else None


def _best_on_grid(logx: np.ndarray, y: np.ndarray, bs: np.ndarray, us: np.ndarray) -> tuple[float, float, float, float, float]:
    """``(sse, r0, a, b, u)`` of the best cell of the grid ``bs`` x ``us`` (``u = log C_mid``):
    for each cell the least-squares ``(r0, a)`` with ``0 <= r0 <= a <= 1``, from the unconstrained
    solution where it is feasible, else the best of the edges (``r0 = 0``; ``a = 1``; ``r0 = a``)."""
    f = 1.0 / (1.0 + np.exp(np.minimum(bs[:, None, None] * (us[None, :, None] - logx[None, None, :]), MAX_LOG_COMPUTE)))
    g = 1.0 - f  # y ~ r0 * g + a * f
    sff, sgg, sfg = (f * f).sum(2), (g * g).sum(2), (f * g).sum(2)
    sfy, sgy = (f * y).sum(2), (g * y).sum(2)
    det = sgg * sff - sfg ** 2
    safe = np.where(np.abs(det) < 1e-12, np.nan, det)
    candidates = [((sgy * sff - sfy * sfg) / safe, (sfy * sgg - sgy * sfg) / safe)]
    candidates.append((np.zeros_like(sff), np.clip(sfy / np.maximum(sff, 1e-300), 0.0, 1.0)))  # r0 = 0
    candidates.append((np.clip((sgy - sfg) / np.maximum(sgg, 1e-300), 0.0, 1.0), np.ones_like(sff)))  # a = 1
    level = np.clip(y.mean(), 0.0, 1.0)
    candidates.append((np.full_like(sff, level), np.full_like(sff, level)))  # flat: r0 = a
    best_sse = np.full(sff.shape, np.inf)
    best_r0, best_a = np.zeros_like(sff), np.zeros_like(sff)
    for r0, a in candidates:
        ok = np.isfinite(r0) & np.isfinite(a) & (r0 >= -1e-12) & (r0 <= a + 1e-12) & (a <= 1 + 1e-12)
        r0, a = np.clip(np.nan_to_num(r0), 0.0, 1.0), np.clip(np.nan_to_num(a), 0.0, 1.0)
        sse = np.where(ok, ((y - (r0[:, :, None] * g + a[:, :, None] * f)) ** 2).sum(2), np.inf)
        better = sse < best_sse
        best_sse, best_r0, best_a = np.where(better, sse, best_sse), np.where(better, r0, best_r0), np.where(better, a, best_a)
    i, j = np.unravel_index(int(np.argmin(best_sse)), best_sse.shape)
    return float(best_sse[i, j]), float(best_r0[i, j]), float(best_a[i, j]), float(bs[i]), float(us[j])


def _binned(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most :data:`MAX_POINTS` points: the means of log-spaced bins of compute."""
    if x.size <= MAX_POINTS:
        return x, y
    edges = np.linspace(np.log(x.min()), np.log(x.max()), MAX_POINTS + 1)
    which = np.clip(np.searchsorted(edges, np.log(x), side="right") - 1, 0, MAX_POINTS - 1)
    kept = [k for k in range(MAX_POINTS) if (which == k).any()]
    return (np.array([np.exp(np.log(x[which == k]).mean()) for k in kept]), np.array([y[which == k].mean() for k in kept]))


def fit_curve(compute: Sequence[float], reward: Sequence[float]) -> Curve:
    """The least-squares curve through ``(compute, reward)`` points (compute > 0)."""
    x = np.asarray(compute, dtype=float)
    y = np.asarray(reward, dtype=float)
    keep = (x > 0) & np.isfinite(x) & np.isfinite(y)
    if not keep.any():
        raise ValueError("no point with positive compute")
    x, y = _binned(x[keep], y[keep])
    logx = np.log(x)
    lo_u, hi_u = float(logx.min()) - 2 * math.log(10), float(logx.max()) + DECADES_BEYOND * math.log(10)
    bs, us = np.linspace(*B_RANGE, 30), np.linspace(lo_u, hi_u, 45)
    _, r0, a, b, u = _best_on_grid(logx, y, bs, us)
    for _ in range(2):  # refine around the best cell
        db, du = bs[1] - bs[0], us[1] - us[0]
        bs = np.linspace(max(B_RANGE[0], b - db), min(B_RANGE[1], b + db), 21)
        us = np.linspace(u - du, u + du, 21)
        _, r0, a, b, u = _best_on_grid(logx, y, bs, us)
    return Curve(a=a, b=b, c_mid=math.exp(u), r0=r0)


@dataclass(frozen=True)
class Forecast:
    """A fitted curve and its bootstrap bands, or why there is none."""

    used: int
    """Held-out results the fit used."""
    curve: Curve | None = None
    """The fit on every result (None: too few results)."""
    asymptote_band: tuple[float, float] | None = None
    """The :data:`BAND` percentiles of ``a`` over the bootstrap fits."""
    target: float | None = None
    """The target reward asked about."""
    compute_to_target: float | None = None
    """Compute at which the fit reaches ``target`` (None: never, or no target)."""
    compute_band: tuple[float | None, float | None] | None = None
    """The :data:`BAND` percentiles of that compute over the bootstrap fits (the upper end None
    when more than 2.5% of them never reach it)."""
    reach_share: float | None = None
    """Share of the bootstrap fits that reach ``target`` at all."""
    at: float | None = None
    """A compute asked about (a budget's end, where the run ends)."""
    predicted: float | None = None
    """The fit's reward at ``at``."""
    predicted_band: tuple[float, float] | None = None
    """The :data:`BAND` percentiles of the reward at ``at`` over the bootstrap fits."""
    note: str = ""
    """Why there is no curve, when there is none."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["curve"] = asdict(self.curve) if self.curve is not None else None
        return d


BAND = (2.5, 97.5)
"""The percentiles of the bootstrap fits a band spans (a 95% band)."""


def _percentiles(values: list[float], lo: float = BAND[0], hi: float = BAND[1]) -> tuple[float, float]:
    return float(np.percentile(values, lo)), float(np.percentile(values, hi))


@dataclass(frozen=True)
class Fits:
    """The curve through a run's results and its bootstrap refits: what every question about a
    target or a compute is answered from (fitted once, asked many times)."""

    used: int
    curve: Curve | None
    draws: list[Curve] = field(default_factory=list)
    note: str = ""

    def band_at(self, c: float) -> tuple[float, float] | None:
        """The :data:`BAND` percentiles of the reward at compute ``c`` over the bootstrap fits
        (the curve's band, drawn around it); None without fits."""
        return _percentiles([f(c) for f in self.draws]) if self.curve is not None and self.draws else None

    def forecast(self, *, target: float | None = None, at: float | None = None) -> Forecast:
        """The asymptote's band; with ``target`` the compute to it; with ``at`` the reward there."""
        if self.curve is None:
            return Forecast(used=self.used, target=target, note=self.note)
        out: dict[str, Any] = {"asymptote_band": _percentiles([f.a for f in self.draws]) if self.draws else None}
        if at is not None and at > 0:
            out.update(at=at, predicted=self.curve(at),
                       predicted_band=_percentiles([f(at) for f in self.draws]) if self.draws else None)
        if target is not None and self.draws:
            reached = [c for f in self.draws if (c := f.compute_for(target)) is not None]
            share = len(reached) / len(self.draws)
            lo, hi = _percentiles(reached) if reached else (None, None)
            out.update(compute_to_target=self.curve.compute_for(target), reach_share=share,
                       compute_band=(lo, hi if share >= BAND[1] / 100 else None))
        return Forecast(used=self.used, curve=self.curve, target=target, **out)


def fits(compute: Sequence[float], reward: Sequence[float], *, draws: int = 100, seed: int = 0) -> Fits:
    """The curve through the points and ``draws`` refits on the points resampled with replacement
    (the generator seeded: the same points give the same band)."""
    pairs = [(float(c), float(r)) for c, r in zip(compute, reward) if c > 0 and math.isfinite(c) and math.isfinite(r)]
    distinct = len({c for c, _ in pairs})
    if distinct < MIN_POINTS:
        return Fits(used=len(pairs), curve=None,
                    note=f"{distinct} held-out results at distinct compute; a forecast needs {MIN_POINTS}")
    xs, ys = [c for c, _ in pairs], [r for _, r in pairs]
    rng = np.random.default_rng(seed)
    refits = []
    for _ in range(draws):
        idx = rng.integers(0, len(pairs), len(pairs))
        if len({xs[i] for i in idx}) >= 3:
            refits.append(fit_curve([xs[i] for i in idx], [ys[i] for i in idx]))
    return Fits(used=len(pairs), curve=fit_curve(xs, ys), draws=refits)


def forecast(compute: Sequence[float], reward: Sequence[float], *, target: float | None = None, at: float | None = None,
             draws: int = 100, seed: int = 0) -> Forecast:
    """The curve through the points and its bootstrap bands; with ``target``, the compute to reach
    it; with ``at``, the reward predicted there."""
    return fits(compute, reward, draws=draws, seed=seed).forecast(target=target, at=at)
