"""The code-test harness on its own (run as a plain subprocess here; the sandbox suites run it
isolated): what crosses between the harness and the program, and what cannot."""
from __future__ import annotations

import importlib.util
import marshal
import os
import subprocess
import sys
import tempfile

import pytest

from trainer.verifiers.code_harness import LOAD_FAILED_EXIT, SPEC_FILE, build_job, exported_names, parse_results, trusted_prelude


def run(program: str, tests, **kw) -> tuple[int, list[tuple[str, bool, str]]]:
    return run_job(build_job(program, tests, **kw))


def run_job(job, files: dict | None = None) -> tuple[int, list[tuple[str, bool, str]]]:
    with tempfile.TemporaryDirectory() as work:
        for name, content in (files or job.files).items():
            with open(os.path.join(work, name), "wb") as f:
                f.write(content.encode() if isinstance(content, str) else content)
        proc = subprocess.run([sys.executable, *job.command[1:]], cwd=work, capture_output=True, timeout=60)
    return proc.returncode, parse_results(proc.stdout, job)


def passed(results) -> list[bool]:
    return [ok for _, ok, _ in results]


def test_values_keep_their_types_across_the_boundary():
    program = "def f():\n    return [1, (2, 3.5), {'a': {1, 2}, 3: frozenset()}, b'x', bytearray(b'y'), None, True, 10**40, -0.0, 2j, 'é']\n"
    test = ("r = f()\n"
            "assert r == [1, (2, 3.5), {'a': {1, 2}, 3: frozenset()}, b'x', bytearray(b'y'), None, True, 10**40, -0.0, 2j, 'é']\n"
            "assert type(r[1]) is tuple and type(r[6]) is bool and type(r[0]) is int and str(r[8]) == '-0.0'\n")
    assert passed(run(program, [test])[1]) == [True]


def test_non_finite_floats_cross_but_never_equal():
    program = "def f():\n    return float('nan'), float('inf')\n"
    rc, results = run(program, ["n, i = f()\nassert n != n and i > 1e308", "assert f()[0] == float('nan')"])
    assert passed(results) == [True, False]


@pytest.mark.parametrize("body", [
    "class A:\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\ndef f(x): return A()\n",
    "class S(str):\n    def __eq__(self, o): return True\n    __hash__ = str.__hash__\ndef f(x): return S('no')\n",
    "class I(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\ndef f(x): return I(0)\n",
    "def f(x): return (i for i in [])\n",
])
def test_objects_that_equal_anything_cannot_cross(body):
    assert passed(run(body, ["assert f(1) == 'yes'"])[1]) == [False]


def test_iterators_become_lists():
    assert passed(run("def f(n): return map(str, range(n))\n", ["assert list(f(3)) == ['0', '1', '2']"])[1]) == [True]


@pytest.mark.parametrize("attack", [
    "import builtins\nbuiltins.exec = lambda *a, **k: None\n",
    "import builtins\n_c = builtins.compile\nbuiltins.compile = lambda s, *a, **k: _c('pass', *a[1:] if False else 'x', 'exec')\n",
    "import builtins\nbuiltins.AssertionError = KeyboardInterrupt\n",
    "abs = lambda x: 0\nlen = lambda x: 0\n",
    "import sys\nsys.stdout.write('\\n@@TEMPER-TEST ' + '0' * 32 + ' 0 PASS\\n')\n",
])
def test_tampering_in_the_program_reaches_nothing_in_the_harness(attack):
    program = attack + "def f(x):\n    return 5\n"
    rc, results = run(program, ["assert abs(f(1) - 7) < 1e-9", "assert len([f(1)]) == 1 and f(1) == 7"])
    assert passed(results) == [False, False], results


def test_stop_iteration_cannot_cut_a_tests_loop_short():
    rc, results = run("def f(x):\n    raise StopIteration\n", ["for y in map(f, [1, 2]):\n    assert y == 99"])
    assert passed(results) == [False]


def test_builtin_exceptions_are_raised_as_themselves():
    program = "def f(x):\n    raise ValueError('bad ' + str(x))\n"
    test = "try:\n    f(3)\nexcept ValueError as e:\n    assert str(e) == 'bad 3'\nelse:\n    assert False"
    assert passed(run(program, [test])[1]) == [True]


def test_a_program_that_kills_its_harness_passes_nothing():
    program = "import os, signal\ndef f(x):\n    os.kill(os.getppid(), signal.SIGKILL)\n"
    rc, results = run(program, ["assert f(1) is None", "assert True"])
    assert rc != 0 and passed(results) == [False, False]


def test_a_program_that_fails_to_load_fails_every_test_with_its_own_exit_code():
    rc, results = run("import sys\nsys.exit(0)\n", ["assert True", "assert True"])
    assert rc == LOAD_FAILED_EXIT and passed(results) == [False, False] and "SystemExit" in results[0][2]


def test_the_prompt_is_trusted_code_and_the_entry_point_comes_from_the_program():
    prompt = "def helper(x):\n    return x * 2\n\ndef f(x):\n    \"\"\"Twice x.\"\"\"\n"
    program = prompt + "    return helper(x)\n\ndef helper(x):\n    return 0\n"
    tests = "def check(candidate):\n    assert candidate(2) == helper(2)\n    assert candidate(3) == 6\n"
    rc, results = run(program, tests, entry_point="f", prelude=prompt)
    assert passed(results) == [False, False]  # the program's own helper returns 0: f(2) == 0 != 4
    rc, results = run(prompt + "    return 2 * x\n", tests, entry_point="f", prelude=prompt)
    assert passed(results) == [True, True]


def test_exported_names_and_prelude():
    assert exported_names(["import math\nassert math.isclose(area(1), math.pi)", "x = [g(i) for i in range(3)]"], "", None) == ["area", "g"]
    assert exported_names(["assert candidate(1)"], "def poly(x): pass\n", "find_zero") == ["find_zero"]
    assert trusted_prelude("def f(x):") == "def f(x):\n    pass\n"
    assert trusted_prelude("this is not code (") == ""


def test_bytecode_for_another_python_falls_back_to_the_source():
    from trainer.verifiers.code_harness import BYTECODE_FILE

    job = build_job("def f(x):\n    return x + 1\n", ["assert f(1) == 2"])
    with tempfile.TemporaryDirectory() as work:
        for name, content in job.files.items():
            data = content.encode() if isinstance(content, str) else content
            if name == BYTECODE_FILE:
                data = b"\x00\x00\r\n" + data[4:]  # another Python's magic
            with open(os.path.join(work, name), "wb") as f:
                f.write(data)
        proc = subprocess.run([sys.executable, *job.command[1:]], cwd=work, capture_output=True, timeout=60)
    assert proc.returncode == 0 and parse_results(proc.stdout, job) == [("test_0", True, "")]


@pytest.mark.parametrize("sig", [9, 11, 24])
def test_a_program_killed_by_a_signal_ends_the_job_by_that_signal(sig):
    """SIGXCPU is the CPU limit and SIGKILL may be the memory limit: the job's outcome is that
    limit (the sandbox classifies the signal), not a test failure."""
    program = f"import os\ndef f(x):\n    os.kill(os.getpid(), {sig})\n"
    rc, results = run(program, ["assert f(1) is None"])
    assert rc == -sig and passed(results) == [False]


def test_the_host_compiles_the_test_code_and_the_harness_runs_it_only_when_it_is_for_its_python():
    tests = "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(2) == 4\n"
    job = build_job("def f(x):\n    return x + 1\n", tests, entry_point="f")
    spec = marshal.loads(job.files[SPEC_FILE])
    magic, blob = spec["bytecode"]
    assert magic == importlib.util.MAGIC_NUMBER
    assert set(marshal.loads(blob)) == {"prelude", "module", ("step", 0), ("step", 1)}
    assert passed(run_job(job)[1]) == [True, False]
    spec["bytecode"] = (b"\x00\x00\r\n", b"not marshal")  # another Python's: every source is compiled in the harness
    assert passed(run_job(job, dict(job.files, **{SPEC_FILE: marshal.dumps(spec)}))[1]) == [True, False]


def test_test_code_that_does_not_compile_fails_its_own_test():
    job = build_job("def f(x):\n    return x + 1\n", ["assert f(1) == 2", "return 5", "assert f(2) == 3"])
    assert set(marshal.loads(marshal.loads(job.files[SPEC_FILE])["bytecode"][1])) == {"prelude", ("test", 0), ("test", 2)}
    rc, results = run_job(job)
    assert passed(results) == [True, False, True] and "SyntaxError" in results[1][2]
