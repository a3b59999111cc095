"""The elastic half of a pooled backend (agent_host.PooledBackend): each key's target size from
its busy sandboxes and the jobs waiting (elastic.Ceilings), creations behind the host's ceilings
and the per-host creation budget, the shrink of long-idle sandboxes above the target, a group's
sandboxes in one allocation, and the sizes and figures the pages show."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

from .elastic import Headroom, HostBudget, PoolFigures, default_budget_path, host_headroom
from .types import Limits, SandboxError

if TYPE_CHECKING:
    from .pool import PoolConfig


class ElasticSizing:
    """Mixed into PooledBackend, which provides ``config``, ``_lock``, ``_returned``, ``_idle``,
    ``_all``, ``_closed``, ``_create(key)`` and ``_remove(sb)``."""

    config: "PoolConfig"
    _lock: Any
    _returned: threading.Condition
    _idle: dict
    _all: set
    _closed: bool

    def _init_elastic(self, config: "PoolConfig", thread_name: str) -> None:
        """The elastic policy's state (the shrink thread starts with the first idle sandbox and
        stops with ``_stop_shrink``: a backend whose constructor failed leaves no thread)."""
        self.headroom: Callable[[], Headroom] = host_headroom
        """The host's memory and process headroom now (the ceilings are checked before each creation)."""
        self.ceilings = config.ceilings()
        self.budget = HostBudget(config.budget_file or default_budget_path(), rate=config.create_rate, burst=config.create_burst)
        """The host's creation budget (every worker process of the host shares its file)."""
        self.figures = PoolFigures(clock=time.monotonic)  # (no lambda over self: a backend whose
        # constructor failed is freed at once, with the sockets it opened, not at a later GC)
        self._waiting: dict[tuple, int] = {}
        self._starting: dict[tuple, int] = {}
        self._stop_shrink = threading.Event()
        self._shrinker: threading.Thread | None = None
        self._shrink_name = thread_name + "-shrink"

    @property
    def clock(self) -> Callable[[], float]:
        """The elastic policy's clock (idle times, creations per second); a test sets its own."""
        return self.figures.clock

    @clock.setter
    def clock(self, value: Callable[[], float]) -> None:
        self.figures.clock = value

    def _counts(self, key: tuple) -> tuple[int, int]:
        """Live (not retiring) and busy-or-resetting sandboxes of ``key``; call with the lock held."""
        live = sum(sb.key == key and not sb.retiring for sb in self._all)
        return live, live - len(self._idle.get(key, ()))

    def _missing(self, key: tuple) -> int:
        """Sandboxes ``key`` lacks against its target (busy ones count: they come back; so do
        those being started, for a waiting job or by another top-up)."""
        with self._lock:
            live, busy = self._counts(key)
            return self.ceilings.target(busy, self._waiting.get(key, 0)) - live - self._starting.get(key, 0)

    def _start(self, key: tuple, wait_s: float):
        """A new sandbox of ``key`` within the host's ceilings and the creation budget (waiting up
        to ``wait_s`` for this domain's turn); SandboxError when either refuses."""
        domain, memory_mb, pids, _tmpfs = key
        with self._lock:
            self._starting[key] = self._starting.get(key, 0) + 1
        try:
            why = self.ceilings.refusal(self.headroom(), memory_mb, pids)
            if why:
                raise SandboxError(why)
            try:
                turn = self.budget.take(domain, wait_s)
            except OSError as e:  # the budget file cannot be opened or locked
                raise SandboxError(f"sandbox creation budget {self.config.budget_file or 'file'}: {e}") from e
            if not turn:
                raise SandboxError(f"sandbox creation budget: no turn for domain {domain!r} within {wait_s:.1f} s "
                                   f"({self.config.create_rate:g} creations/s per host)")
            sb = self._create(key)
        finally:
            with self._lock:
                self._starting[key] -= 1
        self.figures.created(domain)
        return sb

    def _top_up(self, key: tuple) -> None:
        """Start what ``key`` lacks against its target, as far as the host's ceilings and the
        creation budget allow now (no waiting for a turn: the next job asks again); one started
        while the backend closed is removed."""
        for _ in range(max(0, self._missing(key))):
            if self._closed:
                return
            try:
                sb = self._start(key, 0.0)
            except SandboxError:
                return
            with self._lock:
                if not self._closed:
                    self._put_idle(sb)
                    continue
            self._remove(sb)
            return

    def _put_idle(self, sb) -> None:
        """``sb`` joins its key's idle sandboxes from now (waking a waiting acquire); lock held."""
        sb.idle_since = self.clock()
        if self._shrinker is None and not self._stop_shrink.is_set():
            self._shrinker = threading.Thread(target=self._shrink_loop, name=self._shrink_name, daemon=True)
            self._shrinker.start()
        self._idle.setdefault(sb.key, []).append(sb)
        self._returned.notify_all()

    def rebalance(self) -> int:
        """Remove the idle sandboxes above each key's target that were idle ``idle_s`` (longest
        idle first); how many. Run every ``idle_s / 4`` by the pool's shrink thread."""
        now, victims = self.clock(), []
        with self._lock:
            for key, idle in self._idle.items():
                live, busy = self._counts(key)
                n = self.ceilings.surplus(live=live, busy=busy, waiting=self._waiting.get(key, 0),
                                          idle_since=[sb.idle_since for sb in idle], now=now)
                for sb in sorted(idle, key=lambda sb: sb.idle_since)[:n]:
                    idle.remove(sb)
                    sb.retiring = True
                    victims.append(sb)
        for sb in victims:
            self._remove(sb)
        return len(victims)

    def _shrink_loop(self) -> None:
        while not self._stop_shrink.wait(max(0.25, self.config.idle_s / 4)):
            try:
                self.rebalance()
            except Exception:  # noqa: BLE001 - a failed removal is retried next period; never kill the thread
                continue

    def sizes(self) -> dict[str, dict[str, int]]:
        """Per domain: live sandboxes, idle ones, and the target they are kept at."""
        out: dict[str, dict[str, int]] = {}
        with self._lock:
            for key in {sb.key for sb in self._all} | set(self._idle):
                live, busy = self._counts(key)
                row = out.setdefault(key[0], {"size": 0, "idle": 0, "target": 0})
                row["size"] += live
                row["idle"] += live - busy
                row["target"] += self.ceilings.target(busy, self._waiting.get(key, 0))
        return out

    def acquire_many(self, domain: str, limits: Limits, n: int) -> list:
        """``n`` sandboxes of one key in one allocation (a group of rollouts): the idle ones, and
        the rest created together (each behind the creation budget); all or none (SandboxError,
        the ones taken go back idle)."""
        key = (domain, limits.memory_mb, limits.pids, limits.tmpfs_mb)  # agent_host.pool_key
        if self._closed:
            raise SandboxError("the sandbox backend is closed")
        with self._lock:
            idle = self._idle.setdefault(key, [])
            got = [idle.pop() for _ in range(min(n, len(idle)))]
            missing = n - len(got)  # the group's jobs still without a sandbox: the pool's queue
            self._waiting[key] = self._waiting.get(key, 0) + missing
        try:
            if missing:
                with ThreadPoolExecutor(max_workers=missing, thread_name_prefix="sandbox-group") as ex:
                    futures = [ex.submit(self._start, key, self.config.queue_timeout_s) for _ in range(missing)]
                errors = []
                for fut in futures:
                    try:
                        got.append(fut.result())
                    except Exception as e:  # noqa: BLE001 - all or none: whatever failed, the others go back
                        errors.append(str(e) or type(e).__name__)
                if errors:
                    with self._lock:
                        for sb in got:
                            self._put_idle(sb)
                    raise SandboxError(f"group of {n} sandboxes for domain {domain!r}: {errors[0]}")
            return got
        finally:
            with self._lock:
                self._waiting[key] -= missing

