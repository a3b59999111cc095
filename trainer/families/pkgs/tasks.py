"""The built swe-pkg task sets (``tasks/<name>.json.gz``, written by :mod:`trainer.families.pkgs.build`).

A set holds the package's pin (name, version, sdist SHA-256), the tests that pass on the original
(``passing``) and its tasks: ``{id, level, files, diff, f2p, prompt, mutations}``. A task's
pass-to-pass tests are ``passing`` minus its ``f2p``. Its starting tree is the pinned sdist's
tree with its diff applied (the diff is trusted: it never reaches the policy).

>>> "inflection" in package_names()
True
>>> task = all_tasks(1)[0][1]
>>> task["level"], sorted(task)[:3]
(1, ['diff', 'f2p', 'files'])
"""
from __future__ import annotations

import functools
import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.families.pkgs.pins import PINS, source_tree
from trainer.verifiers.patches import apply_patch

TASKS_DIR = Path(__file__).with_name("tasks")
"""Where the built task sets are."""


class TaskSetError(RuntimeError):
    """A task set that does not belong to its pin (rebuild it)."""


@dataclass(frozen=True)
class PackageTasks:
    """One package's built task set."""

    package: str
    """The pin's name."""
    version: str
    """The pinned version."""
    sha256: str
    """The pinned sdist's SHA-256."""
    passing: tuple[str, ...]
    """Tests passing on the original tree."""
    tasks: tuple[dict[str, Any], ...]
    """The tasks, in file order."""

    def p2p(self, task: dict[str, Any]) -> list[str]:
        """A task's pass-to-pass tests: every passing test but its fail-to-pass ones."""
        f2p = set(task["f2p"])
        return [t for t in self.passing if t not in f2p]


def package_names(directory: Path = TASKS_DIR) -> list[str]:
    """Packages with a built task set, sorted."""
    return sorted(p.name[:-len(".json.gz")] for p in directory.glob("*.json.gz") if p.name[:-len(".json.gz")] in PINS)


@functools.lru_cache(maxsize=None)
def load(name: str) -> PackageTasks:
    """Package ``name``'s task set (cached); TaskSetError when it was built from another pin."""
    path = TASKS_DIR / f"{name}.json.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    pin = PINS.get(name)
    if pin is None or doc["version"] != pin.version or doc["sha256"] != pin.sha256:
        raise TaskSetError(f"{path.name} was built from {doc['package']} {doc['version']}, not the pin: rebuild it")
    return PackageTasks(doc["package"], doc["version"], doc["sha256"], tuple(doc["passing"]), tuple(doc["tasks"]))


def all_tasks(level: int | None = None) -> list[tuple[str, dict[str, Any]]]:
    """``(package, task)`` for every built task (of ``level`` only when given), by package."""
    return [(name, task) for name in package_names() for task in load(name).tasks
            if level is None or task["level"] == level]


def starting_tree(name: str, task: dict[str, Any]) -> dict[str, str]:
    """The tree an episode starts from: the pinned sdist with the task's bug(s) applied."""
    return apply_patch(source_tree(name), task["diff"])
