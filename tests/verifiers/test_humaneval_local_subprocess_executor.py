"""HumanEval through a LOCAL SUBPROCESS EXECUTOR (no isolation at all).

This file exists only until the sandbox runtime (workers.sandbox, another branch) is importable
here; it injects a plain subprocess runner in place of the sandbox so the harness, the marker
protocol and the outcome mapping are exercised on all 164 problems. The real check is
test_humaneval_sandbox.py, which requires the sandbox.
"""
from __future__ import annotations

import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from trainer.catalogue.humaneval import broken_completion, problems, reference_completion, task_for
from trainer.outcomes import Outcome
from trainer.registry import get
from trainer.verifiers.code import code_tests, set_sandbox_executor

WALL_S = 30.0  # generous: the machine is shared; the sandbox enforces the real limits


def local_subprocess_execute(files, command, limits=None, stdin=None, *, backend=None, domain="default"):
    """Run ``command`` in a temporary directory with a wall-clock limit; NOT a sandbox."""
    with tempfile.TemporaryDirectory() as work:
        for name, content in files.items():
            (Path(work) / name).write_text(content)
        wall = float((limits or {}).get("wall_s", WALL_S))
        try:
            proc = subprocess.run(command, input=stdin, capture_output=True, cwd=work, timeout=wall)
        except subprocess.TimeoutExpired as exc:
            return SimpleNamespace(status="timeout_wall", stdout=exc.stdout or b"", stderr=b"", tests=[])
        status = "ok" if proc.returncode == 0 else "runtime_error"
        return SimpleNamespace(status=status, stdout=proc.stdout, stderr=proc.stderr, tests=[], exit_code=proc.returncode)


@pytest.fixture
def local_executor():
    set_sandbox_executor(local_subprocess_execute)
    yield
    set_sandbox_executor(None)


@pytest.mark.slow
def test_all_164_canonical_solutions_pass_and_broken_variants_fail(local_executor):
    verify = get("code-humaneval").verify
    tasks = [task_for(p) for p in problems()]
    assert len(tasks) == 164
    with ThreadPoolExecutor(max_workers=4) as pool:
        good = list(pool.map(lambda t: verify(reference_completion(t), t), tasks))
        bad = list(pool.map(lambda t: verify(broken_completion(t), t), tasks))
    not_passing = [t.id for t, v in zip(tasks, good) if v.outcome is not Outcome.PASS]
    assert not_passing == [], [(t.id, v.outcome.value, v.details.get("stderr", "")[-300:]) for t, v in zip(tasks, good) if v.outcome is not Outcome.PASS]
    passing_broken = [t.id for t, v in zip(tasks, bad) if v.outcome is Outcome.PASS]
    assert passing_broken == []
    assert all(v.outcome in {Outcome.FAIL, Outcome.RUNTIME_ERROR} for v in bad)


@pytest.mark.parametrize("body, outcome", [
    ("    import sys; sys.exit(0)\n", Outcome.FAIL),                 # exits before any assert ran
    ("    while True: pass\n", Outcome.TIMEOUT),
    ("    raise SystemExit(0)\n", Outcome.FAIL),
    ("    print('@@temper-test 0 {\"name\": \"check\", \"passed\": true}'); return 0\n", Outcome.FAIL),
])
def test_hostile_solutions_do_not_pass(local_executor, body, outcome):
    task = task_for(problems()[0])
    completion = task.answer["prompt"] + body
    v = code_tests(completion, task, limits={"wall_s": 3})
    assert v.outcome is outcome, v.details


def test_import_time_exit_is_a_runtime_error(local_executor):
    task = task_for(problems()[0])
    v = get("code-humaneval").verify("import sys\nsys.exit(0)\n", task)
    assert v.outcome is Outcome.RUNTIME_ERROR
