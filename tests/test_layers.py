"""The parts import each other only the way DESIGN.md says, and nothing imports in a circle.

Every ``import`` in the tree counts, at module top or inside a function: an import hidden in a
function is still a dependency, and a circle through it is still a circle.

In the control plane, imports sit at module top unless a written reason says otherwise (see
:func:`test_control_plane_imports_inside_functions_say_why`).
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

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


def imports(module: str) -> set[str]:
    """Project modules ``module`` imports, anywhere in its body."""
    path = SOURCES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[: len(up) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
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


def test_no_two_apps_or_parts_import_each_other():
    groups: dict[str, set[str]] = {}
    why: dict[tuple[str, str], list[str]] = {}
    for module, targets in GRAPH.items():
        for target in targets:
            if _group(target) != _group(module):
                groups.setdefault(_group(module), set()).add(_group(target))
                why.setdefault((_group(module), _group(target)), []).append(f"{module} -> {target}")
    cycles = _cycles(groups)
    # Name the imports behind each edge of a circle, so the failure says which file to change.
    edges = [f"{a} -> {b}: {', '.join(sorted(why[a, b]))}" for cycle in cycles for a in cycle for b in sorted(groups[a])
             if b in cycle]
    assert cycles == [], "\n".join(edges)


def test_trainer_never_names_the_control_plane_or_the_workers():
    """Not by import and not in a string handed to importlib."""
    offenders = []
    for module, path in SOURCES.items():
        if not module.startswith("trainer"):
            continue
        text = path.read_text()
        for word in ("controlplane", "workers.", "django"):
            for lineno, line in enumerate(text.splitlines(), 1):
                code = line.split("#", 1)[0]
                if word in code and not code.lstrip().startswith(('"""', "'''")) and ("import" in code or '"' in code or "'" in code):
                    offenders.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert offenders == []


def test_the_control_plane_never_imports_the_workers():
    assert sorted(m for m, targets in GRAPH.items() if m.startswith("controlplane") and any(t.startswith("workers") for t in targets)) == []


HEAVY = frozenset({"torch", "transformers", "vllm", "deepspeed", "sympy", "math_verify", "reasoning_gym", "docker",
                   "playwright", "sentence_transformers", "safetensors"})
"""Packages that take seconds or a GPU to import: loading them only where used needs no comment."""

LAZY = re.compile(r"#\s*lazy:\s*\S")
"""``# lazy: <reason>`` on the import's line, or on the comment line(s) just above a block of imports."""

DOCSTRING_LAZY = re.compile(r"lazy:\s*([\w.]+)")
"""A module docstring's ``lazy: <module> <reason>`` covers that module's imports inside functions."""


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        up = package.split(".")
        base = ".".join(up[: len(up) - (node.level - 1)] + ([base] if base else []))
    return [base]


def _function_imports(tree: ast.AST):
    """Import statements inside a function (or lambda) body, with the statement before each in its block."""
    def walk(node, in_function):
        body_lists = [getattr(node, f) for f in ("body", "orelse", "finalbody", "handlers") if isinstance(getattr(node, f, None), list)]
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
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    explained = DOCSTRING_LAZY.findall(ast.get_docstring(tree) or "")
    reasons: dict[int, bool] = {}  # an import statement's line -> it has a reason
    out = []
    for node, previous in _function_imports(tree):
        names = _imported(node, package)
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


def test_control_plane_imports_inside_functions_say_why():
    """An import inside a function hides a dependency (and can hide a circle): in controlplane/,
    imports sit at module top unless a written reason says why not — ``# lazy: <reason>`` on the
    line or on the comment just above the block (e.g. Django app loading in AppConfig.ready), a
    ``lazy: <module> <reason>`` line in the module docstring, or a heavy package (HEAVY)."""
    offenders = [line for module in sorted(SOURCES) if module.startswith("controlplane")
                 for line in unexplained_function_imports(module)]
    assert offenders == []


def test_the_lazy_import_check_sees_what_it_should(tmp_path, monkeypatch):
    path = tmp_path / "lazy_example.py"
    path.write_text('''"""Example.

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
    monkeypatch.setitem(SOURCES, "lazy_example", path)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert unexplained_function_imports("lazy_example") == [
        "lazy_example.py:6: from controlplane.common import errors",
        "lazy_example.py:14: from controlplane.common import api",
    ]
