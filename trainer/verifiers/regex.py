"""Regular-expression match, anchored and literal by default.

Safe defaults for domains uploaded by users: the completion (already reduced to its final
answer by an ``extract`` stage, or the whole text stripped) must *fullmatch* the pattern. A
pattern taken from the task's answer is escaped, so it is a literal (``4.2`` does not match
``432``, and ``42`` does not match ``420``). Searching anywhere (``mode="search"``) is for a
domain's own pattern only (the ``pattern`` param or ``task.meta["pattern"]``), and even then the
pattern must find one distinct match: ``2024-01-31 or 2024-02-01`` states two dates.

>>> from trainer.tasks.base import Task
>>> t = Task("d", "1", "Give a date", meta={"pattern": r"\\d{4}-\\d{2}-\\d{2}"})
>>> regex_match("It is 2024-01-31.", t, mode="search").outcome.value
'pass'
>>> regex_match("It is 2024-01-31.", t).outcome.value
'fail'
>>> regex_match("2024-01-31 or 2024-02-01", t, mode="search").details["error"]
'the pattern matches 2 different texts'
>>> regex_match("ABC", t, pattern="abc", flags="i").outcome.value
'pass'
>>> a = Task("d", "1", "q", answer="42")
>>> [regex_match(c, a).outcome.value for c in ["42", " 42\\n", "420", "the answer is 42", "4.2"]]
['pass', 'pass', 'fail', 'fail', 'fail']
>>> regex_match("not Paris but London", Task("d", "1", "q", answer="Paris"), mode="search").outcome.value
'fail'
"""
from __future__ import annotations

import re

from trainer.outcomes import Verification
from trainer.tasks.base import Task

_FLAGS = {"i": re.I, "m": re.M, "s": re.S, "x": re.X}
MODES = ("fullmatch", "search")


def compile_pattern(pattern: str, flags: str = "") -> re.Pattern[str]:
    """Compile with letter flags (``i``, ``m``, ``s``, ``x``); ValueError names a bad flag."""
    value = 0
    for letter in flags:
        if letter not in _FLAGS:
            raise ValueError(f"unknown regex flag {letter!r}")
        value |= _FLAGS[letter]
    return re.compile(pattern, value)


def regex_match(
    completion: str, task: Task, *, pattern: str | None = None, flags: str = "", mode: str = "fullmatch"
) -> Verification:
    """Pass when the pattern (the ``pattern`` param, else ``task.meta['pattern']``, else the escaped
    ``task.answer``) fullmatches the stripped completion; ``search`` finds it anywhere, once, and
    applies only to a domain's own pattern (an answer-derived literal is always fullmatched)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    own = pattern if pattern is not None else task.meta.get("pattern")
    if own is None:
        if task.answer is None:
            raise ValueError("no pattern: give the pattern param, task.meta['pattern'] or an answer")
        source, mode = re.escape(str(task.answer).strip()), "fullmatch"
    else:
        source = str(own)
    compiled = compile_pattern(source, flags)
    text = completion.strip()
    if mode == "fullmatch":
        match = compiled.fullmatch(text)
        if match:
            return Verification.passed(expected=source, found=match.group(0))
        return Verification.failed(expected=source, found=text[:200])
    found = list(dict.fromkeys(m.group(0) for m in compiled.finditer(completion) if m.group(0)))
    if len(found) > 1:
        return Verification.failed(error=f"the pattern matches {len(found)} different texts", expected=source, found=found[:5])
    if found:
        return Verification.passed(expected=source, found=found[0])
    return Verification.failed(expected=source, found=completion[:200])
