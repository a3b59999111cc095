"""Code unit tests, run in the sandbox against hostile code.

The sandbox runtime lives in ``workers/`` and ``trainer/`` never names it: the stage runs jobs
through the :class:`~trainer.verifiers.context.VerifyContext` its cascade was compiled with
(``context.execute``, inside one of the domain's sandbox places, ``context.slot``). Without an
executor the stage reports ``sandbox_error`` (infrastructure: masked, never a reward of 0).

The job is built by :mod:`trainer.verifiers.code_harness`: a trusted harness process holds the
tests and the verdict, the program runs in a second process and every call to it crosses the
process boundary as plain data. A pass needs status ``ok`` and a passed marker carrying the job's
nonce for every test; a program that fails to load is a ``runtime_error``. ``params.limits`` are
a :class:`~trainer.verifiers.limits.Limits` (validated with the domain; the defaults without).

>>> extract_code("Here:\\n```python\\nprint(1)\\n```\\n")
'print(1)\\n'
>>> normalize_tests(["assert f(1) == 2", {"name": "big", "source": "assert f(9) == 10"}])
(['assert f(1) == 2', 'assert f(9) == 10'], ['test_0', 'big'])
>>> from trainer.tasks.base import Task
>>> code_tests("def f(x):\\n    return x", Task("d", "1", "q", answer=["assert f(1) == 1"])).outcome.value
'sandbox_error'
"""
from __future__ import annotations

import functools
import re
import xml.etree.ElementTree as ElementTree
from typing import Any, Callable

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.artifacts import Artifact, Outputs
from trainer.verifiers.code_harness import LOAD_FAILED_EXIT, CodeTestJob, build_job, parse_results
from trainer.verifiers.context import NO_CONTEXT, VerifyContext
from trainer.verifiers.limits import Limits

STATUS_OUTCOMES = {
    "runtime_error": Outcome.RUNTIME_ERROR,
    "timeout_cpu": Outcome.TIMEOUT,
    "timeout_wall": Outcome.TIMEOUT,
    "timeout": Outcome.TIMEOUT,
    "memory_limit": Outcome.MEMORY_LIMIT,
    "output_limit": Outcome.OUTPUT_LIMIT,
    "sandbox_error": Outcome.SANDBOX_ERROR,
}
"""Sandbox statuses other than ``ok``, as outcomes (an unknown status is ``sandbox_error``)."""


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block as ``(info string, body)``, in one left-to-right pass (a regex with a
    lazy body and an open info string is quadratic over thousands of unclosed fences).

    >>> fenced_blocks("a\\n```py\\nx = 1\\n```\\n```\\ny\\n```" + "```diff" * 3)
    [('py', 'x = 1\\n'), ('', 'y\\n')]
    """
    out = []
    pos = text.find("```")
    while pos >= 0:
        newline = text.find("\n", pos + 3)
        if newline < 0:
            break
        close = text.find("```", newline + 1)
        if close < 0:
            break
        out.append((text[pos + 3:newline].strip(), text[newline + 1:close]))
        pos = text.find("```", close + 3)
    return out


def extract_code(completion: str) -> str:
    """The last fenced code block (```python preferred), else the completion itself."""
    blocks = fenced_blocks(completion)
    python = [body for info, body in blocks if info in ("python", "py")]
    if python or blocks:
        return (python or [body for _, body in blocks])[-1]
    return completion


def assemble_solution(completion: str, *, prompt: str | None = None, entry_point: str | None = None) -> str:
    """The program to test: the extracted code, after ``prompt`` when the code is a continuation
    (it does not define ``entry_point`` itself)."""
    code = extract_code(completion)
    if prompt and entry_point and not re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.M):
        return prompt + code
    if prompt and not entry_point:
        return prompt + code
    # keep the prompt's imports and helpers when the model wrote the whole function again
    header = prompt.split(f"def {entry_point}", 1)[0] if prompt and entry_point else ""
    return header + code


def normalize_tests(tests: Any, entry_point: str | None = None) -> tuple[list[str] | str, list[str] | None]:
    """``(tests, names)`` for :func:`~trainer.verifiers.code_harness.build_job`: a HumanEval-style
    module defining ``check(candidate)`` stays one string (split per assert by the harness);
    a list of assert strings or of ``{"name", "source"}`` dicts becomes sources and names; any
    other module string is one test."""
    if isinstance(tests, str):
        if entry_point and re.search(r"^def check\(", tests, re.M):
            return tests, None
        return [tests], ["check"]
    sources, names = [], []
    for i, test in enumerate(tests):
        if isinstance(test, str):
            sources.append(test)
            names.append(f"test_{i}")
        else:
            sources.append(str(test["source"]))
            names.append(str(test.get("name", f"test_{i}")))
    return sources, names


def _field(verdict: Any, name: str, default: Any = None) -> Any:
    if isinstance(verdict, dict):
        return verdict.get(name, default)
    return getattr(verdict, name, default)


REPORT_BYTES = 64 << 10
"""Bytes kept of a test job's report and of its output log (:func:`report_artifacts`)."""
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def junit_report(suite: str, tests: list[dict[str, Any]]) -> bytes:
    """The tests' results as a JUnit XML report (what CI tools read), written by trusted code from
    the parsed verdict; characters XML cannot hold become ``?``.

    >>> print(junit_report("t", [{"name": "a", "passed": True}, {"name": "b<", "passed": False, "message": "x\\x00"}]).decode())
    <?xml version='1.0' encoding='utf-8'?>
    <testsuite name="t" tests="2" failures="1"><testcase name="a" /><testcase name="b&lt;"><failure message="x?" /></testcase></testsuite>
    """
    def clean(text: Any) -> str:
        return _NOT_XML.sub("?", str(text))

    failures = sum(1 for t in tests if not t.get("passed"))
    root = ElementTree.Element("testsuite", name=clean(suite), tests=str(len(tests)), failures=str(failures))
    for test in tests:
        case = ElementTree.SubElement(root, "testcase", name=clean(test.get("name", "")))
        if not test.get("passed"):
            ElementTree.SubElement(case, "failure", message=clean(test.get("message", ""))[:2000])
    return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)


def report_artifacts(suite: str, verification: Verification, verdict: Any) -> list[Artifact]:
    """A test job's artifacts: ``report.xml`` (its tests' results as JUnit XML, from the verdict's
    markers) and ``output.log`` (what the program wrote: the job's stderr), each within
    :data:`REPORT_BYTES`. None for a job that never ran (the sandbox failed: nothing to report)."""
    tests = verification.details.get("tests")
    if verification.outcome is Outcome.SANDBOX_ERROR or not isinstance(tests, list):
        return []
    stderr = _field(verdict, "stderr", b"") or b""
    return [Artifact.of("report.xml", junit_report(suite, tests), REPORT_BYTES),
            Artifact.of("output.log", stderr, REPORT_BYTES)]


def verdict_to_verification(verdict: Any, job: CodeTestJob, *, partial_credit: bool = False) -> Verification:
    """Map a sandbox verdict to an outcome; see the module docstring for the rules."""
    status = str(getattr(_field(verdict, "status"), "value", _field(verdict, "status")))
    stdout = _field(verdict, "stdout", "") or ""
    stderr = _field(verdict, "stderr", "") or ""
    if isinstance(stderr, bytes):
        stderr = stderr.decode("utf-8", "replace")
    results = [{"name": n, "passed": p, "message": m} for n, p, m in parse_results(stdout, job)]
    passed = [r["name"] for r in results if r["passed"]]
    details: dict[str, Any] = {"status": status, "tests": results, "stderr": stderr[-2000:]}
    for key in ("exit_code", "wall_s", "cpu_s"):
        value = _field(verdict, key)
        if value is not None:
            details[key] = value
    for key in ("wait_s", "pool_size", "creations_per_s"):  # the sandbox pool's figures, for the run's metrics
        value = _field(verdict, key)
        if value is not None:
            details["sandbox_" + key] = value
    if status == "runtime_error" and _field(verdict, "exit_code") == LOAD_FAILED_EXIT:
        details["error"] = results[0]["message"] if results else "the program failed to load"
    if status != "ok":
        return Verification.failed(STATUS_OUTCOMES.get(status, Outcome.SANDBOX_ERROR), **details)
    if len(passed) == len(job.names):
        return Verification.passed(**details)
    details["failed"] = [r["name"] for r in results if not r["passed"]]
    score = len(passed) / max(len(job.names), 1)
    if partial_credit and score > 0:
        return Verification(Outcome.PARTIAL, score, details)
    return Verification.failed(**details)


def code_tests(
    completion: str,
    task: Task,
    *,
    tests: Any = None,
    entry_point: str | None = None,
    prompt: str | None = None,
    limits: dict[str, Any] | Limits | None = None,
    backend: str | None = None,
    partial_credit: bool = False,
    context: VerifyContext = NO_CONTEXT,
) -> Verification:
    """Stage ``code_tests``: run the task's tests against the completion's code in the sandbox.

    ``tests``, ``entry_point`` and ``prompt`` default to ``task.answer``'s keys of those names
    (``task.answer`` may also be the tests themselves).
    """
    answer = task.answer if isinstance(task.answer, dict) else {"tests": task.answer}
    tests = tests if tests is not None else answer.get("tests")
    entry_point = entry_point or answer.get("entry_point")
    prompt = prompt if prompt is not None else answer.get("prompt")
    if tests is None:
        raise ValueError(f"task {task.id} has no tests")
    sources, names = normalize_tests(tests, entry_point)
    code = assemble_solution(completion, prompt=prompt, entry_point=entry_point)
    try:
        job = build_job(code, sources, entry_point=entry_point, prelude=prompt, test_names=names)
    except ValueError as exc:
        raise ValueError(f"task {task.id}: {exc}") from None
    typed = Limits.from_params(limits)
    verdict = run_job(context, task, job.files, job.command, typed, backend)
    if isinstance(verdict, Verification):
        return verdict
    return verdict_to_verification(verdict, job, partial_credit=partial_credit)


SandboxRun = Callable[..., Any]
"""``run(files, command, outputs=None)``: one job in a sandbox stage's sandbox, within the stage's
limits (what :func:`run_job` returns); ``outputs`` (:class:`~trainer.verifiers.artifacts.Outputs`)
names the files it hands back, as the verdict's ``artifacts``."""


def sandbox_stage(defaults: dict[str, Any]) -> Callable[[Callable[[str, Task, SandboxRun], Verification]], Callable[..., Verification]]:
    """A verifier stage that runs jobs in the sandbox, from ``check(completion, task, run)``: the
    stage takes the params every such stage has (``limits`` over ``defaults``, ``backend``, and
    the ``context`` that holds the sandbox), and ``check`` runs its jobs with ``run``."""
    def wrap(check: Callable[[str, Task, SandboxRun], Verification]) -> Callable[..., Verification]:
        @functools.wraps(check)
        def stage(completion: str, task: Task, *, limits: dict[str, Any] | Limits | None = None, backend: str | None = None,
                  context: VerifyContext = NO_CONTEXT) -> Verification:
            def run(files: dict, command: list[str], outputs: Outputs | None = None) -> Any:
                # The limits are read when a job is about to run: a completion refused before any
                # job (two code blocks, no change) is refused whatever its stage's limits say.
                typed = limits if isinstance(limits, Limits) else Limits.from_params({**defaults, **(limits or {})})
                return run_job(context, task, files, command, typed, backend, outputs)
            return check(completion, task, run)
        return stage
    return wrap


def run_job(context: VerifyContext, task: Task, files: dict, command: list[str], limits: Limits,
            backend: str | None, outputs: Outputs | None = None) -> Any:
    """One sandbox job in one of the task's domain's sandbox places: the executor's verdict, or
    a ``sandbox_error`` Verification when there is no sandbox or it failed (infrastructure,
    masked; never the model's reward). ``outputs`` reach the executor only when given (an
    executor that hands back no files need not know the argument)."""
    if context.execute is None:
        return Verification.failed(Outcome.SANDBOX_ERROR, error="no sandbox in this verify context (the cascade was compiled without one)")
    domain = task.domain or "default"
    try:
        with context.slot(domain, limits):
            handed = {"outputs": outputs} if outputs is not None else {}
            return context.execute(files, command, limits, None, backend=backend, domain=domain, **handed)
    except Exception as exc:  # noqa: BLE001 - the sandbox failing is infrastructure, not the model
        return Verification.failed(Outcome.SANDBOX_ERROR, error=f"{type(exc).__name__}: {exc}")
