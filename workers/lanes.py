"""Duration-aware dispatch: each domain's verification latency, measured continuously, puts it in
a lane, and each lane is a queue with workers of its own, so short verifications flow while long
ones run.

Lanes: ``verify`` (short) and ``verify_long`` (``temper.verify.batch_long``: the same task under a
second name, so a batch's queue follows from its task as everywhere else). A domain is long when
the p95 of its recent verification latencies (``details["verify_s"]`` of the last ``WINDOW``
verifications, seeded from the ``verify/<domain>/p99_s`` points its last steps in any run wrote)
reaches ``TEMPER_VERIFY_LONG_S``; it goes back when its p95 falls under half of that (so a domain
at the boundary does not flap). A long domain goes to the long lane only while a live worker
serves it; with none, it shares the short lane as before (lanes degrade, they never stall).
Judged domains keep the ``judge`` queue (a lane of its own already).

>>> lanes = Lanes(long_s=1.0, seed={"code": [0.02] * 10, "slow": [2.5] * 10})
>>> lanes.lane("code"), lanes.lane("slow"), lanes.lane("new")
('short', 'long', 'short')
>>> lanes.observe({"code": [3.0] * 200})
[('code', 'short', 'long')]
>>> lanes.observe({"code": [0.6] * 256})
[]
>>> lanes.observe({"code": [0.3] * 256})
[('code', 'long', 'short')]
"""
from __future__ import annotations

from collections import deque

SHORT, LONG = "short", "long"
QUEUES = {SHORT: "verify", LONG: "verify_long"}
TASKS = {SHORT: "temper.verify.batch", LONG: "temper.verify.batch_long"}
WINDOW = 256
"""Verifications per domain the p95 is taken over."""
MIN_SAMPLES = 8
"""Fewer than these, a domain stays in the lane it is in (a new domain: short)."""


def percentile(values, q: float) -> float:
    """The ``q`` quantile (linear between ranks), to 6 places; 0 for no values.

    >>> percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.95)
    9.55
    """
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = q * (len(ordered) - 1)
    lo = int(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return round(ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo), 6)


def p95(values) -> float:
    return percentile(values, 0.95)


class Lanes:
    """Each domain's lane from its measured verification latency."""

    def __init__(self, long_s: float, seed: dict[str, list[float]] | None = None) -> None:
        self.long_s = long_s
        self.samples: dict[str, deque] = {}
        self.lanes: dict[str, str] = {}
        for domain, values in (seed or {}).items():
            self._add(domain, values)
            self._classify(domain)

    def _add(self, domain: str, values: list[float]) -> None:
        self.samples.setdefault(domain, deque(maxlen=WINDOW)).extend(float(v) for v in values if v >= 0)

    def _classify(self, domain: str) -> tuple[str, str] | None:
        values = self.samples.get(domain) or ()
        before = self.lanes.get(domain, SHORT)
        if len(values) < MIN_SAMPLES:
            return None
        q = p95(values)
        after = LONG if q >= self.long_s else SHORT if q < self.long_s / 2 else before
        self.lanes[domain] = after
        return (before, after) if after != before else None

    def observe(self, latencies: dict[str, list[float]]) -> list[tuple[str, str, str]]:
        """Add a step's latencies; the domains that changed lane: ``(domain, from, to)``."""
        moved = []
        for domain, values in sorted(latencies.items()):
            self._add(domain, values)
            change = self._classify(domain)
            if change:
                moved.append((domain, *change))
        return moved

    def lane(self, domain: str) -> str:
        return self.lanes.get(domain, SHORT)

    def p95(self, domain: str) -> float | None:
        values = self.samples.get(domain)
        return p95(values) if values else None
