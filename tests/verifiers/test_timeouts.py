"""A stage that never returns is cut at its timeout from outside, and the caller stays responsive."""
from __future__ import annotations

import os
import threading

import pytest

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.cascade import run_cascade
from trainer.verifiers.isolation import ProcessPool
from trainer.verifiers.context import VerifyContext
from trainer.verifiers.stages import STAGES, StageType, register_stage

THIS = __name__


def endless_loop(completion: str, task: Task) -> Verification:
    while True:
        pass


def report_pid(completion: str, task: Task) -> Verification:
    return Verification.passed(pid=os.getpid())


def catches_everything(completion: str, task: Task) -> Verification:
    import time

    while True:
        try:
            time.sleep(3600)
        except BaseException:  # noqa: BLE001 - a hostile stage ignoring interruption
            pass


@pytest.fixture(scope="module", autouse=True)
def test_stage_types():
    for name, fn in [("t_loop", "endless_loop"), ("t_pid", "report_pid"), ("t_stubborn", "catches_everything")]:
        register_stage(StageType(name, f"{THIS}:{fn}", {"type": "object", "additionalProperties": False, "properties": {}}))
    yield
    for name in ("t_loop", "t_pid", "t_stubborn"):
        STAGES.pop(name, None)


@pytest.fixture
def pool():
    p = ProcessPool(max_workers=1)
    yield p
    p.close()


def test_endless_loop_becomes_timeout_and_worker_is_replaced(pool):
    t = Task("test", "1", "q")
    first_pid = run_cascade({"stages": [{"type": "t_pid"}]}, "", t, pool=pool).details["pid"]
    v = run_cascade({"stages": [{"type": "t_loop", "timeout_s": 0.5}]}, "", t, pool=pool)
    assert v.outcome is Outcome.TIMEOUT
    assert v.reward == 0.0
    with pytest.raises(ProcessLookupError):
        os.kill(first_pid, 0)  # the looping worker was killed, not left spinning
    after = run_cascade({"stages": [{"type": "t_pid"}]}, "", t, pool=pool)
    assert after.outcome is Outcome.PASS and after.details["pid"] != first_pid


def test_stage_that_swallows_signals_is_still_cut(pool):
    v = run_cascade({"stages": [{"type": "t_stubborn", "timeout_s": 0.5}]}, "", Task("test", "1", "q"), pool=pool)
    assert v.outcome is Outcome.TIMEOUT


def test_symbolic_expression_that_keeps_math_verify_busy_is_timeout(pool):
    """math-verify on a tower of exponents would run for minutes; the stage is cut at 2 s."""
    t = Task("test", "1", "q", answer="2^{2^{2^{2^{2^{2}}}}} + 1")
    v = run_cascade({"stages": [{"type": "math", "timeout_s": 2.0}]}, "$\\boxed{3^{3^{3^{3^{3}}}} - 7}$", t, pool=pool)
    assert v.outcome is Outcome.TIMEOUT
    ok = run_cascade({"stages": [{"type": "math"}]}, "$\\boxed{4}$", Task("test", "2", "q", answer="2+2"), pool=pool)
    assert ok.outcome is Outcome.PASS


def test_thread_stage_hanging_is_timeout():
    release = threading.Event()
    context = VerifyContext.with_judges({"hanging": lambda request: release.wait() and None})
    try:
        v = run_cascade({"stages": [{"type": "judge", "params": {"judge": "hanging"}, "timeout_s": 0.3}]}, "x", Task("t", "1", "q"),
                        context=context)
        # A judge that times out is the judge's failure: judge_error, masked, never a reward of 0.
        assert v.outcome is Outcome.JUDGE_ERROR and v.reward is None
        assert v.details["stage_outcome"] == "timeout"
    finally:
        release.set()


def test_callers_on_other_threads_are_not_blocked_by_a_hanging_stage():
    pool = ProcessPool(max_workers=2)
    results = {}
    try:
        hang = threading.Thread(target=lambda: results.setdefault("hang", run_cascade(
            {"stages": [{"type": "t_loop", "timeout_s": 3.0}]}, "", Task("t", "1", "q"), pool=pool)))
        hang.start()
        quick = [run_cascade({"stages": [{"type": "exact"}]}, "a", Task("t", str(i), "q", answer="a"), pool=pool) for i in range(20)]
        assert "hang" not in results  # the quick verifications finished while the loop still ran
        assert all(v.outcome is Outcome.PASS for v in quick)
        hang.join()
        assert results["hang"].outcome is Outcome.TIMEOUT
    finally:
        pool.close()


def test_a_worker_started_from_a_thread_that_ended_still_answers():
    """Workers die with the thread that started them (PR_SET_PDEATHSIG): they must be started
    from one long-lived thread, not from the caller's (a thread pool's threads come and go)."""
    pool = ProcessPool(max_workers=1)
    first: list[Verification] = []
    thread = threading.Thread(target=lambda: first.append(pool.call(f"{THIS}:report_pid", "", Task("d", "1", "q"), {}, 10.0)))
    thread.start()
    thread.join()
    second = pool.call(f"{THIS}:report_pid", "", Task("d", "1", "q"), {}, 10.0)
    pool.close()
    assert first[0].outcome is Outcome.PASS and second.outcome is Outcome.PASS, second.details
    assert second.details["pid"] == first[0].details["pid"]  # the same worker, alive after its starter ended


def test_a_stage_timeout_measures_the_stage_not_the_workers_start_or_imports():
    """A cold worker's start, the import of its stage's module and the function's warm-up happen
    before the stage's clock starts: a right answer is not failed as a timeout because a loaded
    machine imported slowly."""
    from tests.verifiers import slow_import_stage

    pool = ProcessPool(max_workers=1)
    try:
        v = pool.call("tests.verifiers.slow_import_stage:passes", "42", Task("d", "1", "q"), {}, slow_import_stage.IMPORT_S / 3)
        assert v.outcome is Outcome.PASS and v.details["answer"] == "42", v.details
        loop = pool.call(f"{THIS}:endless_loop", "", Task("d", "2", "q"), {}, 0.5)
        assert loop.outcome is Outcome.TIMEOUT  # the stage itself is still cut at its timeout
    finally:
        pool.close()


def test_a_stage_function_that_cannot_be_imported_is_the_verifiers_failure_masked():
    pool = ProcessPool(max_workers=1)
    try:
        v = pool.call("tests.verifiers.no_such_stage_module:check", "42", Task("d", "1", "q"), {}, 5.0)
        assert v.outcome is Outcome.JUDGE_ERROR and v.reward is None
        assert "no_such_stage_module" in v.details["error"]
        after = pool.call(f"{THIS}:report_pid", "", Task("d", "2", "q"), {}, 5.0)
        assert after.outcome is Outcome.PASS  # the pool goes on with a new worker
    finally:
        pool.close()
