"""The verify path verifies a task's group of completions together, their sandboxes taken in one
allocation (workers/verify_group.py), with the verdicts of one item at a time. Real sandboxes."""
from __future__ import annotations

import dataclasses

import pytest

from tests.services import require
from workers import sandbox
from workers.verify import task_to_dict, verify_items
from trainer.tasks.base import Task

DOMAIN = "group-code"
SPEC = {"stages": [{"type": "code_tests", "params": {"limits": {"cpu_s": 2, "wall_s": 4, "memory_mb": 256}}}]}
GOOD = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"
HALF = "def add(a, b):\n    return 5 if a == 2 else 0\n"
SPIN = "def add(a, b):\n    while True:\n        pass\n"
HOSTILE = "import os, signal\nos.kill(1, signal.SIGKILL)\nos.kill(os.getppid(), signal.SIGKILL)\ndef add(a, b):\n    return a + b\n"


def task(tid: str, tests=("assert add(2, 3) == 5", "assert add(1, 1) == 2")) -> dict:
    answer = {"tests": list(tests), "entry_point": "add"} if tests is not None else {"entry_point": "add"}
    return task_to_dict(Task(DOMAIN, tid, "write add", answer=answer))


@pytest.fixture
def runtime(settings, tmp_path):
    from tests.verifiers.conftest import sandbox_execute

    require(sandbox_execute() is not None, "workers.sandbox is not importable")
    settings.REDIS_URL = ""  # the quota's slots: this machine's lock files
    settings.VAR_DIR = tmp_path
    return sandbox.get_runtime()


@pytest.fixture
def acquire_many_calls(runtime, monkeypatch):
    """The sizes the pool's backend was asked for in one allocation."""
    real = getattr(runtime.backend, "acquire_many", None)
    require(real is not None, f"the {runtime.backend.name} backend has no acquire_many (a pooled backend is needed)")
    calls: list[int] = []

    def spy(domain, limits, n):
        calls.append(n)
        return real(domain, limits, n)

    monkeypatch.setattr(runtime.backend, "acquire_many", spy)
    return calls


def verdicts(results: list[dict]) -> list[tuple]:
    """Outcome, reward, sandbox status and each test's result (which of a job's CPU and wall
    limits fires first depends on the machine's load, in either path: both are a timeout)."""
    return [(r["outcome"], r["score"], "timeout" if r["outcome"] == "timeout" else r["details"].get("status"),
             [(t["name"], t["passed"]) for t in r["details"].get("tests", [])]) for r in results]


def test_grouped_verdicts_equal_one_at_a_time_and_each_group_is_one_allocation(runtime, acquire_many_calls):
    items = ([{"completion": c, "task": task("a")} for c in (GOOD, WRONG, GOOD, HOSTILE, None)]
             + [{"completion": c, "task": task("b")} for c in (HALF, SPIN, GOOD)]
             + [{"completion": c, "task": task("crash", tests=None)} for c in (GOOD, GOOD)]
             + [{"completion": GOOD, "task": task("lone")}]
             + [{"completion": GOOD, "task": {**task("bad"), "bogus": 1}}] * 2)
    grouped = verify_items(SPEC, items)
    assert sorted(acquire_many_calls) == [3, 4]  # task a's 4 (the None completion crashes first) and task b's 3 sandboxes, each in one allocation
    acquire_many_calls.clear()
    sequential = [verify_items(SPEC, [item])[0] for item in items]
    assert acquire_many_calls == []
    assert verdicts(grouped) == verdicts(sequential)
    outcomes = [r["outcome"] for r in grouped]
    assert outcomes[:3] == ["pass", "fail", "pass"] and outcomes[5:8] == ["fail", "timeout", "pass"], outcomes
    assert outcomes[3] in ("pass", "runtime_error"), grouped[3]  # its own sandbox's pid 1 is out of reach
    assert outcomes[4] == "runtime_error" and grouped[4]["details"]["stage_exception"] == "AttributeError"  # a crash: its item only
    assert outcomes[8:10] == ["runtime_error", "runtime_error"] and "no tests" in str(grouped[8]["details"]), grouped[8]
    assert outcomes[10:] == ["pass", "sandbox_error", "sandbox_error"] and "bogus" in grouped[11]["details"]["error"], outcomes


def test_a_group_larger_than_the_domain_limits_runs_one_job_at_a_time(runtime, acquire_many_calls, monkeypatch):
    items = [{"completion": c, "task": task("big")} for c in (GOOD, WRONG, GOOD)]
    with monkeypatch.context() as m:
        m.setattr(runtime, "config", dataclasses.replace(runtime.config, domain_limit=2))
        assert sandbox.group_limit() == 2
        assert [r["outcome"] for r in verify_items(SPEC, items)] == ["pass", "fail", "pass"]
    assert [r["outcome"] for r in verify_items(SPEC, items, max_concurrent_sandboxes=2)] == ["pass", "fail", "pass"]
    assert acquire_many_calls == []  # over the pool's limit, then over the domain's quota: no group allocation


def test_a_groups_quota_slots_are_all_taken_at_once_or_none_is_held():
    from workers.slots import LocalSlots, domain_slots_now

    slots = LocalSlots()
    other = slots.try_acquire(DOMAIN, 3)  # another worker's job holds one of the 3
    with domain_slots_now(slots, DOMAIN, 3, 3) as held:
        assert held is False and slots.held(DOMAIN) == 1  # not all free now: none kept
    with domain_slots_now(slots, DOMAIN, 3, 2) as held:
        assert held is True and slots.held(DOMAIN) == 3
    assert slots.held(DOMAIN) == 1
    slots.release(DOMAIN, other)
