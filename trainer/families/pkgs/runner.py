"""The trusted pytest runner of the swe-pkg family, used by the build and by the verifier.

A job runs a package's own pytest suite on a source tree in the sandbox. The package's code and
tests are the candidate's (the policy edits the tree), so nothing they print counts. The job's
command is :data:`COMMAND`; the program (:mod:`trainer.families.pkgs.runner_program`) holds three
kinds of process:

* the **parent** (trusted): makes itself non-dumpable (no same-uid process can ptrace it or
  open its ``/proc`` files), opens the spec file (the nonce, the runs) and unlinks it, forks the
  spawner and only then reads the spec; it alone writes the job's stdout: one marker line per
  test, each carrying the job's nonce;
* the **spawner**: imports pytest once (with ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``; the site
  folders then leave ``sys.path``, so no third-party package but pytest is importable), and forks
  one pytest child per run;
* the **pytest child**: Python ``-I`` (no user site, no environment, no script folder on the
  path), bytecode writing off, ``-p no:cacheprovider``, the runner's plugin given as an object
  (never found by name). Its stdout and stderr are the job's stderr. The plugin sends one
  record per test over a socket only the parent reads (not a pipe: ``/proc/self/fd/N`` cannot
  open a socket again), each with the run's key, written at the end of the test's teardown: a
  test passed only when its setup, call and teardown all passed, and a test with two records
  failed (one of them was forged). A test with no record (the
  child called ``os._exit``, ``sys.exit`` or was killed) failed.

A build job holds many runs (one per mutant): the parent writes a run's files before its child
starts and restores them after; each run has a time limit of its own.

>>> job = test_job({"m.py": "X = 1\\n", "tests/test_m.py": "def test_x():\\n    pass\\n"}, nonce="0" * 32)
>>> sorted(job.files)[:2], job.command
(['.temper_pkg_runner.py', '.temper_pkg_spec'], ['python3', '-I', '.temper_pkg_runner.py'])
>>> out = '@@TEMPER-PKG ' + '0' * 32 + ' 0 C ["t::a", "t::b"]\\n@@TEMPER-PKG ' + '0' * 32 + ' 0 R ["t::a", "p", ""]\\n'
>>> r = read_results(out + '@@TEMPER-PKG ' + '1' * 32 + ' 0 R ["t::b", "p", ""]\\n', job)
>>> sorted(r.passed), r.failed, r.collected
(['t::a'], {'t::b': 'no result: the test process ended before this test finished'}, 2)
"""
from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.families.pkgs import runner_program

PROGRAM = Path(runner_program.__file__).read_text()
"""The runner program's source, shipped with every job."""
COMMAND = ["python3", "-I", runner_program.PROGRAM_FILE]
"""The job's command: the sandbox's Python, isolated mode."""
PYTEST_ARGS = ("-q", "-p", "no:cacheprovider", "--continue-on-collection-errors", "-o", "addopts=", "--rootdir", ".")
"""Arguments every pytest child gets (the package's own ``addopts`` are dropped: they may name
plugins that are not there)."""
NO_RESULT = runner_program.NO_RESULT
NOT_RUN = "not run: the test was not collected"
TWO_RECORDS = "two records for one test: one of them was not the runner's"
MAX_MESSAGE = 1000
"""Longest failure text kept per test."""
_MARKER = re.compile(r"^@@TEMPER-PKG ([0-9a-f]{32}) (\d+) ([A-Z]) (.*)$", re.MULTILINE)


@dataclass(frozen=True)
class TestJob:
    """One sandbox job running a package's suite (one run or many), and what reading it needs."""

    __test__ = False  # not a pytest test class

    files: dict[str, str]
    """The tree, the runner program and its spec."""
    command: list[str]
    """The job's command line."""
    nonce: str
    """32 hex digits; only marker lines carrying it count."""
    selects: tuple[tuple[str, ...] | None, ...] = field(default=(None,))
    """Per run, the node ids it runs (None: the whole suite)."""


@dataclass(frozen=True)
class Results:
    """What one run of a suite did, read from the trusted markers only."""

    passed: frozenset[str]
    """Node ids whose setup, call and teardown all passed."""
    failed: dict[str, str]
    """Node id -> short failure text (pytest's ``E`` lines, at most 1000 characters)."""
    collected: int
    """Tests collected (0 when the child never got that far)."""
    error: str = ""
    """Collection errors, a time-out, or a run that never finished; empty when none."""
    skipped: frozenset[str] = frozenset()
    """Node ids that were skipped or expected to fail."""
    coverage: dict[str, list[int]] | None = None
    """Executed lines per source file, for a run that asked for them."""
    wall_s: float = 0.0
    """Seconds the run took, as its parent measured them (0.0 when it never finished)."""


def python_paths(tree: dict[str, str]) -> list[str]:
    """The folders the package imports from: the tree's root, and ``src`` for a src layout.

    >>> python_paths({"src/a/__init__.py": "", "tests/test_a.py": ""}), python_paths({"a.py": ""})
    (['.', 'src'], ['.'])
    """
    return ["."] + (["src"] if any(p.startswith("src/") and p.endswith(".py") for p in tree) else [])


def _check_nonce(nonce: str | None) -> str:
    nonce = nonce or secrets.token_hex(16)
    if not re.fullmatch(r"[0-9a-f]{32}", nonce):
        raise ValueError("nonce must be 32 lower-case hex digits")
    return nonce


def run_spec(tree: dict[str, str], select: list[str] | None = None, *, files: dict[str, str] | None = None,
             timeout_s: float = 3600.0, coverage: list[str] | None = None, output: str = "stderr",
             memory_mb: int | None = None, args: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """One run of a job: the suite (or ``select``) with ``files`` written over the tree first and
    restored after, within ``timeout_s``; ``coverage`` names source files whose executed lines
    are recorded; ``output`` is ``stderr`` or ``discard`` (the child's own output);
    ``memory_mb`` bounds the child's address space; ``args`` are extra pytest arguments."""
    if output not in ("stderr", "discard"):
        raise ValueError("output must be 'stderr' or 'discard'")
    return {"files": dict(files or {}), "select": list(select) if select is not None else None,
            "timeout_s": float(timeout_s), "coverage": list(coverage or []), "output": output,
            "memory_mb": memory_mb, "paths": python_paths(tree), "args": [*PYTEST_ARGS, *args]}


def batch_job(tree: dict[str, str], runs: list[dict[str, Any]], nonce: str | None = None) -> TestJob:
    """A job of several runs (each from :func:`run_spec`) on one tree, in order."""
    if not runs:
        raise ValueError("a job needs at least one run")
    nonce = _check_nonce(nonce)
    reserved = {runner_program.PROGRAM_FILE, runner_program.SPEC_FILE, runner_program.RUN_FILE}
    if reserved & set(tree):
        raise ValueError(f"the tree holds a file the runner needs: {sorted(reserved & set(tree))}")
    files = dict(tree)
    files[runner_program.PROGRAM_FILE] = PROGRAM
    files[runner_program.SPEC_FILE] = json.dumps({"nonce": nonce, "runs": runs})
    selects = tuple(tuple(r["select"]) if r.get("select") is not None else None for r in runs)
    return TestJob(files, list(COMMAND), nonce, selects)


def test_job(tree: dict[str, str], select: list[str] | None = None, nonce: str | None = None) -> TestJob:
    """The job that runs ``tree``'s pytest suite (only the ``select`` node ids when given)."""
    return batch_job(tree, [run_spec(tree, select)], nonce)


test_job.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def _markers(stdout: str | bytes, job: TestJob) -> dict[int, list[tuple[str, Any]]]:
    if isinstance(stdout, bytes):
        stdout = stdout.decode("utf-8", "replace")
    runs: dict[int, list[tuple[str, Any]]] = {}
    for m in _MARKER.finditer(stdout):
        if m.group(1) != job.nonce:
            continue
        try:
            payload = json.loads(m.group(4))
        except ValueError:
            continue
        runs.setdefault(int(m.group(2)), []).append((m.group(3), payload))
    return runs


def _results(markers: list[tuple[str, Any]], select: tuple[str, ...] | None) -> Results:
    passed: set[str] = set()
    skipped: set[str] = set()
    failed: dict[str, str] = {}
    collected: list[str] = []
    errors: list[str] = []
    coverage = None
    done = None
    for kind, payload in markers:
        if kind == "R" and isinstance(payload, list) and len(payload) == 3 and isinstance(payload[0], str):
            node, outcome, msg = payload
            if node in passed or node in failed or node in skipped:
                # one record per test: a second one means one was forged, and the test failed
                passed.discard(node)
                skipped.discard(node)
                failed[node] = TWO_RECORDS
                continue
            if outcome == "p":
                passed.add(node)
            elif outcome == "s":
                skipped.add(node)
            else:
                failed[node] = str(msg)[:MAX_MESSAGE] or "failed"
        elif kind == "C" and isinstance(payload, list) and not collected:
            collected = [str(n) for n in payload]
        elif kind == "E":
            errors.append(str(payload)[:MAX_MESSAGE])
        elif kind == "V" and isinstance(payload, dict):
            coverage = {str(k): [int(n) for n in v] for k, v in payload.items() if isinstance(v, list)}
        elif kind == "D" and isinstance(payload, dict):
            done = payload
    for node in collected:
        if node not in passed and node not in skipped:
            failed.setdefault(node, NO_RESULT)
    for node in select or ():  # a test it selected (a file or folder selects what it holds)
        if "::" in node and node not in passed and node not in skipped and node not in failed:
            failed[node] = NOT_RUN if collected else NO_RESULT
    if done is None:
        errors.append("the runner did not finish this run")
    elif done.get("timeout"):
        errors.append("the run went over its time limit and was killed")
    wall_s = float(done.get("wall_s") or 0.0) if done else 0.0
    return Results(frozenset(passed), failed, len(collected), "\n".join(errors), frozenset(skipped), coverage, wall_s)


def read_runs(stdout: str | bytes, job: TestJob) -> list[Results]:
    """Every run's results, in order (a run with no marker failed everything it selected)."""
    markers = _markers(stdout, job)
    return [_results(markers.get(k, []), select) for k, select in enumerate(job.selects)]


def read_results(stdout: str | bytes, job: TestJob) -> Results:
    """The first (for :func:`test_job`, the only) run's results; only markers with the job's
    nonce count."""
    return read_runs(stdout, job)[0]
