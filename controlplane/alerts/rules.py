"""What a metric rule decides, as pure functions of its state and the new points.

A rule's state per run and metric key is the EMA and the best EMA seen (``drop``) or the last
``window`` values (``above``, ``below``). ``fold`` adds new values; ``verdict`` says whether the
condition holds now (fire, when not firing) or has resolved (when firing). Resolution has
hysteresis so a value hovering at the threshold does not fire on every other step:

* drop: fires when ``best - ema >= threshold`` (after ``window`` points); resolves when the EMA is
  back within half the threshold of its best;
* above / below: fire when the mean of the last ``window`` values is above / below the threshold;
  resolve when it is not.

>>> s = MetricState()
>>> for v in [0.2, 0.6, 0.9, 0.9, 0.9]:
...     s = fold(s, "drop", 3, [v])
>>> verdict(s, "drop", 3, 0.3, firing=False)
(False, 0.8375)
>>> s = fold(s, "drop", 3, [0.1, 0.1])
>>> verdict(s, "drop", 3, 0.3, firing=False)
(True, 0.28437)
>>> s = fold(s, "drop", 3, [0.9, 0.9, 0.9])
>>> verdict(s, "drop", 3, 0.3, firing=True)
(False, 0.82305)
>>> s = fold(MetricState(), "above", 2, [0.5, 0.1, 0.4])
>>> s.recent, verdict(s, "above", 2, 0.2, firing=False)
([0.1, 0.4], (True, 0.25))
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class MetricState:
    ema: float | None = None
    best: float | None = None
    points: int = 0
    recent: list[float] = field(default_factory=list)


def alpha(window: int) -> float:
    """The EMA's weight of a new point for a span of ``window`` steps (2 / (window + 1))."""
    return 2.0 / (window + 1)


def fold(state: MetricState, condition: str, window: int, values: list[float]) -> MetricState:
    """``state`` after ``values`` (in step order); non-finite values are skipped."""
    ema, best, points, recent = state.ema, state.best, state.points, list(state.recent)
    a = alpha(window)
    for v in values:
        if v is None or not math.isfinite(v):
            continue
        points += 1
        ema = v if ema is None else a * v + (1 - a) * ema
        best = ema if best is None else max(best, ema)
        recent = (recent + [v])[-window:]
    return MetricState(ema=ema, best=best, points=points, recent=recent)


def verdict(state: MetricState, condition: str, window: int, threshold: float, *, firing: bool) -> tuple[bool, float | None]:
    """(does the condition hold now, the value it was judged on). While ``firing``, "holds" means
    "has not resolved yet"."""
    if condition == "drop":
        if state.ema is None or state.best is None:
            return firing, None
        value = round(state.ema, 5)
        gap = state.best - state.ema
        if firing:
            return gap >= threshold / 2, value
        return state.points >= window and gap >= threshold, value
    if condition in ("above", "below"):
        if not state.recent:
            return firing, None
        mean = sum(state.recent) / len(state.recent)
        value = round(mean, 5)
        beyond = mean > threshold if condition == "above" else mean < threshold
        if firing:
            return beyond, value
        return len(state.recent) >= window and beyond, value
    raise ValueError(f"not a metric condition: {condition!r}")
