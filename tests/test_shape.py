"""The product code keeps the shape a newcomer can carry on: no file over 600 lines, no function
over 80 lines in the parts (migrations and vendored files aside), no setting nothing reads.

A file or function that grows past its bound is split where it has seams; this test names each
one that does, with its length.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("controlplane", "workers", "trainer", "frontend")
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80


def _product_files() -> list[Path]:
    return sorted(p for part in PARTS for p in (ROOT / part).rglob("*.py")
                  if "migrations" not in p.parts and "vendor" not in p.parts)


def test_no_product_file_is_over_600_lines():
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in _product_files()
            if (n := p.read_text().count("\n")) > MAX_FILE_LINES]
    assert long == []


def test_no_product_function_is_over_80_lines():
    long = []
    for path in _product_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert long == []


def test_every_temper_setting_is_read_somewhere():
    """Each ``TEMPER_*`` setting of controlplane/settings/ is read: by code outside the settings
    (``settings.TEMPER_...``) or by another setting derived from it. One that nothing reads
    misleads whoever sets it."""
    settings_files = sorted((ROOT / "controlplane" / "settings").glob("*.py"))
    assigned: set[str] = set()
    loaded: set[str] = set()
    for path in settings_files:
        tree = ast.parse(path.read_text())
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            assigned |= {t.id for t in targets if isinstance(t, ast.Name) and t.id.startswith("TEMPER_")}
        loaded |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    outside = "\n".join(p.read_text(errors="ignore") for part in PARTS for p in (ROOT / part).rglob("*")
                        if p.suffix in (".py", ".html", ".js") and p.is_file() and p not in settings_files)
    unread = sorted(n for n in assigned if n not in loaded and not re.search(rf"\b{n}\b", outside))
    assert unread == []
