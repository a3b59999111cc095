"""The parts import each other only the way DESIGN.md says, and nothing imports in a circle.

Every ``import`` in the tree counts, at module top or inside a function: an import hidden in a
function is still a dependency, and a circle through it is still a circle.

Imports sit at module top unless a written reason says otherwise (see
:func:`test_imports_inside_functions_say_why`).
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("trainer", "controlplane", "workers")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    out = {}
    for part in PARTS:
        for path in (ROOT / part).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            out[_module_name(path)] = path
    return out


SOURCES = _sources()


def _resolve(name: str) -> str | None:
    """The project module an imported name lives in (the longest known prefix), else None."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in SOURCES:
            return candidate
        parts.pop()
    return None


def _package(module: str) -> str:
    return module if SOURCES[module].name == "__init__.py" else module.rpartition(".")[0]


def _imported(node: ast.Import | ast.ImportFrom, package: str, *, members: bool = False) -> list[str]:
    """The modules an import statement names (relative ones resolved against ``package``); with
    ``members``, ``from a import b`` names ``a.b`` (which may be a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        up = package.split(".")
        base = ".".join(up[: len(up) - (node.level - 1)] + ([base] if base else []))
    return [f"{base}.{a.name}" for a in node.names] if members else [base]


def imports(module: str) -> set[str]:
    """Project modules ``module`` imports, anywhere in its body."""
    path = SOURCES[module]
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for name in _imported(node, _package(module), members=True):
            target = _resolve(name)
            if target and target != module:
                found.add(target)
    return found


GRAPH = {m: imports(m) for m in SOURCES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _group(module: str) -> str:
    """A file's part, or for the control plane its app (``controlplane.runs``)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "controlplane" and len(parts) > 1 else parts[0]


def test_no_module_imports_in_a_circle():
    assert _cycles(GRAPH) == []


def _group_circles(group: Callable[[str], str], modules: Callable[[str], bool] = lambda name: True) -> str:
    """The circles among the groups ``group`` puts the ``modules`` in, each edge of a circle with
    the imports behind it (so that a failure says which file to change); empty when none."""
    groups: dict[str, set[str]] = {}
    why: dict[tuple[str, str], list[str]] = {}
    for module, targets in GRAPH.items():
        for target in targets:
            if modules(module) and modules(target) and group(target) != group(module):
                groups.setdefault(group(module), set()).add(group(target))
                why.setdefault((group(module), group(target)), []).append(f"{module} -> {target}")
    cycles = _cycles(groups)
    return "\n".join(f"{a} -> {b}: {', '.join(sorted(why[a, b]))}" for cycle in cycles for a in cycle
                     for b in sorted(groups[a]) if b in cycle)


def test_no_two_apps_or_parts_import_each_other():
    assert _group_circles(_group) == ""



def _trainer_group(module: str) -> str:
    """A trainer module's package (``trainer.verifiers``), a family's package
    (``trainer.families.swe``), or the module itself at the top (``trainer.integrity``)."""
    parts = module.split(".")
    return ".".join(parts[:3] if parts[1:2] == ["families"] and len(parts) > 3 else parts[:2])


def test_the_trainers_packages_and_families_import_downward_only():
    """A domain family lives in one package (its task source, environment, verifier stages and
    catalogue entries), so no two of the trainer's packages or top-level modules import each
    other, not even inside a function: the registries name a family's parts by strings."""
    assert _group_circles(_trainer_group, lambda name: name.startswith("trainer.")) == ""


OTHER_PARTS = ("controlplane", "workers", "django")
MODULE_PATH = re.compile(r"\b(?:controlplane|workers|django)[.:][A-Za-z_]")
"""A string naming a module of another part (``"workers.sandbox:execute"``), not prose ("workers")."""


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (prose may name the other parts)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def trainer_offenders(module: str) -> list[str]:
    """``path:line: code`` where trainer module ``module`` imports another part or names one of
    its modules in a string (as one handed to importlib would)."""
    path = SOURCES[module]
    tree = ast.parse(path.read_text(), str(path))
    docstrings = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            named = [n for n in _imported(node, _package(module)) if n.split(".")[0] in OTHER_PARTS]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            named = MODULE_PATH.search(node.value)
        else:
            continue
        if named:
            out.append((node.lineno, f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)[:120]}"))
    return [line for _, line in sorted(out)]


def test_trainer_never_names_the_control_plane_or_the_workers():
    """Not by import and not in a string (one handed to importlib); docstrings and comments may."""
    assert [line for module in sorted(SOURCES) if module.startswith("trainer") for line in trainer_offenders(module)] == []


def _probe(tmp_path, monkeypatch, text: str) -> str:
    """A module ``probe`` with ``text``, known to the checks for this test only."""
    path = tmp_path / "probe.py"
    path.write_text(text)
    monkeypatch.setitem(SOURCES, "probe", path)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    return "probe"


def test_the_trainer_check_sees_imports_and_module_paths_not_prose(tmp_path, monkeypatch):
    probe = _probe(tmp_path, monkeypatch, '''"""Prose may name workers.sandbox and controlplane."""
import os
from django.conf import settings
import controlplane.dispatch
EXECUTOR = "workers.sandbox:execute"
SETTINGS = {"workers": ["1", "2"]}
HELP = "the workers run it"  # comments may name workers.sandbox too
class A:
    """workers.x"""
''')
    assert trainer_offenders(probe) == [
        "probe.py:3: from django.conf import settings",
        "probe.py:4: import controlplane.dispatch",
        "probe.py:5: 'workers.sandbox:execute'",
    ]


def test_the_control_plane_never_imports_the_workers():
    assert sorted(m for m, targets in GRAPH.items() if m.startswith("controlplane") and any(t.startswith("workers") for t in targets)) == []


HEAVY = frozenset({"torch", "transformers", "vllm", "deepspeed", "sympy", "math_verify", "reasoning_gym", "docker",
                   "playwright", "sentence_transformers", "safetensors"})
"""Packages that take seconds or a GPU to import: loading them only where used needs no comment."""

LAZY = re.compile(r"#\s*lazy:\s*\S")
"""``# lazy: <reason>`` on the import's line, or on the comment line(s) just above a block of imports."""

DOCSTRING_LAZY = re.compile(r"lazy:\s*([\w.]+)")
"""A module docstring's ``lazy: <module> <reason>`` covers that module's imports inside functions."""


def _function_imports(tree: ast.AST):
    """Import statements inside a function (or lambda) body, with the statement before each in its block."""
    def walk(node, in_function):
        body_lists = [getattr(node, f) for f in ("body", "orelse", "finalbody") if isinstance(getattr(node, f, None), list)]
        for stmts in body_lists:
            previous = None
            for stmt in stmts:
                if in_function and isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    yield stmt, previous
                previous = stmt
        for child in ast.iter_child_nodes(node):
            yield from walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    yield from walk(tree, False)


def unexplained_function_imports(module: str) -> list[str]:
    """``path:line: import`` for each import inside a function of ``module`` with no written reason."""
    path = SOURCES[module]
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text, str(path))
    explained = DOCSTRING_LAZY.findall(ast.get_docstring(tree) or "")
    reasons: dict[int, bool] = {}  # an import statement's line -> it has a reason
    out = []
    for node, previous in _function_imports(tree):
        names = _imported(node, _package(module))
        own = any(LAZY.search(lines[n - 1]) for n in range(node.lineno, node.end_lineno + 1))
        above, n = False, node.lineno - 1
        while n >= 1 and lines[n - 1].strip().startswith("#"):
            above = above or bool(LAZY.search(lines[n - 1]))
            n -= 1
        # A block of imports shares the reason given above its first one.
        shared = isinstance(previous, (ast.Import, ast.ImportFrom)) and reasons.get(previous.lineno, False)
        heavy = all(name.split(".")[0] in HEAVY for name in names)
        documented = all(any(name == m or name.startswith(m + ".") for m in explained) for name in names)
        reasons[node.lineno] = ok = own or above or shared or heavy or documented
        if not ok:
            out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_imports_inside_functions_say_why():
    """An import inside a function hides a dependency (and can hide a circle): in controlplane/,
    workers/ and trainer/, imports sit at module top unless a written reason says why not —
    ``# lazy: <reason>`` on the line or on the comment just above the block (e.g. Django app
    loading in AppConfig.ready, a module that imports torch kept out of a light process's start),
    a ``lazy: <module> <reason>`` line in the module docstring, or a heavy package (HEAVY)."""
    offenders = [line for module in sorted(SOURCES) for line in unexplained_function_imports(module)]
    assert offenders == []


def test_the_lazy_import_check_sees_what_it_should(tmp_path, monkeypatch):
    probe = _probe(tmp_path, monkeypatch, '''"""Example.

lazy: yaml only the export reads it
"""
def a():
    from controlplane.common import errors
def b():
    from controlplane.common import errors  # lazy: a reason
def c():
    # lazy: Django app loading
    from controlplane.common import errors
    from controlplane.common import cli
    x = 1
    from controlplane.common import api
def d():
    import torch.nn
    import yaml
''')
    assert unexplained_function_imports(probe) == [
        "probe.py:6: from controlplane.common import errors",
        "probe.py:14: from controlplane.common import api",
    ]
