"""Hostile completions for the ``shell_state`` stage: each is a failure the candidate earns (never
a pass, never a masked infrastructure outcome)."""
from __future__ import annotations

import collections
import functools
import json
import re
import shlex

import pytest

from trainer.environments.shell import ShellEnv
from trainer.families.shell.catalogue import ShellSource
from trainer.families.shell.tasks import shell_task
from trainer.families.shell.verifier import shell_state, spec_of
from trainer.outcomes import Outcome
from trainer.tasks.base import Task
from trainer.verifiers.context import VerifyContext
from trainer.verifiers.patches import apply_patch, tree_diff
from sandbox_helpers import bwrap_ready, require
from workers.sandbox import execute, open_session


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


def bwrap_context() -> VerifyContext:
    return VerifyContext(execute=functools.partial(execute, backend="bwrap"))


def bwrap_session_context() -> VerifyContext:
    return VerifyContext(execute=functools.partial(execute, backend="bwrap"),
                         open_session=functools.partial(open_session, backend="bwrap"))


def test_a_program_that_prints_the_digest_without_reading_the_configuration_fails():
    """The configuration fixed, then app/main.py replaced by one line printing ``OK <digest>`` (the
    digest of the task's values, which a candidate can compute from the tree): the first run
    passes, the rerun on other values does not. The reference still passes both."""
    require(*bwrap_ready())
    task = make_task("config", 5, 3)
    spec = spec_of(task)
    assert shell_state(tree_diff(spec.files, spec.final()), task, context=bwrap_context()).outcome is Outcome.PASS
    forged = {**spec.final(), "app/main.py": f"print({spec.check_stdout.strip()!r})\n"}
    verdict = shell_state(tree_diff(spec.files, forged), task, context=bwrap_context())
    assert verdict.outcome is Outcome.FAIL and verdict.reward == 0.0, verdict.details
    assert "other values" in verdict.details["probe"] and verdict.details["stdout"] == spec.check_stdout


def test_no_position_in_the_history_is_a_good_guess_for_the_first_bad_commit():
    """A candidate that skips the bisection and writes the subject of a fixed commit (say the last
    one) wins as often as that position is the first bad one. Over 600 seeds per level, no
    position is right more than 1 time in 5 (it was 1 in 2 at level 0: HEAD or HEAD~1)."""
    for level in range(4):
        positions: collections.Counter = collections.Counter()
        for seed in range(600):
            spec = shell_task("git", seed, level)
            if "FIRST_BAD" in spec.expected:
                subjects = re.findall(r"git commit -q -m '([^']*)'", spec.setup)
                positions[len(subjects) - subjects.index(spec.expected["FIRST_BAD"].strip())] += 1
        assert positions and max(positions.values()) / sum(positions.values()) < 0.2, (level, positions.most_common(3))


@pytest.mark.parametrize("nested", [False, True])
def test_a_json_file_that_only_compares_equal_or_breaks_the_parser_fails(nested):
    """``"debug": 0`` and ``"port": 8080.0`` compare equal to ``false`` and ``8080`` in Python
    (they passed); JSON nested past the parser's depth raised RecursionError out of the stage."""
    task = make_task("config", 5, 3)
    spec = spec_of(task)
    good = spec.final()["config/app.json"]
    port = json.loads(good)["port"]
    text = good.replace("false", "0").replace(f'"port": {port}', f'"port": {port}.0')
    assert json.loads(text) == json.loads(good) and text != good
    if nested:
        text = "[" * 150_000 + "]" * 150_000 + "\n"
    final = {**spec.final(), "config/app.json": text}
    verdict = shell_state(tree_diff(spec.files, final), task, context=bwrap_context())
    assert verdict.outcome is Outcome.FAIL and verdict.details["wrong_files"] == ["config/app.json"], verdict.details


def test_a_file_name_cannot_write_the_diffs_headers():
    """A file's name went into the submission's headers as it was: a newline let it write its own
    ``---``/``+++``/``@@`` lines, a tab cut it (``t\tu`` was judged as a file ``t``), and a name
    that is not UTF-8 became a lone surrogate. The verifier must judge the tree trusted code read:
    such names are left out, and the rest of the tree is judged."""
    require(*bwrap_ready())
    task = make_task("data", 11, 0)
    spec = spec_of(task)
    out, want = next(iter(spec.expected.items()))
    body = "".join("+" + line for line in want.splitlines(keepends=True))
    header = f"x\n--- /dev/null\n+++ b/{out}\n@@ -0,0 +1,{len(want.splitlines())} @@\n{body}"
    env = ShellEnv(bwrap_session_context())
    env.reset(task)
    command = f"printf '' > {shlex.quote(header)}; printf 'a\\tb' > $'t\\tu'; touch $'\\xff'; echo kept > kept.txt"
    assert not env.step(json.dumps({"tool": "bash", "command": command})).done
    assert env.step('{"tool": "submit"}').done
    completion = env.submission()
    assert apply_patch(spec.files, completion) == {**spec.files, "kept.txt": "kept\n"}
    assert shell_state(completion, task, context=bwrap_context()).outcome is Outcome.FAIL
