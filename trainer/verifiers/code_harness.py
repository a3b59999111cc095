"""Python unit tests against hostile code: the harness, the job it runs in, and its verdict.

The program under test is optimised against its verifier, so it never shares an interpreter, a
stack or a writable channel with the code that judges it. One sandbox job holds two processes:

* the **harness** (trusted, :data:`HARNESS`): the job's command. It makes itself non-dumpable
  (so no process of the same uid can ptrace it or open its ``/proc`` files), opens the test spec
  file and unlinks it, and only then forks;
* the **candidate**: the forked child. Before any of the program's code runs it drops every file
  descriptor but two pipes to the harness, points its stdin at ``/dev/null`` and its stdout at
  the job's stderr, then loads ``solution.py`` and serves calls.

The harness reads the tests only after the fork, so they exist in its memory alone. It runs the
trusted prelude (the task's prompt: helpers such as HumanEval's ``poly``) and the tests in its own
namespace; every name the tests take from the program (``candidate``, the entry point, free names
of the tests that neither the prelude nor the builtins define) is a proxy: each call crosses the
process boundary as data (:func:`encode` / strict decoding: ``None``, ``bool``, ``int``,
``float``, ``complex``, ``str``, ``bytes``, ``list``, ``tuple``, ``dict``, ``set``,
``frozenset``; exact types only, iterators become lists), so a returned object whose ``__eq__``
always says True, a patched ``builtins.exec`` or ``compile``, a frame walk or a forged marker
line reaches nothing. The harness alone writes the verdict markers, to its stdout, each with the
job's nonce; the host accepts only markers with its nonce, for every test, from a job that
exited 0. What the candidate can do to the harness (kill it, stop it, exhaust limits) ends the
job as a failure, a timeout or a limit, never a pass.

>>> job = build_job("def inc(x):\\n    return x + 1\\n", ["assert inc(1) == 2"], nonce="0" * 32)
>>> sorted(job.files), job.command[:4], job.names, job.exports
(['.temper_tests', 'solution.py', 'temper_harness.bin', 'temper_harness.py'], ['python3', '-I', '-S', '-c'], ['test_0'], ['inc'])
>>> parse_results(b"@@TEMPER-TEST " + b"0" * 32 + b" 0 PASS \\n@@TEMPER-TEST " + b"1" * 32 + b" 0 FAIL x\\n", job)
[('test_0', True, '')]
>>> exported_names(["assert abs(f(x)) < 1 and g(2)"], "x = 3\\n", None)
['f', 'g']
"""
from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import importlib.util
import marshal
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.verifiers import harness_program

SPEC_FILE = harness_program.SPEC_FILE
"""Job file holding the tests and the nonce (marshal); the harness unlinks it before it forks."""
HARNESS_FILE = "temper_harness.py"
"""Job file holding the harness's source."""
BYTECODE_FILE = "temper_harness.bin"
"""Job file holding the harness compiled by this process (the import magic, then marshal):
compiling ~400 lines costs ~4 ms of CPU per job; the sandbox's Python runs the bytecode when its
magic matches and compiles the source otherwise."""
PROGRAM_FILE = harness_program.PROGRAM_FILE
"""Job file holding the program under test."""
HARNESS = Path(harness_program.__file__).read_text()
"""Source of the harness (:mod:`trainer.verifiers.harness_program`), run in the sandbox."""
HARNESS_MODULE = "temper_harness"
"""Name under which a warm sandbox's zygote holds the harness already imported, tagged
``TEMPER_DIGEST`` with :data:`HARNESS_DIGEST` (docs/sandbox.md, the zygote)."""
HARNESS_DIGEST = hashlib.sha256(HARNESS.encode()).hexdigest()
"""SHA-256 of :data:`HARNESS`: the zygote's copy is run only when it is this very source."""
BOOTSTRAP = (
    "import sys\n"
    f"h = sys.modules.get({HARNESS_MODULE!r})\n"
    f"if getattr(h, 'TEMPER_DIGEST', None) == {HARNESS_DIGEST!r}:\n"
    "    sys.exit(h.main())\n"
    "import marshal, _frozen_importlib_external as e\n"
    f"f = open({BYTECODE_FILE!r}, 'rb')\n"
    "code = marshal.load(f) if f.read(4) == e.MAGIC_NUMBER else None\n"
    f"exec(code or compile(open({HARNESS_FILE!r}).read(), {HARNESS_FILE!r}, 'exec'), {{'__name__': '__main__'}})\n"
)
"""Runs the harness the zygote imported (a job it forked, when the digests match: that saves
loading ~30 KB of bytecode and defining the module in every job, about 1.5 ms of a HumanEval
job's CPU), else the harness's bytecode, or its source when the bytecode is for another Python."""
COMMAND = ["python3", "-I", "-S", "-c", BOOTSTRAP]
"""``-I``: no environment, user site or script directory on the path; ``-S``: no site-packages."""
LOAD_FAILED_EXIT = harness_program.LOAD_FAILED_EXIT
"""The harness's exit code when the program failed to load (the job is then a runtime_error)."""
MAX_REPLY_BYTES = harness_program.MAX_REPLY_BYTES
"""Longest encoded value the candidate may return from one call."""

MARKER_RE = re.compile(rb"^@@TEMPER-TEST ([0-9a-f]{32}) (\d+) (PASS|FAIL) ?(.*)$", re.MULTILINE)
_BUILTIN_NAMES = frozenset(dir(builtins)) | {"__name__", "__builtins__", "__file__", "__doc__"}


@dataclass(frozen=True)
class CodeTestJob:
    """One sandbox job that runs a program against tests, and what reading its verdict needs."""

    files: dict[str, str | bytes]
    """``solution.py``, the harness and the spec file."""
    command: list[str]
    """The harness's command line."""
    nonce: str
    """32 hex digits; only markers carrying it count."""
    names: list[str]
    """Test names, in order."""
    exports: list[str]
    """Names the tests call in the program (each a proxy in the harness)."""


_NAMED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler, ast.MatchAs, ast.MatchStar)


def _nodes(tree: ast.AST):
    """Every node under ``tree`` (itself included), in no particular order: ast.walk without
    its two generators per node (build_job walks the tests and the prompt of every job)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for field in node._fields:
            value = getattr(node, field, None)
            if type(value) is list:
                stack.extend([v for v in value if isinstance(v, ast.AST)])
            elif isinstance(value, ast.AST):
                stack.append(value)


def _names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """The names a piece of code loads, and every name it binds anywhere (assignments, defs,
    imports, parameters, handlers, match captures, global and nonlocal declarations).

    >>> sorted(map(sorted, _names(ast.parse("import os.path as p, re\\ndef f(x, *a):\\n    global g\\n    return x + y"))))
    [['a', 'f', 'g', 'p', 're', 'x'], ['x', 'y']]
    """
    loads: set[str] = set()
    bound: set[str] = set()
    for node in _nodes(tree):
        kind = type(node)
        if kind is ast.Name:
            (loads if type(node.ctx) is ast.Load else bound).add(node.id)
        elif kind in _NAMED:
            if node.name:
                bound.add(node.name)
        elif kind is ast.alias:
            bound.add((node.asname or node.name).split(".")[0])
        elif kind is ast.arg:
            bound.add(node.arg)
        elif kind is ast.MatchMapping:
            if node.rest:
                bound.add(node.rest)
        elif kind is ast.Global or kind is ast.Nonlocal:
            bound.update(node.names)
    return loads, bound


def _parse(source: str, what: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as e:
        raise ValueError(f"{what} does not parse: {e}") from None


def _prelude(prompt: str | None) -> tuple[str, ast.Module | None]:
    """:func:`trusted_prelude` and its tree (None when there is no prelude)."""
    if not prompt:
        return "", None
    for source in (prompt, prompt.rstrip() + "\n    pass\n"):
        try:
            return source, ast.parse(source)
        except SyntaxError:
            continue
    return "", None


def trusted_prelude(prompt: str | None) -> str:
    """The task's prompt as code the harness may run: helpers and stubs it defines. A prompt that
    ends in a bare signature gets a ``pass`` body; one that does not parse at all is dropped."""
    return _prelude(prompt)[0]


def _imported(tree: ast.AST | None) -> list[str]:
    names = set()
    for node in _nodes(tree) if tree is not None else ():
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return sorted(n for n in names if n.isidentifier())


def imported_modules(source: str) -> list[str]:
    """Top-level modules a piece of trusted code imports (the harness imports them before it
    forks, so both of its processes share them).

    >>> imported_modules("from typing import List\\nimport math, os.path\\nfrom . import x")
    ['math', 'os', 'typing']
    """
    return _imported(_parse(source, "the prompt") if source else None)


def _exported(tests: list[ast.AST], prelude: ast.AST | None, entry_point: str | None) -> list[str]:
    defined = _names(prelude)[1] if prelude is not None else set()
    free: set[str] = set()
    for tree in tests:
        loads, bound = _names(tree)
        free |= loads - bound
    names = free - defined - _BUILTIN_NAMES - {"candidate"}
    if entry_point:
        names.add(entry_point)
    return sorted(names)


def exported_names(tests: list[str], prelude: str, entry_point: str | None) -> list[str]:
    """Names the tests take from the program: free names of the tests that neither the tests,
    the prelude nor the builtins define, plus the entry point. A program cannot shadow ``abs``."""
    trees = [_parse(source, f"test {i}") for i, source in enumerate(tests)]
    return _exported(trees, _parse(prelude, "the prompt") if prelude else None, entry_point)


def _check_steps(tree: ast.Module) -> tuple[list[str], list[dict[str, Any]]]:
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None or not check.args.args:
        raise ValueError("test code with entry_point must define check(candidate)")
    param = check.args.args[0].arg
    names: list[str] = []
    steps: list[dict[str, Any]] = []
    for stmt in check.body:
        code = ast.unparse(stmt)
        if param != "candidate":
            code = f"{param} = candidate\n" + code
        idx = None
        if any(type(n) is ast.Assert for n in _nodes(stmt)):
            idx = len(names)
            names.append(f"check:L{stmt.lineno}")
        steps.append({"code": code, "test": idx})
    if not names:
        raise ValueError("check(candidate) contains no assert: nothing could ever pass")
    return names, steps


def check_steps(test_code: str, entry_point: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Split ``def check(candidate)``'s body into steps; each step holding an assert is a test."""
    return _check_steps(_parse(test_code, "test code"))


@functools.lru_cache(maxsize=256)
def _analysis(tests: str | tuple[str, ...], prompt: str | None, entry_point: str | None) -> tuple:
    """What a job needs of its tests and prompt, which depend on neither the program nor the
    nonce (so the G jobs of a group share it): ``(prelude, names or None, exports, spec items,
    imported modules)``; each source parsed once, and compiled once (:func:`_bytecode`). Callers
    copy what they hand on."""
    prelude, prelude_tree = _prelude(prompt)
    if isinstance(tests, str):
        if entry_point is None:
            raise ValueError("a test module string needs entry_point (the function check() receives)")
        tree = _parse(tests, "test code")
        names, steps = _check_steps(tree)
        items: dict[str, Any] = {"mode": "check", "module": tests, "entry_point": entry_point, "steps": steps}
        sources = {"module": (tree, "tests.py"), **{("step", i): (s["code"], "check") for i, s in enumerate(steps)}}
        exports = _exported([tree], prelude_tree, entry_point)
    else:
        trees = [_parse(source, f"test {i}") for i, source in enumerate(tests)]
        names = None
        items = {"mode": "statements", "tests": list(tests)}
        sources = {("test", i): (tree, f"test_{i}") for i, tree in enumerate(trees)}
        exports = _exported(trees, prelude_tree, entry_point)
    items["bytecode"] = _bytecode({"prelude": (prelude_tree or "", "prelude.py"), **sources})
    return prelude, names, exports, items, _imported(prelude_tree)


def _bytecode(sources: dict[Any, tuple[str | ast.Module, str]]) -> tuple[bytes, bytes]:
    """``(import magic, marshal of {key: code})``: the spec's sources (or their trees, parsed from
    them once) compiled here as the harness would compile them (its file names, no inherited
    flags), so that the harness, which runs
    them when the magic is its own, compiles none in every job (half a millisecond of a
    HumanEval job's CPU, and once per task here). A source that does not compile is left out:
    the harness compiles it and the error is that test's."""
    codes = {}
    for key, (source, filename) in sources.items():
        try:
            codes[key] = compile(source, filename, "exec", dont_inherit=True, optimize=0)
        except (SyntaxError, ValueError):
            continue
    return importlib.util.MAGIC_NUMBER, marshal.dumps(codes)


def build_job(
    program: str,
    tests: list[str] | str,
    *,
    entry_point: str | None = None,
    prelude: str | None = None,
    test_names: list[str] | None = None,
    nonce: str | None = None,
) -> CodeTestJob:
    """The job that runs ``program`` against ``tests`` (see the module docstring).

    ``tests``: a list of snippets (each one test, e.g. ``"assert add(1, 2) == 3"``), or a test
    module (HumanEval style) defining ``check(candidate)``, with ``entry_point`` naming the
    function passed as ``candidate``; each statement of check's body holding an assert is one
    test. ``prelude``: trusted code from the task (its prompt) run in the harness first.
    """
    if not isinstance(program, str):
        raise TypeError(f"program must be str, got {type(program).__name__}")
    nonce = nonce or secrets.token_hex(16)
    if not re.fullmatch(r"[0-9a-f]{32}", nonce):
        raise ValueError("nonce must be 32 lower-case hex digits")
    if isinstance(tests, list) and tests and all(isinstance(t, str) for t in tests):
        tests = tuple(tests)
    elif not isinstance(tests, str):
        raise ValueError("tests must be a non-empty list of code strings or a test module string")
    prelude, names, exports, items, modules = _analysis(tests, prelude, entry_point)
    if names is None:
        names = list(test_names) if test_names else [f"test_{i}" for i in range(len(tests))]
        if len(names) != len(tests):
            raise ValueError(f"test_names has {len(names)} names for {len(tests)} tests")
    spec = dict(items, nonce=nonce, names=names, prelude=prelude, exports=exports)
    files: dict[str, str | bytes] = {HARNESS_FILE: HARNESS, BYTECODE_FILE: harness_bytecode(), PROGRAM_FILE: program,
                                     SPEC_FILE: marshal.dumps(spec)}
    return CodeTestJob(files, [*COMMAND, *modules], nonce, list(names), list(exports))


@functools.lru_cache(maxsize=1)
def harness_bytecode() -> bytes:
    """This Python's import magic and the harness's code object (see BYTECODE_FILE)."""
    return importlib.util.MAGIC_NUMBER + marshal.dumps(compile(HARNESS, HARNESS_FILE, "exec"))


def job_from_files(files: dict[str, Any]) -> CodeTestJob | None:
    """The job a set of files was built as (None when they hold no test spec)."""
    raw = files.get(SPEC_FILE)
    if raw is None:
        return None
    spec = marshal.loads(raw if isinstance(raw, bytes) else raw.encode("latin-1"))
    return CodeTestJob(dict(files), list(COMMAND), spec["nonce"], list(spec["names"]), list(spec["exports"]))


def parse_results(stdout: bytes | str, job: CodeTestJob) -> list[tuple[str, bool, str]]:
    """``(name, passed, message)`` per test from the markers carrying the job's nonce; a test
    without a marker did not pass."""
    if isinstance(stdout, str):
        stdout = stdout.encode("utf-8", "replace")
    nonce = job.nonce.encode()
    seen: dict[int, tuple[str, bool, str]] = {}
    for m in MARKER_RE.finditer(stdout):
        if m.group(1) != nonce:
            continue
        i = int(m.group(2))
        if i >= len(job.names) or i in seen:
            continue
        seen[i] = (job.names[i], m.group(3) == b"PASS", m.group(4).decode("utf-8", "replace").rstrip("\r"))
    return [seen.get(i, (name, False, "no result: the program ended before this test ran")) for i, name in enumerate(job.names)]
