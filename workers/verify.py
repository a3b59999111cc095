"""Verification for the run driver: cheap stages inline, sandbox and judge stages on the verify
and judge queues, in batches, gathered with deadlines.

A batch that is lost (its worker died) or late is sent again a bounded number of times; what is
still missing after that is recorded as ``sandbox_error`` (masked, never a reward of 0), so a lost
verification never blocks the run. When no live worker serves the batch's queue (``served``, from
the workers' heartbeats) its batches are neither sent nor waited for: their items are
``sandbox_error`` with ``details["no_worker"]`` naming the queue, which the driver does not count
toward quarantine and answers by pausing the run (workers/driver.py).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from contextlib import nullcontext
from typing import Any, Callable

from celery.exceptions import TimeoutError as ResultTimeout

from controlplane.dispatch import TASK_QUEUES
from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers import NO_CONTEXT, VerifyContext, compile_cascade
from trainer.verifiers.cascade import spec_digest
from workers import judge, sandbox
from workers.slots import default_slots, domain_slot
from workers.verify_group import verify_group, verify_many, verify_pairs

log = logging.getLogger(__name__)

REMOTE_STAGES = {"code_tests": "temper.verify.batch", "repo_tests": "temper.verify.batch", "cad_mesh": "temper.verify.batch",
                 "shell_state": "temper.verify.batch", "pkg_tests": "temper.verify.batch", "judge": "temper.judge.batch"}
SANDBOX_STAGES = frozenset(stage for stage, task in REMOTE_STAGES.items() if task == "temper.verify.batch")
"""The stage types that run jobs in the sandbox (a cascade with one verifies a task's group together)."""
BATCH_SIZE = 16
MAX_ATTEMPTS = 3
WAIT_SLICE_S = 2.0
"""While waiting for a batch, how often the gatherer asks whether its queue still has a live worker."""


NO_WORKER = "no_worker"
"""The ``details`` key of a verification that no worker was there to do (its value: the queue)."""
LOST = "lost"
"""The ``details`` key of a verification no worker answered after every re-send (its value: the
queue). Like ``no_worker`` it says nothing of the domain: a worker that died with the batch
still looks alive until its heartbeat is stale, so these are not counted toward quarantine."""


_pinned: dict[tuple[str, int, str], dict] = {}
_pinned_lock = threading.Lock()
PINNED_CACHE = 256
"""Pinned specs a worker process keeps, by domain, version and digest."""


def pinned_spec(domain: str, version: int, digest: str | None, read: Callable[[str, int], dict]) -> dict:
    """The cascade spec ``domain`` pins at ``version``: from this process's memory when the batch
    names its digest and the spec read earlier has that digest (so it is that very spec), else
    ``read(domain, version)`` (the database). A spec whose digest differs from the batch's is the
    database's, used and not kept."""
    key = (domain, version, digest or "")
    if digest:
        with _pinned_lock:
            hit = _pinned.get(key)
        if hit is not None:
            return hit
    spec = read(domain, version)
    if digest and spec_digest(spec) == digest:
        with _pinned_lock:
            if len(_pinned) >= PINNED_CACHE:
                _pinned.clear()
            _pinned[key] = spec
    return spec


def needs_worker(spec: dict) -> bool:
    """Whether a cascade has a stage that runs on the verify (or judge) queue."""
    return any(stage.get("type") in REMOTE_STAGES for stage in spec.get("stages", []))


def worker_queue(spec: dict) -> str | None:
    """The queue whose workers a cascade's batches need, or None when it verifies inline."""
    return TASK_QUEUES[batch_task(spec)] if needs_worker(spec) else None


def batch_task(spec: dict) -> str:
    """The task a cascade's batches go to: the judge queue when it has a judge stage."""
    names = {REMOTE_STAGES[s.get("type")] for s in spec.get("stages", []) if s.get("type") in REMOTE_STAGES}
    return "temper.judge.batch" if "temper.judge.batch" in names else "temper.verify.batch"


def task_to_dict(task: Task) -> dict[str, Any]:
    return dataclasses.asdict(task)


def verification_from_dict(data: dict[str, Any]) -> Verification:
    return Verification(Outcome(data["outcome"]), float(data.get("score", 0.0)), dict(data.get("details") or {}))


def sandbox_slot(max_concurrent: int, wait_s: float = 60.0):
    """The domain's sandbox concurrency quota across all workers, as a VerifyContext slot."""
    def slot(domain: str, limits):
        # A killed worker's slot frees itself once the job could no longer be running.
        return domain_slot(default_slots(), domain, max_concurrent, wait_s, lease_s=limits.wall_s + 30.0)

    return slot


def verify_context(spec: dict, max_concurrent_sandboxes: int | None = None):
    """The VerifyContext a worker verifies ``spec`` with: the sandbox (behind the domain's quota
    when one is given) and the active version of every judge its stages name, resolved here, on
    the task's thread (stage threads never touch the database)."""
    slot = sandbox_slot(max_concurrent_sandboxes) if max_concurrent_sandboxes is not None else None
    return VerifyContext(execute=sandbox.execute, judges=judge.judges_for(spec).get, sandbox_slot=slot)


def environment_context(limit_of: Callable[[str], int | None]):
    """The VerifyContext a run's environments use during episodes (a repository's ``run_tests``,
    a shell episode's session):
    the sandbox, behind each domain's sandbox quota where ``limit_of(domain)`` (asked at every
    sandbox, so a changed quota applies to the next one) gives one."""
    def slot(domain: str, job_limits):
        limit = limit_of(domain)
        return sandbox_slot(limit)(domain, job_limits) if limit is not None else nullcontext()

    return VerifyContext(execute=sandbox.execute, sandbox_slot=slot, open_session=sandbox.open_session)


def verify_items(spec: dict, items: list[dict], max_concurrent_sandboxes: int | None = None) -> list[dict]:
    """Worker side: run a pinned cascade over ``[{completion, task}]``; every item gets an outcome,
    in the items' order. When the cascade runs a sandbox, the completions of one task (the same
    task dict: a group of G rollouts) are verified together, their sandboxes taken in one
    allocation (workers/verify_group.py); the verdicts are those of one item at a time."""
    context = verify_context(spec, max_concurrent_sandboxes)
    if not any(stage.get("type") in SANDBOX_STAGES for stage in spec.get("stages", [])):
        return verify_many(compile_cascade(spec, context), items)
    groups: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(json.dumps(item.get("task"), sort_keys=True, default=str), []).append(i)
    out: list[dict] = [{}] * len(items)
    for idxs in groups.values():
        for i, result in zip(idxs, verify_group(spec, [items[i] for i in idxs], context, max_concurrent_sandboxes)):
            out[i] = result
    return out


class Gatherer:
    """Dispatch batches and collect their results with a deadline, re-sending what is lost.

    ``served(queue)`` says whether a live worker serves a queue now (None: assume one does). A
    batch for an unserved queue is not sent, and one being waited for when its queue loses its
    last worker is given up at once: nobody would verify it, and the run should say so now rather
    than after every deadline and re-send has run out."""

    def __init__(self, send: Callable[[str, tuple], Any], deadline_s: Callable[[int], float], max_attempts: int = MAX_ATTEMPTS,
                 served: Callable[[str], bool] | None = None):
        self.send = send
        self.deadline_s = deadline_s
        self.max_attempts = max_attempts
        self.served = served
        self.stats = {"batches": 0, "resent": 0, "lost_items": 0, "unserved_items": 0}
        self._stats_lock = threading.Lock()  # the Job verifies from several threads at once

    def _count(self, key: str, n: int) -> None:
        with self._stats_lock:
            self.stats[key] += n

    def run(self, name: str, batches: list[tuple]) -> list[list[dict] | None]:
        """``batches`` are task arguments; returns each batch's results (None when lost for good)."""
        return self.gather(name, batches)[0]

    def gather(self, name: str, batches: list[tuple]) -> tuple[list[list[dict] | None], set[int]]:
        """Each batch's results (None when lost for good), and which of the lost ones were lost
        because no live worker serves the queue of task ``name``."""
        queue = TASK_QUEUES.get(name, name)
        results: list[list[dict] | None] = [None] * len(batches)
        todo = list(range(len(batches)))
        unserved: set[int] = set()
        for attempt in range(1, self.max_attempts + 1):
            if not todo:
                break
            if not self._served(queue):
                unserved.update(todo)
                break
            if attempt > 1:
                self._count("resent", len(todo))
                log.warning("re-dispatching %d lost or late %s batches (attempt %d)", len(todo), name, attempt)
            pending = {i: self.send(name, batches[i]) for i in todo}
            self._count("batches", len(pending))
            deadline = time.monotonic() + max(self.deadline_s(len(batches[i][2])) for i in todo)
            todo = []
            for i, handle in pending.items():
                outcome = self._wait(handle, deadline, queue, i, attempt)
                if outcome == "unserved":
                    unserved.add(i)
                elif outcome is None:
                    todo.append(i)
                else:
                    results[i] = outcome
        self._count("lost_items", sum(len(batches[i][2]) for i in list(todo) + sorted(unserved)))
        self._count("unserved_items", sum(len(batches[i][2]) for i in unserved))
        return results, unserved

    def _served(self, queue: str) -> bool:
        return self.served is None or self.served(queue)

    def _wait(self, handle, deadline: float, queue: str, i: int, attempt: int):
        """One batch's results; None when lost or late, ``"unserved"`` when its queue has no
        live worker left. Waits in slices so a queue that loses its last worker is noticed."""
        while True:
            remaining = deadline - time.monotonic()
            wait = min(max(remaining, 0.01), WAIT_SLICE_S) if self.served is not None else max(remaining, 0.01)
            try:
                return handle.get(timeout=wait, propagate=True, disable_sync_subtasks=False)
            except (ResultTimeout, TimeoutError) as exc:
                if remaining > wait and self._served(queue):
                    continue
                gone = not self._served(queue)
                log.warning("verify batch %d %s on attempt %d: %r", i, "has no live worker" if gone else "is late", attempt, exc)
            except Exception as exc:  # noqa: BLE001 - lost workers, broker errors
                log.warning("verify batch %d failed on attempt %d: %r", i, attempt, exc)
                gone = False
            try:
                handle.revoke()
            except Exception:  # noqa: BLE001
                pass
            return "unserved" if gone else None


def make_verify_batch(*, cascades: dict[str, dict], versions: dict[str, int], timeouts: dict[str, float],
                      send: Callable[[str, tuple], Any], deadline_s: float | None = None,
                      priorities: dict[str, int] | None = None,
                      served: Callable[[str], bool] | None = None,
                      lane: Callable[[str], str | None] | None = None,
                      artifacts: Callable[[], dict | None] | None = None) -> tuple[Callable, Gatherer]:
    """The ``verify_batch`` the driver gives the trainer's Job, and its gatherer (for stats).

    A batch's deadline is ``deadline_s`` when given, else generous: 30 s plus twice the worst
    per-task timeout for every item (a worker verifies a batch's items one by one). ``timeouts``
    and ``priorities`` are read at every call, so the driver can keep them live; batches of
    higher-priority domains are sent first. ``lane(domain)``, asked at every call, names another
    task for a domain's sandbox batches (``temper.verify.batch_long``: workers/lanes.py), or None.
    ``artifacts()``, asked at every call, is the run's artifacts setting (``{keep, max_bytes}``),
    sent with each batch so that the worker drops what the run would drop (None: sent back whole).
    """
    compiled = {slug: compile_cascade(spec, NO_CONTEXT) for slug, spec in cascades.items() if not needs_worker(spec)}  # no sandbox or judge stage
    remote = {slug for slug, spec in cascades.items() if needs_worker(spec)}
    digests = {slug: spec_digest(cascades[slug]) for slug in remote}
    task_names = {slug: batch_task(cascades[slug]) for slug in remote}
    priorities = priorities if priorities is not None else {}
    gatherer = Gatherer(send, (lambda n: deadline_s) if deadline_s else
                        (lambda n: 30.0 + 2.0 * n * max(timeouts.values(), default=10.0)), served=served)

    def verify_batch(items: list[tuple[str, Task]]) -> list[Verification]:
        out: list[Verification | None] = [None] * len(items)
        by_domain: dict[str, list[int]] = {}
        local: dict[str, list[int]] = {}
        for i, (completion, task) in enumerate(items):
            (by_domain if task.domain in remote else local).setdefault(task.domain, []).append(i)
        for slug, idxs in local.items():
            for i, verification in zip(idxs, verify_pairs(compiled[slug], [items[i] for i in idxs])):
                out[i] = verification
        batches: dict[str, list[tuple]] = {}
        index: dict[str, list[list[int]]] = {}
        setting = artifacts() if artifacts is not None else None
        extra = (setting,) if setting is not None else ()
        for slug, idxs in sorted(by_domain.items(), key=lambda kv: -priorities.get(kv[0], 0)):
            name = task_names[slug]
            if lane is not None and name == "temper.verify.batch":
                name = lane(slug) or name
            for start in range(0, len(idxs), BATCH_SIZE):
                chunk = idxs[start:start + BATCH_SIZE]
                payload = [{"completion": items[i][0], "task": task_to_dict(items[i][1])} for i in chunk]
                batches.setdefault(name, []).append((slug, versions[slug], payload, digests[slug], *extra))
                index.setdefault(name, []).append(chunk)
        for name in batches:
            results, unserved = gatherer.gather(name, batches[name])
            for b, (chunk, result) in enumerate(zip(index[name], results)):
                for j, i in enumerate(chunk):
                    if b in unserved:
                        queue = TASK_QUEUES[name]
                        out[i] = Verification(Outcome.SANDBOX_ERROR, 0.0, {"error": f"no live worker on queue {queue}", NO_WORKER: queue})
                    elif result is None or j >= len(result):
                        out[i] = Verification(Outcome.SANDBOX_ERROR, 0.0, {"error": f"verification lost after {gatherer.max_attempts} attempts",
                                                                           LOST: TASK_QUEUES[name]})
                    else:
                        out[i] = verification_from_dict(result[j])
        return out  # type: ignore[return-value]

    return verify_batch, gatherer
