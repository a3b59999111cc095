"""What a cascade needs from outside the trainer, handed in as one object.

The trainer never names the sandbox runtime or the control plane. Whoever runs a cascade
(a verify worker, an evaluation, a bench, a test) builds a :class:`VerifyContext` and passes it to
:func:`~trainer.verifiers.cascade.compile_cascade`; the stages that wait on outside services
(``code_tests``, ``judge``) receive it as their ``context`` argument. Without one, those stages
report their infrastructure outcome (``sandbox_error``, ``judge_error``: masked, never a reward
of 0) instead of guessing where the service lives.

>>> ctx = VerifyContext.with_judges({"grader": lambda request: None})
>>> ctx.judge("grader") is not None, ctx.judge("other")
(True, None)
>>> NO_CONTEXT.execute is None
True
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

from trainer.verifiers.limits import Limits

Executor = Callable[..., Any]
"""``execute(files, command, limits: Limits, stdin, *, backend, domain[, outputs]) -> verdict`` where
the verdict has ``status``, ``stdout``, ``stderr`` (and ``exit_code``, ``wall_s``, ``cpu_s``, and
``artifacts`` when the job named ``outputs``: :mod:`trainer.verifiers.artifacts`)."""
SandboxSlot = Callable[[str, Limits], ContextManager[Any]]
"""``slot(domain, limits)``: hold one of the domain's sandbox places while a job runs; raising
means no place came free (an infrastructure outcome)."""
SessionOpener = Callable[..., Any]
"""``open_session(files, *, limits: SessionLimits, setup: str, domain: str) -> session``: a shell
session held until its ``close()``, with ``run(command) -> verdict``, ``files(max_bytes)``,
``read(argv, max_bytes) -> verdict`` (a trusted command) and ``ended`` (the sandbox runtime's
``open_session``)."""
JudgeResolver = Callable[[str], Any]
"""``judges(name) -> Judge | None``."""


@dataclass(frozen=True)
class VerifyContext:
    """The services a cascade's stages may use; every field optional."""

    execute: Executor | None = None
    """Runs one sandbox job (``code_tests``)."""
    judges: JudgeResolver | None = None
    """Finds a judge by name (``judge``)."""
    sandbox_slot: SandboxSlot | None = None
    """The per-domain sandbox concurrency limit (the domain's live ``max_concurrent_sandboxes``)."""
    open_session: SessionOpener | None = None
    """Opens a shell session for an episode (the ``shell`` environment)."""

    def judge(self, name: str) -> Any:
        """The judge named ``name``, or None."""
        return self.judges(name) if self.judges is not None else None

    def slot(self, domain: str, limits: Limits) -> ContextManager[Any]:
        """One sandbox place of ``domain`` (no limit without a ``sandbox_slot``)."""
        return self.sandbox_slot(domain, limits) if self.sandbox_slot is not None else nullcontext()

    @classmethod
    def with_judges(cls, judges: dict[str, Any], **fields: Any) -> "VerifyContext":
        """A context whose judges are a fixed mapping (tests, benches, shadow scoring)."""
        return cls(judges=dict(judges).get, **fields)


NO_CONTEXT = VerifyContext()
"""The context of a cascade compiled without one: no sandbox, no judges."""
