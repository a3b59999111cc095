"""Syntax-tree mutations of the swe-pkg build: each operator, determinism, results that parse to
the intended tree, nothing in docstrings, type hints or f-strings."""
from __future__ import annotations

import ast

import pytest

from trainer.families.pkgs import mutate
from trainer.families.pkgs.pins import is_source_path, source_tree

SOURCE = '''"""Module docstring: a < b and c + 1."""
from typing import Dict, List


def f(a: List[int] = None, b=3, flag=True, name="x") -> Dict[str, int]:
    """Docstring: if a < b and not c: return x[1:2]."""
    total: int = 0
    if a is not None and b > 0:
        total += a[0] * b
    while not flag:
        break
    for i in range(1, len(a) - 1):
        total = total - i
    label = f"{name} {b + 1}"
    return max(total, b), a[-1], a[:b], label
'''


def kinds(source: str) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for m in mutate.mutations(source):
        out.setdefault(m.kind, []).append((m.original, m.replacement))
    return out


def test_each_operator_is_applied():
    found = kinds(SOURCE)
    assert set(found) == set(mutate.KINDS)
    assert ("is not", "is") in found["compare"] and (">", ">=") in found["compare"]
    assert ("*", "//") in found["arith"] and ("+=", "-=") in found["arith"] and ("-", "+") in found["arith"]
    assert ("and", "or") in found["bool"]
    assert ("a is not None and b > 0", "b > 0") in found["drop_condition"]
    assert ("a is not None and b > 0", "a is not None") in found["drop_condition"]
    assert ("not flag", "flag") in found["not"]
    assert ("3", "4") in found["default"] and ("True", "False") in found["default"] and ('"x"', "''") in found["default"]
    assert ("1", "2") in found["range"] and ("len(a) - 1", "(len(a) - 1) + 1") in found["range"]
    assert ("0", "1") in found["index"] and ("1", "2") in found["index"]  # a[0] -> a[1], a[-1] -> a[-2]
    assert ("b", "b + 1") in found["slice"] and ("b", "b - 1") in found["slice"]
    assert ("0", "1") in found["constant"]
    assert ("total, b", "b, total") in found["swap_args"]


def test_every_mutant_parses_to_its_intended_change():
    for m in mutate.mutations(SOURCE):
        mutated = mutate.apply(SOURCE, m)
        assert ast.dump(ast.parse(mutated)) != ast.dump(ast.parse(SOURCE)), m
        changed = [(a, b) for a, b in zip(SOURCE.splitlines(), mutated.splitlines()) if a != b]
        assert len(changed) == 1 and changed[0][0].count("\n") == 0, m  # one line, the rest as it was


def test_nothing_in_docstrings_type_hints_or_fstrings():
    lines = SOURCE.splitlines()
    for m in mutate.mutations(SOURCE):
        line = lines[m.line - 1]
        assert '"""' not in line, m  # the module's and the function's docstrings
        assert not line.lstrip().startswith(("from typing", "label =")), m  # imports and f-string untouched
        if line.startswith("def f"):
            head = SOURCE.encode()[m.start - 20:m.end + 20].decode(errors="replace")
            assert m.kind == "default" and "List" not in m.original and "Dict" not in m.original, (m, head)
        if line.lstrip().startswith("total: int"):
            assert m.original == "0", m  # the value, never the annotation


def test_deterministic_and_restricted_to_lines():
    assert mutate.mutations(SOURCE) == mutate.mutations(SOURCE)
    only = mutate.mutations(SOURCE, frozenset({8}))
    assert only and all(m.line == 8 for m in only)


def test_apply_refuses_a_mutation_of_another_source():
    m = mutate.mutations(SOURCE)[0]
    with pytest.raises(ValueError, match="does not match"):
        mutate.apply(SOURCE.replace("def f", "def g  "), m)


def test_a_real_package_mutates_cleanly():
    tree = source_tree("toolz")
    path = "toolz/itertoolz.py"
    assert is_source_path(path)
    found = mutate.mutations(tree[path])
    assert len(found) > 150 and len({m.kind for m in found}) >= 9
    for m in found[::5]:
        compile(mutate.apply(tree[path], m), path, "exec")
