"""Concurrency and slots: a limit per domain and a global one, a bounded queue, fast refusal,
and retry of infrastructure failures on another slot. Backends only know how to run one job.

Infrastructure failures are those before the job reached its sandbox (no slot, the engine down,
a sandbox that did not start or whose agent is not ready): `SandboxError`, retried, and
`sandbox_error` after the last attempt, which training masks out. Whatever happens once the job
was handed over is the job's outcome, which the backend returns as a verdict and the pool never
retries: a job that breaks its own sandbox gets `runtime_error` (or a limit's status), so no job
can reach the mask from inside its sandbox."""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from contextlib import contextmanager
from typing import Any, Iterator, Protocol

from .types import Limits, SandboxBusy, SandboxError, Verdict


@dataclass(frozen=True)
class PoolConfig:
    """How many executions may run at once, and what happens when that is reached."""

    global_limit: int = max(2, 2 * (os.cpu_count() or 1))
    """Executions running at once across all domains."""
    domain_limit: int = max(2, 2 * (os.cpu_count() or 1))
    """Executions running at once within one domain."""
    queue_size: int = 256
    """Callers allowed to wait for a free place; the next one is refused at once."""
    queue_timeout_s: float = 60.0
    """Longest wait in the queue before refusal."""
    retries: int = 2
    """Extra attempts, each on a fresh slot, after an infrastructure failure."""
    warm_per_domain: int = 2
    """Containers / warm bwrap sandboxes kept started and idle per domain."""
    max_uses: int = 100
    """Jobs a container or warm bwrap sandbox serves before it is retired."""
    bwrap_warm: int = 1
    """1: bwrap runs jobs in warm pooled sandboxes; 0: fresh namespaces per job (cold)."""
    container_cpus: float = 1.0
    """CPUs one container (one job at a time) may use (docker backend)."""
    cpu_weight: int = 30
    """CPU weight of the machine's bwrap sandboxes together, on cgroup v2's scale (1-10000; 100
    is what the trainer's session has): where the CPU is contended the sandboxes get this share of
    it, where it is idle all of it (cgroups.set_cpu_weight)."""
    lease_s: float = 600.0
    """Lease written on each container; the reaper removes containers whose lease expired
    and whose worker is gone (docker backend). Renewed while the pool lives."""

    @classmethod
    def from_env(cls) -> "PoolConfig":
        """Defaults, overridden by TEMPER_SANDBOX_<FIELD> environment variables."""
        kwargs: dict[str, Any] = {}
        for name, f in cls.__dataclass_fields__.items():
            raw = os.environ.get(f"TEMPER_SANDBOX_{name.upper()}")
            if raw is not None:
                try:
                    kwargs[name] = type(getattr(cls(), name))(raw)
                except ValueError as e:
                    raise ValueError(f"TEMPER_SANDBOX_{name.upper()}={raw!r}: {e}") from None
        return cls(**kwargs)

    def __post_init__(self) -> None:
        if not 1 <= self.cpu_weight <= 10000:
            raise ValueError(f"cpu_weight (TEMPER_SANDBOX_CPU_WEIGHT) must be 1-10000, not {self.cpu_weight}")


class Backend(Protocol):
    """What a sandbox backend provides to the pool."""

    name: str

    def acquire(self, domain: str, limits: Limits) -> Any:
        """A ready slot for `domain` and these limits (raises SandboxError on infrastructure failure)."""

    def run(self, slot: Any, files: dict, command: list[str], limits: Limits, stdin: bytes | None, *,
            env: dict[str, str] | None = None, keep: bool = False) -> Verdict:
        """Run one job in the slot; raises SandboxError only when the job did not reach it. ``env``
        replaces the sandbox environment; ``keep`` (a shell session's turn) leaves the slot's files
        for the next job, so such a slot must be released with verdict None (retired)."""

    def release(self, slot: Any, verdict: Verdict | None) -> None:
        """Return the slot; verdict None (it failed before the job), a limit status or a sandbox
        the job broke means retire it."""

    def close(self) -> None:
        """Stop and remove everything the backend holds."""


class SandboxPool:
    """Admission control and retries in front of one backend. Thread-safe."""

    def __init__(self, backend: Backend, config: PoolConfig | None = None):
        self.backend = backend
        self.config = config or PoolConfig()
        self._cond = threading.Condition()
        self._running = 0
        self._per_domain: dict[str, int] = {}
        self._waiting = 0
        self._held = 0

    def _can_start(self, domain: str) -> bool:
        return (self._running < self.config.global_limit
                and self._per_domain.get(domain, 0) < self.config.domain_limit)

    def _admit(self, domain: str) -> None:
        with self._cond:
            if not self._can_start(domain):
                if self._waiting >= self.config.queue_size:
                    raise SandboxBusy(
                        f"sandbox busy: {self._running} running (global limit {self.config.global_limit}, "
                        f"domain {domain!r} {self._per_domain.get(domain, 0)}/{self.config.domain_limit}) "
                        f"and the queue is full ({self._waiting} waiting)")
                self._waiting += 1
                try:
                    ok = self._cond.wait_for(lambda: self._can_start(domain), self.config.queue_timeout_s)
                finally:
                    self._waiting -= 1
                if not ok:
                    raise SandboxBusy(f"sandbox busy: waited {self.config.queue_timeout_s} s "
                                      f"for a place in domain {domain!r}")
            self._running += 1
            self._per_domain[domain] = self._per_domain.get(domain, 0) + 1

    def _leave(self, domain: str) -> None:
        with self._cond:
            self._running -= 1
            self._per_domain[domain] -= 1
            self._cond.notify_all()

    def execute(self, files: dict, command: list[str], limits: Limits | None = None,
                stdin: bytes | None = None, *, domain: str = "default") -> Verdict:
        """Run one job; infrastructure failures (before the job reached a sandbox) are retried on
        another slot and come back as sandbox_error after the last attempt."""
        limits = limits or Limits()
        t0 = time.monotonic()
        try:
            self._admit(domain)
        except SandboxBusy as e:
            return Verdict(status="sandbox_error", error=str(e), backend=self.backend.name,
                           wall_s=time.monotonic() - t0)
        try:
            last: Verdict | None = None
            for _attempt in range(1 + self.config.retries):
                try:
                    slot = self.backend.acquire(domain, limits)
                except SandboxError as e:
                    last = Verdict(status="sandbox_error", error=str(e), backend=self.backend.name)
                    continue
                verdict: Verdict | None = None
                try:
                    verdict = self.backend.run(slot, files, command, limits, stdin)
                except SandboxError as e:  # the job did not reach the sandbox
                    last = Verdict(status="sandbox_error", error=str(e), backend=self.backend.name)
                finally:
                    self.backend.release(slot, verdict)
                if verdict is not None:
                    return verdict  # the job's outcome, whatever it is: never retried
            assert last is not None
            return last
        finally:
            self._leave(domain)

    def hold(self, domain: str, limits: Limits) -> Any:
        """A slot held for a shell session until :meth:`let_go`. Holding is not running: each job
        of the session takes a place of the execution limits for its own length
        (:meth:`admitted`), so a batch of episodes, all holding sandboxes, never waits on itself.
        Infrastructure failures are retried on a fresh slot as in :meth:`execute`; SandboxError
        after the last attempt."""
        last: SandboxError | None = None
        for _attempt in range(1 + self.config.retries):
            try:
                slot = self.backend.acquire(domain, limits)
            except SandboxError as e:
                last = e
                continue
            with self._cond:
                self._held += 1
            return slot
        assert last is not None
        raise last

    @contextmanager
    def admitted(self, domain: str) -> Iterator[None]:
        """One place of ``domain``'s and the global execution limit while a job of a held slot
        runs; SandboxBusy when none came free (as :meth:`execute` is refused)."""
        self._admit(domain)
        try:
            yield
        finally:
            self._leave(domain)

    def let_go(self, slot: Any) -> None:
        """End a held slot: the sandbox is retired (never reused, so nothing of the session reaches
        another job)."""
        try:
            self.backend.release(slot, None)
        finally:
            with self._cond:
                self._held -= 1

    def stats(self) -> dict[str, Any]:
        """Running and waiting counts, for dashboards."""
        with self._cond:
            return {"running": self._running, "waiting": self._waiting, "held": self._held,
                    "per_domain": dict(self._per_domain), "backend": self.backend.name}

    def close(self) -> None:
        """Close the backend (removes its containers)."""
        self.backend.close()
