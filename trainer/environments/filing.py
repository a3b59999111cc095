"""Read a long annual report through tools and answer one question about it (``filing-*``).

The report (:mod:`trainer.tasks.filings`) is rebuilt from the task's seed and level. Tools:
``toc``, ``read`` {section, start, lines} (at most 60 lines and 6,000 characters a call),
``search`` {query} (the lines containing it, with their section and line number), ``calc``
{expression} (arithmetic only) and ``answer`` {value}: the one final answer, which ends the
episode. The verdict compares that value with the gold at the question's tolerance
(:func:`trainer.verifiers.numeric.numeric_match`): a value that is not one finite number (a list,
``"12 or 13"``, NaN) fails, and a ``submit`` or a run out of steps without an answer fails.

>>> from trainer.tasks.base import Task
>>> task = Task("filing-eps", "1", "...", meta={"environment": "filing", "seed": 7, "level": 0, "gold": 1.25,
...             "abs_tol": 0.005})
>>> env = FilingEnv(); _ = env.reset(task)
>>> env.step('{"tool": "search", "query": "stock split"}').observation.splitlines()[0][:40]
'note-4:8: Share amounts in this note are'
>>> env.step('{"tool": "calc", "expression": "5 / 4"}').observation
'1.25'
>>> env.step('{"tool": "answer", "value": 1.254}').outcome.outcome.value
'pass'
>>> _ = env.reset(task); env.step('{"tool": "answer", "value": [1.0, 1.25]}').outcome.outcome.value
'fail'
"""
from __future__ import annotations

import json
import math
from typing import Any

from trainer.environments.base import ActionError, StepResult, ToolEnvironment
from trainer.environments.calculator_kv import safe_eval
from trainer.outcomes import Verification
from trainer.tasks.base import Task
from trainer.tasks.filings import filing, line_cites
from trainer.verifiers.numeric import numeric_match

MAX_LINES = 60
MAX_CHARS = 6_000


def _value_text(value: Any) -> str | None:
    """The answer as text for the numeric check: a number or a string; anything else is None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return repr(value) if not (isinstance(value, float) and not math.isfinite(value)) else "nan"
    if isinstance(value, str):
        return value
    return None


class FilingEnv(ToolEnvironment):
    """One episode: the report, the answer given (if any) and the step budget."""

    name = "filing"

    def _start(self, task: Task) -> None:
        self.doc = filing(int(task.meta["seed"]), int(task.meta["level"]))
        self.answer: Any = None
        self.answered = False

    def _tool(self, call: dict[str, Any]) -> str:
        tool = call["tool"]
        if tool == "toc":
            return self.doc.toc()
        if tool == "read":
            ids = [s.id for s in self.doc.sections]
            if call.get("section") not in ids:
                raise ActionError(f"unknown section {str(call.get('section'))[:60]!r}; sections: {', '.join(ids)}")
            lines = self.doc.section(call["section"]).lines
            try:
                start = max(int(call.get("start", 1)), 1)
                count = min(max(int(call.get("lines", MAX_LINES)), 1), MAX_LINES)
            except (TypeError, ValueError, OverflowError):
                raise ActionError("start and lines must be whole numbers") from None
            out, size = [], 0
            for number in range(start, min(start + count, len(lines) + 1)):
                text = f"{number}: {lines[number - 1]}"
                if size + len(text) > MAX_CHARS and out:
                    break
                out.append(text[:MAX_CHARS])
                size += len(text)
            end = start + len(out) - 1
            more = f"\n(lines {start}-{end} of {len(lines)})" if out else f"(no line {start}; the section has {len(lines)})"
            return "\n".join(out) + more
        if tool == "search":
            query = str(call.get("query", ""))
            if len(query.strip()) < 3:
                raise ActionError("a query needs at least 3 characters")
            hits = line_cites(self.doc, query.strip())
            return "\n".join(hits) if hits else f"no line contains {query[:60]!r}"
        if tool == "calc":
            value = safe_eval(str(call.get("expression", "")))
            return repr(round(value, 10)) if isinstance(value, float) and not value.is_integer() else str(int(value))
        if tool == "answer":
            if "value" not in call:
                raise ActionError('answer needs a value: {"tool": "answer", "value": NUMBER}')
            self.answer, self.answered, self.done = call["value"], True, True
            return "answered"
        raise ActionError(f"unknown tool {tool!r}; tools: toc, read, search, calc, answer")

    def step(self, action: str) -> StepResult:
        result = super().step(action)
        if self.answered and not result.done:  # the answer ends the episode, whatever the budget
            return StepResult(result.observation, True, self.evaluate())
        return result

    def evaluate(self) -> Verification:
        assert self.task is not None
        if not self.answered:
            return Verification.failed(error="no answer given", steps=self.steps)
        text = _value_text(self.answer)
        if text is None:
            return Verification.failed(error=f"the answer is not one number: {json.dumps(self.answer)[:100]}")
        meta = self.task.meta
        result = numeric_match(text, self.task, expected=meta["gold"], abs_tol=float(meta.get("abs_tol", 0.0)),
                               percent=meta.get("percent"))
        return Verification(result.outcome, result.score, {**result.details, "answer": text[:100], "steps": self.steps})
