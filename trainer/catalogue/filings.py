"""Long annual reports read through tools (``filing-*`` domains): one question a task that needs
several far-apart facts and a computation (:mod:`trainer.tasks.filings`, the environment
:mod:`trainer.environments.filing`).

Levels are the report's length: about 4,000, 10,000, 25,000 and 50,000 tokens. A task's prompt
is the table of contents and the question; the report itself is read with the tools, so a model
whose context is shorter than the report can still answer. A task's answer is a reference
transcript (searches and reads of the sections that hold the facts, the computation, the answer),
which the ``environment`` stage replays (single-turn rollouts, SFT, the verifier audit).

>>> import random
>>> task = FilingSource("filing-eps", "eps").sample(random.Random(3), 1)
>>> task.meta["environment"], task.meta["level"], "Question:" in task.prompt
('filing', 1, True)
>>> from trainer.environments.replay import environment_replay
>>> environment_replay(task.answer, task).outcome.value
'pass'
"""
from __future__ import annotations

import dataclasses
import functools
import json
import random
from typing import Any

from trainer.catalogue import DomainSpec
from trainer.catalogue.define import SeededSource, define_domain
from trainer.environments import make_environment
from trainer.tasks.base import Task
from trainer.tasks.filings import LEVELS, QUESTIONS, NoQuestion, filing, prompt

FAMILY = "filings"
MAX_STEPS = 30


def _call(**kwargs: Any) -> str:
    return json.dumps(kwargs)


@dataclasses.dataclass
class FilingSource(SeededSource):
    """Task source for one question kind over generated annual reports (``slug``: ``filing-<kind>``)."""

    kind: str
    """Key of :data:`trainer.tasks.filings.QUESTIONS`."""
    levels: int = LEVELS
    """The report's length: level 0 about 4,000 tokens (three fiscal years) up to level 3, about 50,000."""
    redraw = (NoQuestion,)  # a report that cannot carry the question (rare) gives way to the next one

    def generate(self, seed: int, level: int) -> tuple[str, str, dict[str, Any]]:
        """The table of contents and the question, a reference transcript (reads, calc, answer) and the gold."""
        _, make, tolerance = QUESTIONS[self.kind]
        doc = filing(seed, level)
        question, gold, extra, reads = make(doc, random.Random(seed ^ 0x5EED))
        actions = [_call(tool="toc")]
        for tool, arg in reads:
            actions.append(_call(tool="search", query=arg) if tool == "search"
                           else _call(tool="read", section=arg, start=1, lines=60))
        actions += [_call(tool="calc", expression=extra["expression"]), _call(tool="answer", value=gold)]
        meta = {"environment": "filing", "seed": seed, "level": level, "question": self.kind, "gold": gold,
                "abs_tol": tolerance, "max_steps": MAX_STEPS}
        if "percent" in extra:
            meta["percent"] = extra["percent"]
        return prompt(doc, question), "\n".join(actions), meta


def _new_environment(task: Task):
    return make_environment("filing")


def register_all() -> list[DomainSpec]:
    specs = []
    for kind, (title, _, tolerance) in QUESTIONS.items():
        vspec = {"stages": [{"type": "environment", "params": {"max_steps": MAX_STEPS}, "timeout_s": 10.0}]}
        specs.append(define_domain(
            FilingSource(f"filing-{kind}", kind), vspec,
            title=f"Annual reports: {title}",
            kind="document",
            family=FAMILY,
            description=(f"{title}, from a generated annual report of 4,000 to 50,000 tokens (the level) read through "
                         "tools (table of contents, read, search, calc); one final answer, "
                         + ("exact." if not tolerance else "within half a unit of the second decimal.")),
            task_source_spec={"family": FAMILY, "question": kind, "levels": LEVELS, "multi_turn": True,
                              "environment": "filing"},
            environment=functools.partial(_new_environment),
        ))
    return specs
