"""Pieces of the asynchronous rollout pipeline: batches labelled with their policy version, stage
clocks, and the split of a batch into engine-sized chunks that are verified as they are generated.

With ``rollout.staleness = s > 0`` the job runs three stages at once::

    rollout thread:  generate batch k+s (chunk by chunk)      weight syncs, in order
    verify thread:         verify each chunk as soon as it is generated
    caller:          wait for batch k  ->  advantages  ->  update  ->  queue the sync

Batch k+s is drawn and queued when step k starts, behind the sync of update k, so it is generated
by weights that are exactly ``s`` updates older than the update that consumes it (fewer in the
first steps). With ``s = 0`` everything runs in turn in the caller: generate, verify, update.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from trainer.episodes import Trajectory
from trainer.tasks.base import Task

Request = tuple[Task, int, int]
"""``(task, n, group)``: ``n`` completions of one task, forming one group."""


@dataclass
class Batch:
    """Trajectories generated for one step, with the version of the weights that generated them."""

    trajs: list[Trajectory]
    """Generated trajectories, verified by the time the step consumes them."""
    policy_version: int
    """Policy updates already applied to the weights the engine generated this batch with."""
    checks: list = field(default_factory=list, repr=False)
    """Futures of the chunk verifications still running (empty once the batch is ready)."""


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
