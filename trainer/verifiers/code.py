"""Code unit tests, run in the sandbox.

The sandbox runtime lives in ``workers/`` and ``trainer/`` never imports it: the executor is
injected with :func:`set_sandbox_executor`; when none was set, ``workers.sandbox:execute`` is
resolved with importlib on first use. An executor has the signature of
``workers.sandbox.execute(files, command, limits=None, stdin=None, *, backend=None,
domain="default") -> Verdict`` where the verdict has ``status`` (ok, runtime_error, timeout_cpu,
timeout_wall, memory_limit, output_limit, sandbox_error), ``stdout``, ``stderr`` and ``tests``.

The job is ``solution.py`` (the model's code) plus ``temper_harness.py``; the tests and a
per-job nonce arrive on stdin, so neither is on the sandbox's disk. The harness prints one marker
line per test, ``@@temper-test <nonce> {"name": ..., "passed": ..., "message": ...}``. A pass
needs status ``ok`` and a passed marker for every test: a program that exits before the tests
ran has no markers and fails.

>>> files, command, stdin = build_job("def f(x):\\n    return x + 1\\n", [{"name": "t1", "source": "assert f(1) == 2"}], nonce="n0")
>>> sorted(files), command
(['solution.py', 'temper_harness.py'], ['python3', 'temper_harness.py'])
>>> parse_markers('@@temper-test n0 {"name": "t1", "passed": true, "message": ""}\\n@@temper-test fake {"name": "t1", "passed": true}', "n0")
[{'name': 't1', 'passed': True, 'message': ''}]
>>> extract_code("Here:\\n```python\\nprint(1)\\n```\\n")
'print(1)\\n'
"""
from __future__ import annotations

import importlib
import json
import re
import secrets
import sys
import threading
from typing import Any, Callable

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task

Executor = Callable[..., Any]
MARKER = "@@temper-test"
DEFAULT_EXECUTOR_PATH = "workers.sandbox:execute"

_executor: Executor | None = None
_lock = threading.Lock()

HARNESS = r'''
import json, sys
def _main():
    spec = json.loads(sys.stdin.read())
    nonce, tests = spec.pop("nonce"), spec.pop("tests")
    out, dumps = sys.stdout, json.dumps
    def report(name, passed, message=""):
        out.write("%s %s %s\n" % (MARKER, nonce, dumps({"name": name, "passed": passed, "message": message[:500]})))
        out.flush()
    ns = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        with open("solution.py") as f:
            source = f.read()
        exec(compile(source, "solution.py", "exec"), ns)
    except BaseException as exc:
        report("load", False, "%s: %s" % (type(exc).__name__, exc))
        return 1
    for test in tests:
        scope = dict(ns)
        try:
            exec(compile(test["source"], "test_" + test["name"], "exec"), scope)
        except BaseException as exc:
            report(test["name"], False, "%s: %s" % (type(exc).__name__, exc))
        else:
            report(test["name"], True)
    return 0
sys.exit(_main())
'''.replace("MARKER", repr(MARKER))

STATUS_OUTCOMES = {
    "runtime_error": Outcome.RUNTIME_ERROR,
    "timeout_cpu": Outcome.TIMEOUT,
    "timeout_wall": Outcome.TIMEOUT,
    "timeout": Outcome.TIMEOUT,
    "memory_limit": Outcome.MEMORY_LIMIT,
    "output_limit": Outcome.OUTPUT_LIMIT,
    "sandbox_error": Outcome.SANDBOX_ERROR,
}


def set_sandbox_executor(fn: Executor | None) -> None:
    """Inject the function that runs sandbox jobs (None: resolve ``workers.sandbox:execute`` again).

    A ``limits`` dict from a stage's params is turned into the executor module's ``Limits`` class
    when that module has one.
    """
    global _executor
    if fn is not None:
        module = sys.modules.get(getattr(fn, "__module__", "") or "")
        if module is not None:
            fn = _adapt_limits(fn, module)
    with _lock:
        _executor = fn


def get_sandbox_executor() -> Executor:
    """The injected executor, else ``workers.sandbox.execute`` resolved by importlib.

    Raises RuntimeError when neither is available.
    """
    global _executor
    with _lock:
        if _executor is None:
            module_name, attr = DEFAULT_EXECUTOR_PATH.split(":")
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                raise RuntimeError(f"no sandbox executor: set_sandbox_executor() was not called and {module_name} cannot be imported ({exc})") from None
            _executor = _adapt_limits(getattr(module, attr), module)
        return _executor


def _adapt_limits(execute: Executor, module: Any) -> Executor:
    """Turn a plain ``limits`` dict into the sandbox module's ``Limits`` class when it has one."""
    limits_cls = getattr(module, "Limits", None)
    if limits_cls is None:
        return execute

    def run(files, command, limits=None, stdin=None, **kwargs):
        if isinstance(limits, dict):
            limits = limits_cls(**limits)
        return execute(files, command, limits, stdin, **kwargs)

    return run


def extract_code(completion: str) -> str:
    """The last fenced code block (```python preferred), else the completion itself."""
    blocks = re.findall(r"```(?:python|py)\s*\n(.*?)```", completion, re.S)
    if not blocks:
        blocks = re.findall(r"```[^\n]*\n(.*?)```", completion, re.S)
    return blocks[-1] if blocks else completion


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


def normalize_tests(tests: Any, entry_point: str | None = None) -> list[dict[str, str]]:
    """Tests as ``[{"name", "source"}]`` from a list of assert strings, a list of dicts, or one
    source string (HumanEval style: defines ``check(candidate)``, called with ``entry_point``)."""
    if isinstance(tests, str):
        source = tests
        if entry_point and re.search(r"^def check\(", tests, re.M):
            source = f"{tests}\ncheck({entry_point})\n"
        return [{"name": "check", "source": source}]
    out = []
    for i, test in enumerate(tests):
        if isinstance(test, str):
            out.append({"name": f"test_{i}", "source": test})
        else:
            out.append({"name": str(test.get("name", f"test_{i}")), "source": str(test["source"])})
    return out


def build_job(code: str, tests: list[dict[str, str]], *, nonce: str | None = None) -> tuple[dict[str, str], list[str], bytes]:
    """``(files, command, stdin)`` for one sandbox execution (stdin is UTF-8 JSON bytes)."""
    nonce = nonce or secrets.token_hex(8)
    files = {"solution.py": code, "temper_harness.py": HARNESS}
    stdin = json.dumps({"nonce": nonce, "tests": tests}).encode("utf-8")
    return files, ["python3", "temper_harness.py"], stdin


def parse_markers(stdout: str | bytes, nonce: str) -> list[dict[str, Any]]:
    """The test results the harness printed with this job's nonce (others are ignored)."""
    if isinstance(stdout, bytes):
        stdout = stdout.decode("utf-8", "replace")
    prefix = f"{MARKER} {nonce} "
    results = []
    for line in stdout.splitlines():
        if line.startswith(prefix):
            try:
                item = json.loads(line[len(prefix):])
            except json.JSONDecodeError:
                continue
            results.append({"name": str(item.get("name")), "passed": item.get("passed") is True, "message": str(item.get("message", ""))})
    return results


def _field(verdict: Any, name: str, default: Any = None) -> Any:
    if isinstance(verdict, dict):
        return verdict.get(name, default)
    return getattr(verdict, name, default)


def verdict_to_verification(verdict: Any, nonce: str, test_names: list[str], *, partial_credit: bool = False) -> Verification:
    """Map a sandbox verdict to an outcome; see the module docstring for the rules."""
    status = str(getattr(_field(verdict, "status"), "value", _field(verdict, "status")))
    stdout = _field(verdict, "stdout", "") or ""
    stderr = _field(verdict, "stderr", "") or ""
    if isinstance(stderr, bytes):
        stderr = stderr.decode("utf-8", "replace")
    results = parse_markers(stdout, nonce)
    passed = {r["name"] for r in results if r["passed"]}
    failed = [r for r in results if not r["passed"]]
    details: dict[str, Any] = {
        "status": status,
        "tests": results,
        "stderr": stderr[-2000:],
        "expected": test_names,
    }
    for key in ("exit_code", "wall_s", "cpu_s"):
        value = _field(verdict, key)
        if value is not None:
            details[key] = value
    if status != "ok":
        return Verification.failed(STATUS_OUTCOMES.get(status, Outcome.SANDBOX_ERROR), **details)
    if not results:
        return Verification.failed(error="no test pass markers: the program ended before its tests ran", **details)
    if all(name in passed for name in test_names) and not failed:
        return Verification.passed(**details)
    details["failed"] = [r["name"] for r in failed] or [n for n in test_names if n not in passed]
    score = sum(1 for n in test_names if n in passed) / max(len(test_names), 1)
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
    limits: dict[str, Any] | None = None,
    backend: str | None = None,
    partial_credit: bool = False,
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
    test_list = normalize_tests(tests, entry_point)
    code = assemble_solution(completion, prompt=prompt, entry_point=entry_point)
    nonce = secrets.token_hex(8)
    files, command, stdin = build_job(code, test_list, nonce=nonce)
    try:
        execute = get_sandbox_executor()
        verdict = execute(files, command, limits, stdin, backend=backend, domain=task.domain or "default")
    except Exception as exc:  # noqa: BLE001 - the sandbox failing is infrastructure, not the model
        return Verification.failed(Outcome.SANDBOX_ERROR, error=f"{type(exc).__name__}: {exc}")
    return verdict_to_verification(verdict, nonce, [t["name"] for t in test_list], partial_credit=partial_credit)
