"""Which judged items reviewers see, and each item's inclusion probability (its propensity).

Pure numpy, no Django. Every strategy returns :class:`Draw` rows; the propensity is the exact
probability that the item was included under the design, so inverse-propensity weights give
unbiased population estimates however skewed the sample is.

- ``uniform``: simple random sample of ``n`` from ``N``: propensity ``n / N``.
- ``stratified``: equal allocation across strata (judge score bins), simple random within a
  stratum: propensity ``n_h / N_h``.
- ``disagreement`` / ``low_confidence``: Poisson sampling with probabilities proportional to a
  floor plus the disagreement (or lack of confidence), capped at 1: each item is included
  independently with its probability, which is its propensity.

>>> rng = np.random.default_rng(0)
>>> [round(d.propensity, 3) for d in sample_uniform(10, 4, rng)]
[0.4, 0.4, 0.4, 0.4]
>>> sorted({round(d.propensity, 3) for d in sample_stratified(["a"] * 8 + ["b"] * 2, 4, rng)})
[0.25, 1.0]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

STRATEGIES = ("uniform", "stratified", "disagreement", "low_confidence")
FLOOR = 0.05
"""Every item keeps a positive chance (so every propensity is > 0 and IPW is defined)."""


@dataclass(frozen=True)
class Draw:
    index: int
    """Position of the item in the population."""
    propensity: float
    """Probability that the design includes this item, in (0, 1]."""
    stratum: str = ""
    """The stratum (stratified) or empty."""


def sample_uniform(population: int, n: int, rng: np.random.Generator) -> list[Draw]:
    n = min(n, population)
    if n <= 0:
        return []
    chosen = rng.choice(population, size=n, replace=False)
    return [Draw(int(i), n / population) for i in sorted(chosen)]


def allocate(sizes: dict[str, int], n: int) -> dict[str, int]:
    """Equal allocation of ``n`` across strata, capped by each stratum's size, leftovers spread.

    >>> allocate({"a": 10, "b": 1, "c": 10}, 9)
    {'a': 4, 'b': 1, 'c': 4}
    """
    alloc = {s: 0 for s in sizes}
    left = min(n, sum(sizes.values()))
    while left > 0:
        open_ = [s for s in sorted(sizes) if alloc[s] < sizes[s]]
        share = max(1, left // len(open_))
        for s in open_:
            take = min(share, sizes[s] - alloc[s], left)
            alloc[s] += take
            left -= take
            if left == 0:
                break
    return alloc


def sample_stratified(strata: Sequence[str], n: int, rng: np.random.Generator) -> list[Draw]:
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(strata):
        groups.setdefault(str(s), []).append(i)
    alloc = allocate({s: len(ix) for s, ix in groups.items()}, n)
    out = []
    for s, ix in groups.items():
        k = alloc[s]
        if k == 0:
            continue
        for i in rng.choice(ix, size=k, replace=False):
            out.append(Draw(int(i), k / len(ix), s))
    return sorted(out, key=lambda d: d.index)


MIN_PER_CLASS = 5
"""Items of each judge class (pass, fail) a uniform sample holds at least, where the population
has them: agreement measured on one class cannot tell the judge from a constant."""


def ensure_classes(draws: list[Draw], classes: Sequence[int], rng: np.random.Generator,
                   minimum: int = MIN_PER_CLASS) -> tuple[list[Draw], dict[str, int]]:
    """A uniform sample topped up to ``minimum`` items of each class the population has (or all
    of a smaller class), as a sample stratified by class: every item's propensity becomes its
    class's sampling rate, so the weighted estimates stay unbiased. Returns the draws and the
    items added per class (empty when none were needed: the draws are returned unchanged).

    >>> draws, added = ensure_classes([Draw(0, 0.5), Draw(1, 0.5)], [0, 0, 0, 1], np.random.default_rng(0), 1)
    >>> added, [(d.index, d.propensity) for d in draws]
    ({'pass': 1}, [(0, 0.6666666666666666), (1, 0.6666666666666666), (3, 1.0)])
    """
    members: dict[int, list[int]] = {}
    for i, c in enumerate(classes):
        members.setdefault(int(c), []).append(i)
    chosen = {d.index for d in draws}
    added: dict[str, int] = {}
    extra: list[int] = []
    for c, ix in sorted(members.items()):
        have = sum(1 for i in ix if i in chosen)
        need = min(minimum, len(ix)) - have
        if need > 0:
            rest = [i for i in ix if i not in chosen]
            extra += [int(i) for i in rng.choice(rest, size=need, replace=False)]
            added["pass" if c else "fail"] = need
    if not added:
        return draws, {}
    indices = sorted(chosen | set(extra))
    drawn = {c: sum(1 for i in indices if int(classes[i]) == c) for c in members}
    return [Draw(i, drawn[int(classes[i])] / len(members[int(classes[i])]), "judge " + ("pass" if classes[i] else "fail"))
            for i in indices], added


def inclusion_probabilities(weights: Sequence[float], n: float) -> np.ndarray:
    """``pi_i = n * w_i / sum(w)``, with items above 1 capped at 1 and the rest rescaled.

    >>> inclusion_probabilities([1, 1, 8], 2).round(3).tolist()
    [0.5, 0.5, 1.0]
    """
    w = np.asarray(weights, dtype=float)
    if np.any(w <= 0):
        raise ValueError("weights must be positive")
    n = min(float(n), float(w.size))
    pi = np.zeros(w.size)
    capped = np.zeros(w.size, dtype=bool)
    while True:
        free = ~capped
        budget = n - capped.sum()
        pi[free] = budget * w[free] / w[free].sum() if free.any() else 0.0
        pi[capped] = 1.0
        over = free & (pi > 1.0)
        if not over.any():
            return pi
        capped |= over


def sample_poisson(weights: Sequence[float], n: int, rng: np.random.Generator) -> list[Draw]:
    """Each item independently with probability proportional to its weight (expected size ``n``)."""
    if len(weights) == 0 or n <= 0:
        return []
    pi = inclusion_probabilities(weights, n)
    keep = rng.random(pi.size) < pi
    return [Draw(int(i), float(pi[i])) for i in np.flatnonzero(keep)]


def disagreement_weights(a: Sequence[float], b: Sequence[float], floor: float = FLOOR) -> np.ndarray:
    """``floor + |a - b|`` for scores already on [0, 1]."""
    return floor + np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))


def low_confidence_weights(confidence: Sequence[float], floor: float = FLOOR) -> np.ndarray:
    """``floor + (1 - confidence)`` for confidences on [0, 1]."""
    return floor + 1.0 - np.clip(np.asarray(confidence, dtype=float), 0.0, 1.0)


def confidence_of(score: Sequence[float], threshold: float = 0.5) -> np.ndarray:
    """How far a normalized score is from the pass threshold, scaled to [0, 1] (1: certain).

    >>> confidence_of([0.5, 1.0, 0.0, 0.75]).tolist()
    [0.0, 1.0, 1.0, 0.5]
    """
    s = np.asarray(score, dtype=float)
    span = np.where(s >= threshold, 1.0 - threshold, threshold)
    return np.clip(np.abs(s - threshold) / np.where(span > 0, span, 1.0), 0.0, 1.0)


def score_strata(normalized: Sequence[float], fmt: str) -> list[str]:
    """Strata by judge score: binary 0/1, ordinal 1-5, unit in five bins of width 0.2."""
    s = np.asarray(normalized, dtype=float)
    if fmt == "binary":
        return [str(int(v >= 0.5)) for v in s]
    if fmt == "ordinal":
        return [str(int(round(v * 4 + 1))) for v in s]
    return [f"{min(int(v * 5), 4) / 5:.1f}-{min(int(v * 5), 4) / 5 + 0.2:.1f}" for v in s]
