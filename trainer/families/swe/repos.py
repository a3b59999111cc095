"""Software-engineering tasks in a small Python repository (the ``swe-*`` domains).

A task is a generated package (2 to 4 modules of :mod:`trainer.families.swe.repo_kernels` functions,
a README, a pyproject and ``unittest`` tests) in one of three families:

* ``bugfix``: planted bugs, reported as an issue with a call that returns the wrong value;
* ``feature``: functions whose body is ``raise NotImplementedError``, to implement from their
  docstring;
* ``refactor``: rename a function everywhere (no trace of the old name may remain) or move it to a
  new module of the package (the old module keeps importing it), keeping every behaviour.

The level is the difficulty: level 0 is a two-module package and names the file; level 1 has
three modules and names only the function; level 2 has four modules and two changes to make.
Everything is rebuilt from ``(family, seed, level)``, so a task carries only those.

The hidden tests (never in the repository, never in the prompt) call every function of the
modules the task touches on fixed edge cases, random cases and, for a bug, inputs where the bug
shows; their expected values are computed here from the kernels' correct source. A refactor's
shape is checked on the final tree's syntax (:func:`structure_failures`), by trusted code.

>>> spec = repo_task("bugfix", 7, 0)
>>> sorted(spec.files)[:3], spec.package
(['README.md', 'pyproject.toml', 'stdx/__init__.py'], 'stdx')
>>> spec.hidden[0].startswith("assert same(")
True
"""
from __future__ import annotations

import ast
import functools
import json
import random
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any

from trainer.families.swe.repo_kernels import KERNELS, MODULES, MOVE_TARGETS, Kernel, by_module, call
from trainer.tasks.base import Task
from trainer.verifiers.patches import common_ends

FAMILIES = ("bugfix", "feature", "refactor")
LEVELS = 3
PACKAGES = ("toolbox", "utilkit", "plainlib", "handy", "corekit", "stdx", "minilib", "workbench", "kitchen", "odds")
TEST_COMMAND = "python -m unittest discover -s tests -t ."
CASES_PER_FUNCTION = 6

PRELUDE = textwrap.dedent('''
    def same(got, want):
        """Equal in value and kind; floats within 1e-9 of the expected size (never NaN)."""
        if type(want) is float or type(got) is float:
            return type(got) in (int, float) and type(want) in (int, float) and abs(got - want) <= 1e-9 * max(1.0, abs(want))
        if type(want) in (list, tuple):
            return type(got) is type(want) and len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
        if type(want) is dict:
            return type(got) is dict and list(got) == list(want) and all(same(got[k], want[k]) for k in want)
        return type(got) is type(want) and got == want
''').lstrip()
"""Trusted helpers the hidden tests use (run in the harness, never in the program)."""


@dataclass
class RepoTask:
    """One generated task: the repository as the policy first sees it and how it is judged."""

    family: str
    seed: int
    level: int
    package: str
    files: dict[str, str]
    """The starting tree, path -> text."""
    statement: str
    """What to do (the issue or the request)."""
    hidden: list[str] = field(default_factory=list)
    """Hidden test statements (harness style, using :data:`PRELUDE`)."""
    exports: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Name a hidden test calls -> (module path such as ``toolbox.text``, attribute)."""
    structure: list[dict[str, str]] = field(default_factory=list)
    """Shape checks on the final tree: ``{"check": "absent"|"defines"|"not_defines"|"imports", ...}``."""
    edits: list[dict[str, Any]] = field(default_factory=list)
    """The reference solution as tool calls (before ``run_tests``, ``git_commit`` and ``submit``)."""
    targets: list[str] = field(default_factory=list)
    """The kernels the task is about."""
    checked: list[tuple[str, str]] = field(default_factory=list)
    """The functions the hidden tests check: (the name they call, the kernel behind it)."""


def _module_path(package: str, module: str) -> str:
    return f"{package}/{module}.py"


def module_text(module: str, sources: list[str], extra_imports: list[str] = ()) -> str:
    doc, imports = MODULES.get(module, ("Helpers moved out of another module.", []))
    head = f'"""{doc}"""\n'
    lines = [f"import {name}" for name in imports] + list(extra_imports)
    if lines:
        head += "\n" + "\n".join(lines) + "\n"
    return head + "\n\n" + "\n\n".join(s.rstrip("\n") + "\n" for s in sources)


def _visible_cases(kernel: Kernel, rng: random.Random, avoid: list[int]) -> list[tuple]:
    """Two or three argument tuples whose values are plain and on which none of the bugs in
    ``avoid`` shows (the visible tests pass on the buggy tree: the issue reports the bug)."""
    ref = kernel.reference()
    out = []
    for args in list(kernel.fixed) + [kernel.args(rng) for _ in range(60)]:
        status, value = call(ref, args)
        if status != "ok" or any(call(kernel.buggy(b), args) != (status, value) for b in avoid):
            continue
        if args not in out:
            out.append(args)
        if len(out) == 3:
            break
    return out


def _args_text(args: tuple) -> str:
    return ", ".join(repr(a) for a in args)


def visible_tests(package: str, module: str, kernels: list[Kernel], rng: random.Random, avoid: dict[str, list[int]],
                  names: dict[str, str] | None = None) -> str:
    """``tests/test_<module>.py``: a unittest case per function (names as the tree calls them)."""
    names = names or {}
    called = [names.get(k.name, k.name) for k in kernels]
    body = [f"import unittest\n\nfrom {package}.{module} import {', '.join(called)}\n\n",
            f"class Test{module.title().replace('_', '')}(unittest.TestCase):"]
    for kernel, name in zip(kernels, called):
        body.append(f"    def test_{name}(self):")
        for args in _visible_cases(kernel, rng, avoid.get(kernel.name, [])):
            body.append(f"        self.assertEqual({name}({_args_text(args)}), {call(kernel.reference(), args)[1]!r})")
        body.append("")
    return "\n".join(body).rstrip() + "\n\n\nif __name__ == \"__main__\":\n    unittest.main()\n"


def hidden_tests(kernel: Kernel, name: str, rng: random.Random, bugs: list[int] = ()) -> list[str]:
    """Hidden test statements for one function, called as ``name``: its edge cases, random cases
    and, for each bug in ``bugs``, two inputs where that bug shows."""
    ref = kernel.reference()
    cases = list(kernel.fixed) + [kernel.args(rng) for _ in range(CASES_PER_FUNCTION)]
    for bug in bugs:
        found = sum(call(ref, args) != call(kernel.buggy(bug), args) for args in kernel.fixed)
        for _ in range(400 if found < 2 else 0):
            args = kernel.args(rng)
            if call(ref, args) != call(kernel.buggy(bug), args):
                cases.append(args)
                found += 1
                if found == 2:
                    break
        assert found, f"no input shows bug {bug} of {kernel.name}"
    out, seen = [], set()
    for args in cases:
        key = repr(args)
        if key in seen:
            continue
        seen.add(key)
        status, value = call(ref, args)
        if status == "ok":
            out.append(f"assert same({name}({_args_text(args)}), {value!r})")
        else:
            out.append(f"try:\n    {name}({_args_text(args)})\nexcept {value}:\n    pass\nelse:\n"
                       f"    raise AssertionError('expected {value}')")
    return out


def _issue_example(kernel: Kernel, bug: int, rng: random.Random) -> str:
    ref, bad = kernel.reference(), kernel.buggy(bug)
    for args in [kernel.args(rng) for _ in range(400)] + list(kernel.fixed):
        got, want = call(bad, args), call(ref, args)
        if got != want and want[0] == "ok":
            shown = repr(got[1]) if got[0] == "ok" else f"raises {got[1]}"
            return f"`{kernel.name}({_args_text(args)})` {'returns ' if got[0] == 'ok' else ''}{shown}; it should return {want[1]!r}."
    raise AssertionError(f"no example for bug {bug} of {kernel.name}")


def _base(rng: random.Random, level: int, must: list[str]) -> tuple[str, dict[str, list[Kernel]]]:
    """The package name and its modules' kernels (the modules of ``must`` included)."""
    package = rng.choice(PACKAGES)
    count = 2 + level
    modules = list(dict.fromkeys([KERNELS[k].module for k in must]))
    others = [m for m in MODULES if m not in modules]
    rng.shuffle(others)
    modules += others[:max(count - len(modules), 0)]
    chosen: dict[str, list[Kernel]] = {}
    for module in sorted(modules):
        kernels = by_module(module)
        keep = [k for k in kernels if k.name in must]
        rest = [k for k in kernels if k.name not in must]
        rng.shuffle(rest)
        size = min(len(kernels), 3 + level)
        names = {k.name for k in keep + rest[:max(size - len(keep), 0)]}
        chosen[module] = [k for k in kernels if k.name in names]  # the module's own order
    return package, chosen


def _files(package: str, modules: dict[str, list[Kernel]], sources: dict[str, str], rng: random.Random,
           avoid: dict[str, list[int]], names: dict[str, str] | None = None) -> dict[str, str]:
    files = {
        "README.md": (f"# {package}\n\nSmall, dependency-free helpers: "
                      + ", ".join(f"`{package}.{m}`" for m in modules)
                      + f".\n\nRun the tests:\n\n    {TEST_COMMAND}\n"),
        "pyproject.toml": (f'[project]\nname = "{package}"\nversion = "0.{rng.randint(1, 9)}.{rng.randint(0, 20)}"\n'
                           'requires-python = ">=3.9"\n'),
        f"{package}/__init__.py": f'"""{package}: small helpers ({", ".join(modules)})."""\n',
        "tests/__init__.py": "",
    }
    for module, kernels in modules.items():
        files[_module_path(package, module)] = module_text(module, [sources.get(k.name, k.source) for k in kernels])
        files[f"tests/test_{module}.py"] = visible_tests(package, module, kernels, rng, avoid, names)
    return files


def _replace(path: str, old: str, new: str) -> dict[str, Any]:
    return {"tool": "replace", "path": path, "old": old, "new": new}


def _bugfix(rng: random.Random, level: int) -> RepoTask:
    kernels = list(KERNELS.values())
    first = rng.choice(kernels)
    picked = [first] + ([rng.choice([k for k in kernels if k.module != first.module])] if level == 2 else [])
    bugs = {k.name: rng.randrange(len(k.bugs)) for k in picked}
    package, modules = _base(rng, level, [k.name for k in picked])
    sources = {k.name: k.bugged_source(bugs[k.name]) for k in picked}
    files = _files(package, modules, sources, rng, {k.name: [bugs[k.name]] for k in picked})
    reports = []
    for k in picked:
        where = f" (`{k.name}` in `{_module_path(package, k.module)}`)" if level == 0 else ""
        reports.append(f"- {_issue_example(k, bugs[k.name], rng)}{where}")
    statement = ("Bug report" + ("s" if len(picked) > 1 else "") + ":\n" + "\n".join(reports)
                 + "\n\nFix the bug" + ("s" if len(picked) > 1 else "") + " without breaking anything else.")
    edits = [_fix_edit(files[_module_path(package, k.module)], _module_path(package, k.module), sources[k.name], k.source)
             for k in picked]
    return _finish(RepoTask("bugfix", 0, level, package, files, statement, targets=[k.name for k in picked], edits=edits),
                   modules, rng, {k.name: [bugs[k.name]] for k in picked})


def _fix_edit(text: str, path: str, wrong: str, right: str) -> dict[str, Any]:
    """A ``replace`` call that turns ``wrong`` (a function's source in the file ``text``) into
    ``right``: the lines that differ, widened by a line at a time until the old text is unique."""
    a, b = wrong.splitlines(keepends=True), right.splitlines(keepends=True)
    head, tail = common_ends(a, b)
    lo, hi_a, hi_b = head, len(a) - tail, len(b) - tail
    while True:
        old = "".join(a[lo:hi_a])
        if old and text.count(old) == 1:
            return _replace(path, old, "".join(b[lo:hi_b]))
        if lo == 0 and hi_a == len(a):
            raise AssertionError(f"no unique edit in {path}")
        lo, hi_a, hi_b = max(lo - 1, 0), min(hi_a + 1, len(a)), min(hi_b + 1, len(b))


def _feature(rng: random.Random, level: int) -> RepoTask:
    kernels = list(KERNELS.values())
    first = rng.choice(kernels)
    picked = [first] + ([rng.choice([k for k in kernels if k is not first])] if level == 2 else [])
    package, modules = _base(rng, level, [k.name for k in picked])
    sources = {k.name: k.stub_source() for k in picked}
    files = _files(package, modules, sources, rng, {})
    asks = [f"`{k.name}`" + (f" in `{_module_path(package, k.module)}`" if level == 0 else "") for k in picked]
    statement = (f"Implement {' and '.join(asks)}: the body is `raise NotImplementedError`. Do what the docstring "
                 "says, for every input it describes (its example is one case).")
    edits = [_replace(_module_path(package, k.module), k.stub_source(), k.source) for k in picked]
    return _finish(RepoTask("feature", 0, level, package, files, statement, targets=[k.name for k in picked], edits=edits),
                   modules, rng, {})


def _refactor(rng: random.Random, level: int) -> RepoTask:
    kernels = list(KERNELS.values())
    kinds = ["rename", "move"] if level == 2 else [rng.choice(["rename", "move"])]
    first = rng.choice(kernels)
    picked = [first] + ([rng.choice([k for k in kernels if k.module != first.module])] if level == 2 else [])
    package, modules = _base(rng, level, [k.name for k in picked])
    files = _files(package, modules, {}, rng, {})
    asks, edits, structure = [], [], []
    exports: dict[str, tuple[str, str]] = {}
    renamed: dict[str, str] = {}
    for kind, k in zip(kinds, picked):
        path = _module_path(package, k.module)
        where = f" (in `{path}`)" if level == 0 else ""
        if kind == "rename":
            new = rng.choice(k.renames)
            renamed[k.name] = new
            asks.append(f"Rename the function `{k.name}`{where} to `{new}` everywhere: its definition and every "
                        f"use, tests included. No trace of the old name may remain in the code (no alias).")
            structure += [{"check": "absent", "name": k.name},
                          {"check": "defines", "path": path, "name": new}]
            exports[new] = (f"{package}.{k.module}", new)
            exports[f"{k.name}__gone"] = (f"{package}.{k.module}", k.name)  # must not import
            for fpath in (path, f"tests/test_{k.module}.py"):
                edits.append({"tool": "write", "path": fpath, "content": _renamed(files[fpath], k.name, new)})
        else:
            target = MOVE_TARGETS[k.module]
            new_path = _module_path(package, target)
            asks.append(f"Move the function `{k.name}`{where} into a new module `{new_path}`; "
                        f"`{package}.{k.module}` must keep working for its callers by importing it from there "
                        "(not by keeping a copy).")
            structure += [{"check": "defines", "path": new_path, "name": k.name},
                          {"check": "not_defines", "path": path, "name": k.name},
                          {"check": "imports", "path": path, "name": k.name}]
            exports[k.name + "__moved"] = (f"{package}.{target}", k.name)
            exports[k.name] = (f"{package}.{k.module}", k.name)
            edits.append({"tool": "write", "path": new_path, "content": module_text(target, [k.source], [
                f"import {m}" for m in MODULES[k.module][1]])})
            edits.append(_replace(path, k.source, ""))
            doc_line = files[path].split("\n", 1)[0] + "\n"
            edits.append(_replace(path, doc_line, doc_line + f"\nfrom {package}.{target} import {k.name}\n"))
    statement = "Refactor, keeping every behaviour and every test green:\n" + "\n".join(f"- {a}" for a in asks)
    task = RepoTask("refactor", 0, level, package, files, statement, targets=[k.name for k in picked], edits=edits,
                    structure=structure)
    return _finish(task, modules, rng, {}, renamed=renamed, exports=exports)


def _renamed(text: str, old: str, new: str) -> str:
    """``text`` with the identifier ``old`` renamed (whole words; this generator's own files)."""
    return re.sub(rf"\b{re.escape(old)}\b", new, text)


def _finish(task: RepoTask, modules: dict[str, list[Kernel]], rng: random.Random, bugs: dict[str, list[int]],
            *, renamed: dict[str, str] | None = None, exports: dict[str, tuple[str, str]] | None = None) -> RepoTask:
    """Hidden tests for every function of the touched modules, and how the tests reach them."""
    renamed = renamed or {}
    task.exports = dict(exports or {})
    touched = {KERNELS[name].module for name in task.targets}
    for module in sorted(touched):
        for kernel in modules[module]:
            name = renamed.get(kernel.name, kernel.name)
            task.exports.setdefault(name, (f"{task.package}.{module}", name))
            task.checked.append((name, kernel.name))
            task.hidden += hidden_tests(kernel, name, rng, bugs.get(kernel.name, []))
            if kernel.name + "__gone" in task.exports:  # the old name is gone from the module at run time too
                task.hidden.append(f"try:\n    {kernel.name}__gone()\nexcept NameError:\n    pass\nelse:\n"
                                   f"    raise AssertionError('{kernel.name} is still there')")
            if kernel.name + "__moved" in task.exports:
                task.hidden += [t.replace(f"same({name}(", f"same({kernel.name}__moved(", 1)
                                for t in hidden_tests(kernel, name, rng)[:3] if t.startswith("assert same(")]
    return task


def regrade_tests(task: RepoTask, salt: int) -> list[str]:
    """More hidden tests of the same functions on fresh inputs (isomorphic variants of the task's
    cases, drawn with ``salt``): a stricter grading for the reward-hacking watch's regrade
    (trainer/integrity.py). A change that fits the hidden cases rather than the behaviour fails them."""
    rng = random.Random(f"regrade:{task.family}:{task.seed}:{task.level}:{salt}")
    seen = set(task.hidden)
    out = []
    for name, kernel in task.checked:
        out += [t for t in hidden_tests(KERNELS[kernel], name, rng) if t not in seen and t.startswith("assert same(")]
    return out


@functools.lru_cache(maxsize=256)
def repo_task(family: str, seed: int, level: int) -> RepoTask:
    """The task of ``family`` for ``seed`` at ``level`` (deterministic, cached)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown repository task family {family!r}; known: {', '.join(FAMILIES)}")
    level = max(0, min(int(level), LEVELS - 1))
    rng = random.Random(f"{family}:{seed}:{level}")
    task = {"bugfix": _bugfix, "feature": _feature, "refactor": _refactor}[family](rng, level)
    task.seed = seed
    return task


def task_hidden_tests(task: Task) -> list[str]:
    """The hidden tests of a ``swe-*`` task, regenerated from its seed (never carried in the task)."""
    return repo_task(str(task.meta["family"]), int(task.meta["seed"]), int(task.meta["level"])).hidden


def prompt(task: RepoTask, max_steps: int) -> str:
    """The policy's first observation: the task, the tools and the file list."""
    return (
        f"You are working in a Python repository: the package `{task.package}`, its tests in `tests/` "
        f"(run with `{TEST_COMMAND}`).\n\n{task.statement}\n\n"
        "Work through tools: each turn, reply with one JSON tool call, for example "
        '{"tool": "read", "path": "README.md"}. Tools:\n'
        "- ls {path?}: files under a folder; read {path, start?, lines?}: a file with line numbers;\n"
        "- search {query}: every line holding the text, with its file and line number;\n"
        "- replace {path, old, new}: replace text that occurs exactly once; write {path, content}: create or\n"
        "  overwrite a file; delete {path}; apply_patch {patch}: apply a unified diff;\n"
        "- run_tests {pattern?}: run the repository's tests in a sandbox and see their output;\n"
        "- git_status, git_diff, git_commit {message}, git_log: version control of your work;\n"
        "- submit: you are done (hidden tests then run on the final tree; the episode ends).\n"
        f"You have {max_steps} tool calls.\n\nFiles:\n" + "\n".join(sorted(task.files)) + "\n"
    )


def reference_transcript(task: RepoTask) -> str:
    """The reference solution as tool calls, one per line."""
    first = sorted({e["path"] for e in task.edits if e["tool"] == "replace"} or {e["path"] for e in task.edits})[0]
    calls = [{"tool": "read", "path": first}] + task.edits + [
        {"tool": "run_tests"}, {"tool": "git_commit", "message": f"{task.family}: {', '.join(task.targets)}"},
        {"tool": "submit"}]
    return "\n".join(json.dumps(c) for c in calls)


# ----------------------------------------------------------------------------- shape checks
def _top_level_defs(tree: ast.Module) -> set[str]:
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _top_level_imports(tree: ast.Module) -> set[str]:
    out = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            out.update(a.asname or a.name for a in node.names)
    return out


DYNAMIC = frozenset({"exec", "eval", "compile", "globals", "locals", "vars", "getattr", "setattr", "delattr", "__import__",
                     "importlib", "__dict__", "modules", "__getattr__", "__builtins__", "builtins"})
"""Names that reach code or namespaces by strings: a refactor never needs them, and with them an
alias or a copy hides from the syntax tree."""


def _defined_anywhere(tree: ast.Module) -> set[str]:
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def identifiers(tree: ast.AST) -> set[str]:
    """Every name the code uses or binds (names, attributes, defs, arguments, imports) and every
    string constant that is a name (``globals()["old"]``)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            out.add(node.value)
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.alias):
            out.update(filter(None, [node.name.split(".")[-1], node.asname]))
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)
    return out


def _assigned(tree: ast.Module, name: str) -> bool:
    """True when the module binds ``name`` by an assignment anywhere (``f = lambda ...``)."""
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(tree))


def structure_failures(checks: list[dict[str, str]], tree: dict[str, str]) -> list[str]:
    """The shape checks that the tree ``tree`` (path -> text) fails, as messages.

    >>> checks = [{"check": "absent", "name": "old"}, {"check": "defines", "path": "p/m.py", "name": "new"}]
    >>> structure_failures(checks, {"p/m.py": "def new():\\n    return 1\\n"})
    []
    >>> structure_failures(checks, {"p/m.py": "def new():\\n    return 1\\nold = new\\n"})
    ['the old name old is still used in p/m.py']
    """
    parsed: dict[str, ast.Module | None] = {}
    out = []
    for path, text in tree.items():
        if path.endswith(".py"):
            try:
                parsed[path] = ast.parse(text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                parsed[path] = None
                out.append(f"{path} does not parse")
    if checks:  # the names that reach code by strings hide aliases and copies from these checks
        for path, module in sorted(parsed.items()):
            if module is not None and (dynamic := sorted(identifiers(module) & DYNAMIC)):
                out.append(f"{path} uses {', '.join(dynamic)}: a refactor needs no code reached by strings")
    for check in checks:
        kind, name, path = check["check"], check["name"], check.get("path", "")
        if kind == "absent":
            out += [f"the old name {name} is still used in {p}" for p, t in sorted(parsed.items())
                    if t is not None and name in identifiers(t)]
            continue
        module = parsed.get(path)
        if module is None:
            out.append(f"{path} is missing or does not parse")
        elif kind == "defines" and name not in _top_level_defs(module):
            out.append(f"{path} does not define {name}")
        elif kind == "not_defines" and (name in _defined_anywhere(module) or _assigned(module, name)):
            out.append(f"{path} still defines {name} (it must import it)")
        elif kind == "imports" and name not in _top_level_imports(module):
            out.append(f"{path} does not import {name}")
    return out
