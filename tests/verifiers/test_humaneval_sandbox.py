"""HumanEval through the real sandbox runtime (workers.sandbox): required in CI."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from trainer.catalogue.humaneval import broken_completion, problems, reference_completion, task_for
from trainer.outcomes import Outcome
from trainer.catalogue import get
from trainer.verifiers.code import code_tests


@pytest.mark.slow
def test_all_164_canonical_solutions_pass_and_broken_variants_fail_in_the_sandbox(real_sandbox):
    verify = get("code-humaneval").cascade(real_sandbox)
    tasks = [task_for(p) for p in problems()]
    with ThreadPoolExecutor(max_workers=4) as pool:
        good = list(pool.map(lambda t: verify(reference_completion(t), t), tasks))
        bad = list(pool.map(lambda t: verify(broken_completion(t), t), tasks))
    assert [(t.id, v.outcome.value) for t, v in zip(tasks, good) if v.outcome is not Outcome.PASS] == []
    assert [t.id for t, v in zip(tasks, bad) if v.outcome is Outcome.PASS] == []
    assert not any(v.is_infrastructure for v in good + bad)


def test_endless_solution_is_timeout_in_the_sandbox(real_sandbox):
    task = task_for(problems()[0])
    v = code_tests(task.answer["prompt"] + "    while True: pass\n", task, limits={"cpu_s": 2, "wall_s": 4}, context=real_sandbox)
    assert v.outcome is Outcome.TIMEOUT


def test_exit_before_the_tests_and_forged_markers_fail_in_the_sandbox(real_sandbox):
    task = task_for(problems()[0])
    forged = "    print('@@temper-test 0 {\"name\": \"check\", \"passed\": true}')\n    import os; os._exit(0)\n"
    assert code_tests(task.answer["prompt"] + forged, task, context=real_sandbox).outcome is Outcome.FAIL
    assert code_tests("import sys\nsys.exit(0)\n", task, context=real_sandbox).outcome is Outcome.RUNTIME_ERROR


# --- hostile programs (issue 14): none passes, none is masked as an infrastructure outcome -----

from trainer.audit.code_probes import PROGRAMS, hostile_programs  # noqa: E402

SAMPLE = [task_for(p) for p in problems()[::41]]  # 4 problems of different shapes
HOSTILE_LIMITS = {"cpu_s": 3, "wall_s": 6, "memory_mb": 256}


@pytest.mark.parametrize("probe", sorted(PROGRAMS))
def test_hostile_program_never_passes_nor_is_masked(real_sandbox, probe):
    for task in SAMPLE:
        completion = hostile_programs(task.answer["entry_point"], task.answer["prompt"])[probe]
        v = code_tests(completion, task, limits=HOSTILE_LIMITS, context=real_sandbox)
        assert v.outcome is not Outcome.PASS and v.score == 0.0, (task.id, v.details)
        assert not v.is_infrastructure, (task.id, v.outcome, v.details.get("stderr", "")[-500:])


@pytest.mark.slow
def test_always_equal_results_fail_every_problem(real_sandbox):
    """HumanEval's own harness passes 155/164 problems with an object whose __eq__ says True."""
    tasks = [task_for(p) for p in problems()]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda t: code_tests(hostile_programs(t.answer["entry_point"], t.answer["prompt"])["always_equal"],
                                                     t, limits=HOSTILE_LIMITS, context=real_sandbox), tasks))
    assert [t.id for t, v in zip(tasks, results) if v.outcome is Outcome.PASS or v.is_infrastructure] == []


@pytest.mark.parametrize("body, outcome", [
    ("    import sys; sys.exit(0)\n", Outcome.FAIL),                 # exits inside the call: that test fails
    ("    raise SystemExit(0)\n", Outcome.FAIL),
    ("    print('@@TEMPER-TEST ' + '0' * 32 + ' 0 PASS'); return 0\n", Outcome.FAIL),
])
def test_exits_and_prints_inside_the_function_fail(real_sandbox, body, outcome):
    task = task_for(problems()[0])
    assert code_tests(task.answer["prompt"] + body, task, limits=HOSTILE_LIMITS, context=real_sandbox).outcome is outcome


def test_the_prompts_helpers_come_from_the_task_not_the_program(real_sandbox):
    """HumanEval/32's tests call the prompt's poly(); a program that redefines poly to return 0
    (so any root 'works') must not pass."""
    task = task_for(problems()[32])
    cheat = f"```python\n{task.answer['prompt']}    return 0.0\n\ndef poly(xs, x):\n    return 0.0\n```"
    assert code_tests(cheat, task, limits=HOSTILE_LIMITS, context=real_sandbox).outcome is not Outcome.PASS
    assert code_tests(reference_completion(task), task, limits=HOSTILE_LIMITS, context=real_sandbox).outcome is Outcome.PASS
