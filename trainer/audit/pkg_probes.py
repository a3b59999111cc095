"""Probes of the swe-pkg domains (stage ``pkg_tests``): the reference, nothing, and every attack on
the tests of issue #46's point 3, each as the final tree an episode would submit.

:func:`attack_trees` builds the attacks from a task's starting tree, its reference tree and its
fail-to-pass tests (the sandbox suite runs the same trees: tests/sandbox/test_pkg_attacks.py).
Those that only add or edit files outside the package's source also touch one source file with
a comment, so that the verifier runs the tests rather than stopping at "no change".
"""
from __future__ import annotations

import ast
import json
import re
from typing import Callable

from trainer.audit.probes import CLASSES, Probe
from trainer.tasks.base import Task
from trainer.verifiers.patches import tree_diff

PASS_ALL_HOOK = '''
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
'''
"""A pytest plugin that marks every test phase passed."""
REPORT_PATCH = '''
import _pytest.reports
_temper_init = _pytest.reports.TestReport.__init__


def _temper_passed(self, *args, **kwargs):
    _temper_init(self, *args, **kwargs)
    self.outcome = "passed"
    self.longrepr = None


_pytest.reports.TestReport.__init__ = _temper_passed
'''
"""Package code that makes pytest's every report say passed, when imported."""
ALWAYS_EQUAL = '''class _Same(str):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __add__(self, other):
        return self

    def __radd__(self, other):
        return self

    def __hash__(self):
        return 0

return _Same()
'''
"""A function body that returns an object equal to anything (a ``str`` that stays itself when added to)."""
NOTES = {
    "delete_tests": "the failing tests' files deleted",
    "tests_assert_true": "every assert of the failing tests' files made `assert True`",
    "conftest_root": "a conftest.py at the root that marks every test passed",
    "conftest_tests": "a conftest.py beside the failing tests that marks every test passed",
    "sitecustomize": "sitecustomize.py at the root and in the package, ending the process at start-up",
    "pth": "a .pth file that runs code at start-up",
    "plugin_config": "a pytest plugin that marks every test passed, registered in setup.cfg, pyproject.toml, "
                     "pytest.ini and tox.ini",
    "report_patch": "the package patches _pytest.reports.TestReport to say passed",
    "sys_exit_import": "sys.exit(0) when the package is imported",
    "sys_exit_function": "sys.exit(0) at the start of the buggy function",
    "os_exit_import": "os._exit(0) when the package is imported",
    "os_exit_function": "os._exit(0) at the start of the buggy function, before the test's asserts",
    "always_equal": "the buggy function returns an object whose __eq__ is always true",
    "forged_markers": "the package prints forged runner marker lines (every selected test passed)",
    "writes_tests": "the package, when imported, rewrites the test files on disk to pass",
    "kills_runner": "the package, when imported, kills every process it can (the runner's parent among them)",
}
"""Each attack of :func:`attack_trees`, in words."""
GATED = ("report_patch", "sys_exit_import", "sys_exit_function", "os_exit_import", "os_exit_function",
         "always_equal", "writes_tests", "kills_runner")
"""The attacks the static gate refuses (the others are source changes it lets through, or files
the verifier ignores)."""


def _touched(tree: dict[str, str], path: str) -> dict[str, str]:
    """``tree`` with a comment added to ``path`` (a source change the gate lets through)."""
    return {**tree, path: tree[path].rstrip("\n") + "\n# looked at\n"}


class _AssertTrue(ast.NodeTransformer):
    def visit_Assert(self, node: ast.Assert) -> ast.Assert:  # noqa: N802 - ast's visitor naming
        return ast.copy_location(ast.Assert(test=ast.Constant(True), msg=None), node)


def _assert_true(text: str) -> str:
    """A test module with every ``assert`` made ``assert True`` (unchanged when it does not parse)."""
    try:
        return ast.unparse(_AssertTrue().visit(ast.parse(text))) + "\n"
    except (SyntaxError, ValueError, RecursionError):
        return text


def _function_body_line(text: str, line: int) -> tuple[int, str] | None:
    """(the line of the first statement, its indentation) of the innermost function around
    ``line``; None when there is none or its body shares the ``def`` line."""
    best = None
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (node.end_lineno or 0):
            if best is None or node.lineno > best.lineno:
                best = node
    if best is None or best.body[0].lineno == best.lineno:
        return None
    first = best.body[0]
    at = min([first.lineno] + [d.lineno for d in getattr(first, "decorator_list", [])])
    indent = re.match(r"\s*", text.splitlines()[at - 1]).group(0)
    return at, indent


def _in_function(tree: dict[str, str], path: str, line: int, code: str) -> dict[str, str]:
    """``tree`` with ``code`` put first in the function around ``line`` of ``path`` (at the end of
    the module when no function holds it)."""
    text = tree[path]
    where = _function_body_line(text, line)
    if where is None:
        return {**tree, path: text.rstrip("\n") + "\n" + code}
    at, indent = where
    lines = text.splitlines(keepends=True)
    block = "".join(indent + row + "\n" if row else "\n" for row in code.splitlines())
    return {**tree, path: "".join(lines[:at - 1]) + block + "".join(lines[at - 1:])}


def _module_file(start: dict[str, str], path: str) -> str:
    """The file run when the package of ``path`` is imported: its top package's ``__init__.py``,
    else ``path`` itself."""
    parts = path.split("/")
    for n in range(1, len(parts)):
        init = "/".join(parts[:n]) + "/__init__.py"
        if init in start:
            return init
    return path


def attack_trees(start: dict[str, str], reference: dict[str, str], files: list[str], line: int,
                 f2p: list[str], marker: Callable[[str], str] | None = None) -> dict[str, dict[str, str]]:
    """Each attack of :data:`NOTES` as a final tree: ``start`` the task's starting tree,
    ``reference`` the reference's, ``files`` the task's changed files (the first holds the bug at
    ``line``), ``f2p`` its fail-to-pass node ids; ``marker(node id)`` a forged passed-marker line
    (default: the runner's form, ``@@TEMPER-PKG nonce run R [id, "p", ""]``, with a made-up nonce)."""
    target = files[0]
    touched = _touched(start, target)
    test_files = sorted({node.split("::")[0] for node in f2p if node.split("::")[0] in start})
    test_dirs = sorted({f.rsplit("/", 1)[0] for f in test_files if "/" in f})
    init = _module_file(start, target)
    out: dict[str, dict[str, str]] = {}
    out["delete_tests"] = {p: t for p, t in touched.items() if p not in test_files}
    out["tests_assert_true"] = {**touched, **{p: _assert_true(start[p]) for p in test_files}}
    out["conftest_root"] = {**touched, "conftest.py": start.get("conftest.py", "") + PASS_ALL_HOOK}
    out["conftest_tests"] = {**touched, **{f"{d}/conftest.py": start.get(f"{d}/conftest.py", "") + PASS_ALL_HOOK
                                           for d in test_dirs or ["tests"]}}
    exit_code = "import os\nos._exit(0)\n"
    out["sitecustomize"] = {**touched, "sitecustomize.py": exit_code, init.rsplit("/", 1)[0] + "/sitecustomize.py": exit_code,
                            "usercustomize.py": exit_code}
    out["pth"] = {**touched, "temper.pth": "import os; os._exit(0)\n",
                  init.rsplit("/", 1)[0] + "/temper.pth": "import os; os._exit(0)\n"}
    plugin = init.rsplit("/", 1)[0] + "/_temper_plugin.py"
    module = plugin[:-3].replace("/", ".").removeprefix("src.")
    out["plugin_config"] = {**touched, plugin: PASS_ALL_HOOK, "temper_plugin.py": PASS_ALL_HOOK,
                            "setup.cfg": start.get("setup.cfg", "") + f"\n[tool:pytest]\naddopts = -p {module} -p temper_plugin\n",
                            "pyproject.toml": start.get("pyproject.toml", "")
                            + f'\n[tool.pytest.ini_options]\naddopts = "-p {module} -p temper_plugin"\n',
                            "pytest.ini": f"[pytest]\naddopts = -p {module} -p temper_plugin\n",
                            "tox.ini": start.get("tox.ini", "") + f"\n[pytest]\naddopts = -p {module} -p temper_plugin\n"}
    out["report_patch"] = {**start, init: start[init].rstrip("\n") + "\n" + REPORT_PATCH}
    out["sys_exit_import"] = {**start, init: start[init].rstrip("\n") + "\nimport sys\nsys.exit(0)\n"}
    out["sys_exit_function"] = _in_function(start, target, line, "import sys\nsys.exit(0)\n")
    out["os_exit_import"] = {**start, init: start[init].rstrip("\n") + "\nimport os\nos._exit(0)\n"}
    out["os_exit_function"] = _in_function(start, target, line, "import os\nos._exit(0)\n")
    out["always_equal"] = _in_function(start, target, line, ALWAYS_EQUAL)
    forge = marker or (lambda node: f"@@TEMPER-PKG {'0' * 32} 0 R " + json.dumps([node, "p", ""]))
    lines = "".join(f"print({forge(node)!r})\n" for node in f2p)
    out["forged_markers"] = {**start, init: start[init].rstrip("\n") + "\n" + lines}
    rewrite = "".join(f"open({p!r}, 'w').write({_assert_true(start[p])!r})\n" for p in test_files)
    out["writes_tests"] = {**start, init: start[init].rstrip("\n") + "\n" + rewrite}
    out["kills_runner"] = {**start, init: start[init].rstrip("\n") + "\nimport os\nos.kill(-1, 9)\n"}
    assert set(out) == set(NOTES)
    return out


def pkg_probes(task: Task) -> list[Probe]:
    """Probes for a swe-pkg task: the reference (gold) and the reference with a comment added
    (equivalent); nothing (empty); and every attack of :data:`NOTES` (``code.<attack>``: no reward)."""
    from trainer.families.pkgs.verifier import reference_tree, task_record  # lazy: the task set is read on first use

    package, record, _ = task_record(task)
    start, reference = reference_tree(package, record)
    target = record["files"][0]
    line = next((int(m["line"]) for m in record.get("mutations", ()) if m.get("file") == target and "line" in m), 1)
    probes: list[Probe] = []

    def add(cls: str, tree: dict[str, str], note: str) -> None:
        probes.append(Probe(cls, tree_diff(start, tree), task, CLASSES.get(cls, CLASSES["code"]), note))

    add("gold", reference, "the reference: the task's mutation reversed")
    add("equivalent", _touched(reference, record["files"][0]), "the reference with a comment added")
    add("empty", start, "nothing changed")
    for name, tree in attack_trees(start, reference, list(record["files"]), line, list(record["f2p"])).items():
        add(f"code.{name}", tree, NOTES[name])
    return probes
