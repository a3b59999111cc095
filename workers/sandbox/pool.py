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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from contextlib import contextmanager
from typing import Any, Iterator, Protocol

from .elastic import Ceilings, PoolFigures
from .outcome import check_command, check_files
from .types import Limits, Outputs, SandboxBusy, SandboxError, Verdict


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
    """Containers / warm bwrap sandboxes a domain keeps started when idle (the elastic pool's
    floor: it grows to the busy sandboxes plus the jobs waiting, up to ``domain_limit``)."""
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
    idle_s: float = 30.0
    """An idle warm sandbox above its domain's target (busy + waiting, at least
    ``warm_per_domain``) is removed after this many seconds idle (elastic.Ceilings.surplus)."""
    create_rate: float = 20.0
    """Sandbox creations per second the host's worker processes may start together (a token bucket
    in ``budget_file``, shared round-robin by the domains waiting for one: a burst of one domain
    does not starve the others)."""
    create_burst: int = 8
    """Creations that may start at once before ``create_rate`` applies."""
    budget_file: str = ""
    """The host's creation budget file, shared by its worker processes under flock (empty: the
    system temporary directory's ``temper-sandbox-creation-budget.json``)."""
    host_memory_reserve_mb: int = 512
    """Available host memory (MiB) a new sandbox may never take: no sandbox is started when its
    ``memory_mb`` would leave less than this available."""
    host_pids_reserve: int = 256
    """Free host processes a new sandbox may never take (the kernel's task limit minus the tasks
    that exist, less the sandbox's ``pids``)."""

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
        for name, low in (("warm_per_domain", 0), ("domain_limit", 1), ("global_limit", 1), ("create_burst", 1),
                          ("host_memory_reserve_mb", 0), ("host_pids_reserve", 0)):
            if getattr(self, name) < low:
                raise ValueError(f"{name} (TEMPER_SANDBOX_{name.upper()}) must be at least {low}, not {getattr(self, name)}")
        for name in ("idle_s", "create_rate"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} (TEMPER_SANDBOX_{name.upper()}) must be above 0, not {getattr(self, name)}")

    def ceilings(self) -> Ceilings:
        """The elastic pool's per-domain bounds and host reserves (elastic.Ceilings)."""
        return Ceilings(floor=self.warm_per_domain, cap=max(self.warm_per_domain, self.domain_limit), idle_s=self.idle_s,
                        memory_reserve_mb=self.host_memory_reserve_mb, pids_reserve=self.host_pids_reserve)


class Backend(Protocol):
    """What a sandbox backend provides to the pool."""

    name: str

    def acquire(self, domain: str, limits: Limits) -> Any:
        """A ready slot for `domain` and these limits (raises SandboxError on infrastructure failure)."""

    def run(self, slot: Any, files: dict, command: list[str], limits: Limits, stdin: bytes | None, *,
            env: dict[str, str] | None = None, keep: bool = False, outputs: Outputs | None = None) -> Verdict:
        """Run one job in the slot; raises SandboxError only when the job did not reach it. ``env``
        replaces the sandbox environment; ``keep`` (a shell session's turn) leaves the slot's files
        for the next job, so such a slot must be released with verdict None (retired); ``outputs``
        are the files the job hands back (the verdict's ``artifacts``)."""

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
        self.figures: PoolFigures = getattr(backend, "figures", None) or PoolFigures()
        """Acquire waits per domain (and, for pooled backends, their creations per second)."""

    def _can_start(self, domain: str, n: int = 1) -> bool:
        return (self._running + n <= self.config.global_limit
                and self._per_domain.get(domain, 0) + n <= self.config.domain_limit)

    def _admit(self, domain: str, n: int = 1) -> None:
        """Take ``n`` places of ``domain`` at once (a group's are all or none), waiting in the queue."""
        with self._cond:
            if not self._can_start(domain, n):
                if self._waiting >= self.config.queue_size:
                    raise SandboxBusy(
                        f"sandbox busy: {self._running} running (global limit {self.config.global_limit}, "
                        f"domain {domain!r} {self._per_domain.get(domain, 0)}/{self.config.domain_limit}) "
                        f"and the queue is full ({self._waiting} waiting)")
                self._waiting += 1
                self._cond.notify_all()  # whoever watches the queue (stats) sees it grow
                try:
                    ok = self._cond.wait_for(lambda: self._can_start(domain, n), self.config.queue_timeout_s)
                finally:
                    self._waiting -= 1
                if not ok:
                    raise SandboxBusy(f"sandbox busy: waited {self.config.queue_timeout_s} s "
                                      f"for {n} place(s) in domain {domain!r}")
            self._running += n
            self._per_domain[domain] = self._per_domain.get(domain, 0) + n

    def _leave(self, domain: str, n: int = 1) -> None:
        with self._cond:
            self._running -= n
            self._per_domain[domain] -= n
            self._cond.notify_all()

    def _stamp(self, verdict: Verdict, domain: str, waited: float) -> Verdict:
        """The pool's figures on a verdict: its wait, and its domain's size and creations per second."""
        verdict.wait_s = waited
        sizes = getattr(self.backend, "sizes", None)
        if sizes is not None:
            verdict.pool_size = sizes().get(domain, {}).get("size", 0)
            verdict.creations_per_s = self.figures.creations_per_s(domain)
        return verdict

    def _attempts(self, domain: str, files: dict, command: list[str], limits: Limits, stdin: bytes | None,
                  t0: float, slot: Any = None, outputs: Outputs | None = None) -> Verdict:
        """Run one job (in ``slot`` when one was allocated for it), retrying infrastructure
        failures on fresh slots; its place in the pool is held by the caller."""
        last: Verdict | None = None
        waited = time.monotonic() - t0
        for _attempt in range(1 + self.config.retries):
            if slot is None:
                try:
                    slot = self.backend.acquire(domain, limits)
                except SandboxError as e:
                    last = Verdict(status="sandbox_error", error=str(e), backend=self.backend.name)
                    continue
                waited = time.monotonic() - t0
                self.figures.waited(domain, waited)
            verdict: Verdict | None = None
            try:
                verdict = self.backend.run(slot, files, command, limits, stdin, outputs=outputs)
            except SandboxError as e:  # the job did not reach the sandbox
                last = Verdict(status="sandbox_error", error=str(e), backend=self.backend.name)
            finally:
                self.backend.release(slot, verdict)
                slot = None
            if verdict is not None:
                return self._stamp(verdict, domain, waited)  # the job's outcome, whatever it is: never retried
        assert last is not None
        return self._stamp(last, domain, time.monotonic() - t0)

    def execute(self, files: dict, command: list[str], limits: Limits | None = None,
                stdin: bytes | None = None, *, domain: str = "default", outputs: Outputs | None = None) -> Verdict:
        """Run one job; infrastructure failures (before the job reached a sandbox) are retried on
        another slot and come back as sandbox_error after the last attempt. ``outputs``: the files
        it hands back (the verdict's ``artifacts``)."""
        limits = limits or Limits()
        t0 = time.monotonic()
        try:
            self._admit(domain)
        except SandboxBusy as e:
            return Verdict(status="sandbox_error", error=str(e), backend=self.backend.name,
                           wall_s=time.monotonic() - t0)
        try:
            return self._attempts(domain, files, command, limits, stdin, t0, outputs=outputs)
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

    def execute_group(self, jobs: list[tuple[dict, list[str]]], limits: Limits | None = None, *,
                      domain: str = "default", outputs: Outputs | None = None) -> list[Verdict]:
        """Run a group's jobs (``[(files, command)]``, e.g. the G rollouts of one task) at once,
        each in its own sandbox, the G places and sandboxes taken in one allocation (a pooled
        backend's ``acquire_many``: all or none). Verdicts in the jobs' order; a job whose
        sandbox failed before it started is retried alone, as :meth:`execute` would. Every job
        hands back the same ``outputs``."""
        limits = limits or Limits()
        n = len(jobs)
        if not 1 <= n <= min(self.config.domain_limit, self.config.global_limit):
            raise ValueError(f"jobs: a group needs 1 to {min(self.config.domain_limit, self.config.global_limit)} "
                             f"jobs (domain_limit, global_limit), not {n}")
        for files, command in jobs:
            check_files(files)
            check_command(command)
        t0 = time.monotonic()
        try:
            self._admit(domain, n)
        except SandboxBusy as e:
            return [Verdict(status="sandbox_error", error=str(e), backend=self.backend.name) for _ in jobs]
        try:
            slots: list[Any] = [None] * n
            acquire_many = getattr(self.backend, "acquire_many", None)
            if acquire_many is not None:
                try:
                    slots = acquire_many(domain, limits, n)
                    for _ in slots:
                        self.figures.waited(domain, time.monotonic() - t0)
                except SandboxError:
                    slots = [None] * n  # each job then tries alone (retries included)
            with ThreadPoolExecutor(max_workers=n, thread_name_prefix="sandbox-group-job") as ex:
                futures = [ex.submit(self._attempts, domain, files, command, limits, None, t0, slot, outputs)
                           for (files, command), slot in zip(jobs, slots)]
                return [f.result() for f in futures]
        finally:
            self._leave(domain, n)

    def stats(self) -> dict[str, Any]:
        """Running and waiting counts, and per domain the pool's size, idle and target sandboxes
        (pooled backends), its acquire waits (p50, p99) and creations per second: for dashboards."""
        with self._cond:
            out: dict[str, Any] = {"running": self._running, "waiting": self._waiting, "held": self._held,
                                   "per_domain": dict(self._per_domain), "backend": self.backend.name}
        sizes = getattr(self.backend, "sizes", lambda: {})()
        pools = {}
        for domain in sorted(set(sizes) | self.figures.domains()):
            pools[domain] = {"size": 0, "idle": 0, "target": 0, **sizes.get(domain, {}), **self.figures.waits(domain),
                             "creations_per_s": round(self.figures.creations_per_s(domain), 3)}
        out["pools"] = pools
        return out

    def close(self) -> None:
        """Close the backend (removes its containers)."""
        self.backend.close()
