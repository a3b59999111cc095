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
- **Creation-rate budget**: a token bucket per host (``create_rate`` per second, ``create_burst``
  at once; one file every worker process of the host shares under flock) handed out round-robin
  over the domains that wait for a creation, so a burst of one domain takes its turn beside the
  others instead of in front of them.
"""
from __future__ import annotations

import fcntl
import itertools
import json
import math
import os
import tempfile
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import psutil

from .cgroups import pid_alive

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
    """A token bucket for sandbox creations, handed out round-robin over the domains waiting for
    one. Pure: :meth:`grant` is given the time; the caller decides how to wait. Its state is plain
    JSON (:meth:`state`), so the processes of a host can share one (:class:`HostBudget`).

    >>> b = CreationBudget(rate=1.0, burst=2, now=0.0)
    >>> for i, d in enumerate(["a"] * 5 + ["b"]):
    ...     b.request(d, f"t{i}")
    >>> b.grant(0.0)          # two tokens: one per domain, not both to the first burst
    ['a', 'b']
    >>> b.grant(1.0), b.grant(1.5), b.grant(2.0)
    (['a'], [], ['a'])
    """

    def __init__(self, *, rate: float, burst: int, now: float, state: dict | None = None) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"creation budget: rate must be > 0 and burst >= 1, not rate={rate}, burst={burst}")
        self.rate, self.burst = float(rate), int(burst)
        state = state or {}
        self.tokens = float(state.get("tokens", burst))
        self.at = float(state.get("at", now))
        self.queues: dict[str, list[str]] = {d: list(q) for d, q in (state.get("queues") or {}).items() if q}
        self.order: list[str] = [d for d in state.get("order") or [] if d in self.queues]
        self.granted: set[str] = set(state.get("granted") or [])

    def state(self) -> dict:
        """The bucket, the waiting tickets and the granted ones, as JSON-safe data."""
        return {"tokens": self.tokens, "at": self.at, "queues": self.queues, "order": self.order,
                "granted": sorted(self.granted)}

    def request(self, domain: str, ticket: str) -> None:
        """Queue one creation of ``domain`` under ``ticket`` (a name unique to its caller)."""
        if domain not in self.queues:
            self.queues[domain] = []
            self.order.append(domain)
        self.queues[domain].append(ticket)

    def cancel(self, ticket: str) -> None:
        """Withdraw a request (its caller gave up or died) or forget a granted ticket."""
        self.granted.discard(ticket)
        for domain, q in list(self.queues.items()):
            if ticket in q:
                q.remove(ticket)
                if not q:
                    del self.queues[domain]
                    self.order.remove(domain)

    def pending(self, domain: str) -> int:
        """Creations of ``domain`` waiting for a token."""
        return len(self.queues.get(domain, ()))

    def grant(self, now: float) -> list[str]:
        """Refill the bucket to ``now`` and hand its whole tokens out, one domain at a time in
        turn; the domains granted, in order (their tickets join ``granted``)."""
        self.tokens = min(float(self.burst), self.tokens + max(0.0, now - self.at) * self.rate)
        self.at = now
        out = []
        while self.order and self.tokens >= 1.0:
            domain = self.order.pop(0)
            q = self.queues[domain]
            self.granted.add(q.pop(0))
            self.tokens -= 1.0
            out.append(domain)
            if q:
                self.order.append(domain)
            else:
                del self.queues[domain]
        return out

    def next_token_s(self) -> float:
        """Seconds until the next whole token."""
        return max(0.0, (1.0 - self.tokens) / self.rate)


class HostBudget:
    """The creation budget of a host: one :class:`CreationBudget` in a small file that every
    worker process of the host takes turns on under ``flock``. :meth:`take` queues this creation,
    then looks again each time a token is due until its turn came (or ``timeout_s`` passed);
    tickets of processes that died are dropped. ``clock`` must be one every process shares
    (wall time), or a test's."""

    def __init__(self, path: str | Path, *, rate: float, burst: int, clock: Callable[[], float] = time.time) -> None:
        CreationBudget(rate=rate, burst=burst, now=0.0)  # checks rate and burst
        self.path, self.rate, self.burst, self.clock = Path(path), rate, burst, clock
        self._seq = itertools.count()

    @contextmanager
    def _budget(self) -> Iterator[CreationBudget]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.read(fd, 1 << 20)
            try:
                state = json.loads(raw) if raw else {}
            except ValueError:  # a torn or foreign file: start the bucket again
                state = {}
            budget = CreationBudget(rate=self.rate, burst=self.burst, now=self.clock(), state=state)
            yield budget
            data = json.dumps(budget.state()).encode()
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, data)
        finally:
            os.close(fd)  # closing releases the lock

    def take(self, domain: str, timeout_s: float) -> bool:
        """Wait for a creation token for ``domain``; False when none came within ``timeout_s``."""
        ticket = f"{os.getpid()}:{threading.get_ident()}:{next(self._seq)}"
        end = time.monotonic() + timeout_s
        with self._budget() as b:
            b.request(domain, ticket)
        while True:
            with self._budget() as b:
                for other in {t for q in b.queues.values() for t in q} | b.granted:
                    if not pid_alive(int(other.split(":", 1)[0])):
                        b.cancel(other)
                b.grant(self.clock())
                if ticket in b.granted:
                    b.granted.discard(ticket)
                    return True
                left = end - time.monotonic()
                if left <= 0:
                    b.cancel(ticket)
                    return False
                pause = min(left, max(b.next_token_s(), 0.005))
            time.sleep(pause)  # a token is due then: the bucket refills with time, nothing signals it


def default_budget_path() -> Path:
    """The host's creation budget file (the same for every worker process of the host)."""
    return Path(tempfile.gettempdir()) / "temper-sandbox-creation-budget.json"


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


__all__ = ["Ceilings", "CreationBudget", "HostBudget", "Headroom", "PoolFigures", "default_budget_path", "host_headroom",
           "percentile"]
