"""Answer extraction: the one final answer of a completion (a ``\\boxed{}``, an ``<answer>`` tag or
the final line).

The ``extract`` stage replaces the completion seen by later stages of a cascade with what it
extracted. Every answer container counts, not the last one: a completion whose boxes and tags
hold more than one distinct answer fails (``\\boxed{wrong} or \\boxed{gold}`` is a hedge, not
the gold), and so does an answer that states more values than the task's gold (``X or Y``,
``X, Y``, one value per line; see :func:`trainer.verifiers.answers.hedge_reason`). The final
line is used only when there is no container. Nothing found, or an empty container, is a
``parse_error``.

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
>>> v = extract_answer(r"\\boxed{1} no wait \\boxed{\\frac{1}{2}}", Task("d", "1", "q", answer="\\\\frac{1}{2}"))
>>> v.outcome.value, v.details["error"]
('fail', 'several different answers: 1 | \\\\frac{1}{2}')
>>> extract_answer("<answer>Paris or London</answer>", Task("d", "1", "q", answer="Paris")).details["error"]
"hedged answer: 'or' joins several values (the gold has none)"
"""
from __future__ import annotations

from typing import Any

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.answers import METHODS, answer_containers, boxed_spans, final_answers, final_line, one_final_answer, tag_spans

__all__ = ["METHODS", "answer_tag", "extract", "extract_answer", "final_line", "last_boxed"]


def last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` (or ``\\fbox{...}``), with nested braces balanced."""
    spans = boxed_spans(text)
    return spans[-1][2] if spans else None


def answer_tag(text: str, tag: str = "answer") -> str | None:
    """Contents of the last ``<tag>...</tag>`` pair (case-insensitive)."""
    spans = tag_spans(text, tag)
    return spans[-1][2] if spans else None


def extract(text: str, methods: list[str] | tuple[str, ...] = METHODS, tag: str = "answer") -> tuple[str, str] | None:
    """``(method, value)`` of the last answer container (or the final line), else None.

    This is where an answer is, not whether it is the only one: stages use
    :func:`trainer.verifiers.answers.one_final_answer`.
    """
    containers = answer_containers(text, tuple(m for m in methods if m != "final_line"), tag)
    if containers:
        return containers[-1]
    found = final_answers(text, tuple(methods), tag)
    return ("final_line", found[-1]) if found else None


def _scalar_gold(task: Task) -> Any:
    """The gold a hedge is measured against: a scalar or a string, else None."""
    answer = task.answer
    return answer if isinstance(answer, (str, int, float)) and not isinstance(answer, bool) else None


def extract_answer(
    completion: str, task: Task, *, methods: list[str] | None = None, tag: str = "answer", **_: Any
) -> Verification:
    """Stage ``extract``: pass with ``details.extracted`` (the one final answer); ``parse_error``
    when there is none or it is empty; ``fail`` when the completion gives several different
    answers or hedges (``details.error`` says which)."""
    methods = list(methods or METHODS)
    answer, why = one_final_answer(completion, tuple(methods), tag, gold=_scalar_gold(task))
    if answer is None:
        outcome = Outcome.PARSE_ERROR if why in ("no answer found", "empty answer") else Outcome.FAIL
        return Verification.failed(outcome, error=why, methods=methods, found=completion[-200:])
    method = "final_line"
    containers = answer_containers(completion, tuple(m for m in methods if m != "final_line"), tag)
    if containers:
        method = containers[-1][0]
    return Verification.passed(extracted=answer, method=method)
