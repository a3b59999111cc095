"""Elastic warm pools: how many sandboxes a domain keeps, which creations may start now, and the
figures the pages show. Pure policy (no processes): fed the pool's counts, the host's headroom and
a clock, so the tests drive it with a synthetic queue and a fake clock; the pooled backends
(agent_host.PooledBackend) ask it before they start or remove a sandbox.

- **Target size** per pool key (domain and limits shape): the sandboxes busy plus the jobs waiting
  for one, at least ``PoolConfig.warm_per_domain`` (the floor kept warm when idle) and at most
  ``PoolConfig.domain_limit`` (the domain's quota in this process).
- **Shrink**: an idle sandbox above the target that has been idle ``PoolConfig.idle_s`` is removed.
- **Host ceiling**: a sandbox is started only while the host keeps ``host_memory_reserve_mb`` of
  available memory and ``host_pids_reserve`` free processes beyond the new sandbox's own limits
  (read with psutil and /proc: the whole host, whoever uses it).
- **Creation-rate budget**: a token bucket (``create_rate`` per second, ``create_burst`` at once)
  handed out round-robin over the domains that wait for a creation, so a burst of one domain
  takes its turn beside the others instead of in front of them.
"""
from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Hashable

import psutil

WAIT_WINDOW = 1024
"""Recent acquire waits kept per domain for the p50 / p99."""
RATE_WINDOW_S = 60.0
"""Creations per second are counted over this many seconds."""


@dataclass(frozen=True)
class Headroom:
    """What the host has left now: available memory and processes it may still start."""

    memory_mb: float
    """Available memory (psutil's ``available``), MiB."""
    pids: int
    """Processes (tasks) the host may still start before its limit."""


def host_headroom() -> Headroom:
    """The host's headroom now: psutil's available memory, and the kernel's task limit
    (/proc/sys/kernel/pid_max and threads-max, the lower) minus the tasks that exist now."""
    memory = psutil.virtual_memory().available / (1 << 20)
    limit = 1 << 22
    for path in ("/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"):
        try:
            with open(path) as f:
                limit = min(limit, int(f.read().strip()))
        except (OSError, ValueError):
            pass
    try:
        with open("/proc/loadavg") as f:  # "0.1 0.2 0.3 running/total last": total is every task
            tasks = int(f.read().split()[3].split("/")[1])
    except (OSError, ValueError, IndexError):
        tasks = len(psutil.pids())
    return Headroom(memory_mb=memory, pids=max(0, limit - tasks))


@dataclass(frozen=True)
class Ceilings:
    """Per-domain bounds and host-wide reserves of an elastic pool (from PoolConfig)."""

    floor: int
    """Sandboxes a domain keeps warm when idle."""
    cap: int
    """Sandboxes a domain may hold at most (its quota)."""
    idle_s: float
    """Seconds an idle sandbox above the target lives before it is removed."""
    memory_reserve_mb: float
    """Available host memory that creations never take."""
    pids_reserve: int
    """Free host processes that creations never take."""

    def target(self, busy: int, waiting: int) -> int:
        """Sandboxes a domain should hold: its busy ones plus the jobs waiting for one, within
        the floor and the cap.

        >>> c = Ceilings(floor=1, cap=4, idle_s=30, memory_reserve_mb=0, pids_reserve=0)
        >>> [c.target(0, 0), c.target(1, 1), c.target(2, 5)]
        [1, 2, 4]
        """
        return max(self.floor, min(self.cap, busy + waiting))

    def surplus(self, *, live: int, busy: int, waiting: int, idle_since: list[float], now: float) -> int:
        """How many of the idle sandboxes to remove now: those idle for ``idle_s`` or longer,
        but never below the target.

        >>> c = Ceilings(floor=1, cap=8, idle_s=30, memory_reserve_mb=0, pids_reserve=0)
        >>> c.surplus(live=4, busy=0, waiting=0, idle_since=[0, 0, 50, 60], now=70)  # two idle 70 s
        2
        >>> c.surplus(live=4, busy=0, waiting=0, idle_since=[0, 0, 0, 0], now=70)    # floor 1 stays
        3
        """
        stale = sum(1 for t in idle_since if now - t >= self.idle_s)
        return max(0, min(stale, live - self.target(busy, waiting)))

    def refusal(self, headroom: Headroom, memory_mb: int, pids: int) -> str:
        """Why the host cannot take one more sandbox of these limits ('' when it can)."""
        if headroom.memory_mb - memory_mb < self.memory_reserve_mb:
            return (f"host memory ceiling: {headroom.memory_mb:.0f} MiB available, a sandbox of {memory_mb} MiB "
                    f"would leave less than the reserve of {self.memory_reserve_mb:.0f} MiB")
        if headroom.pids - pids < self.pids_reserve:
            return (f"host process ceiling: {headroom.pids} processes left, a sandbox of {pids} would leave "
                    f"less than the reserve of {self.pids_reserve}")
        return ""


class CreationBudget:
    """A per-host token bucket for sandbox creations, handed out round-robin over the domains
    waiting for one. Pure: :meth:`grant` is given the time; the caller decides how to wait.

    >>> b = CreationBudget(rate=1.0, burst=2, now=0.0)
    >>> for d in ["a"] * 5 + ["b"]:
    ...     _ = b.request(d)
    >>> b.grant(0.0)          # two tokens: one per domain, not both to the first burst
    ['a', 'b']
    >>> b.grant(1.0), b.grant(1.5), b.grant(2.0)
    (['a'], [], ['a'])
    """

    def __init__(self, *, rate: float, burst: int, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"creation budget: rate must be > 0 and burst >= 1, not rate={rate}, burst={burst}")
        self.rate, self.burst = float(rate), int(burst)
        self.tokens, self.at = float(burst), now
        self._queues: dict[Hashable, deque[int]] = {}
        self._order: deque[Hashable] = deque()  # round-robin over domains with requests
        self._next = 0
        self.granted: set[int] = set()

    def request(self, domain: Hashable) -> int:
        """Queue one creation for ``domain``; the ticket :meth:`grant` will name as granted."""
        self._next += 1
        q = self._queues.setdefault(domain, deque())
        if not q:
            self._order.append(domain)
        q.append(self._next)
        return self._next

    def cancel(self, ticket: int) -> None:
        """Withdraw a request (its caller gave up) or forget a granted ticket."""
        self.granted.discard(ticket)
        for domain, q in self._queues.items():
            if ticket in q:
                q.remove(ticket)
                if not q:
                    self._order.remove(domain)
                return

    def pending(self, domain: Hashable) -> int:
        """Creations of ``domain`` waiting for a token."""
        return len(self._queues.get(domain, ()))

    def grant(self, now: float) -> list[Hashable]:
        """Refill the bucket to ``now`` and hand its whole tokens out, one domain at a time in
        turn; the domains granted, in order (their tickets join ``granted``)."""
        self.tokens = min(float(self.burst), self.tokens + max(0.0, now - self.at) * self.rate)
        self.at = now
        out = []
        while self._order and self.tokens >= 1.0:
            domain = self._order.popleft()
            q = self._queues[domain]
            self.granted.add(q.popleft())
            self.tokens -= 1.0
            out.append(domain)
            if q:
                self._order.append(domain)
        return out

    def next_token_s(self) -> float:
        """Seconds until the next whole token."""
        return max(0.0, (1.0 - self.tokens) / self.rate)


class BlockingBudget:
    """:class:`CreationBudget` for threads: :meth:`take` waits (on a condition, woken by each
    token's time) until this creation's turn comes, or gives up after ``timeout_s``."""

    def __init__(self, *, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.budget = CreationBudget(rate=rate, burst=burst, now=clock())
        self._cond = threading.Condition()

    def take(self, domain: Hashable, timeout_s: float) -> bool:
        """Wait for a creation token for ``domain``; False when none came within ``timeout_s``."""
        end = time.monotonic() + timeout_s
        with self._cond:
            ticket = self.budget.request(domain)
            while True:
                if self.budget.grant(self.clock()):
                    self._cond.notify_all()  # a token may have gone to another waiter
                if ticket in self.budget.granted:
                    self.budget.granted.discard(ticket)
                    return True
                left = end - time.monotonic()
                if left <= 0:
                    self.budget.cancel(ticket)
                    return False
                self._cond.wait(min(left, max(self.budget.next_token_s(), 0.001)))


class PoolFigures:
    """What a pool reports per domain: acquire waits (p50 / p99 over the last WAIT_WINDOW) and
    creations per second (over the last RATE_WINDOW_S). Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._waits: dict[str, deque[float]] = {}
        self._creations: dict[str, deque[float]] = {}

    def waited(self, domain: str, seconds: float) -> None:
        with self._lock:
            self._waits.setdefault(domain, deque(maxlen=WAIT_WINDOW)).append(seconds)

    def created(self, domain: str) -> None:
        with self._lock:
            self._creations.setdefault(domain, deque()).append(self.clock())

    def creations_per_s(self, domain: str) -> float:
        now = self.clock()
        with self._lock:
            times = self._creations.get(domain, deque())
            while times and now - times[0] > RATE_WINDOW_S:
                times.popleft()
            return len(times) / RATE_WINDOW_S

    def waits(self, domain: str) -> dict[str, float | None]:
        """``wait_p50_s`` and ``wait_p99_s`` of the domain's recent acquires (None before any)."""
        with self._lock:
            xs = sorted(self._waits.get(domain, ()))
        return {"wait_p50_s": percentile(xs, 0.5), "wait_p99_s": percentile(xs, 0.99)}

    def domains(self) -> set[str]:
        with self._lock:
            return set(self._waits) | set(self._creations)


def percentile(xs: list[float], q: float) -> float | None:
    """The ``q`` quantile of sorted ``xs`` (nearest rank, rounded up), None when empty.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 0.5), percentile([1.0, 2.0, 3.0, 4.0], 0.99), percentile([], 0.5)
    (2.0, 4.0, None)
    """
    if not xs:
        return None
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


__all__ = ["Ceilings", "CreationBudget", "BlockingBudget", "Headroom", "PoolFigures", "host_headroom", "percentile"]
