"""A feedback environment around any single-turn verifier: the model may try again after a
wrong answer, told what was wrong.

>>> from trainer.catalogue.builtin import ADDITION, verify_exact
>>> env = RetryEnv(verify_exact)
>>> env.reset(ADDITION.make(2, 3))
'2+3='
>>> r = env.step("6"); (r.observation, r.done)
(' no. 2+3=', False)
>>> r = env.step("5"); (r.done, r.outcome.outcome.value, r.outcome.details["turns"])
(True, 'pass', 2)
"""
from __future__ import annotations

from typing import Callable

from trainer.environments.base import StepResult
from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task


class RetryEnv:
    """A wrong answer is told "no" and the prompt repeated, up to ``max_tries`` turns."""

    def __init__(self, verify: Callable[[str, Task], Verification], max_tries: int = 3):
        self.verify = verify
        self.max_tries = max_tries
        self.task: Task | None = None
        self.tries = 0

    def reset(self, task: Task) -> str:
        self.task, self.tries = task, 0
        return task.prompt

    def step(self, action: str) -> StepResult:
        assert self.task is not None, "step() before reset()"
        self.tries += 1
        result = self.verify(action, self.task)
        if result.outcome is Outcome.PASS or self.tries >= self.max_tries:
            return StepResult("", True, Verification(result.outcome, result.score,
                                                     {**result.details, "turns": self.tries}))
        return StepResult(f" no. {self.task.prompt}", False)
