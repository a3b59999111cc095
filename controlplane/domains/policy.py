"""Domain rules a run driver applies at each step: quotas on shares, and quarantine of a domain
whose verifications keep failing for infrastructure reasons. Pure logic: the driver feeds it
the step's metrics and records what it decides through the runs app's services.

>>> q = Quarantine(set())
>>> q.observe({"outcome/code/sandbox_error": 6.0, "outcome/code/pass": 2.0}, ["code"])
[('code', 6.0, 8.0)]
"""
from __future__ import annotations

from trainer.outcomes import INFRASTRUCTURE_OUTCOMES

QUARANTINE_RATE = 0.5
"""A domain whose share of infrastructure outcomes (sandbox or judge errors) over the last
QUARANTINE_WINDOW steps exceeds this, with at least QUARANTINE_MIN_SAMPLES samples, is quarantined."""
QUARANTINE_WINDOW = 3
QUARANTINE_MIN_SAMPLES = 8
INFRA_OUTCOMES = tuple(sorted(o.value for o in INFRASTRUCTURE_OUTCOMES))
"""Outcomes that are the infrastructure's failure, not the policy's."""


class Quarantine:
    """Per-domain infrastructure error rates over a window of steps; decides what to stop sampling."""

    def __init__(self, already: set[str]):
        self.quarantined = set(already)
        self.window: dict[str, list[tuple[float, float]]] = {}

    def observe(self, metrics: dict[str, float], domains: list[str]) -> list[tuple[str, float, float]]:
        """Record one step; returns the newly quarantined ``(domain, infra, total)``."""
        new = []
        for slug in domains:
            if slug in self.quarantined:
                continue
            prefix = f"outcome/{slug}/"
            total = sum(v for k, v in metrics.items() if k.startswith(prefix))
            infra = sum(metrics.get(prefix + o, 0.0) for o in INFRA_OUTCOMES)
            history = (self.window.setdefault(slug, []) + [(infra, total)])[-QUARANTINE_WINDOW:]
            self.window[slug] = history
            seen = sum(t for _, t in history)
            bad = sum(i for i, _ in history)
            if seen >= QUARANTINE_MIN_SAMPLES and bad / seen > QUARANTINE_RATE:
                self.quarantined.add(slug)
                new.append((slug, bad, seen))
        return new


def capped_shares(weights: dict[str, float], caps: dict[str, float]) -> dict[str, float]:
    """Sampling shares from weights, no domain above its ``max_share`` (the excess goes to the
    others in proportion to their weights). When the caps sum below 1 they are the shares.

    >>> capped_shares({"a": 8, "b": 1, "c": 1}, {"a": 0.5})
    {'a': 0.5, 'b': 0.25, 'c': 0.25}
    >>> capped_shares({"a": 1, "b": 1}, {"a": 0.2, "b": 0.2})
    {'a': 0.5, 'b': 0.5}
    """
    total = sum(weights.values())
    shares = {d: w / total for d, w in weights.items()}
    capped: dict[str, float] = {}
    while True:
        free = [d for d in shares if d not in capped]
        budget = 1.0 - sum(capped.values())
        free_total = sum(weights[d] for d in free)
        if not free or free_total <= 0:
            break
        shares.update({d: budget * weights[d] / free_total for d in free})
        over = [d for d in free if shares[d] > caps.get(d, 1.0) + 1e-12]
        if not over:
            break
        capped.update({d: caps[d] for d in over})
        shares.update(capped)
    total = sum(shares.values())
    return {d: round(v / total, 12) for d, v in shares.items()}
