"""Software-engineering tasks in a small Python repository (``swe-*`` domains): find and fix
planted bugs, implement functions from their docstrings, rename or move functions without
breaking anything (:mod:`trainer.families.swe.repos`, the environment :mod:`trainer.families.swe.environment`).

The policy works over several turns through tools (list, read, search, replace, write, apply a
patch, run the tests in a sandbox, git status/diff/commit/log) and submits; the verdict is the
``repo_tests`` stage's: the final diff applied to the starting tree and the hidden tests run on it
in a fresh sandbox (:mod:`trainer.families.swe.verifier`). Levels are the difficulty: the package's size,
how precisely the task names the place, and one or two changes to make. A task's answer is a
reference transcript, which the stage also accepts (single-turn rollouts, SFT, the audit).

>>> import random
>>> task = RepoSource("swe-refactor", "refactor").sample(random.Random(1), 2)
>>> task.meta["environment"], task.level, "Refactor" in task.prompt
('repo', 2, True)
"""
from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

from trainer.catalogue import DomainSpec
from trainer.catalogue.define import SeededSource, define_domain
from trainer.families.swe.environment import RepoEnv
from trainer.families.swe.repos import FAMILIES, LEVELS, prompt, reference_transcript, repo_task
from trainer.tasks.base import Task

FAMILY = "repos"
MAX_STEPS = 30
TITLES = {
    "bugfix": ("Repository: fix a reported bug", "Find and fix the planted bug(s) an issue reports, in a small Python package"),
    "feature": ("Repository: implement from a docstring", "Implement the function(s) whose body raises NotImplementedError, as their docstring says"),
    "refactor": ("Repository: refactor, tests green", "Rename a function everywhere, or move it to a new module, keeping every behaviour"),
}
VERIFIER_SPEC = {"stages": [{"type": "repo_tests", "timeout_s": 90.0}]}


@dataclasses.dataclass
class RepoSource(SeededSource):
    """Task source for one family of repository tasks (``slug``: ``swe-<family>``)."""

    family: str
    """One of :data:`trainer.families.swe.repos.FAMILIES`."""
    levels: int = LEVELS
    """Level 0: two modules, the file named; 1: three modules, the function named; 2: four modules, two changes."""

    def generate(self, seed: int, level: int) -> tuple[str, str, dict[str, Any]]:
        """The task's prompt, a reference transcript, and what the environment and ``wrong_transcript`` rebuild it from."""
        spec = repo_task(self.family, seed, level)
        meta = {"environment": "repo", "family": self.family, "seed": seed, "level": level, "max_steps": MAX_STEPS,
                "targets": spec.targets}
        return prompt(spec, MAX_STEPS), reference_transcript(spec), meta


def wrong_transcript(task: Task) -> str:
    """A well-formed change the verifier must not pass: for a bug, an edit of the README alone;
    for a feature, a body that returns None; for a refactor, the reference without its last edit
    (the tests still name the old function, or the old module no longer imports the moved one)."""
    spec = repo_task(task.meta["family"], int(task.meta["seed"]), int(task.meta["level"]))
    if spec.family == "bugfix":
        edits = [{"tool": "write", "path": "README.md", "content": spec.files["README.md"] + "\nFixed.\n"}]
    elif spec.family == "feature":
        edits = [dict(e, new=e["old"].replace("raise NotImplementedError", "return None")) for e in spec.edits]
    else:
        edits = spec.edits[:-1]
    return "\n".join(json.dumps(c) for c in edits + [{"tool": "submit"}])


def _new_environment(task: Task) -> RepoEnv:
    return RepoEnv(MAX_STEPS)


def register_all() -> list[DomainSpec]:
    specs = []
    for family in FAMILIES:
        title, description = TITLES[family]
        specs.append(define_domain(
            RepoSource(f"swe-{family}", family), VERIFIER_SPEC,
            title=title,
            kind="code",
            family=FAMILY,
            description=(f"{description}; multi-turn, through tools and a sandbox, with git. Hidden tests on the final "
                         "tree in a fresh sandbox decide."),
            task_source_spec={"family": FAMILY, "repo_family": family, "levels": LEVELS, "multi_turn": True,
                              "environment": "repo"},
            environment=functools.partial(_new_environment),
        ))
    return specs
