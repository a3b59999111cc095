"""Agreement statistics between a judge and human reviewers. Pure numpy: no Django, no scipy.

Every function takes plain sequences and an optional ``sample_weight`` (inverse sampling
propensities give inverse-propensity-weighted estimates of the population value).

>>> round(cohen_kappa([0, 1, 1, 0], [0, 1, 0, 0]), 4)
0.5
>>> accuracy([1, 2, 3], [1, 2, 4])
0.6666666666666666
>>> ipw_mean([1, 0, 1], [0.5, 0.25, 1.0])  # weights 2, 4, 1: (2 + 1) / 7
0.42857142857142855
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

MIN_COUNT = 30
"""Below this many labelled items a statistic is reported with a warning."""

FORMATS = ("binary", "ordinal", "unit")
"""Score formats: binary 0/1, ordinal 1-5, unit interval 0-1."""


def _arr(values: Sequence[float]) -> np.ndarray:
    return np.asarray(values, dtype=float)


def _weights(sample_weight: Sequence[float] | None, n: int) -> np.ndarray:
    if sample_weight is None:
        return np.ones(n)
    w = _arr(sample_weight)
    if w.shape != (n,):
        raise ValueError(f"sample_weight has {w.size} values for {n} items")
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ValueError("sample_weight must be finite and non-negative")
    return w


def _pair(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = _arr(a), _arr(b)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"need two 1-d sequences of equal length, got {x.shape} and {y.shape}")
    return x, y


def _mean(values: np.ndarray, sample_weight: Sequence[float] | None) -> float:
    """The (weighted) mean of one value per item; NaN when there are no items or no weight."""
    if values.size == 0:
        return math.nan
    w = _weights(sample_weight, values.size)
    return float(np.sum(w * values) / np.sum(w)) if w.sum() > 0 else math.nan


# ----------------------------------------------------------------------------- point statistics
def accuracy(a: Sequence[float], b: Sequence[float], sample_weight: Sequence[float] | None = None) -> float:
    """Share of items where ``a`` and ``b`` are equal (weighted)."""
    x, y = _pair(a, b)
    return _mean(x == y, sample_weight)


def confusion_matrix(a: Sequence[float], b: Sequence[float], labels: Sequence[float],
                     sample_weight: Sequence[float] | None = None) -> np.ndarray:
    """``C[i, j]``: (weighted) count of items with ``a == labels[i]`` and ``b == labels[j]``.

    >>> confusion_matrix([0, 1, 1], [0, 0, 1], [0, 1]).tolist()
    [[1.0, 0.0], [1.0, 1.0]]
    """
    x, y = _pair(a, b)
    w = _weights(sample_weight, x.size)
    lab = _arr(labels)
    order = np.argsort(lab)
    k = lab.size
    out = np.zeros((k, k))
    if x.size == 0:
        return out
    ix = order[np.clip(np.searchsorted(lab[order], x), 0, k - 1)]
    iy = order[np.clip(np.searchsorted(lab[order], y), 0, k - 1)]
    bad = (lab[ix] != x) | (lab[iy] != y)
    if np.any(bad):
        raise ValueError(f"values {sorted(set(x[lab[ix] != x].tolist()) | set(y[lab[iy] != y].tolist()))} are not among the labels {lab.tolist()}")
    np.add.at(out, (ix, iy), w)
    return out


def cohen_kappa(a: Sequence[float], b: Sequence[float], labels: Sequence[float] | None = None,
                weights: str | None = None, sample_weight: Sequence[float] | None = None) -> float:
    """Cohen's kappa; ``weights`` ``"linear"`` or ``"quadratic"`` give weighted kappa (ordinal).

    Disagreement weights use label positions (``|i - j|`` or ``(i - j)**2``), as scikit-learn does.
    NaN when chance disagreement is zero (both raters used one and the same label).
    """
    x, y = _pair(a, b)
    if labels is None:
        labels = sorted(set(x.tolist()) | set(y.tolist()))
    k = len(labels)
    if x.size == 0 or k == 0:
        return math.nan
    c = confusion_matrix(x, y, labels, sample_weight)
    n = c.sum()
    if n <= 0:
        return math.nan
    expected = np.outer(c.sum(axis=1), c.sum(axis=0)) / n
    i, j = np.indices((k, k))
    if weights is None:
        w = (i != j).astype(float)
    elif weights == "linear":
        w = np.abs(i - j).astype(float)
    elif weights == "quadratic":
        w = ((i - j) ** 2).astype(float)
    else:
        raise ValueError("weights must be None, 'linear' or 'quadratic'")
    denominator = float(np.sum(w * expected))
    if denominator == 0:
        return math.nan
    return float(1.0 - np.sum(w * c) / denominator)


def rankdata(values: Sequence[float]) -> np.ndarray:
    """Ranks from 1, ties sharing their average rank.

    >>> rankdata([10, 20, 20, 5]).tolist()
    [2.0, 3.5, 3.5, 1.0]
    """
    x = _arr(values)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(x.size)
    sorted_x = x[order]
    i = 0
    while i < x.size:
        j = i
        while j + 1 < x.size and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def _pearson(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    if w.sum() <= 0:
        return math.nan
    mx, my = np.average(x, weights=w), np.average(y, weights=w)
    cov = np.sum(w * (x - mx) * (y - my))
    sx, sy = np.sum(w * (x - mx) ** 2), np.sum(w * (y - my) ** 2)
    if sx <= 0 or sy <= 0:
        return math.nan
    return float(cov / math.sqrt(sx * sy))


def spearman(a: Sequence[float], b: Sequence[float], sample_weight: Sequence[float] | None = None) -> float:
    """Spearman's rank correlation (average ranks for ties; weights apply to the Pearson step).

    >>> spearman([1, 2, 3, 4], [10, 20, 30, 40]), spearman([1, 2, 3], [3, 2, 1])
    (1.0, -1.0)
    """
    x, y = _pair(a, b)
    if x.size < 2:
        return math.nan
    return _pearson(rankdata(x), rankdata(y), _weights(sample_weight, x.size))


def mae(a: Sequence[float], b: Sequence[float], sample_weight: Sequence[float] | None = None) -> float:
    """Mean absolute error (weighted)."""
    x, y = _pair(a, b)
    return _mean(np.abs(x - y), sample_weight)


# ----------------------------------------------------------------------------- sampling weights
def ipw_weights(propensity: Sequence[float]) -> np.ndarray:
    """Inverse-propensity weights ``1 / p``; every propensity must be in (0, 1]."""
    p = _arr(propensity)
    if np.any(p <= 0) or np.any(p > 1) or not np.all(np.isfinite(p)):
        raise ValueError("propensities must be in (0, 1]")
    return 1.0 / p


def ipw_mean(values: Sequence[float], propensity: Sequence[float]) -> float:
    """The population mean of ``values`` estimated from a sample with inclusion probabilities
    ``propensity`` (Hajek: the inverse-propensity-weighted mean)."""
    v = _arr(values)
    w = ipw_weights(propensity)
    return float(np.sum(w * v) / np.sum(w)) if v.size else math.nan


# ----------------------------------------------------------------------------- intervals
def bootstrap_ci(statistic: Callable[..., float], *arrays: Sequence[float], sample_weight: Sequence[float] | None = None,
                 n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic(*arrays[, sample_weight=...])``.

    Items are resampled with replacement ``n_boot`` times (with their weights when given);
    replicates where the statistic is undefined (NaN) are dropped. ``(nan, nan)`` when the data
    are empty or no replicate is defined.
    """
    data = [_arr(a) for a in arrays]
    n = data[0].size if data else 0
    if n == 0:
        return (math.nan, math.nan)
    w = None if sample_weight is None else _weights(sample_weight, n)
    rng = np.random.default_rng(seed)
    reps = []
    for _ in range(n_boot):
        idx = rng.integers(0, n, n)
        args = [d[idx] for d in data]
        value = statistic(*args) if w is None else statistic(*args, sample_weight=w[idx])
        if value is not None and math.isfinite(value):
            reps.append(value)
    if not reps:
        return (math.nan, math.nan)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(np.asarray(reps), [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


# ----------------------------------------------------------------------------- reviewers
def krippendorff_alpha(data: Sequence[Sequence[float]], level: str = "nominal") -> float:
    """Krippendorff's alpha for ``data[coder][unit]`` (NaN or None where a coder gave no value).

    ``level``: ``nominal``, ``ordinal`` or ``interval``. Units with fewer than two values are not
    pairable and are left out. NaN when there is no variation at all.

    >>> round(krippendorff_alpha([[1, 1, 2, 2], [1, 2, 2, 2]]), 4)  # o = [[2, 1], [1, 4]]
    0.5333
    """
    m = np.array([[math.nan if v is None else float(v) for v in row] for row in data], dtype=float)
    if m.ndim != 2:
        raise ValueError("data must be a coders x units table")
    values = sorted({float(v) for v in m[np.isfinite(m)]})
    index = {v: i for i, v in enumerate(values)}
    k = len(values)
    o = np.zeros((k, k))
    for unit in m.T:
        present = [index[float(v)] for v in unit if math.isfinite(v)]
        mu = len(present)
        if mu < 2:
            continue
        for p in range(mu):
            for q in range(mu):
                if p != q:
                    o[present[p], present[q]] += 1.0 / (mu - 1)
    nc = o.sum(axis=1)
    n = nc.sum()
    if n <= 1 or k < 2:
        return math.nan
    v = np.asarray(values)
    if level == "nominal":
        delta = 1.0 - np.eye(k)
    elif level == "interval":
        delta = (v[:, None] - v[None, :]) ** 2
    elif level == "ordinal":
        delta = np.zeros((k, k))
        for c in range(k):
            for d in range(k):
                lo, hi = min(c, d), max(c, d)
                delta[c, d] = (nc[lo:hi + 1].sum() - (nc[c] + nc[d]) / 2.0) ** 2
    else:
        raise ValueError("level must be nominal, ordinal or interval")
    expected = float(np.sum(np.outer(nc, nc) * delta))
    if expected == 0:
        return math.nan
    return float(1.0 - (n - 1) * np.sum(o * delta) / expected)


# ----------------------------------------------------------------------------- calibration
def reliability_diagram(scores: Sequence[float], human_pass: Sequence[float], bins: int = 10,
                        sample_weight: Sequence[float] | None = None) -> list[dict[str, Any]]:
    """Judge score (0-1) against the human pass rate, in ``bins`` equal-width bins (empty bins left out)."""
    s, h = _pair(scores, human_pass)
    w = _weights(sample_weight, s.size)
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(s, edges[1:-1], right=False), 0, bins - 1)
    out = []
    for b in range(bins):
        sel = which == b
        if not np.any(sel) or w[sel].sum() <= 0:
            continue
        out.append({
            "lo": float(edges[b]), "hi": float(edges[b + 1]), "count": int(sel.sum()),
            "mean_score": float(np.average(s[sel], weights=w[sel])),
            "human_pass_rate": float(np.average(h[sel], weights=w[sel])),
        })
    return out


# ----------------------------------------------------------------------------- the report
def normalize(values: Sequence[float], fmt: str) -> np.ndarray:
    """Scores in a format's own scale to [0, 1]: ordinal 1-5 -> (s - 1) / 4; others unchanged."""
    v = _arr(values)
    return (v - 1.0) / 4.0 if fmt == "ordinal" else v


def categories(values: Sequence[float], fmt: str, threshold: float = 0.5) -> tuple[np.ndarray, list[float]]:
    """Values as the categories kappa compares: binary 0/1, ordinal 1-5, unit thresholded to 0/1."""
    v = _arr(values)
    if fmt == "ordinal":
        return np.clip(np.rint(v), 1, 5), [1.0, 2.0, 3.0, 4.0, 5.0]
    if fmt == "unit":
        return (v >= threshold).astype(float), [0.0, 1.0]
    return (v >= 0.5).astype(float), [0.0, 1.0]


def _finite_or_none(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def agreement_report(judge: Sequence[float], human: Sequence[float], *, fmt: str, propensity: Sequence[float] | None = None,
                     threshold: float = 0.5, n_boot: int = 1000, seed: int = 0, level: float = 0.95,
                     min_count: int = MIN_COUNT, reviewer_table: Sequence[Sequence[float]] | None = None) -> dict[str, Any]:
    """Everything the review pages show for one domain and judge version.

    ``judge`` and ``human`` are scores in the format's own scale (``unit`` humans label 0/1);
    ``propensity`` the items' sampling propensities. Each metric has ``value`` (plain),
    ``ci`` (bootstrap), ``ipw`` (inverse-propensity-weighted) and ``ipw_ci``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}")
    j, h = _pair(judge, human)
    n = int(j.size)
    w = ipw_weights(propensity) if propensity is not None else np.ones(n)
    jc, labels = categories(j, fmt, threshold)
    hc, _ = categories(h, "binary" if fmt == "unit" else fmt, threshold)
    kappa_weights = "quadratic" if fmt == "ordinal" else None
    jn, hn = normalize(j, fmt), normalize(h, fmt)

    def kappa(x, y, sample_weight=None):
        return cohen_kappa(x, y, labels, kappa_weights, sample_weight)

    metrics: dict[str, tuple[Callable[..., float], tuple[np.ndarray, ...]]] = {
        "accuracy": (accuracy, (jc, hc)),
        "kappa": (kappa, (jc, hc)),
        "spearman": (spearman, (j, h)),
        "mae": (mae, (jn, hn)),
    }
    out: dict[str, Any] = {"n": n, "format": fmt, "kappa_weights": kappa_weights or "none", "level": level, "metrics": {}}
    for name, (fn, args) in metrics.items():
        if n == 0:
            out["metrics"][name] = {"value": None, "ci": [None, None], "ipw": None, "ipw_ci": [None, None]}
            continue
        lo, hi = bootstrap_ci(fn, *args, n_boot=n_boot, level=level, seed=seed)
        ilo, ihi = bootstrap_ci(fn, *args, sample_weight=w, n_boot=n_boot, level=level, seed=seed)
        out["metrics"][name] = {
            "value": _finite_or_none(fn(*args)), "ci": [_finite_or_none(lo), _finite_or_none(hi)],
            "ipw": _finite_or_none(fn(*args, sample_weight=w)), "ipw_ci": [_finite_or_none(ilo), _finite_or_none(ihi)],
        }
    out["confusion"] = {"labels": labels, "rows": "judge", "cols": "human",
                        "matrix": confusion_matrix(jc, hc, labels).tolist() if n else []}
    out["reliability"] = reliability_diagram(jn, (hn >= threshold).astype(float), bins=5 if fmt != "unit" else 10) if n else []
    if reviewer_table is not None and len(reviewer_table) > 1:
        level_name = "ordinal" if fmt == "ordinal" else "nominal"
        out["krippendorff_alpha"] = _finite_or_none(krippendorff_alpha(reviewer_table, level_name))
    else:
        out["krippendorff_alpha"] = None
    warnings = []
    if n < min_count:
        warnings.append(f"only {n} labelled items (fewer than {min_count}): intervals are wide and may mislead")
    if n and len(set(hc.tolist())) < 2:
        warnings.append("the reviewers used only one label: kappa is undefined or unstable")
    out["warnings"] = warnings
    return out
