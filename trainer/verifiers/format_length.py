"""Format and length checks: cheap gates that run before any answer checking.

>>> from trainer.tasks.base import Task
>>> t = Task("d", "1", "q")
>>> format_check("<think>x</think><answer>1</answer>", t, required_tags=["think", "answer"]).outcome.value
'pass'
>>> format_check("<answer>1</answer>", t, required_tags=["think"]).details["error"]
'missing <think>...</think>'
>>> format_check("<answer>1</answer><answer>2</answer>", t, single_tags=["answer"]).outcome.value
'fail'
>>> length_check("one two three", t, max_words=2).details["error"]
'3 words > max_words 2'
>>> length_check("ok", t, min_chars=1, max_chars=10).outcome.value
'pass'
"""
from __future__ import annotations

import re

from trainer.outcomes import Verification
from trainer.tasks.base import Task


def format_check(
    completion: str,
    task: Task,
    *,
    required_tags: list[str] | None = None,
    single_tags: list[str] | None = None,
    pattern: str | None = None,
    forbidden: list[str] | None = None,
) -> Verification:
    """Fail unless every required ``<tag>...</tag>`` appears, single tags appear at most once,
    ``pattern`` (a regex) is found and no ``forbidden`` substring occurs."""
    for tag in required_tags or []:
        if not re.search(rf"<{re.escape(tag)}>.*?</{re.escape(tag)}>", completion, re.S):
            return Verification.failed(error=f"missing <{tag}>...</{tag}>")
    for tag in single_tags or []:
        if len(re.findall(rf"<{re.escape(tag)}>", completion, re.I)) > 1:
            return Verification.failed(error=f"<{tag}> appears more than once")
    if pattern is not None and not re.search(pattern, completion, re.S):
        return Verification.failed(error=f"pattern {pattern!r} not found")
    for text in forbidden or []:
        if text in completion:
            return Verification.failed(error=f"forbidden text {text!r} present")
    return Verification.passed()


def length_check(
    completion: str,
    task: Task,
    *,
    min_chars: int | None = None,
    max_chars: int | None = None,
    min_words: int | None = None,
    max_words: int | None = None,
    max_lines: int | None = None,
) -> Verification:
    """Fail when the completion is shorter or longer than the bounds given."""
    counts = {
        "chars": len(completion),
        "words": len(completion.split()),
        "lines": len(completion.splitlines()),
    }
    bounds = [
        ("chars", min_chars, max_chars),
        ("words", min_words, max_words),
        ("lines", None, max_lines),
    ]
    for unit, low, high in bounds:
        if low is not None and counts[unit] < low:
            return Verification.failed(error=f"{counts[unit]} {unit} < min_{unit} {low}", found=counts)
        if high is not None and counts[unit] > high:
            return Verification.failed(error=f"{counts[unit]} {unit} > max_{unit} {high}", found=counts)
    return Verification.passed(found=counts)
