"""Regular-expression match.

>>> from trainer.tasks.base import Task
>>> t = Task("d", "1", "Give a date", meta={"pattern": r"\\d{4}-\\d{2}-\\d{2}"})
>>> regex_match("It is 2024-01-31.", t).outcome.value
'pass'
>>> regex_match("It is 2024-01-31.", t, mode="fullmatch").outcome.value
'fail'
>>> regex_match("ABC", t, pattern="abc", flags="i").outcome.value
'pass'
"""
from __future__ import annotations

import re

from trainer.outcomes import Verification
from trainer.tasks.base import Task

_FLAGS = {"i": re.I, "m": re.M, "s": re.S, "x": re.X}


def compile_pattern(pattern: str, flags: str = "") -> re.Pattern[str]:
    """Compile with letter flags (``i``, ``m``, ``s``, ``x``); ValueError names a bad flag."""
    value = 0
    for letter in flags:
        if letter not in _FLAGS:
            raise ValueError(f"unknown regex flag {letter!r}")
        value |= _FLAGS[letter]
    return re.compile(pattern, value)


def regex_match(
    completion: str, task: Task, *, pattern: str | None = None, flags: str = "", mode: str = "search"
) -> Verification:
    """Pass when ``pattern`` (or ``task.meta['pattern']``) matches: ``search`` anywhere or ``fullmatch``."""
    pattern = pattern if pattern is not None else task.meta.get("pattern", task.answer)
    compiled = compile_pattern(str(pattern), flags)
    text = completion.strip() if mode == "fullmatch" else completion
    match = compiled.fullmatch(text) if mode == "fullmatch" else compiled.search(text)
    if match:
        return Verification.passed(expected=pattern, found=match.group(0))
    return Verification.failed(expected=pattern, found=completion[:200])
