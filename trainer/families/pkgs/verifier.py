"""Stage ``pkg_tests``: a swe-pkg task's fail-to-pass and pass-to-pass tests on the final tree.

The completion is the episode's final tree as a unified diff from the task's starting tree (what
:meth:`ShellEnv.submission <trainer.environments.shell.ShellEnv.submission>` gives; a trailer
after the diff, such as a git bundle's, is not read), or one ```diff block; two diff blocks are
no answer (``parse_error``), and an empty diff fails (``no change``).

Trusted code rebuilds the starting tree (the pinned sdist with the task's mutation:
:func:`~trainer.families.pkgs.tasks.starting_tree`), applies the diff, and keeps ONLY the changes
to files of the package's own source that the sdist has (:func:`~trainer.families.pkgs.pins.is_source_path`).
Every other change counts for nothing and is listed in ``details["ignored"]``: tests edited or
deleted, a new ``conftest.py``, ``sitecustomize.py``, ``.pth`` file or pytest plugin module, edits
of ``setup.cfg``, ``pyproject.toml``, ``pytest.ini``, ``tox.ini`` or ``setup.py``, any new or deleted
file. A git-style diff's sections for such files are not even applied (:func:`apply_kept`), so a
large or malformed change to them cannot spoil a fix. The static gate
(:mod:`~trainer.families.pkgs.gate`) then reads the kept files: one that does not parse, or adds
an import, a dunder or a listed name (ways to exit early, to reach the interpreter or pytest, to
make an object equal to anything), fails with the gate's records. The gate is the only defence
against code that patches pytest from inside its own interpreter (a report forced to passed) and
against an object equal to anything; exiting early, killing the runner and forged output also
fail at run time (tests/sandbox/test_pkg_attacks.py shows both).

Then, in a fresh sandbox, the original sdist tree (its own tests, conftest files and
configuration) with only the kept files over it runs the task's fail-to-pass tests and the
package's other passing tests (pass-to-pass) under the trusted runner
(:mod:`~trainer.families.pkgs.runner`): a test counts as passed only when the runner's parent
process, which the candidate's code cannot reach, got its record of setup, call and teardown
passed, and printed it with the job's nonce. The score is 1 when every one of those tests passed,
else 0. A job that exits early, is killed or breaks its sandbox fails (``runtime_error``, a limit's
outcome, or ``fail``); only the sandbox itself failing is ``sandbox_error`` (masked).

>>> from trainer.tasks.base import Task
>>> task = Task("swe-pkg-named", "x", "...", meta={"package": "p", "task_id": "p-1-0"})
>>> pkg_tests("", task).details["error"]
'no change: the working tree is as the task left it'
>>> pkg_tests("```diff\\n--- a/x\\n+++ b/x\\n```\\n```diff\\n--- a/y\\n+++ b/y\\n```", task).details["error"]
'2 diff blocks: one change per completion'
>>> split_change({"p/m.py": "a", "tests/t.py": "b"}, {"p/m.py": "A", "tests/t.py": "B", "conftest.py": "c"},
...              lambda p: p.startswith("p/"))
({'p/m.py': 'A'}, [{'path': 'conftest.py', 'why': 'a new file'}, {'path': 'tests/t.py', 'why': 'not the package source'}])
"""
from __future__ import annotations

import re
from typing import Any, Callable

from trainer.families.pkgs import gate
from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers import artifacts
from trainer.verifiers.code import REPORT_BYTES, STATUS_OUTCOMES, SandboxRun, fenced_blocks, junit_report, sandbox_stage
from trainer.verifiers.patches import PatchError, apply_patch, tree_diff

DEFAULT_LIMITS = {"cpu_s": 120.0, "wall_s": 180.0, "memory_mb": 1024, "output_bytes": 8 << 20, "tmpfs_mb": 256,
                  "pids": 64}
"""A package's selected tests in one job (the slowest suites take tens of seconds on a loaded host)."""
MAX_COMPLETION_CHARS = 32_000_000
"""A longer completion is refused unread (the environment reads a final tree of at most 24 MiB);
what is applied of it is bounded by :data:`~trainer.verifiers.patches.MAX_PATCH_CHARS`."""
_SECTION = re.compile(r"^diff --git ", re.M)
TRAILER = "\n# git bundle"
"""Where a submission's trailer starts (:data:`trainer.families.shell.gitstate.MARK`): not read."""
MAX_LISTED = 50
"""Ignored files and failures listed in the details, at most."""
FAILURES_SHOWN = 5


def task_record(task: Task) -> tuple[str, dict[str, Any], list[str]]:
    """(package, the built task record, the package's tests passing on the original) of a
    ``swe-pkg-*`` task; KeyError when no built task set holds it."""
    from trainer.families.pkgs import tasks  # lazy: the built task set is read on first use

    package = str(task.meta["package"])
    built = tasks.load(package)
    for record in built.tasks:
        if record["id"] == task.meta["task_id"]:
            return package, record, list(built.passing)
    raise KeyError(f"no built {package} task {task.meta['task_id']!r}")


def reference_tree(package: str, record: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(the starting tree, the reference's final tree: the task's files as the sdist has them)."""
    from trainer.families.pkgs import pins, tasks  # lazy: reads the sdist on first use

    start = tasks.starting_tree(package, record)
    original = pins.source_tree(package)
    return start, {**start, **{path: original[path] for path in record["files"]}}


def the_diff(completion: str) -> tuple[str | None, str]:
    """(the diff a completion holds, '') or (None, why it holds no readable change)."""
    if len(completion) > MAX_COMPLETION_CHARS:
        return None, f"the completion has {len(completion)} characters; at most {MAX_COMPLETION_CHARS}"
    raw = completion.lstrip().startswith(("diff --git ", "--- ", TRAILER.lstrip()))
    blocks = [] if raw else [body for info, body in fenced_blocks(completion) if info in ("diff", "patch")]
    if len(blocks) > 1:
        return None, f"{len(blocks)} diff blocks: one change per completion"
    diff = blocks[0] if blocks else completion
    if diff.startswith(TRAILER.lstrip()):
        return "", ""
    return diff.split(TRAILER, 1)[0], ""


def sections(diff: str) -> list[tuple[str | None, str | None, str]] | None:
    """A git-style diff's file sections as ``(old path, new path, text)`` (None for
    ``/dev/null``, or for a path the section does not name); None when the diff has no
    ``diff --git`` headers (a hand-written diff is applied whole).

    >>> [s[:2] for s in sections("diff --git a/x b/x\\n--- a/x\\n+++ b/x\\n@@ -1 +1 @@\\n-a\\n+b\\n"
    ...                             "diff --git a/n b/n\\nnew file mode 100644\\n--- /dev/null\\n+++ b/n\\n")]
    [('x', 'x'), (None, 'n')]
    """
    starts = [m.start() for m in _SECTION.finditer(diff)]
    if not starts or diff[:starts[0]].strip():
        return None
    out = []
    for begin, end in zip(starts, starts[1:] + [len(diff)]):
        text = diff[begin:end]
        head = text.split("\n@@", 1)[0].splitlines()
        old = next((line[4:] for line in head if line.startswith("--- ")), None)
        new = next((line[4:] for line in head if line.startswith("+++ ")), None)
        out.append((None if old in (None, "/dev/null") else old.removeprefix("a/"),
                    None if new in (None, "/dev/null") else new.removeprefix("b/"), text))
    return out


def apply_kept(start: dict[str, str], diff: str, is_source: Callable[[str], bool]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The final tree with only the sections of ``diff`` that change an existing source file
    applied, and the other sections as ignored ``{"path", "why"}`` (their text is never applied:
    a large or malformed change to a file that counts for nothing cannot spoil the fix);
    a diff without git headers is applied whole. ``PatchError`` when what is applied does not."""
    parts = sections(diff)
    if parts is None:
        return apply_patch(start, diff), []
    kept, ignored = [], []
    for old, new, text in parts:
        if old is not None and old == new and old in start and is_source(old):
            kept.append(text)
        elif old is None and new is not None and new not in start:
            ignored.append({"path": new, "why": "a new file"})
        elif new is None and old is not None and old in start:
            ignored.append({"path": old, "why": "deleted (kept as it was)"})
        elif old is not None and old == new and old in start:
            ignored.append({"path": old, "why": "not the package source"})
        elif old is not None and new is not None and old != new:
            ignored.append({"path": f"{old} -> {new}", "why": "renamed (kept as it was)"})
        else:
            ignored.append({"path": str(new or old or text.splitlines()[0][:200]), "why": "not a change of a file of the tree"})
    return (apply_patch(start, "".join(kept)) if kept else dict(start)), ignored


def split_change(start: dict[str, str], final: dict[str, str],
                 is_source: Callable[[str], bool]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """(the kept changes: path -> new text of the package's existing source files, the ignored
    changes as ``{"path", "why"}``)."""
    kept: dict[str, str] = {}
    ignored: list[dict[str, str]] = []
    for path in sorted(set(start) | set(final)):
        old, new = start.get(path), final.get(path)
        if old == new:
            continue
        if old is None:
            ignored.append({"path": path, "why": "a new file"})
        elif new is None:
            ignored.append({"path": path, "why": "deleted (kept as it was)"})
        elif not is_source(path):
            ignored.append({"path": path, "why": "not the package source"})
        else:
            kept[path] = new
    return kept, ignored


def _tests(results: Any, names: list[str]) -> list[dict[str, Any]]:
    """Each selected test as ``{"name", "passed", "message"}`` (no record: failed)."""
    out = []
    for name in names:
        passed = name in results.passed
        message = "" if passed else results.failed.get(name, "no result: the test did not run to its end")
        out.append({"name": name, "passed": passed, "message": message})
    return out


def judge(completion: str, task: Task, run: SandboxRun, *, _gated: bool = True) -> Verification:
    """The stage's check (see the module docstring). ``_gated=False`` skips the static gate: for
    tests that show what the sandbox alone does with a change the gate refuses, never a stage."""
    diff, why = the_diff(completion)
    if diff is None:
        return Verification.failed(Outcome.PARSE_ERROR, error=why)
    if not diff.strip():
        return Verification.failed(error="no change: the working tree is as the task left it")
    from trainer.families.pkgs import pins, runner  # lazy: the runner and the pins are read when a change is judged

    try:
        package, record, passing = task_record(task)
        start, reference = reference_tree(package, record)
    except Exception as exc:  # noqa: BLE001 - the task set or the sdist missing is infrastructure, masked
        return Verification.failed(Outcome.SANDBOX_ERROR, error=f"the task cannot be rebuilt: {type(exc).__name__}: {exc}"[:500])
    # the task's own mutated files are the package's source whatever the path rule says (a
    # single-module package's ``six.py`` sits at the top of the sdist)
    def is_source(path: str) -> bool:
        return pins.is_source_path(path) or path in record["files"]

    try:
        final, skipped = apply_kept(start, diff, is_source)
    except PatchError as exc:
        return Verification.failed(Outcome.PARSE_ERROR, error=f"the diff does not apply: {exc}")
    kept, ignored = split_change(start, final, is_source)
    ignored = sorted(skipped + ignored, key=lambda i: i["path"])
    details: dict[str, Any] = {"package": package, "task_id": record["id"], "kept": sorted(kept)[:MAX_LISTED],
                               "ignored": ignored[:MAX_LISTED], "gate": "passed" if _gated else "bypassed"}
    if not kept:
        return Verification.failed(error="no change to the package's source: every change is ignored", **details)
    refusals = gate.check_tree(start, kept, reference) if _gated else []
    if refusals:
        details["gate"] = refusals[:20]
        return Verification.failed(error="the gate refuses the change: " + "; ".join(
            f"{r['file']}:{r['line']}: {r['what']}" for r in refusals[:3]), **details)
    f2p = list(record["f2p"])
    p2p = sorted(set(passing) - set(f2p))
    job = runner.test_job({**start, **kept}, select=f2p + p2p)
    verdict = run(job.files, job.command)
    if isinstance(verdict, Verification):  # no sandbox, or it failed: infrastructure, masked
        return verdict
    return _verdict(verdict, job, f2p, p2p, details, f"{task.domain}/{task.id}", completion)


def _verdict(verdict: Any, job: Any, f2p: list[str], p2p: list[str], details: dict[str, Any],
             suite: str, completion: str) -> Verification:
    """The Verification of a job that ran (see the module docstring)."""
    from trainer.families.pkgs import runner  # lazy: as in judge

    status = str(getattr(verdict.status, "value", verdict.status))
    if status == "sandbox_error":
        return Verification.failed(Outcome.SANDBOX_ERROR, error=str(getattr(verdict, "error", ""))[:500])
    results = runner.read_results(verdict.stdout or b"", job)
    tests = _tests(results, f2p + p2p)
    failures = [t for t in tests if not t["passed"]]
    stderr = verdict.stderr.decode("utf-8", "replace") if isinstance(verdict.stderr, bytes) else str(verdict.stderr or "")
    details.update(
        status=status, exit_code=getattr(verdict, "exit_code", None), cpu_s=getattr(verdict, "cpu_s", None),
        wall_s=getattr(verdict, "wall_s", None), collected=results.collected, runner_error=results.error,
        f2p={"passed": sum(t["passed"] for t in tests[:len(f2p)]), "total": len(f2p)},
        p2p={"passed": sum(t["passed"] for t in tests[len(f2p):]), "total": len(p2p)},
        failures=[{"test": t["name"], "message": t["message"]} for t in failures[:FAILURES_SHOWN]],
        **artifacts.detail([artifacts.Artifact.of("final.diff", completion, artifacts.DIFF_BYTES, truncate=False),
                            artifacts.Artifact.of("report.xml", junit_report(suite, tests), REPORT_BYTES),
                            artifacts.Artifact.of("output.log", stderr, REPORT_BYTES)]))
    if status != "ok":
        return Verification.failed(STATUS_OUTCOMES.get(status, Outcome.RUNTIME_ERROR),
                                   error=f"the test job ended with {status}: {getattr(verdict, 'error', '')}"[:500], **details)
    if failures:
        return Verification.failed(error=f"{len(failures)} of {len(tests)} tests failed "
                                   f"({details['f2p']['total'] - details['f2p']['passed']} fail-to-pass)", **details)
    return Verification.passed(**details)


@sandbox_stage(DEFAULT_LIMITS)
def pkg_tests(completion: str, task: Task, run: SandboxRun) -> Verification:
    """Run the task's fail-to-pass and pass-to-pass tests on the package with the completion's
    source changes, and nothing else of it (params: ``limits``, ``backend``)."""
    return judge(completion, task, run)


def reference_diff(task: Task) -> str:
    """The reference: the task's mutation reversed, as a diff from the starting tree."""
    package, record, _ = task_record(task)
    return tree_diff(*reference_tree(package, record))
