"""python_test_job: per-test markers, HumanEval-style check(candidate) splitting."""
from __future__ import annotations

import pytest

from sandbox_helpers import bwrap_ready, require
from workers.sandbox import Limits, execute, python_test_job

LIMITS = Limits(cpu_s=3, wall_s=6)


@pytest.fixture
def bwrap():
    ok, reason = bwrap_ready()
    require(ok, reason)
    return "bwrap"


def test_statement_tests_pass_and_fail_individually(bwrap):
    files, command = python_test_job("def add(a, b):\n    return a + b\n",
                                     ["assert add(1, 2) == 3", "assert add(2, 2) == 5", "assert add(0, 0) == 0"])
    v = execute(files, command, LIMITS, backend=bwrap)
    assert v.status == "ok"
    assert [t.passed for t in v.tests] == [True, False, True]
    assert "AssertionError" in v.tests[1].message
    assert not v.all_passed


def test_humaneval_check_is_split_per_assert(bwrap):
    test = (
        "def check(candidate):\n"
        "    assert candidate(1) == 2\n"
        "    base = 10\n"
        "    assert candidate(base) == 11\n"
        "    for i in range(3):\n"
        "        assert candidate(i) == i + 1\n"
    )
    files, command = python_test_job("def inc(x):\n    return x + 1\n", test, entry_point="inc")
    v = execute(files, command, LIMITS, backend=bwrap)
    assert v.all_passed and [t.name for t in v.tests] == ["check:L2", "check:L4", "check:L5"]
    files, command = python_test_job("def inc(x):\n    return 2 if x == 1 else 0\n", test, entry_point="inc")
    v = execute(files, command, LIMITS, backend=bwrap)
    assert [t.passed for t in v.tests] == [True, False, False]


def test_program_that_crashes_at_import_fails_every_test(bwrap):
    files, command = python_test_job("raise ValueError('boom')\n", ["assert True", "assert True"])
    v = execute(files, command, LIMITS, backend=bwrap)
    assert not any(t.passed for t in v.tests)
    assert "boom" in v.tests[0].message


def test_bad_test_specs_are_refused():
    with pytest.raises(ValueError, match="entry_point"):
        python_test_job("x = 1", "def check(candidate):\n    assert True\n")
    with pytest.raises(ValueError, match="check"):
        python_test_job("x = 1", "assert True\n", entry_point="x")
    with pytest.raises(ValueError, match="non-empty"):
        python_test_job("x = 1", [])
