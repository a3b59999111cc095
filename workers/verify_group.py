"""A task's group of completions verified together: the G cascades of one task run at once, and
the first sandbox job of each runs in one allocation (``workers.sandbox.execute_group``: the G
places of the pool's execution limits and the G sandboxes, all or none).

Each cascade runs on its own thread with a VerifyContext whose ``execute`` posts the cascade's
first sandbox job to the group's :class:`GroupReservation` and waits; once every cascade has
posted its job or ended without one (a format stage refused it, the verifier crashed), the posted
jobs run together. What cannot go as one group runs one job at a time, exactly as a lone
cascade's job would (behind the domain's quota slot): jobs whose limits, backend or domain differ,
a group larger than the pool's limits, a group whose quota slots are not all free now, and every
later job of a cascade. Each job still runs alone in its own sandbox, so a verdict is the one
the sequential path gives.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any, Callable

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers import VerifyContext, compile_cascade
from workers import sandbox
from workers.slots import default_slots, domain_slots_now

log = logging.getLogger(__name__)

ALONE = object()
"""A member's answer when its job is not run with the group: it runs the job itself."""


@dataclasses.dataclass(frozen=True)
class Job:
    """One sandbox job as a cascade's stage hands it to ``context.execute``."""

    files: dict
    command: list
    limits: Any
    stdin: bytes | None
    backend: str | None
    domain: str
    outputs: Any = None
    """The files the job hands back (``Outputs``), or None."""


class GroupReservation:
    """The first sandbox job of each of ``size`` cascades, run together by ``run_together(jobs)``
    (verdicts in the jobs' order, or None: each runs alone). Thread-safe; every member must call
    :meth:`ended` when its cascade returns."""

    def __init__(self, size: int, base: VerifyContext, run_together: Callable[[list[Job]], list | None]):
        self._base = base
        self._run_together = run_together
        self._cond = threading.Condition()
        self._open = set(range(size))  # members that have neither posted a job nor ended
        self._posted: dict[int, Job] = {}
        self._answers: dict[int, Any] = {}
        self._launched = False

    def context(self, member: int) -> VerifyContext:
        """The VerifyContext member ``member``'s cascade runs with (the quota slot is taken here,
        for the group or for each lone job, so the stage's own slot is none)."""
        return dataclasses.replace(self._base, execute=functools.partial(self._execute, member), sandbox_slot=None)

    def ended(self, member: int) -> None:
        """Member ``member``'s cascade returned (with or without a sandbox job)."""
        with self._cond:
            self._open.discard(member)
            ready = self._take_launch()
        if ready:
            self._launch()

    def _take_launch(self) -> bool:
        """Whether the caller launches the group now (every member posted or ended); lock held."""
        if self._launched or self._open:
            return False
        self._launched = True
        return True

    def _execute(self, member: int, files: dict, command: list, limits: Any, stdin: bytes | None, *,
                 backend: str | None = None, domain: str = "default", outputs: Any = None) -> Any:
        job = Job(files, command, limits, stdin, backend, domain, outputs)
        with self._cond:
            first = member in self._open and not self._launched
            if first:
                self._open.discard(member)
                self._posted[member] = job
            ready = first and self._take_launch()
        if not first:
            return self._alone(job)
        if ready:
            self._launch()
        with self._cond:
            self._cond.wait_for(lambda: member in self._answers)
            answer = self._answers.pop(member)
        return self._alone(job) if answer is ALONE else answer

    def _launch(self) -> None:
        members = sorted(self._posted)
        verdicts = None
        try:
            if len(members) > 1:
                verdicts = self._run_together([self._posted[m] for m in members])
        except Exception:  # noqa: BLE001 - the group failing to start: each job runs alone, as it would have
            log.exception("a group of %d sandbox jobs could not run together", len(members))
            verdicts = None
        finally:
            with self._cond:
                for k, m in enumerate(members):
                    self._answers[m] = verdicts[k] if verdicts is not None else ALONE
                self._cond.notify_all()

    def _alone(self, job: Job) -> Any:
        with self._base.slot(job.domain, job.limits):
            handed = {"outputs": job.outputs} if job.outputs is not None else {}
            return self._base.execute(job.files, job.command, job.limits, job.stdin, backend=job.backend, domain=job.domain,
                                      **handed)


def group_runner(max_concurrent_sandboxes: int | None) -> Callable[[list[Job]], list | None]:
    """``run_together`` for a domain's jobs: one ``sandbox.execute_group`` when the jobs are alike
    (limits, backend, domain, outputs, no stdin), fit the pool's limits and the domain's quota has the
    group's slots free now; else None."""
    def run_together(jobs: list[Job]) -> list | None:
        first = jobs[0]
        if any((j.limits, j.backend, j.domain, j.stdin, j.outputs) != (first.limits, first.backend, first.domain, None, first.outputs)
               for j in jobs):
            return None
        if len(jobs) > sandbox.group_limit(first.backend):
            return None
        quota = (nullcontext(True) if max_concurrent_sandboxes is None else
                 domain_slots_now(default_slots(), first.domain, max_concurrent_sandboxes, len(jobs), lease_s=first.limits.wall_s + 30.0))
        with quota as held:
            if not held:
                return None
            return sandbox.execute_group([(j.files, j.command) for j in jobs], first.limits, backend=first.backend, domain=first.domain,
                                         outputs=first.outputs)

    return run_together


def verify_item(cascade: Callable[[str, Task], Verification], item: dict) -> dict:
    """One ``{completion, task}`` through a compiled cascade; a crashing verifier is an outcome
    (``sandbox_error``), not a dead batch."""
    try:
        return cascade(item["completion"], Task(**item["task"])).to_dict()
    except Exception as exc:  # noqa: BLE001
        log.exception("verifier crashed")
        return Verification(Outcome.SANDBOX_ERROR, 0.0, {"error": repr(exc)[:500]}).to_dict()


def verify_pairs(cascade: Any, items: list[tuple[str, Task]]) -> list[Verification]:
    """A domain's items verified in this process together (:meth:`Cascade.run_many`: a process
    stage's calls in one message); a cascade that crashes is verified item by item, so the crash
    is the crashing item's ``sandbox_error``."""
    try:
        return cascade.run_many(items)
    except Exception:  # noqa: BLE001
        log.exception("verifier crashed on a batch; verifying its items one by one")
    out = []
    for completion, task in items:
        try:
            out.append(cascade(completion, task))
        except Exception as exc:  # noqa: BLE001
            out.append(Verification(Outcome.SANDBOX_ERROR, 0.0, {"error": repr(exc)[:500]}))
    return out


def verify_many(cascade: Any, items: list[dict]) -> list[dict]:
    """``{completion, task}`` items through a compiled cascade together (each stage over every
    item, a process stage's calls in one message: :meth:`Cascade.run_many
    <trainer.verifiers.cascade.Cascade.run_many>`), each with the outcome :func:`verify_item`
    gives it alone; an item whose task does not load, or a cascade that crashes, is that item's
    (or, item by item, each one's) ``sandbox_error``."""
    pairs: list[tuple[str, Task]] = []
    out: list[dict | None] = [None] * len(items)
    index: list[int] = []
    for i, item in enumerate(items):
        try:
            pairs.append((item["completion"], Task(**item["task"])))
            index.append(i)
        except Exception:  # noqa: BLE001 - verify_item says why, for this item alone
            out[i] = verify_item(cascade, item)
    for i, verification in zip(index, verify_pairs(cascade, pairs)):
        out[i] = verification.to_dict()
    return out  # type: ignore[return-value]


def verify_group(spec: dict, items: list[dict], context: VerifyContext, max_concurrent_sandboxes: int | None) -> list[dict]:
    """The completions of one task, verified by ``spec`` at once with their first sandbox jobs in
    one allocation; results in the items' order."""
    if len(items) == 1:
        return [verify_item(compile_cascade(spec, context), items[0])]
    reservation = GroupReservation(len(items), context, group_runner(max_concurrent_sandboxes))

    def member(i: int) -> dict:
        try:
            return verify_item(compile_cascade(spec, reservation.context(i)), items[i])
        finally:
            reservation.ended(i)

    with ThreadPoolExecutor(max_workers=len(items), thread_name_prefix="verify-group") as ex:
        return list(ex.map(member, range(len(items))))
