"""Shell tasks in the Terminal-Bench manner (``shell-*`` domains): the policy works in a real
bash session in the sandbox (the ``shell`` environment, :mod:`trainer.environments.shell`) and
submits; the ``shell_state`` stage judges the final tree (:mod:`trainer.families.shell.verifier`).

A task's answer is what a perfect episode submits (:func:`submission`): the final tree trusted
code expects, as a diff from the task's files, and for a git task the reference's repository as a
git bundle; its meta carries the files, the trusted setup and the session's limits, whether the
repository is read back at the end (``git_state``), and the reference and wrong command scripts
(the tests run them in a real session).

>>> import random
>>> task = ShellSource("shell-git", "git").sample(random.Random(1), 2)
>>> task.meta["environment"], task.level, task.meta["setup"].startswith("set -e"), task.meta["git_state"]
('shell', 2, True, True)
>>> "# git bundle (" in task.answer
True
"""
from __future__ import annotations

import dataclasses
from typing import Any

from trainer.catalogue import DomainSpec
from trainer.catalogue.define import SeededSource, define_domain
from trainer.environments.shell import ShellEnv
from trainer.families.shell.gitstate import read_state, trailer
from trainer.families.shell.tasks import FAMILIES, LEVELS, ShellTask, shell_task
from trainer.tasks.base import Task
from trainer.verifiers.patches import tree_diff

FAMILY = "shell"
SESSION_LIMITS = {"command_wall_s": 20, "command_cpu_s": 20, "episode_commands": 40, "episode_wall_s": 300,
                  "memory_mb": 512, "pids": 128, "tmpfs_mb": 64}
"""Each episode's budgets (see :class:`~trainer.verifiers.limits.SessionLimits`)."""
TITLES = {
    "data": ("Shell: transform data files", "Summarise generated CSV files with standard command-line tools into "
             "the output file asked for; the output is compared with trusted code's"),
    "config": ("Shell: repair a broken configuration", "Repair the configuration faults (JSON, INI, .env, a renamed "
               "import) that make a program's run fail; the run is repeated in a fresh sandbox with its script restored"),
    "git": ("Shell: git operations", "Recover a deleted file from history, merge a branch resolving conflicts by a "
            "rule and commit the merge, or find the commit that broke a check with bisect; the working tree and "
            "the repository's commits (read back as a git bundle, checked by id in a fresh sandbox) are checked"),
}
VERIFIER_SPEC = {"stages": [{"type": "shell_state", "timeout_s": 60.0}]}


@dataclasses.dataclass
class ShellSource(SeededSource):
    """Task source of one shell family (``slug``: ``shell-<family>``)."""

    family: str
    """One of :data:`trainer.families.shell.tasks.FAMILIES`."""
    levels: int = LEVELS
    """Data: 1 to 8 files; config: 1 to 4 faults; git: 4 to 32 commits."""

    def generate(self, seed: int, level: int) -> tuple[str, str, dict[str, Any]]:
        spec = shell_task(self.family, seed, level)
        meta = {"environment": "shell", "family": self.family, "seed": seed, "level": level,
                "files": spec.files, "setup": spec.setup, "session_limits": SESSION_LIMITS,
                "git_state": bool(spec.git), "reference_commands": spec.reference, "wrong_commands": spec.wrong}
        return spec.prompt, submission(spec, spec.final()), meta


def submission(spec: ShellTask, tree: dict[str, str], bundle: bytes | None = None) -> str:
    """What an episode that leaves ``tree`` submits: the tree as a diff from the task's files, and
    for a git task the repository (``bundle``, the reference's by default)."""
    diff = tree_diff(spec.files, tree)
    return diff + trailer(spec.after if bundle is None else bundle) if spec.git else diff


def wrong_diff(task: Task) -> str:
    """A well-formed submission the verifier must not pass: each checked file with a line added."""
    spec = shell_task(str(task.meta["family"]), int(task.meta["seed"]), int(task.meta["level"]))
    return submission(spec, {**spec.final(), **{p: text + "extra\n" for p, text in spec.expected.items()}})


def new_environment(task: Any) -> ShellEnv:
    """The episode's environment: a git task's reads the repository back at the end."""
    return ShellEnv(final_state=read_state if task.meta.get("git_state") else None)


def register_all() -> list[DomainSpec]:
    specs = []
    for family in FAMILIES:
        title, description = TITLES[family]
        specs.append(define_domain(
            ShellSource(f"shell-{family}", family), VERIFIER_SPEC, title=title, kind="code", family=FAMILY,
            description=f"{description}. Multi-turn, in a persistent bash session in the sandbox.",
            task_source_spec={"family": FAMILY, "shell_family": family, "levels": LEVELS, "multi_turn": True,
                              "environment": "shell"},
            environment=new_environment,
        ))
    return specs
