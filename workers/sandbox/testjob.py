"""Python unit-test jobs with explicit per-test pass markers.

A program passes a test only when the harness printed that test's PASS marker, which it does
after the test's asserts ran. A program that exits 0 early (sys.exit, os._exit, killing itself)
prints no markers and so passes nothing.

The job files are the harness, the program and a spec (test code plus a random nonce). The
harness reads the spec and the program, deletes both files, and only then runs the program, so
the program cannot read the tests or the nonce from disk. The spec is marshal data (json would cost the harness ~25 ms of imports). Markers go to a duplicate of fd 1 taken
before the program runs and carry the nonce; the host accepts only markers with its nonce.
Limit: program and tests share one interpreter, so a program that goes looking for the harness's
frames in memory could forge markers; the verifier should treat Python as the trust boundary
only for honest-but-wrong code, the sandbox being the boundary for hostile code.
"""
from __future__ import annotations

import ast
import marshal
import re
import secrets

from .types import TestResult

SPEC_FILE = ".temper_tests.marshal"
"""Job file holding the tests and nonce; execute() parses markers when it is present."""
HARNESS_FILE = "_temper_harness.py"
"""Job file holding the harness."""
PROGRAM_FILE = "solution.py"
"""Job file holding the program under test."""

HARNESS = r'''
import marshal, os, sys

def _run():
    with open(%(spec)r, "rb") as f:
        spec = marshal.loads(f.read())
    os.unlink(%(spec)r)
    with open(%(prog)r, "r", encoding="utf-8") as f:
        program = f.read()
    os.unlink(%(prog)r)
    nonce = spec.pop("nonce")
    marker_fd = os.dup(1)

    def mark(i, ok, msg=""):
        msg = " ".join(str(msg).split())[:500]
        line = "\n@@TEMPER-TEST %%s %%d %%s %%s\n" %% (nonce, i, "PASS" if ok else "FAIL", msg)
        try:
            sys.stdout.flush()
        except BaseException:
            pass
        os.write(marker_fd, line.encode("utf-8", "replace"))

    def describe(e):
        return "%%s: %%s" %% (type(e).__name__, e)

    tests = spec["tests"]
    ns = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(compile(program, "solution.py", "exec"), ns)
    except BaseException as e:
        for i in range(len(tests)):
            mark(i, False, "program failed to load: " + describe(e))
        return
    if spec["mode"] == "statements":
        for i, code in enumerate(tests):
            try:
                exec(compile(code, "test_%%d" %% i, "exec"), ns)
            except BaseException as e:
                mark(i, False, describe(e))
            else:
                mark(i, True)
        return
    # mode "check": run the test module, then check()'s body statement by statement
    try:
        exec(compile(spec["module"], "tests.py", "exec"), ns)
        g = dict(ns)
        g["candidate"] = ns[spec["entry_point"]]
    except BaseException as e:
        for i in range(len(tests)):
            mark(i, False, "test setup failed: " + describe(e))
        return
    done = 0
    for stmt in spec["steps"]:
        try:
            exec(compile(stmt["code"], "check", "exec"), g)
        except BaseException as e:
            if stmt["test"] is not None and isinstance(e, AssertionError):
                mark(stmt["test"], False, describe(e))
                done = stmt["test"] + 1
                continue
            first = stmt["test"] if stmt["test"] is not None else done
            for i in range(first, len(tests)):
                mark(i, False, describe(e) if i == first else "not run: an earlier step failed")
            return
        if stmt["test"] is not None:
            mark(stmt["test"], True)
            done = stmt["test"] + 1

_run()
''' % {"spec": SPEC_FILE, "prog": PROGRAM_FILE}

MARKER_RE = re.compile(rb"^@@TEMPER-TEST ([0-9a-f]{32}) (\d+) (PASS|FAIL) ?(.*)$", re.MULTILINE)


def _check_steps(test_code: str, entry_point: str) -> tuple[list[str], list[dict]]:
    """Split `def check(candidate)`'s body into steps; each step containing an assert is a test."""
    try:
        tree = ast.parse(test_code)
    except SyntaxError as e:
        raise ValueError(f"test code does not parse: {e}") from None
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None or not check.args.args:
        raise ValueError("test code with entry_point must define check(candidate)")
    param = check.args.args[0].arg
    names: list[str] = []
    steps: list[dict] = []
    for stmt in check.body:
        code = ast.unparse(stmt)
        if param != "candidate":
            code = f"{param} = candidate\n" + code
        has_assert = any(isinstance(n, ast.Assert) for n in ast.walk(stmt))
        idx = None
        if has_assert:
            idx = len(names)
            names.append(f"check:L{stmt.lineno}")
        steps.append({"code": code, "test": idx})
    if not names:
        raise ValueError("check(candidate) contains no assert: nothing could ever pass")
    return names, steps


def python_test_job(
    program: str,
    tests: list[str] | str,
    *,
    entry_point: str | None = None,
    test_names: list[str] | None = None,
    python: str = "python3",
    python_args: tuple[str, ...] = ("-S",),
) -> tuple[dict[str, str | bytes], list[str]]:
    """Build (files, command) that run `program` against `tests` with per-test pass markers.

    tests: a list of Python snippets (each one test, e.g. "assert add(1, 2) == 3"), run in the
    program's namespace; or a test module string (HumanEval style) defining `check(candidate)`,
    with `entry_point` naming the function to pass as candidate: each statement of check's body
    that contains an assert is one test, run in order. Pass the files and command to execute();
    the verdict's `tests` then lists every test, passed only where its marker came back.
    python_args: interpreter flags; the default -S skips `site` (stdlib only, the same on both
    backends, ~10 ms faster); pass () for a program that needs dist-packages.
    """
    if not isinstance(program, str):
        raise TypeError(f"program must be str, got {type(program).__name__}")
    nonce = secrets.token_hex(16)
    if isinstance(tests, str):
        if entry_point is None:
            raise ValueError("a test module string needs entry_point (the function check() receives)")
        names, steps = _check_steps(tests, entry_point)
        spec = {"mode": "check", "module": tests, "entry_point": entry_point, "steps": steps,
                "tests": names}
    elif isinstance(tests, list) and tests and all(isinstance(t, str) for t in tests):
        names = test_names or [f"test_{i}" for i in range(len(tests))]
        if len(names) != len(tests):
            raise ValueError(f"test_names has {len(names)} names for {len(tests)} tests")
        spec = {"mode": "statements", "tests": list(tests)}
    else:
        raise ValueError("tests must be a non-empty list of code strings or a test module string")
    spec["nonce"] = nonce
    spec["names"] = names
    files: dict[str, str | bytes] = {HARNESS_FILE: HARNESS, PROGRAM_FILE: program, SPEC_FILE: marshal.dumps(spec)}
    return files, [python, *python_args, HARNESS_FILE]


def parse_tests(files: dict, stdout: bytes) -> list[TestResult]:
    """Per-test results from the markers in stdout (only markers carrying this job's nonce)."""
    raw = files.get(SPEC_FILE)
    if raw is None:
        return []
    spec = marshal.loads(raw if isinstance(raw, bytes) else raw.encode("latin-1"))
    nonce, names = spec["nonce"].encode(), spec["names"]
    seen: dict[int, TestResult] = {}
    for m in MARKER_RE.finditer(stdout):
        if m.group(1) != nonce:
            continue
        i = int(m.group(2))
        if i >= len(names) or i in seen:
            continue
        msg = m.group(4).decode("utf-8", "replace").rstrip("\r")
        seen[i] = TestResult(names[i], m.group(3) == b"PASS", msg)
    return [seen.get(i, TestResult(n, False, "no result: the program ended before this test ran"))
            for i, n in enumerate(names)]
