"""Numeric comparison with absolute and relative tolerance.

Pass when ``|found - expected| <= max(abs_tol, rel_tol * |expected|)``.

>>> from trainer.tasks.base import Task
>>> t = Task("d", "1", "pi?", answer=3.14159)
>>> numeric_match("3.1416", t, abs_tol=1e-3).outcome.value
'pass'
>>> numeric_match("3.2", t, rel_tol=0.01).outcome.value
'fail'
>>> numeric_match("1,000", Task("d", "1", "q", answer="1e3")).outcome.value
'pass'
>>> numeric_match("about three", t).outcome.value
'parse_error'
>>> numeric_match("the answer is 3.14159", t, take="last").outcome.value
'pass'
"""
from __future__ import annotations

from typing import Any

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.exact import expected_values
from trainer.verifiers.normalize import last_number, parse_number


def within(found: float, expected: float, abs_tol: float = 0.0, rel_tol: float = 0.0) -> bool:
    """True when ``found`` is within the absolute or relative tolerance of ``expected``."""
    return abs(found - expected) <= max(abs_tol, rel_tol * abs(expected))


def numeric_match(
    completion: str,
    task: Task,
    *,
    expected: Any = None,
    abs_tol: float = 1e-9,
    rel_tol: float = 0.0,
    take: str = "whole",
) -> Verification:
    """Compare the number in the completion (``take``: ``whole`` text or ``last`` number in it)."""
    found = parse_number(completion) if take == "whole" else last_number(completion)
    if found is None:
        return Verification.failed(Outcome.PARSE_ERROR, error="not a number", found=completion[:200])
    targets = [parse_number(str(v)) if not isinstance(v, (int, float)) else float(v) for v in expected_values(task, expected)]
    targets = [t for t in targets if t is not None]
    if not targets:
        raise ValueError(f"expected answer {task.answer!r} is not a number")
    if any(within(found, t, abs_tol, rel_tol) for t in targets):
        return Verification.passed(expected=targets, found=found)
    return Verification.failed(expected=targets, found=found)
