"""Answer extraction: the last ``\\boxed{}``, an ``<answer>`` tag, or the final line.

The ``extract`` stage replaces the completion seen by later stages of a cascade with what it
extracted; when nothing can be extracted it is a ``parse_error``.

>>> last_boxed(r"so \\boxed{1} no wait \\boxed{\\frac{1}{2}}")
'\\\\frac{1}{2}'
>>> answer_tag("<think>hm</think><answer> 42 </answer>")
'42'
>>> final_line("Let me think.\\nFinal answer: 7\\n\\n")
'7'
>>> from trainer.tasks.base import Task
>>> extract_answer("I think <answer>B</answer>", Task("d", "1", "q")).details["extracted"]
'B'
>>> extract_answer("no answer here", Task("d", "1", "q"), methods=["boxed"]).outcome.value
'parse_error'
"""
from __future__ import annotations

import re
from typing import Any

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task

METHODS = ("boxed", "answer_tag", "final_line")
_FINAL_PREFIX = re.compile(r"^(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*[:=]?\s*", re.I)


def last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``), with nested braces balanced."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, j = 1, i
    while j < len(text):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j].strip()
        j += 1
    return None


def answer_tag(text: str, tag: str = "answer") -> str | None:
    """Contents of the last ``<tag>...</tag>`` pair (case-insensitive)."""
    found = re.findall(rf"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, re.S | re.I)
    return found[-1].strip() if found else None


def final_line(text: str) -> str | None:
    """The last non-empty line, without a leading "Final answer:"-style prefix."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return None
    return _FINAL_PREFIX.sub("", lines[-1]).strip() or None


def extract(text: str, methods: list[str] | tuple[str, ...] = METHODS, tag: str = "answer") -> tuple[str, str] | None:
    """``(method, value)`` from the first method that finds something, else None."""
    for method in methods:
        if method == "boxed":
            value = last_boxed(text)
        elif method == "answer_tag":
            value = answer_tag(text, tag)
        elif method == "final_line":
            value = final_line(text)
        else:
            raise ValueError(f"unknown extraction method {method!r}")
        if value is not None:
            return method, value
    return None


def extract_answer(
    completion: str, task: Task, *, methods: list[str] | None = None, tag: str = "answer", **_: Any
) -> Verification:
    """Stage ``extract``: pass with ``details.extracted``, or ``parse_error`` when nothing is found."""
    found = extract(completion, tuple(methods or METHODS), tag)
    if found is None:
        return Verification.failed(Outcome.PARSE_ERROR, error="no answer found", methods=list(methods or METHODS))
    method, value = found
    return Verification.passed(extracted=value, method=method)
