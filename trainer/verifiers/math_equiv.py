"""Mathematical equivalence with the math-verify package (imported lazily).

>>> from trainer.tasks.base import Task
>>> t = Task("d", "1", "q", answer="\\\\frac{1}{2}")
>>> math_equivalence("The answer is $\\\\boxed{0.5}$", t).outcome.value
'pass'
>>> math_equivalence("$\\\\boxed{2/4}$", t).outcome.value
'pass'
>>> math_equivalence("$\\\\boxed{1/3}$", t).outcome.value
'fail'
>>> math_equivalence("", t).outcome.value
'parse_error'
"""
from __future__ import annotations

import re
from typing import Any

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task


def _wrap(text: str) -> str:
    text = str(text).strip()
    return text if ("$" in text or "\\boxed" in text or "\\(" in text) else f"${text}$"


def math_equivalence(
    completion: str, task: Task, *, expected: Any = None, float_rounding: int = 6, strict: bool = True
) -> Verification:
    """Parse the gold answer and the completion with math-verify and compare them symbolically.

    math-verify's own signal-based timeouts are turned off: the cascade enforces the stage
    timeout from outside, in a worker process it can kill.
    """
    from math_verify import parse, verify  # lazy: sympy and latex2sympy are heavy

    gold_text = task.answer if expected is None else expected
    gold = parse(_wrap(str(gold_text)), parsing_timeout=None)
    if not gold:
        raise ValueError(f"expected answer {gold_text!r} cannot be parsed")
    found = parse(completion, parsing_timeout=None)
    if not found:
        prose = re.search(r"[A-Za-z]{2,}\W+[A-Za-z]{2,}", completion) and "\\" not in completion
        found = parse(_wrap(completion), parsing_timeout=None) if len(completion) < 200 and not prose else []
    if not found:
        return Verification.failed(Outcome.PARSE_ERROR, error="no mathematical answer found", found=completion[-200:])
    ok = verify(gold, found, float_rounding=float_rounding, strict=strict, timeout_seconds=None)
    details = {"expected": str(gold_text), "found": str(found[-1] if len(found) > 1 else found[0])}
    return Verification.passed(**details) if ok else Verification.failed(**details)
