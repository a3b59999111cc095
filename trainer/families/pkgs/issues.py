"""Issue text for a swe-pkg task, written from the failing behaviour alone.

The policy sees what a user filing a bug would see: which of the package's tests fail, and what
pytest said (its ``E`` lines: the call, the expected and the actual value, the exception). It
never sees the diff, the mutation or the mutated source line: any line of pytest's output that
quotes a mutated source line is left out. Level 1 names the file the bug is in; level 2 does not;
level 3 describes the failures of two interacting bugs in two different files (not named).

>>> f = [Failure("tests/test_a.py::test_add", "E       assert 3 == 4\\nE        +  where 3 = add(1, 2)")]
>>> print(issue("demo", "1.0", 1, [f], files=["demo/core.py"], seed=0, forbidden=["return a - b"]))
Bug in demo 1.0: tests/test_a.py::test_add fails
<BLANKLINE>
The package's own test suite has a failing test.
<BLANKLINE>
`tests/test_a.py::test_add` fails:
<BLANKLINE>
```
assert 3 == 4
 +  where 3 = add(1, 2)
```
<BLANKLINE>
The bug is in `demo/core.py`.
<BLANKLINE>
Reproduce with `python3 -m pytest tests/test_a.py::test_add`. Fix the package's code so that the failing tests pass and every other test still passes; do not change the tests.
"""
from __future__ import annotations

import ast
import random
import re
import shlex
import textwrap
from dataclasses import dataclass, replace

MAX_LINES = 14
"""Lines of pytest's output kept per failing test."""
SHOWN = 2
"""Failing tests described per bug."""
ADDRESS = re.compile(r"\b0x[0-9a-f]{6,}\b")
"""An object's address in a repr (it changes from run to run: the prompt must not)."""
OPENINGS = (
    "The package's own test suite has a failing test.",
    "After the last change, part of the test suite fails.",
    "A user reports wrong results, and the package's tests agree.",
    "CI is red: some of the package's tests fail.",
)


@dataclass(frozen=True)
class Failure:
    """One failing test and pytest's explanation (the ``E`` lines)."""

    test: str
    """The test's node id."""
    message: str
    """pytest's ``E`` lines (or the crash line)."""
    code: str = ""
    """The test function's source (what it calls), when found: test code, never the package's."""


def test_source(tree: dict[str, str], node_id: str, max_lines: int = MAX_LINES) -> str:
    r"""The source of the test function a node id names (its class's method for ``C::test``),
    at most ``max_lines`` lines; empty when it cannot be found.

    >>> test_source({"t/test_a.py": "import a\n\nclass T:\n    def test_x(self):\n        assert a.f(1) == 2\n"}, "t/test_a.py::T::test_x[1]")
    'def test_x(self):\n    assert a.f(1) == 2'
    """
    path, _, rest = node_id.partition("::")
    names = [n.split("[", 1)[0] for n in rest.split("::") if n]
    try:
        scope: list[ast.stmt] = ast.parse(tree.get(path, "")).body
    except (SyntaxError, ValueError):
        return ""
    node = None
    for name in names:
        node = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name), None)
        if node is None:
            return ""
        scope = node.body
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return ""
    lines = textwrap.dedent("\n".join(tree[path].splitlines()[node.lineno - 1:node.end_lineno])).splitlines()
    return "\n".join(lines[:max_lines] + (["    ..."] if len(lines) > max_lines else []))


def scrub(message: str, forbidden: list[str]) -> list[str]:
    """The message's lines without pytest's ``E`` prefix, leaving out any that quote a forbidden
    text (a mutated source line) and keeping at most :data:`MAX_LINES`.

    >>> scrub("E   x = a - b\\nE   ValueError: no", ["x = a - b"])
    ['ValueError: no']
    """
    keys = [f.strip() for f in forbidden if len(f.strip()) >= 6]
    body = textwrap.dedent("\n".join(line[1:] if line.startswith("E ") else line for line in message.splitlines()))
    out = []
    for text in body.splitlines():
        if not text.strip() or any(key in text for key in keys):
            continue
        out.append(ADDRESS.sub("0x...", text.rstrip()))
    return out[:MAX_LINES] or ["(the test fails; pytest gave no message)"]


def _block(failure: Failure, forbidden: list[str], again: bool = False) -> str:
    lines = scrub(failure.message, forbidden)
    text = (f"`{failure.test}`" + (" (the same test with other parameters)" if again else "")
            + " fails:\n\n```\n" + "\n".join(lines) + "\n```")
    if failure.code:
        keys = [f.strip() for f in forbidden if len(f.strip()) >= 6]
        code = "\n".join(line if not any(key in line for key in keys) else "..." for line in failure.code.splitlines())
        text = f"`{failure.test}`:\n\n```python\n{code}\n```\n\nfails with:\n\n```\n" + "\n".join(lines) + "\n```"
    return text


def issue(package: str, version: str, level: int, failures: list[list[Failure]], *, files: list[str], seed: int,
          forbidden: list[str]) -> str:
    """The prompt of a task: ``failures`` holds groups of failing tests (one group: the task's
    failing tests, at level 3 those where the two bugs meet first); ``files`` the changed files (named at level 1 only); ``forbidden``
    the mutated source lines, never quoted."""
    rng = random.Random(f"{package}:{level}:{seed}")
    first = failures[0][0].test
    title = (f"Bug in {package} {version}: {first} fails" if level < 3
             else f"Bugs in {package} {version}: {first} fails")
    parts = [title, rng.choice(OPENINGS)]
    codes: set[str] = set()
    for bug in failures:
        shown = bug[:SHOWN]
        for f in shown:
            # a second parameter of a test already quoted: its message only, not the same code again
            parts.append(_block(f if f.code not in codes else replace(f, code=""), forbidden,
                                again=bool(f.code) and f.code in codes))
            codes.add(f.code)
        if len(bug) > len(shown):
            parts.append(f"{len(bug) - len(shown)} more test(s) fail the same way.")
    if level == 1:
        parts.append(f"The bug is in `{files[0]}`.")
    elif level == 3:
        parts.append("These failures come from two bugs in two different files of the package, and the bugs "
                     "interact: fixing one of them alone is not enough.")
    tests = " ".join(shlex.quote(bug[0].test) for bug in failures)
    parts.append(f"Reproduce with `python3 -m pytest {tests}`. Fix the package's code so that the failing tests pass "
                 "and every other test still passes; do not change the tests.")
    return "\n\n".join(parts)
