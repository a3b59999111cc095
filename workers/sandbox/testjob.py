"""Python unit-test jobs with explicit per-test pass markers, for callers of ``execute``.

The job is the trainer's code-test harness (:mod:`trainer.verifiers.code_harness`): a trusted,
non-dumpable harness process holds the tests and writes the markers; the program under test runs
in a second process forked before the tests are read, and each call to it crosses the process
boundary as plain data. A program that exits early, forges marker lines, patches builtins, walks
frames or returns objects that compare equal to anything passes nothing.
"""
from __future__ import annotations

from typing import Any

from trainer.verifiers.code_harness import HARNESS_FILE, PROGRAM_FILE, SPEC_FILE, build_job, job_from_files, parse_results

from .types import TestResult

__all__ = ["python_test_job", "parse_tests", "SPEC_FILE", "HARNESS_FILE", "PROGRAM_FILE"]


def python_test_job(program: str, tests: list[str] | str, **options: Any) -> tuple[dict[str, str | bytes], list[str]]:
    """Build (files, command) that run `program` against `tests` with per-test pass markers
    (``options``: :func:`~trainer.verifiers.code_harness.build_job`'s ``entry_point``, ``prelude``
    and ``test_names``).

    tests: a list of Python snippets (each one test, e.g. "assert add(1, 2) == 3"), or a test
    module string (HumanEval style) defining `check(candidate)`, with `entry_point` naming the
    function passed as candidate: each statement of check's body that contains an assert is one
    test, run in order. prelude: trusted code of the task (its prompt) the tests may use. Pass the
    files and command to execute(); the verdict's `tests` then lists every test, passed only where
    its marker came back.
    """
    job = build_job(program, tests, **options)
    return job.files, job.command


def parse_tests(files: dict, stdout: bytes) -> list[TestResult]:
    """Per-test results from the markers in stdout (only markers carrying this job's nonce)."""
    job = job_from_files(files)
    if job is None:
        return []
    return [TestResult(name, passed, message) for name, passed, message in parse_results(stdout, job)]
