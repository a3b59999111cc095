"""Exact match after normalisation.

>>> from trainer.tasks.base import Task
>>> t = Task("d", "1", "Capital of France?", answer="Paris")
>>> exact_match("  paris ", t).outcome.value
'pass'
>>> exact_match("Paris!", t, strip_punctuation=True).outcome.value
'pass'
>>> exact_match("London", t).details["found"]
'london'
>>> exact_match("Paris", t, case_sensitive=True, expected=["paris", "PARIS"]).outcome.value
'fail'
>>> [exact_match(c, t).outcome.value for c in ["", "Paris or London", "Paris, London", "not Paris"]]
['parse_error', 'fail', 'fail', 'fail']

``literal``: the completion stripped of surrounding whitespace must be the answer character for
character: no case folding, no Unicode compatibility forms (a ligature "ﬁ" is not "fi", fullwidth
"ａ" is not "a"), no collapsed inner whitespace. The built-in domains verify this way, so that the
trainer's in-process check and the platform's stage agree on every completion.

>>> s = Task("d", "dba", "sort(dba)=", answer="abd")
>>> [exact_match(c, s, literal=True).outcome.value for c in [" abd ", "ABD", "ａｂｄ", "a bd", "abd or adb"]]
['pass', 'fail', 'fail', 'fail', 'fail']
>>> exact_match("ﬁ", Task("d", "if", "sort(if)=", answer="fi"), literal=True).outcome.value
'fail'
"""
from __future__ import annotations

from typing import Any

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.normalize import normalize_text


def expected_values(task: Task, expected: Any = None) -> list[Any]:
    """The accepted answers: the ``expected`` param, else ``task.answer``, as a list."""
    value = task.answer if expected is None else expected
    return list(value) if isinstance(value, (list, tuple)) else [value]


def exact_match(
    completion: str,
    task: Task,
    *,
    expected: Any = None,
    case_sensitive: bool = False,
    strip_punctuation: bool = False,
    literal: bool = False,
) -> Verification:
    """Pass when the normalised completion equals one normalised accepted answer (with
    ``literal``, only surrounding whitespace is stripped); an empty answer is a ``parse_error``
    whatever the gold."""
    if literal:
        norm = lambda s: str(s).strip()  # noqa: E731
    else:
        norm = lambda s: normalize_text(str(s), case_sensitive=case_sensitive, strip_punctuation=strip_punctuation)  # noqa: E731
    found = norm(completion)
    if not found:
        return Verification.failed(Outcome.PARSE_ERROR, error="empty answer")
    accepted = [norm(v) for v in expected_values(task, expected)]
    if found in accepted:
        return Verification.passed(expected=accepted, found=found)
    return Verification.failed(expected=accepted, found=found)
