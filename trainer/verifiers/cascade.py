"""The cascade: cheap stages first, stopping at the first decisive one.

Stages are run in order of their type's cost (gates, string checks, symbolic, execution, judges;
equal costs keep the spec's order). An ``extract`` stage (or any stage whose pass carries
``details["extracted"]``) replaces the text later stages see. A gate is decisive when it does not
pass; a checker is decisive unless it says fail or parse_error, so a cheap exact match that
passes ends the cascade and a fail falls through to the next checker. ``stop_on`` in a stage
overrides that. When no stage is decisive, the last checker's verification is the result.

>>> from trainer.tasks.base import Task
>>> t = Task("d", "1", "q", answer="0.5")
>>> spec = {"stages": [{"type": "math"}, {"type": "extract", "params": {"methods": ["boxed"]}},
...                    {"type": "exact"}]}
>>> v = run_cascade(spec, "so \\\\boxed{0.5}", t, isolation="inline")
>>> v.outcome.value, v.details["stage"], [s["stage"] for s in v.details["stages"]]
('pass', 'exact', ['extract', 'exact'])
>>> v = run_cascade(spec, "so \\\\boxed{1/2}", t, isolation="inline")
>>> v.outcome.value, v.details["stage"]
('pass', 'math')
>>> run_cascade(spec, "no box", t, isolation="inline").outcome.value
'parse_error'
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.context import NO_CONTEXT, VerifyContext
from trainer.verifiers.isolation import ISOLATIONS, ProcessPool, default_pool, run_in_thread, run_inline
from trainer.verifiers.stages import STAGES, StageType, validate_cascade

NON_DECISIVE_FOR_CHECKERS = frozenset({Outcome.FAIL, Outcome.PARSE_ERROR})
INFRASTRUCTURE_ON_FAILURE = {"judge": Outcome.JUDGE_ERROR}
"""Stage types whose timeout or crash is the service's failure (an infrastructure outcome)."""


class CascadeError(ValueError):
    """A cascade spec is invalid; ``errors`` lists ``(path, message)``."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = errors
        super().__init__("invalid verifier cascade: " + "; ".join(f"{p}: {m}" for p, m in errors))


@dataclass(frozen=True)
class StageConfig:
    """One configured stage of a cascade."""

    type: str
    """Stage type name (a key of ``STAGES``)."""
    params: dict[str, Any]
    """Keyword arguments for the stage function."""
    timeout_s: float
    """Wall-clock limit, enforced from outside the stage."""
    stop_on: frozenset[Outcome] | None = None
    """Outcomes that end the cascade (None: the type's default rule)."""
    name: str = ""
    """Label in details and timings (default: the type)."""

    @property
    def stage_type(self) -> StageType:
        return STAGES[self.type]

    def is_decisive(self, outcome: Outcome) -> bool:
        if self.stop_on is not None:
            return outcome in self.stop_on
        if self.stage_type.gate:
            return outcome is not Outcome.PASS
        return outcome not in NON_DECISIVE_FOR_CHECKERS


@dataclass(frozen=True)
class Cascade:
    """A validated cascade; call it as ``cascade(completion, task) -> Verification``."""

    stages: tuple[StageConfig, ...]
    """Stages in the order they run (cheapest first)."""
    spec: dict[str, Any]
    """The spec it was built from."""
    context: VerifyContext = NO_CONTEXT
    """The sandbox and judges its ``code_tests`` and ``judge`` stages use."""

    @classmethod
    def from_spec(cls, spec: dict[str, Any], context: VerifyContext | None = None) -> "Cascade":
        errors = validate_cascade(spec)
        if errors:
            raise CascadeError(errors)
        stages = []
        for raw in spec["stages"]:
            stype = STAGES[raw["type"]]
            stop_on = raw.get("stop_on")
            stages.append(StageConfig(
                type=stype.name,
                params=dict(raw.get("params", {})),
                timeout_s=float(raw.get("timeout_s", stype.default_timeout_s)),
                stop_on=frozenset(Outcome(o) for o in stop_on) if stop_on is not None else None,
                name=raw.get("name") or stype.name,
            ))
        ordered = tuple(sorted(stages, key=lambda s: s.stage_type.cost))  # stable: equal costs keep order
        return cls(ordered, spec, context or NO_CONTEXT)

    def __call__(self, completion: str, task: Task, *, isolation: str | None = None, pool: ProcessPool | None = None) -> Verification:
        return self.run(completion, task, isolation=isolation, pool=pool)

    def run(self, completion: str, task: Task, *, isolation: str | None = None, pool: ProcessPool | None = None) -> Verification:
        """Verify one completion. ``isolation`` overrides every stage's (``inline`` for benches)."""
        return self.run_many([(completion, task)], isolation=isolation, pool=pool)[0]

    def run_many(self, items: list[tuple[str, Task]], *, isolation: str | None = None,
                 pool: ProcessPool | None = None) -> list[Verification]:
        """Verify many completions, each as :meth:`run` would alone: each stage runs over every
        completion still undecided before the next stage starts, and a ``process`` stage's
        calls go to one verifier worker in one message (:meth:`ProcessPool.call_many`), each
        with its own timeout; what one call does to its worker never decides another's outcome."""
        if isolation is not None and isolation not in ISOLATIONS:
            raise ValueError(f"isolation must be one of {ISOLATIONS}, not {isolation!r}")
        states = [_Progress(completion) for completion, _ in items]
        for stage in self.stages:
            live = [i for i, state in enumerate(states) if not state.decided]
            if not live:
                break
            results = run_stage_many(stage, [(states[i].text, items[i][1]) for i in live], isolation=isolation,
                                     pool=pool, context=self.context)
            for i, (verification, seconds) in zip(live, results):
                states[i].record(stage, verification, seconds)
        return [state.verdict() for state in states]


class _Progress:
    """One completion's way through a cascade: the text later stages see, the trail, the
    decisive result once a stage gave one, and the last checker's result otherwise."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.trail: list[dict[str, Any]] = []
        self.timings: dict[str, float] = {}
        self.result: tuple[Verification, str] | None = None
        self.last_checker: tuple[Verification, str] | None = None
        self.decided = False
        self.seconds = 0.0

    def record(self, stage: StageConfig, verification: Verification, seconds: float) -> None:
        self.trail.append({"stage": stage.name, "type": stage.stage_type.name, "outcome": verification.outcome.value,
                           "seconds": round(seconds, 6)})
        self.timings[stage.name] = self.timings.get(stage.name, 0.0) + seconds
        self.seconds += seconds
        self.result = (verification, stage.name)
        if stage.is_decisive(verification.outcome):
            self.decided = True
        elif not stage.stage_type.gate:
            self.last_checker = self.result
        elif verification.outcome is Outcome.PASS and "extracted" in verification.details:
            self.text = str(verification.details["extracted"])

    def verdict(self) -> Verification:
        """The decisive stage's result, else (every stage ran) the last checker's."""
        result = self.result if self.decided or self.last_checker is None else self.last_checker
        assert result is not None  # a valid spec has at least one stage
        final, name = result
        details = {**final.details, "stage": name, "stages": self.trail, "timings": self.timings, "verify_s": self.seconds}
        return Verification(final.outcome, final.score, details)


def run_stage(stage: StageConfig, completion: str, task: Task, *, isolation: str | None = None, pool: ProcessPool | None = None,
              context: VerifyContext = NO_CONTEXT) -> Verification:
    """Run one stage under its isolation and timeout; adds ``stage`` to the details. A stage that
    needs the context gets it and runs in this process (``process`` isolation would mean pickling it)."""
    return run_stage_many(stage, [(completion, task)], isolation=isolation, pool=pool, context=context)[0][0]


def run_stage_many(stage: StageConfig, calls: list[tuple[str, Task]], *, isolation: str | None = None,
                   pool: ProcessPool | None = None, context: VerifyContext = NO_CONTEXT) -> list[tuple[Verification, float]]:
    """:func:`run_stage` over each ``(completion, task)``, with each one's seconds; a ``process``
    stage's calls in one message to one worker."""
    stype = stage.stage_type
    mode = isolation or stype.isolation
    params = {**stage.params, "context": context} if stype.needs_context else stage.params
    if stype.needs_context and mode == "process":
        mode = "thread"
    if mode == "process":
        results = (pool or default_pool()).call_many(stype.function, [(c, t, params) for c, t in calls], stage.timeout_s)
    else:
        results = []
        for completion, task in calls:
            t0 = time.perf_counter()
            if mode == "thread":
                verification = run_in_thread(stype.fn, completion, task, params, stage.timeout_s)
            else:
                verification = run_inline(stype.fn, completion, task, params)
            results.append((verification, time.perf_counter() - t0))
    return [(_settled(stage, verification), seconds) for verification, seconds in results]


def _settled(stage: StageConfig, verification: Verification) -> Verification:
    """A stage's result as the cascade records it: a service stage's failure is the service's
    (masked, never a reward of 0), and ``stage`` names the stage."""
    infra = INFRASTRUCTURE_ON_FAILURE.get(stage.stage_type.name)
    if infra is not None and verification.outcome in (Outcome.TIMEOUT, Outcome.RUNTIME_ERROR, Outcome.MEMORY_LIMIT):
        verification = Verification.failed(infra, **{**verification.details, "stage_outcome": verification.outcome.value})
    if "stage" not in verification.details:
        verification = Verification(verification.outcome, verification.score, {**verification.details, "stage": stage.name})
    return verification


_cache: dict[str, Cascade] = {}
_cache_lock = threading.Lock()


def compile_cascade(spec: dict[str, Any], context: VerifyContext) -> Cascade:
    """A validated :class:`Cascade` for ``spec`` bound to ``context`` (the sandbox and judges
    its stages use; :data:`NO_CONTEXT`, said where a cascade is compiled: those stages report
    their infrastructure outcome). The validated stages are cached by the spec's JSON; raises
    :class:`CascadeError`."""
    key = json.dumps(spec, sort_keys=True, default=str)
    with _cache_lock:
        cascade = _cache.get(key)
    if cascade is None:
        cascade = Cascade.from_spec(spec)
        with _cache_lock:
            if len(_cache) > 1024:
                _cache.clear()
            _cache[key] = cascade
    return cascade if context is NO_CONTEXT else dataclasses.replace(cascade, context=context)


def spec_digest(spec: dict[str, Any]) -> str:
    """A short fingerprint of a cascade spec (SHA-256 of its canonical JSON): a verify batch
    carries its pinned spec's, so a worker that has that spec need not read it again.

    >>> spec_digest({"stages": [{"type": "exact"}]}) == spec_digest({"stages": [{"type": "exact"}]})
    True
    """
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:32]


def run_cascade(spec: dict[str, Any], completion: str, task: Task, *, isolation: str | None = None, pool: ProcessPool | None = None,
                context: VerifyContext | None = None) -> Verification:
    """Verify ``completion`` for ``task`` with the cascade ``spec``."""
    return compile_cascade(spec, context or NO_CONTEXT).run(completion, task, isolation=isolation, pool=pool)
