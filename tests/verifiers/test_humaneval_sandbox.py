"""HumanEval through the real sandbox runtime (workers.sandbox): required in CI."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from trainer.catalogue.humaneval import broken_completion, problems, reference_completion, task_for
from trainer.outcomes import Outcome
from trainer.registry import get
from trainer.verifiers.code import code_tests


@pytest.mark.slow
def test_all_164_canonical_solutions_pass_and_broken_variants_fail_in_the_sandbox(real_sandbox):
    verify = get("code-humaneval").verify
    tasks = [task_for(p) for p in problems()]
    with ThreadPoolExecutor(max_workers=4) as pool:
        good = list(pool.map(lambda t: verify(reference_completion(t), t), tasks))
        bad = list(pool.map(lambda t: verify(broken_completion(t), t), tasks))
    assert [(t.id, v.outcome.value) for t, v in zip(tasks, good) if v.outcome is not Outcome.PASS] == []
    assert [t.id for t, v in zip(tasks, bad) if v.outcome is Outcome.PASS] == []
    assert not any(v.is_infrastructure for v in good + bad)


def test_endless_solution_is_timeout_in_the_sandbox(real_sandbox):
    task = task_for(problems()[0])
    v = code_tests(task.answer["prompt"] + "    while True: pass\n", task, limits={"cpu_s": 2, "wall_s": 4})
    assert v.outcome is Outcome.TIMEOUT


def test_exit_before_the_tests_and_forged_markers_fail_in_the_sandbox(real_sandbox):
    task = task_for(problems()[0])
    forged = "    print('@@temper-test 0 {\"name\": \"check\", \"passed\": true}')\n    import os; os._exit(0)\n"
    assert code_tests(task.answer["prompt"] + forged, task).outcome is Outcome.FAIL
    assert code_tests("import sys\nsys.exit(0)\n", task).outcome is Outcome.RUNTIME_ERROR
