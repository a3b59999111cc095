"""The rollout pipeline: how a step gets its verified batch and how the engine gets new weights.

Two pipelines with the same methods, chosen once from ``rollout.staleness`` (:func:`pipeline_for`):

:class:`SyncPipeline` (``staleness = 0``) runs everything in turn in the caller: generate the
batch with the current weights (the engine shares the policy's parameters), verify it, update,
sync.

:class:`OverlappedPipeline` (``staleness = s > 0``) runs three stages at once::

    rollout thread:  generate batch k+s (chunk by chunk)      weight syncs, in order
    verify thread:         verify each chunk as soon as it is generated
    caller:          wait for batch k  ->  advantages  ->  update  ->  queue the sync

Batch k+s is drawn and queued when step k starts, behind the sync of update k, so it is generated
by weights that are exactly ``s`` updates older than the update that consumes it (fewer in the
first steps). A sync copies a snapshot, so generation never sees half an update.

Each chunk's completions are verified per domain, on verify threads of that domain's own, so a
slow domain (a long verification lane) never holds a fast one's groups. With a verification budget
(``rollout.verify_budget_s`` = b > 0) a step waits for its batch's verification at most b seconds
once the batch is generated: it trains on the groups verified by then, and the rest stay in
flight and join the next step (the step after is the last one a group may join under the bound,
so there it is waited for). To keep such a group under the bound, a budgeted pipeline generates
``s - 1`` batches ahead instead of ``s``: the batch a step consumes is ``s - 1`` updates old, a
group it carries ``s``.

Either way every batch carries the policy version that generated it, and a batch more than
``staleness`` updates old is refused.
"""
from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, TypeVar

from trainer.episodes import Trajectory
from trainer.outcomes import Verification
from trainer.tasks.base import Task

if TYPE_CHECKING:
    import torch

Request = tuple[Task, int, int]
"""``(task, n, group)``: ``n`` completions of one task, forming one group."""
Generate = Callable[[list[Request]], list[Trajectory]]
"""Unverified trajectories for requests (multi-turn episodes come back verified)."""
VerifyBatch = Callable[[list[tuple[str, Task]]], list[Verification]]
"""``[(completion, task)] -> [Verification]``, one per item, in order."""
T = TypeVar("T")


VERIFY_THREADS = 2
"""Verifications of one domain an overlapped pipeline runs at once (each domain has its own
threads, so a slow domain's verifications never hold a fast one's)."""


@dataclass
class Batch:
    """Trajectories generated for one step, with the version of the weights that generated them."""

    trajs: list[Trajectory]
    """Generated trajectories, verified by the time the step consumes them."""
    policy_version: int
    """Policy updates already applied to the weights the engine generated this batch with."""
    checks: list[tuple[list[Trajectory], cf.Future]] = field(default_factory=list, repr=False)
    """The verifications still running: each future verifies the trajectories beside it (whole
    groups of one domain); empty once the batch is ready."""
    carried: bool = False
    """Groups held over from an earlier step whose verification budget ran out: they join the next
    step's batch."""

    def groups(self) -> int:
        return len({t.group for t in self.trajs})

    def split(self) -> tuple[Batch, Batch]:
        """The part whose verification is done, and the part still verifying (same version)."""
        done = [(trajs, check) for trajs, check in self.checks if check.done()]
        running = [(trajs, check) for trajs, check in self.checks if not check.done()]
        late = {id(t) for trajs, _ in running for t in trajs}
        ready = Batch([t for t in self.trajs if id(t) not in late], self.policy_version, done, carried=self.carried)
        rest = Batch([t for t in self.trajs if id(t) in late], self.policy_version, running, carried=True)
        return ready, rest


# ----------------------------------------------------------------------------- stage clocks
class StageClock:
    """Busy seconds of one pipeline stage: time during which at least one of its jobs runs.

    Thread-safe; ``busy_s(now)`` includes the job running now, so windows can be cut anywhere.

    >>> clock = StageClock()
    >>> with clock.running():
    ...     pass
    >>> clock.busy_s() >= 0.0
    True
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._since = 0.0
        self._busy = 0.0

    @contextmanager
    def running(self):
        with self._lock:
            if self._active == 0:
                self._since = time.perf_counter()
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0:
                    self._busy += time.perf_counter() - self._since

    def busy_s(self, now: float | None = None) -> float:
        with self._lock:
            now = time.perf_counter() if now is None else now
            return self._busy + (now - self._since if self._active else 0.0)


class StageClocks:
    """The clocks of the stages ``generate``, ``verify`` and ``update``, read in windows.

    Windows tile the job's time from its first step on, so the time between steps (the caller's
    bookkeeping) counts too: work the pipeline does then is busy, waiting is idle.

    >>> clocks = StageClocks()
    >>> clocks.open(time.perf_counter())
    >>> with clocks.running("update"):
    ...     pass
    >>> sorted(clocks.window_metrics())[:3]
    ['pipeline/generate_busy_s', 'pipeline/generate_idle_frac', 'pipeline/update_busy_s']
    """

    def __init__(self) -> None:
        self.clocks = {stage: StageClock() for stage in ("generate", "verify", "update")}
        self._window_start: float | None = None
        self._busy_at_window_start: dict[str, float] = {}

    def running(self, stage: str):
        """Context manager: ``stage`` is busy while it runs."""
        return self.clocks[stage].running()

    def open(self, now: float) -> None:
        """Start the first window at ``now`` (the job's first step); later calls do nothing."""
        if self._window_start is None:
            self._window_start = now

    def window_metrics(self) -> dict[str, float]:
        """Busy seconds and idle fraction of each stage since the previous window ended."""
        now = time.perf_counter()
        window = max(now - self._window_start, 1e-9)
        previous = self._busy_at_window_start
        out = {"pipeline/window_s": window}
        for stage, clock in self.clocks.items():
            busy = clock.busy_s(now)
            spent = min(max(busy - previous.get(stage, 0.0), 0.0), window)
            out[f"pipeline/{stage}_busy_s"] = spent
            out[f"pipeline/{stage}_idle_frac"] = 1.0 - spent / window
            previous[stage] = busy
        self._busy_at_window_start = previous
        self._window_start = now
        return out


def engine_chunks(requests: list[Request], size: int) -> list[list[Request]]:
    """Requests split, whole groups at a time, into chunks of at most ``size`` completions (a
    group larger than ``size`` is a chunk of its own). Each chunk is one engine call whose
    completions go to verification while the next chunk is generated.

    >>> reqs = [("a", 4, 0), ("b", 4, 1), ("c", 4, 2)]
    >>> [[g for _, _, g in c] for c in engine_chunks(reqs, 8)]
    [[0, 1], [2]]
    >>> [[g for _, _, g in c] for c in engine_chunks(reqs, 2)]
    [[0], [1], [2]]
    """
    out: list[list[Request]] = []
    count = 0
    for req in requests:
        if out and count + req[1] <= size:
            out[-1].append(req)
            count += req[1]
        else:
            out.append([req])
            count = req[1]
    return out


# ----------------------------------------------------------------------------- the pipelines
class Pipeline:
    """The interface both pipelines implement, and what they share: the timed generate and verify
    stages, the engine's weight load and the staleness check."""

    shares_weights: bool
    """Whether the engine may generate with the policy's own parameters (else it keeps a copy)."""

    def __init__(self, engine, policy: torch.nn.Module, generate: Generate, verify_batch: VerifyBatch,
                 clocks: StageClocks, *, staleness: int, chunk_size: int, verify_budget_s: float = 0.0):
        self.engine = engine
        self.policy = policy
        self._generate_untimed = generate
        self.verify_batch = verify_batch
        self.clocks = clocks
        self.staleness = staleness
        self.chunk_size = chunk_size
        self.verify_budget_s = verify_budget_s
        """Seconds a step waits for its batch's verification once generated (0: all of it)."""
        self.version = 0
        """Policy updates handed to :meth:`sync` so far (the caller's view)."""
        self.engine_version = 0
        """Policy updates reflected in the engine's weights (the generating side's view)."""

    def knobs(self) -> tuple[int, int]:
        """``(staleness in force, verify lanes)``: what a split advisor may change between steps
        (:mod:`trainer.advisor`); in turn, ``(0, 1)``."""
        return 0, 1

    def set_knobs(self, *, staleness: int | None = None, verify_lanes: int | None = None) -> None:
        """Change the split from the next step on (between steps only): the staleness in force, from
        1 to the bound this pipeline was built with (which every batch is still checked against),
        and the verify calls in flight per domain. In turn there is nothing to change."""
        raise ValueError("a pipeline in turn (staleness 0) has no staleness or verify lanes to change")

    def next_batch(self, draw: Callable[[], list[Request]], metrics: dict) -> Batch:
        """This step's verified batch (of requests from ``draw()``); adds the seconds the caller
        waited for generation, then verification, to ``stage/generate_s`` and ``stage/verify_s``."""
        raise NotImplementedError

    def refill(self, requests: list[Request], metrics: dict) -> Batch:
        """A further verified batch in this step (dynamic sampling), timed like :meth:`next_batch`."""
        raise NotImplementedError

    def sync(self, version: int) -> float:
        """The engine is to take the policy after ``version`` updates; seconds the caller spent."""
        raise NotImplementedError

    def resync(self) -> None:
        """The engine takes the current weights now (they changed without an update: SFT)."""
        raise NotImplementedError

    def on_engine(self, fn: Callable[[], T]) -> T:
        """``fn()``, which uses the engine, with the engine holding the current policy."""
        raise NotImplementedError

    def verify(self, trajs: list[Trajectory]) -> None:
        """Verify ``trajs`` now, on the verify stage."""
        raise NotImplementedError

    def ahead(self) -> list[Batch]:
        """The batches generated ahead of the current step, verified (for a checkpoint): groups
        carried over from a step (``carried``) first, then the batches queued ahead."""
        raise NotImplementedError

    def restore(self, ahead: list[Batch], version: int) -> None:
        """Continue from a checkpoint taken after ``version`` updates, whose weights the engine was
        built from; ``ahead`` are the batches that were generated ahead then (:meth:`ahead`)."""
        self.version = self.engine_version = version

    def close(self) -> None:
        """Stop; batches queued ahead are dropped."""

    def _generate(self, requests: list[Request]) -> list[Trajectory]:
        with self.clocks.running("generate"):
            return self._generate_untimed(requests)

    def _verify(self, trajs: list[Trajectory]) -> None:
        """Fill in the verification of each trajectory that has none yet."""
        todo = [t for t in trajs if t.verification is None]
        if todo:
            with self.clocks.running("verify"):
                results = self.verify_batch([(t.completion, t.task) for t in todo])
            for t, v in zip(todo, results):
                t.verification = v

    def _load_weights(self, weights, version: int) -> float:
        """Make the engine hold ``weights``, the policy after ``version`` updates; seconds spent."""
        seconds = self.engine.sync_weights(weights)
        self.engine_version = version
        return seconds

    def _checked(self, batch: Batch, metrics: dict) -> Batch:
        """Record the policy version a batch was generated with; refuse one older than allowed."""
        lag = self.version - batch.policy_version
        if not 0 <= lag <= self.staleness:
            raise RuntimeError(f"batch generated by policy version {batch.policy_version} reached "
                               f"update {self.version + 1}: staleness {lag} is outside "
                               f"0..{self.staleness}")
        if "batch/policy_version" not in metrics:  # the step's first batch is its oldest
            metrics["batch/policy_version"] = float(batch.policy_version)
            metrics["batch/policy_lag"] = float(lag)
        return batch


class SyncPipeline(Pipeline):
    """``staleness = 0``: each batch is generated with the current weights, then verified, in the
    caller; the engine shares the policy's parameters and holds the current policy between steps."""

    shares_weights = True

    def next_batch(self, draw: Callable[[], list[Request]], metrics: dict) -> Batch:
        return self._in_turn(draw(), metrics)

    def refill(self, requests: list[Request], metrics: dict) -> Batch:
        return self._in_turn(requests, metrics)

    def _in_turn(self, requests: list[Request], metrics: dict) -> Batch:
        t0 = time.perf_counter()
        batch = Batch(self._generate(requests), policy_version=self.engine_version)
        t1 = time.perf_counter()
        self._verify(batch.trajs)
        metrics["stage/generate_s"] += t1 - t0
        metrics["stage/verify_s"] += time.perf_counter() - t1
        return self._checked(batch, metrics)

    def sync(self, version: int) -> float:
        self.version = version
        return self._load_weights(self.policy, version)

    def resync(self) -> None:
        self.sync(self.version)

    def on_engine(self, fn: Callable[[], T]) -> T:
        return fn()

    def verify(self, trajs: list[Trajectory]) -> None:
        self._verify(trajs)

    def ahead(self) -> list[Batch]:
        return []


class OverlappedPipeline(Pipeline):
    """``staleness > 0``: one thread generates (and applies weight syncs in order), each domain's
    verify threads verify; the engine keeps its own copy of the weights."""

    shares_weights = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rollout_thread = cf.ThreadPoolExecutor(1, "rollout")
        self.verify_threads: dict[str, cf.ThreadPoolExecutor] = {}
        """Per domain (and ``""`` for evaluations), its verify threads, started when first needed."""
        self._threads_lock = threading.Lock()
        self.lookahead = self.staleness - 1 if self.verify_budget_s > 0 else self.staleness
        """Batches generated ahead of the one a step consumes (one fewer with a budget, so that a
        group carried to the next step is still within the staleness bound there)."""
        self.verify_lanes = VERIFY_THREADS
        """Verify threads per domain (:meth:`set_knobs` changes it between steps)."""
        self.retired: list[cf.ThreadPoolExecutor] = []
        """Verify threads replaced by :meth:`set_knobs`, finishing what was queued on them."""
        self.pending: list[cf.Future] = []
        """Batches queued ahead (futures of :class:`Batch`), oldest first: at most ``lookahead``."""
        self.carried: list[Batch] = []
        """Groups of earlier batches still verifying when their step's budget ran out."""
        self.syncs: list[cf.Future] = []
        """Weight syncs queued on the rollout thread whose outcome nobody has looked at yet."""

    def knobs(self) -> tuple[int, int]:
        return self.lookahead + (1 if self.verify_budget_s > 0 else 0), self.verify_lanes

    def set_knobs(self, *, staleness: int | None = None, verify_lanes: int | None = None) -> None:
        if staleness is not None:
            if not 1 <= staleness <= self.staleness:
                raise ValueError(f"staleness {staleness} is outside 1..{self.staleness} (the run's bound)")
            # Fewer batches ahead: those queued already are consumed first (each within the bound).
            self.lookahead = staleness - 1 if self.verify_budget_s > 0 else staleness
        if verify_lanes is not None and verify_lanes != self.verify_lanes:
            if verify_lanes < 1:
                raise ValueError(f"verify lanes must be at least 1, not {verify_lanes}")
            with self._threads_lock:
                self.verify_lanes = verify_lanes
                old, self.verify_threads = list(self.verify_threads.values()), {}
                self.retired += old
            for pool in old:  # new verifications go to new threads; what was queued here still runs
                pool.shutdown(wait=False)

    def next_batch(self, draw: Callable[[], list[Request]], metrics: dict) -> Batch:
        while len(self.pending) < self.lookahead + 1:  # queue the batches generated ahead
            self.pending.append(self._submit(draw()))
        batch = self._take(self.pending.pop(0), metrics)
        self._raise_failed_syncs()  # every sync queued before this batch's generation has run
        return self._checked(batch, metrics)

    def refill(self, requests: list[Request], metrics: dict) -> Batch:
        return self._checked(self._ready(self._submit(requests), metrics), metrics)

    def sync(self, version: int) -> float:
        # a snapshot, synced on the rollout thread behind the generations queued before it
        self.version = version
        snapshot = [p.detach().clone() for p in self.policy.parameters()]
        self._raise_failed_syncs()
        self.syncs.append(self.rollout_thread.submit(self._load_weights, _ParamsView(snapshot), version))
        return 0.0

    def _raise_failed_syncs(self) -> None:
        """A weight sync that failed on the rollout thread fails the step that next looks (the
        batches generated after it would otherwise come from the wrong weights, or cache)."""
        done = [f for f in self.syncs if f.done()]
        self.syncs = [f for f in self.syncs if not f.done()]
        for f in done:
            f.result()

    def resync(self) -> None:
        self.rollout_thread.submit(self._load_weights, self.policy, self.version).result()

    def on_engine(self, fn: Callable[[], T]) -> T:
        self.resync()  # the engine belongs to the rollout thread: run there, after what is queued
        return self.rollout_thread.submit(fn).result()

    def verify(self, trajs: list[Trajectory]) -> None:
        self._verify_on("", trajs).result()

    def ahead(self) -> list[Batch]:
        return [self._wait_all(b) for b in self.carried] + [self._ready(f) for f in self.pending]

    def restore(self, ahead: list[Batch], version: int) -> None:
        super().restore(ahead, version)
        for batch in ahead:
            if batch.carried:
                self.carried.append(batch)
            else:
                self.pending.append(_done(batch))

    def close(self) -> None:
        self.rollout_thread.shutdown(wait=True, cancel_futures=True)
        with self._threads_lock:
            pools = list(self.verify_threads.values()) + self.retired
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)

    def _verifier(self, domain: str) -> cf.ThreadPoolExecutor:
        """``domain``'s verify threads (the caller holds ``_threads_lock``)."""
        if domain not in self.verify_threads:
            self.verify_threads[domain] = cf.ThreadPoolExecutor(self.verify_lanes, f"verify-{domain}" if domain else "verify")
        return self.verify_threads[domain]

    def _verify_on(self, domain: str, trajs: list[Trajectory]) -> cf.Future:
        """Verify ``trajs`` on ``domain``'s verify threads (under the lock, so :meth:`set_knobs`
        never retires the threads between the choice and the submission)."""
        with self._threads_lock:
            return self._verifier(domain).submit(self._verify, trajs)

    def _produce(self, requests: list[Request]) -> Batch:
        """On the rollout thread: generate a batch chunk by chunk, each chunk's completions going to
        the verify threads (a verification per domain) as soon as they are generated (it overlaps
        the next chunk's generation, the next batch's, and the caller's update)."""
        batch = Batch([], policy_version=self.engine_version)
        for chunk in engine_chunks(requests, self.chunk_size):
            trajs = self._generate(chunk)
            batch.trajs += trajs
            by_domain: dict[str, list[Trajectory]] = {}
            for t in trajs:
                by_domain.setdefault(t.task.domain, []).append(t)
            for domain, part in by_domain.items():
                batch.checks.append((part, self._verify_on(domain, part)))
        return batch

    def _submit(self, requests: list[Request]) -> cf.Future:
        """Queue a batch on the rollout thread (behind every sync queued before it)."""
        return self.rollout_thread.submit(self._produce, requests)

    def _take(self, future: cf.Future, metrics: dict) -> Batch:
        """This step's batch: the queued batch once generated, with the groups carried over from
        the step before; without a budget every verification is waited for, with one only as
        long as it allows (at least one group, and every group at the staleness bound, always)."""
        t0 = time.perf_counter()
        batch = future.result()
        t1 = time.perf_counter()
        metrics["stage/generate_s"] += t1 - t0
        carried, self.carried = self.carried, []
        due = [b for b in carried if self.version - b.policy_version >= self.staleness]
        budgeted = [b for b in carried if b not in due] + [batch]
        for b in due:  # its last step under the bound
            self._wait_all(b)
        checks = [check for b in budgeted for _, check in b.checks]
        if self.verify_budget_s > 0:
            cf.wait(checks, timeout=self.verify_budget_s)
            if not due and not any(b.split()[0].trajs for b in budgeted):
                cf.wait(checks, return_when=cf.FIRST_COMPLETED)  # a step trains on something
        else:
            cf.wait(checks)
        parts = []
        for b in due + budgeted:
            ready, rest = b.split()
            parts.append(ready)
            if rest.trajs:
                self.carried.append(rest)
        for b in parts:
            self._wait_all(b)  # done already: raises a verification's exception, as waiting would
        metrics["stage/verify_s"] += time.perf_counter() - t1
        metrics["batch/groups_carried_in"] = float(sum(b.groups() for b in parts if b.carried))
        metrics["batch/groups_carried_out"] = float(sum(b.groups() for b in self.carried))
        parts = [b for b in parts if b.trajs]
        return Batch([t for b in parts for t in b.trajs],
                     min((b.policy_version for b in parts), default=batch.policy_version))

    @staticmethod
    def _wait_all(batch: Batch) -> Batch:
        """``batch`` with every verification done (a verifier's exception is raised here)."""
        for _, check in batch.checks:
            check.result()
        batch.checks = []
        return batch

    @classmethod
    def _ready(cls, future: cf.Future, metrics: dict | None = None) -> Batch:
        """Wait for a queued batch to be generated, then verified; time each wait."""
        t0 = time.perf_counter()
        batch = future.result()
        t1 = time.perf_counter()
        cls._wait_all(batch)
        if metrics is not None:
            metrics["stage/generate_s"] += t1 - t0
            metrics["stage/verify_s"] += time.perf_counter() - t1
        return batch


def _done(batch: Batch) -> cf.Future:
    """A future already holding ``batch``."""
    future: cf.Future = cf.Future()
    future.set_result(batch)
    return future


class _ParamsView:
    """Something with ``parameters()``: a frozen snapshot handed to an engine's sync."""

    def __init__(self, params: list[torch.Tensor]):
        self._params = params

    def parameters(self):
        return iter(self._params)


def pipeline_for(staleness: int) -> type[SyncPipeline] | type[OverlappedPipeline]:
    """The pipeline a run with ``rollout.staleness = staleness`` uses."""
    return OverlappedPipeline if staleness > 0 else SyncPipeline
