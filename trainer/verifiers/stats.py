"""Per-domain verification statistics for the dashboard: latency percentiles and outcome counts.

>>> from trainer.outcomes import Outcome, Verification
>>> vs = [Verification.passed(verify_s=0.01), Verification.failed(verify_s=0.03), Verification(Outcome.TIMEOUT, 0.0, {"verify_s": 2.0})]
>>> s = summarize(vs)
>>> s["count"], s["outcomes"]["pass"], s["outcomes"]["timeout"], s["p50_s"], s["p99_s"]
(3, 1, 1, 0.03, 2.0)
>>> stats = VerificationStats(); stats.add("rg-ab", vs[0]); stats.add("rg-ab", vs[2])
>>> stats.snapshot()["rg-ab"]["outcomes"]["timeout"]
1
"""
from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any, Iterable

from trainer.outcomes import OUTCOME_VALUES, Verification


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in [0, 100]) of an ascending list; None when empty."""
    if not sorted_values:
        return None
    rank = max(1, min(len(sorted_values), int(-(-q * len(sorted_values) // 100))))
    return sorted_values[rank - 1]


def summarize(verifications: Iterable[Verification]) -> dict[str, Any]:
    """``{"count", "p50_s", "p99_s", "outcomes": {outcome: n}, "mean_reward"}`` (latency from
    ``details["verify_s"]``, which every cascade result carries)."""
    latencies, rewards = [], []
    outcomes = {value: 0 for value in OUTCOME_VALUES}
    for v in verifications:
        outcomes[v.outcome.value] += 1
        if "verify_s" in v.details:
            latencies.append(float(v.details["verify_s"]))
        if v.reward is not None:
            rewards.append(v.reward)
    latencies.sort()
    return {
        "count": sum(outcomes.values()),
        "p50_s": percentile(latencies, 50),
        "p99_s": percentile(latencies, 99),
        "outcomes": outcomes,
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
    }


class VerificationStats:
    """Thread-safe accumulator of verifications per domain (bounded window per domain)."""

    def __init__(self, window: int = 10_000) -> None:
        self.window = window
        self._items: dict[str, list[Verification]] = defaultdict(list)
        self._lock = threading.Lock()

    def add(self, domain: str, verification: Verification) -> None:
        with self._lock:
            items = self._items[domain]
            items.append(verification)
            if len(items) > self.window:
                del items[: len(items) - self.window]

    def snapshot(self, reset: bool = False) -> dict[str, dict[str, Any]]:
        """Summaries per domain; ``reset`` clears the window afterwards."""
        with self._lock:
            items = {k: list(v) for k, v in self._items.items()}
            if reset:
                self._items.clear()
        return {domain: summarize(vs) for domain, vs in items.items()}
