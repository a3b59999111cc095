"""The shell task families (``shell-data``, ``shell-config``, ``shell-git``) in real bubblewrap
sessions: each sampled task's reference command script, run turn by turn through the ``shell``
environment, passes the ``shell_state`` stage; its wrong script, a do-nothing episode and the
attacks below fail. Every session and check job shares the process's one warm bwrap pool."""
from __future__ import annotations

import functools
import json

import pytest

from sandbox_helpers import bwrap_ready, require
from trainer.environments.shell import ShellEnv
from trainer.families.shell.catalogue import ShellSource
from trainer.families.shell.tasks import shell_task
from trainer.families.shell.verifier import shell_state
from trainer.outcomes import Outcome
from trainer.tasks.base import Task
from trainer.verifiers.context import VerifyContext
from workers.sandbox import execute, get_runtime, open_session

# (family, seed, level): both ends of the levels, and each of git's three operations.
CASES = [("data", 11, 0), ("data", 12, 3), ("config", 0, 1), ("config", 5, 3),
         ("git", 1, 0), ("git", 0, 1), ("git", 0, 0), ("git", 3, 3), ("git", 1, 3), ("git", 4, 3)]


def context() -> VerifyContext:
    return VerifyContext(execute=execute, open_session=functools.partial(open_session, backend="bwrap"))


def make_task(family: str, seed: int, level: int) -> Task:
    prompt, answer, meta = ShellSource(f"shell-{family}", family).generate(seed, level)
    return Task(f"shell-{family}", f"L{level}-{seed}", prompt, answer, level, meta)


def episode(task: Task, commands: list[str]) -> tuple[str, object]:
    """Run ``commands`` as the episode's turns, submit, and judge the submission."""
    env = ShellEnv(context())
    env.reset(task)
    for command in commands:
        result = env.step(json.dumps({"tool": "bash", "command": command}))
        assert not result.done, result.observation
    assert env.step('{"tool": "submit"}').done
    completion = env.submission()
    return completion, shell_state(completion, task, context=context())


@pytest.mark.parametrize("family,seed,level", CASES)
def test_reference_passes_wrong_and_nothing_fail(family, seed, level):
    require(*bwrap_ready())
    task = make_task(family, seed, level)
    completion, good = episode(task, task.meta["reference_commands"])
    assert good.outcome is Outcome.PASS, (good.details, completion[:2000])
    _, bad = episode(task, task.meta["wrong_commands"])
    assert bad.outcome is Outcome.FAIL and bad.reward == 0.0, bad.details
    nothing, idle = episode(task, [])
    assert nothing == ""  # the trusted setup leaves the tree as the task's files
    assert idle.outcome is Outcome.FAIL and idle.reward == 0.0
    assert get_runtime("bwrap").stats()["held"] == 0
