"""Bootstrap confidence intervals and the comparison of evaluations (pure functions).

>>> lo, hi = bootstrap_ci([0.0, 1.0] * 20)
>>> round(lo, 2) <= 0.5 <= round(hi, 2)
True
>>> d = paired_delta({"a": 1.0, "b": 1.0, "c": 0.0}, {"a": 0.0, "b": 0.0, "c": 0.0})
>>> d["delta"], d["n"]
(-0.6666666666666666, 3)
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

RESAMPLES = 2000
ALPHA = 0.05
SEED = 0


def bootstrap_ci(values: Sequence[float], *, resamples: int = RESAMPLES, alpha: float = ALPHA,
                 seed: int = SEED) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval of the mean (the same every time: fixed seed); ``(None,
    None)`` with fewer than two values, where no interval can be told (never significant).

    >>> bootstrap_ci([1.0])
    (None, None)
    """
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return None, None
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)  # (R,)
    return float(np.quantile(means, alpha / 2)), float(np.quantile(means, 1 - alpha / 2))


def paired_delta(base: dict[str, float], other: dict[str, float], *, resamples: int = RESAMPLES,
                 alpha: float = ALPHA, seed: int = SEED) -> dict:
    """Mean of ``other - base`` over the tasks both scored, with a paired bootstrap interval.

    Pairing by task removes the task-difficulty spread from the interval, so a real change shows
    up as significant with fewer tasks than comparing two independent means would need.
    """
    common = sorted(set(base) & set(other))
    diffs = [other[t] - base[t] for t in common]
    if not diffs:
        return {"delta": None, "lo": None, "hi": None, "n": 0}
    lo, hi = bootstrap_ci(diffs, resamples=resamples, alpha=alpha, seed=seed)
    return {"delta": float(np.mean(diffs)), "lo": lo, "hi": hi, "n": len(diffs)}


def task_scores(per_task: list[dict]) -> dict[str, float]:
    """Each task's mean valid reward (tasks with only masked samples are left out)."""
    out = {}
    for t in per_task:
        valid = [r for r in t.get("rewards", []) if r is not None]
        if valid:
            out[str(t["task_id"])] = sum(valid) / len(valid)
    return out
