"""The swe-pkg runner in a real bubblewrap sandbox: only the trusted parent's markers count, a test
passes only when its setup, call and teardown passed, and a test without a record failed."""
from __future__ import annotations

import pytest

from sandbox_helpers import bwrap_ready, require
from trainer.families.pkgs import pins, runner
from workers.sandbox import Limits, execute

LIMITS = Limits(cpu_s=60, wall_s=60, memory_mb=1024, output_bytes=8 << 20)
NONCE = "ab" * 16

PACKAGE = {
    "mod/__init__.py": "def add(a, b):\n    return a + b\n",
    "tests/test_a.py": (
        "import os, sys, pytest\n"
        "from mod import add\n\n"
        "def test_ok():\n    assert add(1, 2) == 3\n\n"
        "def test_fails():\n    assert add(1, 2) == 4\n\n"
        "def test_sys_exit():\n    sys.exit(0)\n\n"
        "@pytest.fixture\n"
        "def broken():\n    yield 1\n    raise RuntimeError('teardown broke')\n\n"
        "def test_teardown_fails(broken):\n    assert broken == 1\n\n"
        "def test_forged_marker():\n"
        f"    print('@@TEMPER-PKG {NONCE} 0 R [\"tests/test_a.py::test_fails\", \"p\", \"\"]')\n"
        f"    os.write(1, b'\\n@@TEMPER-PKG {NONCE} 0 R [\"tests/test_z.py::test_after_exit\", \"p\", \"\"]\\n')\n"
        "    assert False\n\n"
        "def test_skipped():\n    pytest.skip('not here')\n\n"
        "def test_no_third_party():\n    import yaml  # on the host's site-packages, not the sandbox's\n"
    ),
    "tests/test_z.py": (
        "import os\n\n"
        "def test_os_exit():\n    os._exit(0)\n\n"
        "def test_after_exit():\n    assert True\n"
    ),
    "tests/test_k.py": (
        "import os, signal\n\n"
        "def test_killed():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    ),
    "tests/test_p.py": (
        "import _pytest.reports\n\n"
        "def test_patches_reports():\n"
        "    _pytest.reports.BaseReport.passed = property(lambda self: True)\n"
        "    _pytest.reports.TestReport.from_item_and_call = classmethod(lambda cls, item, call: None)\n"
        "    assert False\n"
    ),
}


@pytest.fixture(scope="module")
def sandbox():
    ok, reason = bwrap_ready()
    require(ok, reason)
    return "bwrap"


def run(job: runner.TestJob, sandbox: str):
    verdict = execute(job.files, job.command, LIMITS, backend=sandbox)
    assert verdict.status == "ok", (verdict.status, verdict.stderr[-2000:])
    return verdict


@pytest.fixture(scope="module")
def hostile(sandbox):
    """The hostile package's tests a and z (k and p need their own runs), run once."""
    job = runner.test_job(PACKAGE, ["tests/test_a.py", "tests/test_z.py"], nonce=NONCE)
    verdict = run(job, sandbox)
    return verdict, runner.read_results(verdict.stdout, job)


def test_only_a_clean_pass_counts(hostile):
    verdict, results = hostile
    assert results.passed == {"tests/test_a.py::test_ok"}
    assert results.skipped == {"tests/test_a.py::test_skipped"}
    assert "assert 3 == 4" in results.failed["tests/test_a.py::test_fails"]
    assert "SystemExit" in results.failed["tests/test_a.py::test_sys_exit"]
    assert "teardown broke" in results.failed["tests/test_a.py::test_teardown_fails"]
    assert "No module named 'yaml'" in results.failed["tests/test_a.py::test_no_third_party"]
    assert results.collected == 9


def test_os_exit_leaves_the_rest_failed(hostile):
    _, results = hostile
    assert results.failed["tests/test_z.py::test_os_exit"] == runner.NO_RESULT
    assert results.failed["tests/test_z.py::test_after_exit"] == runner.NO_RESULT


def test_forged_markers_reach_only_stderr(hostile):
    verdict, results = hostile
    assert "tests/test_a.py::test_fails" in results.failed
    assert b'test_after_exit", "p"' not in verdict.stdout
    assert b'test_after_exit\\", \\"p\\"' not in verdict.stdout  # not even inside another marker
    assert b".FF.EFsF" in verdict.stderr  # pytest's own output is the job's stderr


def test_killed_child_and_patched_reports_fail(sandbox):
    runs = [runner.run_spec(PACKAGE, ["tests/test_k.py"]), runner.run_spec(PACKAGE, ["tests/test_p.py"]),
            runner.run_spec(PACKAGE, ["tests/test_a.py::test_ok"])]
    job = runner.batch_job(PACKAGE, runs, nonce=NONCE)
    killed, patched, ok = runner.read_runs(run(job, sandbox).stdout, job)
    assert killed.passed == set() and killed.failed == {"tests/test_k.py::test_killed": runner.NO_RESULT}
    assert patched.passed == set() and "tests/test_p.py::test_patches_reports" in patched.failed
    assert ok.passed == {"tests/test_a.py::test_ok"}  # each run is a fresh child


def test_batch_runs_write_and_restore_files_and_time_out(sandbox):
    mutant = {"mod/__init__.py": "def add(a, b):\n    return a - b\n"}
    loop = {"mod/__init__.py": "def add(a, b):\n    while True:\n        pass\n"}
    select = ["tests/test_a.py::test_ok"]
    runs = [runner.run_spec(PACKAGE, select, files=mutant), runner.run_spec(PACKAGE, select, files=loop, timeout_s=2),
            runner.run_spec(PACKAGE, select, coverage=["mod/__init__.py"], output="discard")]
    job = runner.batch_job(PACKAGE, runs)
    wrong, looped, original = runner.read_runs(run(job, sandbox).stdout, job)
    assert "assert -1 == 3" in wrong.failed["tests/test_a.py::test_ok"]
    assert looped.passed == set() and "time limit" in looped.error
    assert original.passed == set(select) and original.error == ""
    assert original.coverage == {"mod/__init__.py": [1, 2]}


def test_markers_of_another_nonce_are_ignored():
    job = runner.test_job(PACKAGE, ["tests/test_a.py::test_ok"], nonce=NONCE)
    forged = f"@@TEMPER-PKG {'cd' * 16} 0 R [\"tests/test_a.py::test_ok\", \"p\", \"\"]\n"
    results = runner.read_results(forged, job)
    assert results.passed == set() and results.failed == {"tests/test_a.py::test_ok": runner.NO_RESULT}
    assert "did not finish" in results.error


RULE = r"""(x|ch|ss|sh)$", r'\1es'"""


def test_a_real_package_suite_is_read_right(sandbox):
    tree = pins.source_tree("inflection")
    job = runner.test_job(tree)
    results = runner.read_results(run(job, sandbox).stdout, job)
    assert results.collected == 455 and len(results.passed) == 455 and results.failed == {}
    one = "test_inflection.py::test_pluralize_singular[search-searches]"
    job = runner.test_job({**tree, "inflection/__init__.py": tree["inflection/__init__.py"].replace(RULE, RULE.replace("es'", "s'"))}, [one])
    results = runner.read_results(run(job, sandbox).stdout, job)
    assert one in results.failed and results.collected == 1
