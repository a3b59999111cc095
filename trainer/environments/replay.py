"""Replay a whole tool-use transcript through its environment; reward from the final state.

In a multi-turn rollout the environment verifies the episode itself; this stage verifies a
single completion that lists the tool calls (one JSON object per line), so tool-use domains also
work with single-turn rollouts, SFT data and the cascade.

>>> from trainer.tasks.base import Task
>>> task = Task("t", "1", "...", meta={"environment": "calculator_kv", "initial_store": {"a": 2},
...             "targets": {"double": 4}})
>>> environment_replay('{"tool": "get", "key": "a"}\\n{"tool": "set", "key": "double", "value": 4}\\n{"tool": "submit"}', task).outcome.value
'pass'
>>> environment_replay("I give up", task).outcome.value
'parse_error'
"""
from __future__ import annotations

from typing import Any

from trainer.environments import ENVIRONMENTS, make_environment, split_actions
from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task


def environment_replay(completion: str, task: Task, *, env: str | None = None, max_steps: int | None = None) -> Verification:
    """Run each tool call in order; the verification is the environment's at the end."""
    actions = split_actions(completion)
    if not actions:
        return Verification.failed(Outcome.PARSE_ERROR, error="no tool calls in the completion")
    environment = make_environment(env or task.meta["environment"])
    environment.reset(task)
    if max_steps is not None:
        environment.max_steps = max_steps
    transcript = []
    for action in actions:
        result = environment.step(action)
        transcript.append(result.observation[:200])
        if result.done:
            verification = result.outcome
            break
    else:
        verification = environment.evaluate()
    if verification is None:  # an environment that submits (a repository) leaves its verdict to its own stage
        return Verification.failed(error=f"the {environment.name} environment's verdict comes from its domain's stage "
                                         "(repo_tests), not from a replay")
    return Verification(verification.outcome, verification.score, {**verification.details, "observations": transcript[-5:]})


def params_errors(params: dict[str, Any], where: str) -> list[tuple[str, str]]:
    """The ``environment`` stage's params beyond its schema: ``env`` must name a registered
    environment (the stage registry checks it here: the verifiers do not import the environments)."""
    env = params.get("env")
    if env is not None and env not in ENVIRONMENTS:
        return [(f"{where}.env", f"unknown environment {env!r}; known: {', '.join(sorted(ENVIRONMENTS))}")]
    return []
