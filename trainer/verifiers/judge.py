"""The judge stage's interface. The judge itself (a model grading a completion against a rubric)
comes with the calibration issue; until one is set, the stage reports ``judge_error`` (an
infrastructure outcome, never a reward of 0).

>>> from trainer.tasks.base import Task
>>> judge_stage("anything", Task("d", "1", "q")).outcome.value
'judge_error'
>>> set_judge("default", lambda request: JudgeResult(score=0.9, reason="good"))
>>> judge_stage("anything", Task("d", "1", "q"), threshold=0.5).outcome.value
'pass'
>>> set_judge("default", None)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task


@dataclass(frozen=True)
class JudgeRequest:
    """What a judge is asked to grade."""

    prompt: str
    """The task's prompt as the policy saw it."""
    completion: str
    """The policy's completion."""
    reference: Any = None
    """The task's reference answer, if any."""
    rubric: str | None = None
    """Grading instructions from the stage params."""
    meta: dict[str, Any] = field(default_factory=dict)
    """The task's metadata."""


@dataclass(frozen=True)
class JudgeResult:
    """A judge's verdict."""

    score: float
    """Grade in [0, 1]."""
    reason: str = ""
    """The judge's short justification."""
    judge_version: str = ""
    """Which judge configuration produced it (for calibration)."""


class Judge(Protocol):
    """Anything that grades a request; raising means the judge failed (``judge_error``)."""

    def __call__(self, request: JudgeRequest) -> JudgeResult: ...


_JUDGES: dict[str, Judge] = {}


def set_judge(name: str, judge: Judge | None) -> None:
    """Install (or with None remove) the judge the ``judge`` stage uses under ``name``."""
    if judge is None:
        _JUDGES.pop(name, None)
    else:
        _JUDGES[name] = judge


def judge_stage(
    completion: str, task: Task, *, judge: str = "default", rubric: str | None = None, threshold: float = 0.5
) -> Verification:
    """Grade with the named judge: score >= threshold is pass, else fail; no judge or an error is
    ``judge_error``."""
    fn = _JUDGES.get(judge)
    if fn is None:
        return Verification.failed(Outcome.JUDGE_ERROR, error=f"no judge named {judge!r} is configured")
    request = JudgeRequest(task.prompt, completion, task.answer, rubric, dict(task.meta))
    try:
        result = fn(request)
        score = float(result.score)
    except Exception as exc:  # noqa: BLE001 - any failure of the judge is infrastructure
        return Verification.failed(Outcome.JUDGE_ERROR, error=f"{type(exc).__name__}: {exc}")
    if not 0.0 <= score <= 1.0:
        return Verification.failed(Outcome.JUDGE_ERROR, error=f"judge score {score} outside [0, 1]")
    details = {"found": score, "reason": result.reason, "judge_version": result.judge_version}
    if score >= threshold:
        return Verification(Outcome.PASS, 1.0, details)
    return Verification.failed(**details)
