"""Numeric comparison with absolute and relative tolerance.

Pass when ``|found - expected| <= max(abs_tol, rel_tol * |expected|)`` and both are finite: NaN
and infinities never match (``abs(nan - v) <= tol`` is False, but so is ``> tol``, so every
comparison here asks "within?", never "too far?"). The answer is one number: ``1 2 3 4`` is not
1234, and with ``take="last"`` the final line must state one number. Percentages read as
fractions (``12%`` = 0.12) unless ``percent="points"`` (or the task's ``meta["percent"]``) says
the gold is itself a percentage, so ``45.23%`` answers 45.23.

Tolerances should fit the field: a figure copied from a document is exact (``abs_tol=0``); a
value asked for "rounded to two decimal places" is within half a unit of that place
(``abs_tol=0.005``).

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
>>> numeric_match("3 or 3.14159", t, take="last").details["error"]
'the final line states 2 numbers'
>>> [numeric_match(s, t, abs_tol=1e9).outcome.value for s in ["nan", "inf", "1 2 3 4"]]
['parse_error', 'parse_error', 'fail']
>>> numeric_match("4/2", Task("d", "1", "q", answer=2)).details["error"]
'hedged answer: a slash between numbers where the gold is a whole number'
>>> numeric_match("45.23%", Task("d", "1", "q", answer=45.23, meta={"percent": "points"})).outcome.value
'pass'
"""
from __future__ import annotations

import math
from typing import Any

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.answers import count_numbers, final_line, hedge_reason
from trainer.verifiers.exact import expected_values
from trainer.verifiers.normalize import is_finite_number, last_number, parse_number


def within(found: float, expected: float, abs_tol: float = 0.0, rel_tol: float = 0.0) -> bool:
    """True when both are finite and ``found`` is within the absolute or relative tolerance.

    >>> within(float("nan"), 1.0, abs_tol=10), within(float("inf"), float("inf")), within(1.004, 1.0, abs_tol=0.005)
    (False, False, True)
    """
    if not (is_finite_number(found) and is_finite_number(expected)):
        return False
    return abs(found - expected) <= max(abs_tol, rel_tol * abs(expected))


def numeric_match(
    completion: str,
    task: Task,
    *,
    expected: Any = None,
    abs_tol: float = 1e-9,
    rel_tol: float = 0.0,
    take: str = "whole",
    percent: str | None = None,
) -> Verification:
    """Compare the number in the completion (``take``: the ``whole`` text is one number, or the
    ``last`` number of a final line that states only one)."""
    percent = percent or task.meta.get("percent", "fraction")
    gold = task.answer if expected is None else expected
    if take == "whole":
        reason = hedge_reason(completion, gold)
        if reason is not None:
            return Verification.failed(error=f"hedged answer: {reason}", found=completion[:200])
        found = parse_number(completion, percent=percent)
    else:
        line = final_line(completion) or ""
        n = count_numbers(line)
        if n > 1:
            return Verification.failed(error=f"the final line states {n} numbers", found=line[:200])
        reason = hedge_reason(line, gold)
        if reason is not None:
            return Verification.failed(error=f"hedged answer: {reason}", found=line[:200])
        found = last_number(line)
    if found is None:
        return Verification.failed(Outcome.PARSE_ERROR, error="not a finite number", found=completion[:200])
    targets = [float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else parse_number(str(v), percent=percent)
               for v in expected_values(task, expected)]
    targets = [t for t in targets if t is not None and math.isfinite(t)]
    if not targets:
        raise ValueError(f"expected answer {task.answer!r} is not a finite number")
    if any(within(found, t, abs_tol, rel_tol) for t in targets):
        return Verification.passed(expected=targets, found=found)
    return Verification.failed(expected=targets, found=found)
