"""Multiple choice: a letter or the text of one option.

>>> from trainer.tasks.base import Task
>>> t = Task("d", "1", "2+2?", answer="B", meta={"choices": ["3", "4", "5"]})
>>> [multiple_choice(c, t).outcome.value for c in ["B", "(b)", "Answer: B.", "4", "A", "A or B"]]
['pass', 'pass', 'pass', 'pass', 'fail', 'parse_error']

Every option at once, a negated option and an empty answer are no choice:

>>> [multiple_choice(c, t).outcome.value for c in ["A, B, C", "A/B/C", "not A", "B, not A", "", "3 4 5"]]
['parse_error', 'parse_error', 'parse_error', 'parse_error', 'parse_error', 'parse_error']
"""
from __future__ import annotations

import re
import string
from typing import Any

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.normalize import normalize_text

_LETTER = re.compile(r"(?<![A-Za-z])\(?([A-Za-z])[).:]?(?![A-Za-z])")
_NEGATION = re.compile(r"\b(?:not|isn't|is not|except|never|nor)\b", re.I)
_PREFIX = re.compile(r"^(?:the\s+)?(?:final\s+)?(?:answer|option|choice)\s*(?:is)?\s*[:=]?\s*", re.I)


def choice_letter(text: str, choices: list[str]) -> str | None | bool:
    """The chosen letter (upper case); None when none is found; False when several are named
    (or one is named with a negation: "not A" chooses nothing)."""
    letters = string.ascii_uppercase[: len(choices)] if choices else string.ascii_uppercase
    body = _PREFIX.sub("", text.strip()).strip()
    norm = normalize_text(body, strip_punctuation=True)
    for i, option in enumerate(choices):
        if norm and norm == normalize_text(option, strip_punctuation=True):
            return letters[i]
    found = {m.upper() for m in _LETTER.findall(body) if m.upper() in letters}
    if len(found) > 1 or (found and _NEGATION.search(body)):
        return False
    return found.pop() if found else None


def multiple_choice(
    completion: str, task: Task, *, expected: Any = None, choices: list[str] | None = None
) -> Verification:
    """Pass when the completion names the expected option (by letter or by its text)."""
    choices = list(choices if choices is not None else task.meta.get("choices", []))
    target = str(task.answer if expected is None else expected).strip()
    if len(target) != 1 and target in choices:
        target = string.ascii_uppercase[choices.index(target)]
    target = target.upper()
    found = choice_letter(completion, choices)
    if found is False:
        return Verification.failed(Outcome.PARSE_ERROR, error="several options named, or one negated", found=completion[:200])
    if found is None:
        return Verification.failed(Outcome.PARSE_ERROR, error="no option named", found=completion[:200])
    if found == target:
        return Verification.passed(expected=target, found=found)
    return Verification.failed(expected=target, found=found)
