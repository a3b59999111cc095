"""Stage ``repo_tests``: a repository task's hidden tests on the final tree, in a fresh sandbox.

The completion is the change to the task's starting repository (:mod:`trainer.families.swe.repos`):
either a unified diff (what a multi-turn episode submits: :meth:`RepoEnv.submission
<trainer.families.swe.environment.RepoEnv.submission>`; a single-turn answer may put it in one
```diff block), or a transcript of the environment's tool calls, replayed here without a sandbox
(the audit and SFT use the reference transcript). One change per completion: two diff blocks, or
a diff beside tool calls, is no answer.

Trusted code rebuilds the starting tree from the task's family, seed and level, applies the
change, checks a refactor's shape on the final tree's syntax, and builds the job: the code-test
harness (:mod:`trainer.verifiers.code_harness`) holds the hidden tests and writes the verdict,
and the repository under ``repo/`` is the program, loaded by a small generated module that
imports the functions the tests call. Every call crosses the process boundary as data; the
tests never exist in a file the program can read. A job that ran hands back its test report and
output log as artifacts (``report.xml``, ``output.log``: :func:`~trainer.verifiers.code.report_artifacts`).

>>> from trainer.tasks.base import Task
>>> task = Task("swe-feature", "x", "...", meta={"family": "feature", "seed": 3, "level": 0})
>>> repo_tests("no change at all", task).outcome.value
'parse_error'
>>> repo_tests("```diff\\n--- a/x\\n+++ b/x\\n```\\n```diff\\n--- a/y\\n+++ b/y\\n```", task).details["error"]
'2 diff blocks: one change per completion'
>>> repo_tests(task_reference(task), task).outcome.value  # no sandbox in this context
'sandbox_error'
"""
from __future__ import annotations

import re
from typing import Any

from trainer.environments.base import ActionError, split_actions
from trainer.families.swe.environment import RepoEnv, check_tree
from trainer.families.swe.repos import PRELUDE, RepoTask, reference_transcript, regrade_tests, repo_task, structure_failures
from trainer.integrity import REGRADE, canary_hidden, tampered_files
from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers import artifacts
from trainer.verifiers.code import SandboxRun, fenced_blocks, report_artifacts, sandbox_stage, verdict_to_verification
from trainer.verifiers.code_harness import build_job
from trainer.verifiers.patches import PatchError, apply_patch

REPO_DIR = "repo"
"""Where the final tree sits in the job."""
DEFAULT_LIMITS = {"cpu_s": 20.0, "wall_s": 40.0, "memory_mb": 512}
MAX_COMPLETION_CHARS = 500_000
_HEADERS = re.compile(r"^--- .*\n\+\+\+ ", re.M)


def spec_of(task: Task) -> RepoTask:
    """The generated repository task a ``swe-*`` task stands for."""
    meta = task.meta
    return repo_task(str(meta["family"]), int(meta["seed"]), int(meta["level"]))


def hidden_for(spec: RepoTask, task: Task) -> list[str]:
    """A repository task's hidden tests as ``task`` has them: a canary's with its conflicting
    duplicate, a regrade's with the extra cases of fresh inputs, a real task's as generated."""
    if task.meta.get(REGRADE):
        return spec.hidden + regrade_tests(spec, int(task.meta[REGRADE]["salt"]))
    return canary_hidden(spec.hidden, task)


def task_reference(task: Task) -> str:
    """The reference transcript of a task (its ``answer``, rebuilt when absent)."""
    return task.answer if isinstance(task.answer, str) else reference_transcript(spec_of(task))


def final_tree(completion: str, task: Task, spec: RepoTask) -> tuple[dict[str, str] | None, str]:
    """The tree a completion leaves, and ``"diff"`` or ``"transcript"``; ``(None, why)`` when it
    holds no change or more than one."""
    if len(completion) > MAX_COMPLETION_CHARS:
        return None, f"the completion has {len(completion)} characters; at most {MAX_COMPLETION_CHARS}"
    blocks = [body for info, body in fenced_blocks(completion) if info in ("diff", "patch")]
    if len(blocks) > 1:
        return None, f"{len(blocks)} diff blocks: one change per completion"
    patch = blocks[0] if blocks else (completion if _HEADERS.search(completion) else None)
    actions = split_actions(completion)
    if patch is not None:
        if actions:
            return None, "both a diff and tool calls: one change per completion"
        try:
            tree = apply_patch(spec.files, patch)
            check_tree(tree)
        except (PatchError, ActionError) as exc:
            return None, f"the diff does not apply: {exc}"
        return tree, "diff"
    if not actions:
        return None, "no change: neither a unified diff nor tool calls"
    env = RepoEnv()
    env.reset(task)  # the task's step budget: calls past it change nothing
    for action in actions:
        if env.step(action).done:
            break
    return env.tree, "transcript"


def _program(spec: RepoTask) -> str:
    """The generated module the harness loads: it imports each function the tests call from
    the final tree (a name that no longer imports is missing, and its tests fail)."""
    lines = ["import sys", f"sys.path.insert(0, {REPO_DIR!r})"]
    for name, (module, attribute) in sorted(spec.exports.items()):
        lines += ["try:", f"    from {module} import {attribute} as {name}", "except Exception:", "    pass"]
    return "\n".join(lines) + "\n"


@sandbox_stage(DEFAULT_LIMITS)
def repo_tests(completion: str, task: Task, run: SandboxRun) -> Verification:
    """Apply the completion's change to the starting tree and run the hidden tests on it
    (params: ``limits``, ``backend``)."""
    spec = spec_of(task)
    tree, how = final_tree(completion, task, spec)
    if tree is None:
        return Verification.failed(Outcome.PARSE_ERROR, error=how)
    changed = sorted(p for p in set(tree) | set(spec.files) if tree.get(p) != spec.files.get(p))
    # Tampering evidence (trainer.integrity): tests, their configuration and start-up hooks the
    # change touched that the task does not ask to change. The hidden tests decide regardless.
    allowed = {e.get("path") for e in spec.edits}
    details: dict[str, Any] = {"change": how, "changed_files": changed[:50],
                               "tampered": tampered_files(changed, allowed)[:50]}
    if not changed:
        return Verification.failed(error="the change leaves the repository as it was", **details)
    if spec.structure and (problems := structure_failures(spec.structure, tree)):
        return Verification.failed(error="the refactor's shape is wrong", structure=problems[:20], **details)
    job = build_job(_program(spec), hidden_for(spec, task), prelude=PRELUDE)
    files = {**job.files, **{f"{REPO_DIR}/{path}": text for path, text in tree.items()}}
    verdict = run(files, job.command)
    if isinstance(verdict, Verification):
        return verdict
    result = verdict_to_verification(verdict, job)
    handed = artifacts.detail(report_artifacts(f"{task.domain}/{task.id}", result, verdict))
    return Verification(result.outcome, result.score, {**result.details, **details, **handed})
