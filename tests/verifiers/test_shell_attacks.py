"""Hostile completions for the ``shell_state`` stage: each is a failure the candidate earns (never
a pass, never a masked infrastructure outcome)."""
from __future__ import annotations

import functools

import pytest

from trainer.families.shell.catalogue import ShellSource
from trainer.families.shell.verifier import shell_state, spec_of
from trainer.outcomes import Outcome
from trainer.tasks.base import Task
from trainer.verifiers.context import VerifyContext
from trainer.verifiers.patches import tree_diff
from workers.sandbox import execute


def make_task(family: str, seed: int, level: int) -> Task:
    prompt, answer, meta = ShellSource(f"shell-{family}", family).generate(seed, level)
    return Task(f"shell-{family}", f"L{level}-{seed}", prompt, answer, level, meta)


@pytest.mark.parametrize("name", ["../evil", "/etc/evil", "config/../run.sh", "./run.sh", "a//b"])
def test_a_path_outside_the_tree_is_the_candidates_parse_error_not_a_masked_sandbox_error(name):
    task = make_task("config", 0, 1)
    spec = spec_of(task)
    final = {**spec.final(), name: "echo hi\n"}
    verdict = shell_state(tree_diff(spec.files, final), task,
                          context=VerifyContext(execute=functools.partial(execute, backend="bwrap")))
    assert verdict.outcome is Outcome.PARSE_ERROR, verdict.details
    assert "inside the tree" in verdict.details["error"] and verdict.reward == 0.0
