"""The episode of a ``swe-pkg-*`` task: a bash session in the package's source tree.

:class:`PkgEnv` is the ``shell`` environment (:class:`~trainer.environments.shell.ShellEnv`)
whose files are not in the task (a package's tree is too large to carry in every task) but
built at :meth:`PkgEnv.reset` from the task's package and id: the pinned sdist's text files
with the task's mutation applied (:func:`trainer.families.pkgs.tasks.starting_tree`). The
trusted setup (:func:`setup_script`) makes that tree ONE git commit, so nothing in the
sandbox's repository (no other commit, branch, tag, reflog entry or stash) holds the original
code: the fix is only in the verifier's hands. Caches of Python and pytest are left out of git
(``.git/info/exclude``) and out of the final tree the submission is made from
(:data:`TREE_READ`), so running the tests changes nothing the verifier sees.

>>> print(setup_script("toolz", "1.0.0"))
git init -q -b main && printf '%s\\n' __pycache__/ '*.pyc' .pytest_cache/ >> .git/info/exclude && git add -A && git -c user.name=temper -c user.email=temper@localhost commit -qm 'toolz 1.0.0'
>>> env = PkgEnv(); _ = env.reset(Task("swe-pkg-x", "1", "Fix it.", meta={"environment": "shell"}))
>>> env.step('{"tool": "submit"}').outcome.outcome.value
'sandbox_error'
"""
from __future__ import annotations

import dataclasses
import functools
import io
import shlex
import tarfile
from typing import Any

from trainer.environments.shell import _UNDIFFABLE, INSTRUCTIONS, ShellEnv
from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.limits import SessionLimits

TREE_BYTES = 16 << 20
"""Largest final working tree (as a tar stream, caches left out) read back for the submission."""
TREE_READ = ["tar", "-C", "/work", "--exclude=./.git", "--exclude=__pycache__", "--exclude=*.pyc",
             "--exclude=.pytest_cache", "-cf", "-", "."]
"""The trusted read of the final tree: every regular file but git's and Python's caches."""
IGNORED = ("__pycache__/", "*.pyc", ".pytest_cache/")
"""Written to ``.git/info/exclude`` by the setup: what running the tests leaves is not a change."""


def setup_script(package: str, version: str) -> str:
    """The trusted setup of a session: the starting tree committed once, on ``main``."""
    message = shlex.quote(f"{package} {version}")
    return ("git init -q -b main && printf '%s\\n' " + " ".join(shlex.quote(p) for p in IGNORED)
            + " >> .git/info/exclude && git add -A && git -c user.name=temper -c user.email=temper@localhost "
            + f"commit -qm {message}")


@functools.lru_cache(maxsize=None)
def _records(package: str) -> dict[str, dict[str, Any]]:
    """A package's built tasks by id."""
    from trainer.families.pkgs import tasks  # lazy: the built task files are read on first use

    return {record["id"]: record for record in tasks.load(package).tasks}


def task_record(package: str, task_id: str) -> dict[str, Any]:
    """A built task of ``package``; KeyError names a package or an id no task file holds."""
    try:
        return _records(package)[task_id]
    except (KeyError, FileNotFoundError):
        raise KeyError(f"no built swe-pkg task {task_id!r} of {package!r}") from None


def starting_files(task: Task) -> dict[str, str]:
    """The task's starting tree: its package's sdist with the task's mutation applied."""
    from trainer.families.pkgs.tasks import starting_tree  # lazy: reads the sdist on first use

    package = str(task.meta["package"])
    return starting_tree(package, task_record(package, str(task.meta["task_id"])))


class PkgEnv(ShellEnv):
    """A ``shell`` episode in the package's source tree (see the module docstring)."""

    def reset(self, task: Task) -> str:
        try:
            files = starting_files(task)
        except Exception as exc:  # the task set or the sdist is missing: infrastructure, masked
            self.close()
            self.task, self.done, self.steps, self.final, self.state, self.base = task, False, 0, None, "", {}
            self.limits = SessionLimits.from_params(task.meta.get("session_limits"))
            self.failure = Verification.failed(Outcome.SANDBOX_ERROR, reason=f"{type(exc).__name__}: {exc}"[:500])
            return task.prompt + INSTRUCTIONS
        setup = setup_script(str(task.meta["package"]), str(task.meta.get("version", "")))
        return super().reset(dataclasses.replace(task, meta={**task.meta, "files": files, "setup": setup}))

    def _read_final(self) -> str:
        """Read the final tree (trusted ``tar``, caches left out) into ``final``; why it could not
        be read ('' when it was)."""
        try:
            with self._slot():
                verdict = self.session.read(TREE_READ, TREE_BYTES)
            if verdict.status != "ok":
                return f"{verdict.status} {verdict.error}".strip()
            tree = {}
            with tarfile.open(fileobj=io.BytesIO(verdict.stdout), mode="r:") as tar:
                for member in tar:
                    handle = tar.extractfile(member) if member.isfile() else None
                    if handle is not None:
                        tree[member.name.removeprefix("./")] = handle.read()
        except Exception as exc:  # a tree over the bound, a broken session: the episode's own
            return str(exc) or type(exc).__name__
        self.final = {k: v.decode("utf-8", "replace") for k, v in tree.items() if not _UNDIFFABLE.search(k)}
        return ""
