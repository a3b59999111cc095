"""The shell task families (``shell-data``, ``shell-config``, ``shell-git``) in real bubblewrap
sessions: each sampled task's reference command script, run turn by turn through the ``shell``
environment, passes the ``shell_state`` stage; its wrong script, a do-nothing episode and the
attacks below fail. Every session and check job shares the process's one warm bwrap pool."""
from __future__ import annotations

import functools
import json
import shlex

import pytest

from sandbox_helpers import bwrap_ready, require
from trainer.families.shell.catalogue import ShellSource, new_environment
from trainer.families.shell.gitstate import split
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
    env = new_environment(task)
    env.bind(context())
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
    assert (split(nothing)[0] if family == "git" else nothing) == ""  # the setup leaves the tree as the task's files
    assert idle.outcome is Outcome.FAIL and idle.reward == 0.0
    assert get_runtime("bwrap").stats()["held"] == 0


def test_attacks_on_the_final_state_fail():
    """Deleting the inputs, writing a plausible output without the transformation, replacing the
    checked script, and hand-writing a merge's lists without merging: each earns 0."""
    require(*bwrap_ready())
    data = make_task("data", 11, 0)
    out = shell_task("data", 11, 0).outputs[0]
    other = shell_task("data", 99, 0)  # another seed's right answer: same format, other data
    guesses = {
        "deleted everything": ["rm -rf ./*"],
        "inputs deleted, output guessed": [f"mkdir -p out && printf %s {json.dumps(next(iter(other.expected.values())))} "
                                           f"> {out} && rm -rf data"],
        "empty output": [f"mkdir -p out && : > {out}"],
    }
    for what, commands in guesses.items():
        _, verdict = episode(data, commands)
        assert verdict.outcome is Outcome.FAIL, what

    config = make_task("config", 0, 1)  # faults: the .env line and a renamed import
    spec = shell_task("config", 0, 1)
    env_fix = spec.reference[0]
    forged = f"printf '#!/bin/sh\\necho {spec.check_stdout.strip()}\\n' > run.sh && bash run.sh"
    _, verdict = episode(config, [env_fix, forged])  # the import still broken; run.sh forged
    assert verdict.outcome is Outcome.FAIL and verdict.details["exit_code"] == 1, verdict.details
    assert verdict.details["stdout"] == ""  # the real program ran (and failed), not the forged script
    _, verdict = episode(config, [forged])  # the configuration left broken
    assert verdict.outcome is Outcome.FAIL and verdict.details["wrong_files"] == ["config/runtime.env"]

    merge = make_task("git", 1, 0)
    lists = {p: t for p, t in shell_task("git", 1, 0).expected.items() if p.startswith("lists/")}
    by_hand = [f"printf %s {shlex.quote(text)} > {path}" for path, text in lists.items()]
    _, verdict = episode(merge, by_hand)  # the lists right, but nothing merged: feature's file is missing
    assert verdict.outcome is Outcome.FAIL and [p[:5] for p in verdict.details["wrong_files"]] == ["docs/"], verdict.details


def test_each_family_has_over_50_distinct_reproducible_instances():
    for family in ("data", "config", "git"):
        source = ShellSource(f"shell-{family}", family)
        answers = {source.generate(seed, seed % 4)[1] for seed in range(60)}
        assert len(answers) == 60, family  # no two answers alike: none is a constant
        assert source.generate(7, 2) == source.generate(7, 2)
    with pytest.raises(ValueError, match="family must be one of"):
        shell_task("nope", 1, 0)
