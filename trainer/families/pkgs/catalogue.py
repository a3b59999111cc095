"""Software-engineering tasks on real packages (``swe-pkg-*`` domains): a bug injected into a
pinned PyPI package's source (:mod:`trainer.families.pkgs.build`), reported as an issue; the
policy works in a bash session in the package's tree (:class:`~trainer.families.pkgs.environment.PkgEnv`,
the ``shell`` environment), runs the package's own tests and submits; the ``pkg_tests`` stage
runs the fail-to-pass and pass-to-pass tests on the final tree, with the original tests
restored, in a fresh sandbox.

One domain per level of the built task set: ``swe-pkg-named`` (one mutation, the file named),
``swe-pkg-unnamed`` (one mutation, the file not named), ``swe-pkg-pair`` (two mutations in two
files). A task is drawn (seeded) from the level's built tasks of every package; its answer is the
reference: the mutation's reverse, as a diff from the starting tree (what a perfect episode
submits); its meta names the package, version and task, not the files (the environment builds
them). The task source names each built task set by its digest (:func:`task_sets`), so a
rebuilt set is a new domain version.

>>> sorted(LEVELS.items(), key=lambda kv: kv[1])
[('swe-pkg-named', 1), ('swe-pkg-unnamed', 2), ('swe-pkg-pair', 3)]
>>> print(HOW_TO_WORK.format(package="toolz", version="1.0.0").strip().split(". ")[0])
The package toolz 1.0.0 is in /work: its released source with the bug in it, committed once in git
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import random
from typing import Any

from trainer.catalogue import DomainSpec
from trainer.catalogue.define import define_domain
from trainer.families.pkgs.environment import PkgEnv, starting_files, task_record
from trainer.tasks.base import Task
from trainer.verifiers.patches import tree_diff

FAMILY = "pkgs"
LEVELS = {"swe-pkg-named": 1, "swe-pkg-unnamed": 2, "swe-pkg-pair": 3}
"""Each domain's level of the built task set."""
SESSION_LIMITS = {"command_wall_s": 60, "command_cpu_s": 60, "episode_commands": 50, "episode_wall_s": 900,
                  "memory_mb": 1024, "pids": 128, "tmpfs_mb": 128, "file_size_mb": 32}
"""Each episode's budgets (see :class:`~trainer.verifiers.limits.SessionLimits`): a package's
whole suite runs in one command; /work holds the tree, its git objects and the tests' caches."""
HOW_TO_WORK = (
    "\n\nThe package {package} {version} is in /work: its released source with the bug in it, committed "
    "once in git. Find the cause and fix the package's code. Run its tests with `python3 -m pytest -q` "
    "(one file or test: `python3 -m pytest -q tests/test_x.py::test_name`). Changes to the tests count for "
    "nothing: your fix is judged by the package's own tests, restored as released. Submit when the fix is "
    "in the working tree."
)
"""Appended to the task's issue text (the shell's own instructions follow)."""
TITLES = {
    "swe-pkg-named": ("Package bug: the file named", "Fix a bug injected into a real PyPI package, reported as an "
                      "issue that names the file"),
    "swe-pkg-unnamed": ("Package bug: find the file", "Fix a bug injected into a real PyPI package, reported as an "
                        "issue from the failing behaviour only"),
    "swe-pkg-pair": ("Package bugs: two files", "Fix two interacting bugs injected into two files of a real PyPI "
                     "package, reported as one issue"),
}
VERIFIER_SPEC = {"stages": [{"type": "pkg_tests", "timeout_s": 300.0}]}


@dataclasses.dataclass
class PkgSource:
    """Task source of one ``swe-pkg-*`` domain: a seeded draw from its level's built tasks."""

    slug: str
    """Domain slug (a key of :data:`LEVELS`)."""
    level: int
    """The built task set's level this domain draws from (1, 2 or 3)."""
    levels: int = 1
    """One sampler level: the difficulty is the domain's."""

    def sample(self, rng: random.Random, level: int = 0) -> Task:
        """One task, drawn with ``rng`` from every package's built tasks of the domain's level."""
        from trainer.families.pkgs.tasks import all_tasks  # lazy: the built task files are read on first draw

        pool = all_tasks(self.level)
        if not pool:
            raise LookupError(f"{self.slug}: no built tasks of level {self.level} (manage.py domains build-swe)")
        package, record = pool[rng.randrange(len(pool))]
        return make_task(self.slug, package, record)


def make_task(slug: str, package: str, record: dict[str, Any]) -> Task:
    """The catalogue's task for one built task record of ``package``."""
    from trainer.families.pkgs.pins import PINS  # lazy: with the task files

    version = PINS[package].version
    meta = {"environment": "shell", "package": package, "version": version, "task_id": record["id"],
            "level": int(record["level"]), "session_limits": SESSION_LIMITS}
    task = Task(slug, str(record["id"]), str(record["prompt"]) + HOW_TO_WORK.format(package=package, version=version),
                None, 0, meta)
    return dataclasses.replace(task, answer=reference_diff(task))


@functools.lru_cache(maxsize=4096)
def _reference(task_id: str, package: str) -> str:
    from trainer.families.pkgs.pins import source_tree  # lazy: with the task files

    start = starting_files(Task("", task_id, "", meta={"task_id": task_id, "package": package}))
    original = source_tree(package)
    changed = sorted(p for p in set(start) | set(original) if start.get(p) != original.get(p))
    return tree_diff({p: start[p] for p in changed if p in start}, {p: original[p] for p in changed if p in original})


def reference_diff(task: Task) -> str:
    """What a perfect episode submits: the mutation undone, as a diff from the starting tree."""
    return _reference(str(task.meta["task_id"]), str(task.meta["package"]))


def wrong_diff(task: Task) -> str:
    """A well-formed submission the verifier must not pass: the fail-to-pass tests' files deleted
    (the tests are restored before the verdict, and the bug is still there)."""
    start = starting_files(task)
    record = task_record(str(task.meta["package"]), str(task.meta["task_id"]))
    files = sorted({node.split("::")[0] for node in record["f2p"]} & set(start))
    return tree_diff({p: start[p] for p in files}, {})


def new_environment(task: Any) -> PkgEnv:
    """The episode's environment: a shell session in the task's starting tree."""
    return PkgEnv()


def task_sets() -> dict[str, str]:
    """Each built task set's SHA-256 (first 16 digits), by package: part of the domains' task
    source, so that a rebuilt or added task set makes a new domain version."""
    from trainer.families.pkgs.tasks import TASKS_DIR, package_names  # lazy: the pins are read with it

    return {name: hashlib.sha256((TASKS_DIR / f"{name}.json.gz").read_bytes()).hexdigest()[:16]
            for name in package_names()}


def register_all() -> list[DomainSpec]:
    sets = task_sets()
    specs = []
    for slug, level in LEVELS.items():
        title, description = TITLES[slug]
        specs.append(define_domain(
            PkgSource(slug, level), VERIFIER_SPEC, title=title, kind="code", family=FAMILY,
            description=f"{description}. Multi-turn, in a persistent bash session in the package's source tree; "
                        "the package's fail-to-pass and pass-to-pass tests decide, in a fresh sandbox.",
            task_source_spec={"family": FAMILY, "pkg_level": level, "levels": 1, "multi_turn": True,
                              "environment": "shell", "task_sets": sets},
            environment=new_environment,
        ))
    return specs
