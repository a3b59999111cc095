"""Multi-turn episodes: an environment answers each model turn until the episode is done.

An :class:`Environment` keeps its state across turns. ``reset(task)`` gives the first
observation (the prompt); ``step(action)`` takes the model's turn text and returns the next
observation, whether the episode is done and, when done, its :class:`Verification`. The tokens of
environment observations are appended to the trajectory with loss mask 0.

:class:`RetryEnv` is the example: it wraps any single-turn verifier and lets the model try again
after a wrong answer, telling it what was wrong.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task


@dataclass
class StepResult:
    """What the environment says after one model turn."""

    observation: str
    """Text appended after the model's turn (masked out of the loss); empty when done."""
    done: bool
    """True when the episode is over."""
    outcome: Verification | None = None
    """The episode's verification once done (None while running)."""


class Environment(Protocol):
    """State kept across the turns of one episode."""

    def reset(self, task: Task) -> str:
        """Start an episode; returns the first observation (the prompt text)."""
        ...

    def step(self, action: str) -> StepResult:
        """Take the model's turn text; return the next observation."""
        ...


class RetryEnv:
    """Feedback environment: a wrong answer is told "no" and the model may try again.

    >>> from trainer.tasks.builtin import ADDITION, verify_exact
    >>> env = RetryEnv(verify_exact)
    >>> env.reset(ADDITION.make(2, 3))
    '2+3='
    >>> r = env.step("6"); (r.observation, r.done)
    (' no. 2+3=', False)
    >>> r = env.step("5"); (r.done, r.outcome.outcome.value, r.outcome.details["turns"])
    (True, 'pass', 2)
    """

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
