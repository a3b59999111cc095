"""The ``pkg_tests`` stage on the committed swe-pkg task sets, unpatched: each built package's first
task's reference passes in a real bwrap sandbox, and a change that fixes nothing fails. (The
attacks are in test_pkg_attacks.py, on a task built there.)"""
from __future__ import annotations

import functools

from trainer.families.pkgs import verifier
from trainer.outcomes import Outcome
from trainer.tasks.base import Task
from trainer.verifiers.context import VerifyContext
from trainer.verifiers.patches import tree_diff
from sandbox_helpers import bwrap_ready, require
from workers.sandbox import execute



def test_the_reference_of_each_built_package_passes_and_doing_nothing_fails():
    """The committed task sets, unpatched (tasks.starting_tree, the reference as the catalogue
    builds it): each package's first task, its reference passing every f2p and p2p test in the
    sandbox, and the starting tree with a comment added failing."""
    from trainer.families.pkgs import tasks

    require(*bwrap_ready())
    context = VerifyContext(execute=functools.partial(execute, backend="bwrap"))
    names = tasks.package_names()
    assert names, "no built task set"
    for name in names:
        record = tasks.load(name).tasks[0]
        task = Task("swe-pkg-named", record["id"], record["prompt"], None, record["level"],
                    {"package": name, "task_id": record["id"]})
        start, reference = verifier.reference_tree(name, record)
        verdict = verifier.pkg_tests(verifier.reference_diff(task), task, context=context)
        assert verdict.outcome is Outcome.PASS, (name, verdict.details)
        assert verdict.details["f2p"]["passed"] == len(record["f2p"]) > 0
        touched = {**start, record["files"][0]: start[record["files"][0]] + "# looked at\n"}
        verdict = verifier.pkg_tests(tree_diff(start, touched), task, context=context)
        assert verdict.outcome is Outcome.FAIL and verdict.details["f2p"]["passed"] < len(record["f2p"]), (name, verdict.details)
