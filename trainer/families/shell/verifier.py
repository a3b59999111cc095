"""Stage ``shell_state``: a shell task's final tree checked by trusted code.

The completion is the episode's final working tree as a diff from the task's files
(:meth:`ShellEnv.submission <trainer.environments.shell.ShellEnv.submission>`). Trusted code
rebuilds the task from its family, seed and level (:func:`~trainer.families.shell.tasks.shell_task`),
applies the diff, and checks the files the task names: each must hold what trusted code computed
(a JSON file compared as JSON, types included, an INI file by its sections, an ``.env`` file by its
``KEY=VALUE`` lines; any other file exactly, its trailing whitespace aside). A task with a
``check`` command then runs it in a fresh sandbox on the final tree with the task's own copy of
its ``restore`` files put back, and passes only on exit 0 with the exact expected standard output;
then once more in another fresh sandbox for each of the task's ``probes``, with the configuration
replaced by other well-formed values, whose output must follow (a program that prints the digest
of the task's own values without reading them fails there).
A task that asks something of the repository (``git``: the ``shell-git`` tasks) has its
submission's diff followed by the repository read back as a git bundle
(:mod:`~trainer.families.shell.gitstate`); once the tree is right, the bundle is inspected in a
fresh sandbox and main is judged by commit ids against the ids trusted code computed for the
task's own history (:mod:`~trainer.families.shell.gitobjects`): ``unchanged``, main and HEAD at
main's last commit as the task left it; ``commit``, main and HEAD at a new commit that has that
commit as an ancestor (the history kept, not rewritten); ``merge``, main and HEAD at a commit
whose parents are main's and feature's last commits, in that order; and main's last commit
holds the task's ``committed`` files as the tree must. A submission without a readable bundle
fails.
Nothing the candidate printed during the episode, and no file it wrote that claims success,
enters the verdict; an empty diff (the do-nothing episode) fails.

>>> from trainer.tasks.base import Task
>>> task = Task("shell-data", "x", "...", meta={"family": "data", "seed": 3, "level": 0})
>>> shell_state("", task).details["error"]
'no change: the working tree is as the task left it'
>>> shell_state(reference_diff(task), task).outcome.value
'pass'
>>> same("a.json", '{"a": 1}', '{ "a" : 1 }\\n'), same("a.txt", "x\\n", "x"), same("a.txt", "x\\n", None)
(True, True, False)
>>> same("a.json", '{"debug": false}', '{"debug": 0}'), same("a.json", '{"port": 80}', '{"port": 80.0}')
(False, False)
"""
from __future__ import annotations

import configparser
import json
from typing import Any

from trainer.families.shell import gitstate
from trainer.families.shell.tasks import ShellTask, shell_task
from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.artifacts import final_diff
from trainer.verifiers.code import SandboxRun, sandbox_stage
from trainer.verifiers.patches import PatchError, apply_patch, tree_diff

DEFAULT_LIMITS = {"cpu_s": 10.0, "wall_s": 20.0, "memory_mb": 512}
MAX_COMPLETION_CHARS = 2_000_000


def spec_of(task: Task) -> ShellTask:
    """The generated shell task a ``shell-*`` task stands for."""
    meta = task.meta
    return shell_task(str(meta["family"]), int(meta["seed"]), int(meta["level"]))


def reference_diff(task: Task) -> str:
    """The final tree trusted code expects, as a diff from the task's files."""
    spec = spec_of(task)
    return tree_diff(spec.files, spec.final())


def _ini(text: str) -> dict[str, dict[str, str]]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return {name: dict(parser[name]) for name in parser.sections()}


def _env(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, allow_nan=True)


def same(path: str, want: str, got: str | None) -> bool:
    """Whether the final file ``got`` holds what ``want`` does (see the module docstring)."""
    if got is None:
        return False
    try:
        if path.endswith(".json"):  # compared with types: false is not 0, 8080 is not 8080.0
            return _canonical(json.loads(got)) == _canonical(json.loads(want))
        if path.endswith(".ini"):
            return _ini(got) == _ini(want)
    except (ValueError, RecursionError, configparser.Error):  # nested past the parser's depth: not the file
        return False
    if path.endswith(".env"):
        return _env(got) == _env(want)
    return got.rstrip() == want.rstrip()


@sandbox_stage(DEFAULT_LIMITS)
def shell_state(completion: str, task: Task, run: SandboxRun) -> Verification:
    """Check the final tree the completion's diff leaves (params: ``limits``, ``backend``)."""
    if len(completion) > MAX_COMPLETION_CHARS:
        return Verification.failed(Outcome.PARSE_ERROR, error=f"the diff has {len(completion)} characters; at most "
                                   f"{MAX_COMPLETION_CHARS}")
    spec = spec_of(task)
    diff, bundle, unread = gitstate.split(completion) if spec.git else (completion, None, "")
    if not diff.strip():
        return Verification.failed(error="no change: the working tree is as the task left it")
    try:
        tree = apply_patch(spec.files, diff)
    except PatchError as exc:
        return Verification.failed(Outcome.PARSE_ERROR, error=f"the diff does not apply: {exc}")
    wrong = sorted(path for path, want in spec.expected.items() if not same(path, want, tree.get(path)))
    details: dict[str, Any] = {"family": spec.family, "checked": sorted(spec.expected), **final_diff(completion)}
    if wrong:
        return Verification.failed(error="files do not hold what the task asks", wrong_files=wrong, **details)
    if spec.git:
        failed = _repository(spec, bundle, unread, run, details)
        if failed is not None:
            return failed
    if not spec.check:
        return Verification.passed(**details)
    restored = {path: spec.files[path] for path in spec.restore}
    runs = [({}, spec.check_stdout), *spec.probes]
    for number, (over, want) in enumerate(runs):
        verdict = run({**tree, **over, **restored}, ["bash", "-c", spec.check])
        failed = _judge(verdict, spec.check, want, details)
        if failed is not None:
            if number:
                failed.details["probe"] = f"the check rerun on other values of the configuration ({sorted(over)})"
            return failed
    return Verification.passed(**details)


def _repository(spec: ShellTask, bundle: bytes | None, unread: str, run: SandboxRun,
                details: dict[str, Any]) -> Verification | None:
    """None when the repository the submission carries is what ``spec.git`` asks (see the module
    docstring); else the failed Verification."""
    details["git"] = spec.git
    if bundle is None:
        return Verification.failed(error=f"no repository to check: {unread}", **details)
    base = spec.heads["main"]
    facts = gitstate.inspect(bundle, spec.committed, base, run)
    if isinstance(facts, Verification):
        return facts
    main = facts["main"]
    details.update(main=main, head=facts["head"], parents=facts["parents"])
    if main is None:
        why = "the repository has no branch main"
    elif facts["head"] != main:
        why = "HEAD is not main's last commit: main is not checked out"
    elif spec.git == "unchanged" and main != base:
        why = "main is not at its last commit as the task left it: the history was changed"
    elif spec.git == "commit" and main == base:
        why = "nothing was committed on main"
    elif spec.git == "commit" and not facts["descends"]:
        why = "main's history was rewritten: its last commit as the task left it is not an ancestor of main"
    elif spec.git == "merge" and facts["parents"] != [base, spec.heads["feature"]]:
        why = "main's last commit is not the merge of main's and feature's last commits (its parents are not those two)"
    elif wrong := sorted(p for p in spec.committed if not same(p, spec.expected[p], facts["files"].get(p))):
        return Verification.failed(error="main's last commit does not hold what the task asks", wrong_commits=wrong,
                                   **details)
    else:
        return None
    return Verification.failed(error=why, **details)


def _judge(verdict: Any, check: str, want: str, details: dict[str, Any]) -> Verification | None:
    """None when one ``check`` run exited 0 with exactly ``want``; else the failed Verification."""
    if isinstance(verdict, Verification):
        return verdict
    status = str(getattr(verdict.status, "value", verdict.status))
    if status == "sandbox_error":  # infrastructure: masked, never the candidate's reward
        return Verification.failed(Outcome.SANDBOX_ERROR, error=str(getattr(verdict, "error", ""))[:500])
    stdout = verdict.stdout.decode("utf-8", "replace") if isinstance(verdict.stdout, bytes) else str(verdict.stdout or "")
    details.update(check=check, status=status, exit_code=getattr(verdict, "exit_code", None), stdout=stdout[-500:])
    if status != "ok" or getattr(verdict, "exit_code", None) != 0 or stdout != want:
        return Verification.failed(error=f"`{check}` did not succeed with the expected output", **details)
    return None
