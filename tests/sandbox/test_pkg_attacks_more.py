"""More attacks on the ``pkg_tests`` stage, each in a real bwrap sandbox on a committed task of
``parse`` (its first whose fail-to-pass tests are in two test files; the starting tree keeps the
bug, so a pass would be forged).

* Forged records by path: ``parse`` imports ``logging``, and ``logging.FileHandler`` opens any
  path; ``/proc/self/fd/N`` reopened the pytest child's records pipe, and records written at
  import (before pytest ran a test) were believed: the buggy tree scored 1 with the gate passing.
  The records channel is a socket now (a socket cannot be opened by path). The gate lists
  ``FileHandler`` now, but the standard library has other ways to open a path (``gzip``,
  ``tarfile``, ``xml.etree``...), so these tests bypass the gate: the runtime must hold alone.
* Test files rewritten at run time: the same ``logging.FileHandler`` in write mode, run when the
  first test module imports ``parse``, rewrote a test module collected later to patch pytest's
  report (ungated code: any file the child imports later could be written so) before any test
  ran: the buggy tree scored 1. The pytest child now runs on a read-only
  tree (files and folders; the runner's spawner restores the modes after the run).
* Forged records by descriptor number (``os.write``, gate bypassed: a file that already uses
  ``os`` could reach it): a record counts only with the run's key, and a test with two
  records fails.
"""
from __future__ import annotations

import functools
import json

import pytest

from trainer.audit.pkg_probes import REPORT_PATCH
from trainer.families.pkgs import tasks, verifier
from trainer.outcomes import Outcome
from trainer.tasks.base import Task
from trainer.verifiers.code import sandbox_stage
from trainer.verifiers.context import VerifyContext
from trainer.verifiers.patches import tree_diff
from sandbox_helpers import bwrap_ready, require
from workers.sandbox import execute

PACKAGE = "parse"

BY_PATH = '''

def _forged():
    for n in range(3, 64):
        try:
            handler = logging.FileHandler("/proc/self/fd/%d" % n)
        except Exception:
            continue
        handler.stream.write("".join('{"t": "r", "id": "%s", "o": "p", "msg": ""}\\n' % i for i in IDS))
        handler.stream.flush()


_forged()
'''
BY_NUMBER = '''
import os as _o

for _n in range(3, 64):
    try:
        _o.write(_n, "".join('{"t": "r", "id": "%s", "o": "p", "msg": ""}\\n' % i for i in IDS).encode())
    except OSError:
        pass
'''

REWRITE = '''

def _rewritten():
    handler = logging.FileHandler("PATH", mode="w")
    handler.stream.write(bytes.fromhex("HEX").decode())
    handler.stream.close()


_rewritten()
'''


@pytest.fixture(scope="module")
def world():
    """(task, starting tree, the task's file, every selected test id, bwrap context)."""
    require(*bwrap_ready())
    built = tasks.load(PACKAGE)
    # a task whose fail-to-pass tests are in two test files or more
    record = next(r for r in built.tasks if len({i.split("::")[0] for i in r["f2p"]}) > 1)
    task = Task("swe-pkg-named", record["id"], "fix it", None, 1, {"package": PACKAGE, "task_id": record["id"]})
    start, _ = verifier.reference_tree(PACKAGE, record)
    ids = list(record["f2p"]) + sorted(set(built.passing) - set(record["f2p"]))
    context = VerifyContext(execute=functools.partial(execute, backend="bwrap"))
    return task, start, record["files"][0], ids, context


def forged(world, code: str, *, gated: bool = True):
    task, start, target, ids, context = world
    tree = {**start, target: start[target] + code.replace("IDS", json.dumps(ids))}
    check = verifier.pkg_tests if gated else sandbox_stage(verifier.DEFAULT_LIMITS)(
        functools.partial(verifier.judge, _gated=False))
    return check(tree_diff(start, tree), task, context=context)


def test_records_forged_through_a_path_to_the_records_channel_fail(world):
    verdict = forged(world, BY_PATH, gated=False)  # the gate lists FileHandler now; other file APIs remain
    assert verdict.details["gate"] == "bypassed"
    assert verdict.outcome is Outcome.FAIL and verdict.reward == 0.0, verdict.details
    assert verdict.details["f2p"]["passed"] == 0 and verdict.details["p2p"]["passed"] > 0, verdict.details


def test_test_files_rewritten_at_run_time_fail(world):
    """The task's fail-to-pass tests are in two test files; the second, collected after the first
    imported ``parse``, is rewritten to patch pytest's report to passed (ungated code) before any
    test runs."""
    task, start, target, ids, context = world
    second = list(dict.fromkeys(i.split("::")[0] for i in ids))[1]
    code = REWRITE.replace("PATH", second).replace("HEX", (REPORT_PATCH + start[second]).encode().hex())
    verdict = forged(world, code, gated=False)
    assert verdict.details["gate"] == "bypassed"
    assert verdict.outcome is not Outcome.SANDBOX_ERROR and verdict.reward == 0.0, verdict.details
    assert verdict.details["f2p"]["passed"] == 0, verdict.details


def test_records_forged_by_descriptor_number_fail_with_the_gate_bypassed(world):
    verdict = forged(world, BY_NUMBER, gated=False)
    assert verdict.details["gate"] == "bypassed"
    assert verdict.outcome is Outcome.FAIL and verdict.reward == 0.0, verdict.details
    assert verdict.details["f2p"]["passed"] == 0, verdict.details
