"""Attacks on the ``pkg_tests`` stage (issue #46, point 3), each run in a real bwrap sandbox on a real
package task: ``inflection``'s pinned sdist with a bug injected in ``ordinal`` (a bound of the
kind the build's mutations make), its fail-to-pass tests measured here by the trusted runner.

Every attack fails; none is a masked ``sandbox_error``. How each is stopped:

* by the verifier keeping only changes to the package's existing source files (tests deleted or
  edited, a ``conftest.py`` at the root or beside the tests, ``sitecustomize.py``, a ``.pth``
  file, a pytest plugin registered in ``setup.cfg``/``pyproject.toml``/``pytest.ini``/``tox.ini``):
  the files are listed as ignored and the tests run on the original tree, where they fail;
* by the runner at run time: forged marker lines (the child's output is the job's stderr, and a
  marker needs the job's nonce);
* by the static gate, and ALSO at run time with the gate bypassed (a private switch of the
  verifier, tested here): ``sys.exit(0)`` at import or inside the function, ``os._exit(0)`` at
  import or before the asserts (the tests that never finish have no record: failed), killing
  every process of the job, the runner's parent included (``runtime_error``, not masked);
* by the static gate ONLY: code of the package runs inside pytest's own interpreter, so with the
  gate bypassed it could patch pytest (``_pytest.reports.TestReport`` forced to passed: the runner
  notices patches of the functions it watches, not of every class pytest has), return an object
  whose ``__eq__`` is always true (pytest's asserts compare with ``==``), or rewrite the test files
  on disk before pytest imports them. The tests below show which of these the bypassed runtime
  lets pass; the gate refuses each of them.
"""
from __future__ import annotations

import functools

import pytest

from trainer.audit.pkg_probes import GATED, NOTES, attack_trees
from trainer.families.pkgs import pins, runner
from trainer.families.pkgs import verifier
from trainer.outcomes import Outcome
from trainer.tasks.base import Task
from trainer.verifiers.code import sandbox_stage
from trainer.verifiers.context import VerifyContext
from trainer.verifiers.limits import Limits
from trainer.verifiers.patches import tree_diff
from sandbox_helpers import bwrap_ready, require
from workers.sandbox import execute

PACKAGE = "inflection"
TARGET = "inflection/__init__.py"
RIGHT, WRONG = '}.get(number % 10, "th")', '}.get(number % 100, "th")'
RUNTIME_STOPS = ("sys_exit_import", "sys_exit_function", "os_exit_import", "os_exit_function", "kills_runner")
"""Gated attacks the runtime also stops."""
GATE_ONLY = tuple(a for a in GATED if a not in RUNTIME_STOPS)


@pytest.fixture(scope="module")
def world():
    """(task, start tree, reference tree, record, bwrap context), the task built like the build's:
    the original passes, the mutant fails some tests, the rest still pass."""
    require(*bwrap_ready())
    context = VerifyContext(execute=functools.partial(execute, backend="bwrap"))
    original = pins.source_tree(PACKAGE)
    assert original[TARGET].count(RIGHT) == 1
    start = {**original, TARGET: original[TARGET].replace(RIGHT, WRONG)}
    limits = Limits.from_params(verifier.DEFAULT_LIMITS)
    measured = []
    for tree in (original, start):
        job = runner.test_job(tree)
        verdict = execute(job.files, job.command, limits, backend="bwrap")
        assert verdict.status == "ok", verdict.error
        measured.append(runner.read_results(verdict.stdout, job))
    passing, mutant = measured
    f2p = sorted(passing.passed - mutant.passed)
    assert f2p and passing.collected > 400 and not passing.failed and passing.passed - set(f2p) <= mutant.passed
    line = start[TARGET].splitlines().index(next(x for x in start[TARGET].splitlines() if WRONG in x)) + 1
    record = {"id": f"{PACKAGE}-1-0", "level": 1, "files": [TARGET], "diff": tree_diff(original, start), "f2p": f2p,
              "mutations": [{"file": TARGET, "line": line, "kind": "constant"}]}
    task = Task("swe-pkg-named", record["id"], "ordinal(21) is 'th'; it should be 'st'.", None, 1,
                {"package": PACKAGE, "task_id": record["id"]})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verifier, "task_record", lambda t: (PACKAGE, record, sorted(passing.passed)))
        patch.setattr(verifier, "reference_tree", lambda package, r: (start, original))
        yield task, start, original, record, context


def verify(world, tree: dict[str, str], *, gated: bool = True):
    task, start, _, _, context = world
    check = verifier.pkg_tests if gated else sandbox_stage(verifier.DEFAULT_LIMITS)(
        functools.partial(verifier.judge, _gated=False))
    return check(tree_diff(start, tree), task, context=context)


def attacks(world) -> dict[str, dict[str, str]]:
    _, start, original, record, _ = world
    return attack_trees(start, original, record["files"], record["mutations"][0]["line"], record["f2p"])


def test_the_reference_passes_and_a_comment_beside_it_too(world):
    _, start, original, record, _ = world
    for tree in (original, {**original, TARGET: original[TARGET] + "# fixed\n"}):
        verdict = verify(world, tree)
        assert verdict.outcome is Outcome.PASS and verdict.reward == 1.0, verdict.details
        assert verdict.details["f2p"] == {"passed": len(record["f2p"]), "total": len(record["f2p"])}
        assert verdict.details["p2p"]["passed"] == verdict.details["p2p"]["total"] > 400
        assert verdict.details["gate"] == "passed" and verdict.details["ignored"] == []


def test_the_reference_passes_beside_large_or_broken_changes_that_count_for_nothing(world):
    """The fix beside a 1 MB log the agent left (the whole diff is over the patch bound) and a
    malformed section for a test file: only the source's section is applied. Given as one ```diff block
    after some prose, the fix passes too."""
    task, start, original, _, context = world
    diff = tree_diff(start, {**original, "notes.log": ("x" * 79 + "\n") * 13_000})
    assert len(diff) > 1_000_000
    broken = "diff --git a/test_inflection.py b/test_inflection.py\n--- a/test_inflection.py\n+++ b/test_inflection.py\n@@ -1,3 +1,3 @@\n-nothing like this\n"
    verdict = verifier.pkg_tests(diff + broken, task, context=context)
    assert verdict.outcome is Outcome.PASS, verdict.details
    assert [i["path"] for i in verdict.details["ignored"]] == ["notes.log", "test_inflection.py"]
    fenced = verifier.pkg_tests(f"The fix:\n\n```diff\n{tree_diff(start, original)}```\n", task, context=context)
    assert fenced.outcome is Outcome.PASS, fenced.details


def test_doing_nothing_fails(world):
    task, start, _, _, context = world
    for completion in ("", "# git bundle: none (no repository)\n"):
        verdict = verifier.pkg_tests(completion, task, context=context)
        assert verdict.outcome is Outcome.FAIL and "no change" in verdict.details["error"]
    touched = {**start, TARGET: start[TARGET] + "# looked at\n"}  # a change that fixes nothing runs, and fails
    verdict = verify(world, touched)
    assert verdict.outcome is Outcome.FAIL and verdict.details["f2p"]["passed"] == 0, verdict.details


@pytest.mark.parametrize("name", sorted(NOTES))
def test_every_attack_fails(world, name):
    tree = attacks(world)[name]
    verdict = verify(world, tree)
    assert verdict.outcome is not Outcome.SANDBOX_ERROR and verdict.reward == 0.0, (NOTES[name], verdict.details)
    assert verdict.outcome is not Outcome.PASS
    if name in GATED:
        assert isinstance(verdict.details["gate"], list) and verdict.details["gate"], verdict.details
    else:  # the tests ran, on the original tests and configuration
        assert verdict.details["gate"] == "passed" and verdict.details["f2p"]["passed"] == 0, verdict.details
    _, start, _, _, _ = world
    changed = {p for p in set(tree) | set(start) if tree.get(p) != start.get(p)}
    assert {i["path"] for i in verdict.details["ignored"]} == changed - {TARGET}


@pytest.mark.parametrize("name", RUNTIME_STOPS + ("forged_markers",))
def test_the_runtime_alone_stops_the_early_exits_and_forged_markers(world, name):
    """With the gate bypassed the tests run, and still fail: a test that never finished has no
    record, and a marker without the job's nonce is not read."""
    verdict = verify(world, attacks(world)[name], gated=False)
    assert verdict.details["gate"] == "bypassed"
    assert verdict.outcome not in (Outcome.PASS, Outcome.SANDBOX_ERROR) and verdict.reward == 0.0, verdict.details
    assert verdict.details["f2p"]["passed"] == 0, verdict.details


@pytest.mark.parametrize("name", GATE_ONLY)
def test_what_only_the_gate_stops(world, name):
    """The gate refuses each (test_every_attack_fails). With it bypassed, the report patched from
    the package's code PASSES, and the always-equal object passes the fail-to-pass tests that
    compare it (half of them here; those that format it fail): no check inside pytest's
    interpreter holds once the candidate's code runs there, so the gate is the defence. (The test
    files rewritten on disk fail on this task only because pytest had read the test module before
    it imported the package.)"""
    verdict = verify(world, attacks(world)[name], gated=False)
    assert verdict.outcome is not Outcome.SANDBOX_ERROR and verdict.details["gate"] == "bypassed", verdict.details
    if name == "report_patch":
        assert verdict.outcome is Outcome.PASS, verdict.details
    if name == "always_equal":
        assert verdict.details["f2p"]["passed"] > 0, verdict.details


def test_the_audit_probes_hold(world):
    """Each audit probe of the task (trainer/audit/pkg_probes.py) gets what it expects: the
    reference and its equivalent pass, nothing and every attack earn nothing."""
    from trainer.audit.pkg_probes import pkg_probes
    from trainer.audit.probes import EXPECT_NO_REWARD, EXPECT_PASS
    from trainer.audit.runner import plan_probes

    task, _, _, _, context = world
    probes = pkg_probes(task)  # reads the task through the verifier, as the world patched it
    planned, chance, skipped = plan_probes(family="pkgs", verifier={"stages": [{"type": "pkg_tests"}]}, tasks=[task],
                                           chance_tasks=[task])
    assert [(p.cls, p.completion) for p in planned] == [(p.cls, p.completion) for p in probes] and not chance and not skipped
    assert {p.cls for p in probes} >= {"gold", "equivalent", "empty"} | {f"code.{n}" for n in NOTES}
    for probe in probes:
        verdict = verifier.pkg_tests(probe.completion, probe.task, context=context)
        if probe.expect == EXPECT_PASS:
            assert verdict.outcome is Outcome.PASS, (probe.cls, verdict.details)
        else:
            assert probe.expect == EXPECT_NO_REWARD and verdict.reward == 0.0, (probe.cls, verdict.details)
            assert verdict.outcome is not Outcome.SANDBOX_ERROR, (probe.cls, verdict.details)

