"""Syntax-tree mutations: the bugs the swe-pkg build injects into a package's source.

A :class:`Mutation` is one small edit of the source text at a node of its syntax tree: a
comparison or arithmetic operator swapped, ``and``/``or`` exchanged, an off-by-one constant,
slice bound, index or ``range`` bound, a condition dropped from ``if c and d`` / ``while``,
a ``not`` removed, a wrong default value, two call arguments swapped. The edit touches only the
node's own characters (the rest of the file keeps its formatting, so the diff is one line or
two), and every mutation is checked: the edited source parses to exactly the intended tree.
Nothing in docstrings, type hints or f-strings is mutated.

>>> src = "def f(a, b=2):\\n    '''a < b'''\\n    if a < b and a:\\n        return a + 1\\n    return b\\n"
>>> [(m.kind, m.line, m.original, m.replacement) for m in mutations(src)][:6]
[('default', 1, '2', '3'), ('default', 1, '2', '1'), ('drop_condition', 3, 'a < b and a', 'a'), ('drop_condition', 3, 'a < b and a', 'a < b'), ('bool', 3, 'and', 'or'), ('compare', 3, '<', '<=')]
>>> print(apply(src, mutations(src)[5]).splitlines()[2])
    if a <= b and a:
"""
from __future__ import annotations

import ast
import bisect
import re
from dataclasses import asdict, dataclass
from typing import Callable, Iterator

COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
           ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
"""Each comparison operator and the one it becomes."""
ARITH = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult, ast.Div: ast.FloorDiv,
         ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult, ast.LShift: ast.RShift, ast.RShift: ast.LShift,
         ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd, ast.BitXor: ast.BitOr}
"""Each arithmetic operator and the one it becomes."""
SYMBOLS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.Is: "is",
           ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in", ast.Add: "+", ast.Sub: "-", ast.Mult: "*",
           ast.FloorDiv: "//", ast.Div: "/", ast.Mod: "%", ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>",
           ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.And: "and", ast.Or: "or"}
KINDS = ("compare", "arith", "bool", "drop_condition", "not", "constant", "index", "slice", "range", "default", "swap_args")
"""Every kind of mutation."""
_LOOSE = (ast.BoolOp, ast.IfExp, ast.Lambda, ast.NamedExpr)


@dataclass(frozen=True)
class Mutation:
    """One edit of a source text: the bytes ``start:end`` (UTF-8) become ``replacement``."""

    kind: str
    """One of :data:`KINDS`."""
    line: int
    """1-based line where the edited text starts."""
    start: int
    """Byte offset where the edited text starts."""
    end: int
    """Byte offset where it ends."""
    original: str
    """The text replaced."""
    replacement: str
    """The text put in its place."""

    def to_dict(self) -> dict:
        """JSON-safe copy."""
        return asdict(self)


class _Source:
    """A module's text as bytes, with node positions as byte offsets."""

    def __init__(self, source: str):
        self.data = source.encode("utf-8")
        self.starts = [0]
        for m in re.finditer(rb"\n", self.data):
            self.starts.append(m.end())

    def at(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.at(node.lineno, node.col_offset), self.at(node.end_lineno, node.end_col_offset)

    def text(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8")

    def seg(self, node: ast.AST) -> str:
        return self.text(*self.span(node))


def _skipped(tree: ast.Module) -> set[int]:
    """ids of nodes never mutated: docstrings, annotations, f-strings, ``if TYPE_CHECKING`` and
    ``__main__`` blocks, asserts, ``__all__``/version assignments (with everything under them)."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                roots.append(body[0])
            if not isinstance(node, (ast.ClassDef, ast.Module)):
                roots.extend(a.annotation for a in _all_args(node.args) if a.annotation is not None)
                if node.returns is not None:
                    roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        elif isinstance(node, (ast.JoinedStr, ast.Assert)):
            roots.append(node)
        elif isinstance(node, ast.If) and ("TYPE_CHECKING" in ast.dump(node.test) or "__main__" in ast.dump(node.test)):
            roots.append(node)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("__all__", "__version__", "version")
                                                  for t in node.targets):
            roots.append(node)
    return {id(n) for root in roots for n in ast.walk(root)}


def _all_args(args: ast.arguments) -> list[ast.arg]:
    return [*args.posonlyargs, *args.args, *([args.vararg] if args.vararg else []), *args.kwonlyargs,
            *([args.kwarg] if args.kwarg else [])]


Candidate = tuple[str, int, int, str, Callable[[], Callable[[], None]]]
"""``(kind, start, end, replacement, change)``: ``change()`` edits the tree as the text edit
should, and returns the function that undoes it."""


def _setter(obj: object, field: str, value: object) -> Callable[[], Callable[[], None]]:
    def change() -> Callable[[], None]:
        old = getattr(obj, field)
        setattr(obj, field, value)
        return lambda: setattr(obj, field, old)
    return change


def _item_setter(seq: list, index: int, value: object) -> Callable[[], Callable[[], None]]:
    def change() -> Callable[[], None]:
        old = seq[index]
        seq[index] = value
        return lambda: seq.__setitem__(index, old)
    return change


def _op_in_gap(src: _Source, start: int, end: int, symbol: str) -> tuple[int, int] | None:
    """Where ``symbol`` stands between two operands (one occurrence, outside comments)."""
    gap = src.text(start, end)
    words = r"\s+".join(re.escape(w) for w in symbol.split())
    pattern = rf"(?<![<>=!*/&|^%\w]){words}(?![<>=*/\w])" if symbol[0].isalpha() or symbol in ("<", ">", "*", "/") else rf"(?<![<>=!*/&|^%]){re.escape(symbol)}(?![<>=*/])"
    found = [m for m in re.finditer(pattern, gap) if "#" not in gap[:m.start()]]
    if len(found) != 1:
        return None
    offset = len(gap[:found[0].start()].encode("utf-8"))
    return start + offset, start + offset + len(found[0].group(0).encode("utf-8"))


def _ops(node: ast.AST, src: _Source) -> Iterator[Candidate]:
    """compare, arith and bool: an operator swapped in place."""
    if isinstance(node, ast.Compare):
        left = node.left
        for i, (op, right) in enumerate(zip(node.ops, node.comparators)):
            where = _op_in_gap(src, src.span(left)[1], src.span(right)[0], SYMBOLS[type(op)])
            if where:
                new = COMPARE[type(op)]
                yield "compare", *where, SYMBOLS[new], _item_setter(node.ops, i, new())
            left = right
    elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in ARITH:
        left, right = (node.left, node.right) if isinstance(node, ast.BinOp) else (node.target, node.value)
        symbol = SYMBOLS[type(node.op)] + ("=" if isinstance(node, ast.AugAssign) else "")
        where = _op_in_gap(src, src.span(left)[1], src.span(right)[0], symbol)
        if where:
            new = ARITH[type(node.op)]
            yield "arith", *where, SYMBOLS[new] + symbol[len(SYMBOLS[type(node.op)]):], _setter(node, "op", new())
    elif isinstance(node, ast.BoolOp) and len(node.values) == 2:
        where = _op_in_gap(src, src.span(node.values[0])[1], src.span(node.values[1])[0], SYMBOLS[type(node.op)])
        if where:
            new = ast.Or if isinstance(node.op, ast.And) else ast.And
            yield "bool", *where, SYMBOLS[new], _setter(node, "op", new())


def _wrapped(src: _Source, node: ast.AST) -> str:
    return f"({src.seg(node)})" if isinstance(node, _LOOSE) else src.seg(node)


def _conditions(node: ast.AST, src: _Source) -> Iterator[Candidate]:
    """drop_condition (one operand of an ``and``/``or`` test left out) and not (a ``not`` removed)."""
    if isinstance(node, (ast.If, ast.While, ast.IfExp)) and isinstance(node.test, ast.BoolOp):
        test = node.test
        start, end = src.span(test)
        joiner = f" {SYMBOLS[type(test.op)]} "
        for i in range(len(test.values)):
            rest = test.values[:i] + test.values[i + 1:]
            text = joiner.join(_wrapped(src, v) for v in rest) if len(rest) > 1 else src.seg(rest[0])
            value = ast.BoolOp(op=test.op, values=rest) if len(rest) > 1 else rest[0]
            yield "drop_condition", start, end, text, _setter(node, "test", value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        start, end = src.span(node)
        yield "not", start, end, _wrapped(src, node.operand), _replace(node)


def _replace(node: ast.UnaryOp) -> Callable[[], Callable[[], None]]:
    """Turn ``not x`` into ``x`` in place (the node becomes a copy of its operand)."""
    def change() -> Callable[[], None]:
        saved = dict(node.__dict__)
        cls = node.__class__
        node.__class__ = node.operand.__class__
        node.__dict__.clear()
        node.__dict__.update(saved["operand"].__dict__)

        def undo() -> None:
            node.__class__ = cls
            node.__dict__.clear()
            node.__dict__.update(saved)
        return undo
    return change


def _int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _shifted(src: _Source, node: ast.AST, delta: int) -> tuple[str, ast.AST]:
    """``node`` plus ``delta``: a literal for an int constant, else ``expr + 1`` / ``expr - 1``."""
    if _int(node):
        return str(node.value + delta), ast.Constant(node.value + delta)
    op = ast.Add() if delta > 0 else ast.Sub()
    atomic = isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant))
    text = f"{src.seg(node) if atomic else '(' + src.seg(node) + ')'} {'+' if delta > 0 else '-'} {abs(delta)}"
    return text, ast.BinOp(left=node, op=op, right=ast.Constant(abs(delta)))


def _off_by_one(node: ast.AST, src: _Source, claimed: set[int]) -> Iterator[Candidate]:
    """slice, index and range bounds moved by one; other int constants moved by one."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
        for field in ("lower", "upper"):
            bound = getattr(node.slice, field)
            if bound is not None and not isinstance(bound, ast.Starred):
                claimed.add(id(bound))
                for delta in (1, -1):
                    text, value = _shifted(src, bound, delta)
                    yield "slice", *src.span(bound), text, _setter(node.slice, field, value)
    elif isinstance(node, ast.Subscript) and (_int(node.slice) or isinstance(node.slice, ast.UnaryOp) and _int(node.slice.operand)):
        inner = node.slice if _int(node.slice) else node.slice.operand
        claimed.add(id(inner))
        sign = 1 if inner is node.slice else -1
        new = inner.value + 1
        yield "index", *src.span(inner), str(new), _setter(inner, "value", new)
        if (inner.value > 0 if sign > 0 else inner.value > 1):
            yield "index", *src.span(inner), str(inner.value - 1), _setter(inner, "value", inner.value - 1)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" and 1 <= len(node.args) <= 3:
        for i in range(min(len(node.args), 2)):
            arg = node.args[i]
            if isinstance(arg, ast.Starred) or (len(node.args) == 1 and i == 1):
                continue
            claimed.add(id(arg))
            for delta in (1, -1):
                text, value = _shifted(src, arg, delta)
                yield "range", *src.span(arg), text, _item_setter(node.args, i, value)
    elif _int(node) and id(node) not in claimed:
        for new in (node.value + 1, node.value - 1):
            if new >= 0:
                yield "constant", *src.span(node), str(new), _setter(node, "value", new)
    elif isinstance(node, ast.Constant) and type(node.value) is bool and id(node) not in claimed:
        yield "constant", *src.span(node), str(not node.value), _setter(node, "value", not node.value)


def _defaults(node: ast.AST, src: _Source, claimed: set[int]) -> Iterator[Candidate]:
    """default: a parameter's constant default changed."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return
    for seq in (node.args.defaults, node.args.kw_defaults):
        for i, default in enumerate(seq):
            if not isinstance(default, ast.Constant):
                continue
            claimed.add(id(default))
            value = default.value
            if type(value) is bool:
                news = [not value]
            elif type(value) is int:
                news = [value + 1] + ([value - 1] if value > 0 else [])
            elif type(value) is str and value:
                news = [""]
            else:
                continue
            for new in news:
                yield "default", *src.span(default), repr(new), _item_setter(seq, i, ast.Constant(new))


def _swaps(node: ast.AST, src: _Source) -> Iterator[Candidate]:
    """swap_args: two neighbouring positional arguments of a call exchanged."""
    if not isinstance(node, ast.Call) or len(node.args) < 2 or any(isinstance(a, ast.Starred) for a in node.args):
        return
    for i in range(len(node.args) - 1):
        a, b = node.args[i], node.args[i + 1]
        (a0, a1), (b0, b1) = src.span(a), src.span(b)
        if src.seg(a) == src.seg(b):
            continue
        text = src.seg(b) + src.text(a1, b0) + src.seg(a)

        def change(i: int = i) -> Callable[[], None]:
            args = node.args
            node.args = args[:i] + [args[i + 1], args[i]] + args[i + 2:]
            return lambda: setattr(node, "args", args)
        yield "swap_args", a0, b1, text, change


def _owners(tree: ast.Module) -> dict[int, ast.stmt]:
    """id of every node -> the innermost statement holding it (a statement holds itself)."""
    owners: dict[int, ast.stmt] = {}
    stack: list[tuple[ast.AST, ast.stmt | None]] = [(tree, None)]
    while stack:
        node, owner = stack.pop()
        owner = node if isinstance(node, ast.stmt) else owner
        if owner is not None:
            owners[id(node)] = owner
        stack.extend((child, owner) for child in ast.iter_child_nodes(node))
    return owners


def _candidates(tree: ast.Module, src: _Source) -> Iterator[tuple[ast.AST, Candidate]]:
    skipped = _skipped(tree)
    claimed: set[int] = set()
    nodes = sorted((n for n in ast.walk(tree) if hasattr(n, "lineno") and id(n) not in skipped),
                   key=lambda n: (n.lineno, n.col_offset, -n.end_lineno, -n.end_col_offset))
    for node in nodes:
        for gen in (_defaults(node, src, claimed), _ops(node, src), _conditions(node, src),
                    _off_by_one(node, src, claimed), _swaps(node, src)):
            for candidate in gen:
                yield node, candidate


def _parses_as_intended(tree: ast.Module, src: _Source, stmt: ast.stmt | None, start: int, end: int, text: str,
                        change: Callable[[], Callable[[], None]]) -> bool:
    """True when the edited text parses to the tree ``change`` makes: the statement holding the
    edit is parsed alone (the rest of the module is unchanged), else the whole module."""
    whole = stmt is None or not (src.span(stmt)[0] <= start and end <= src.span(stmt)[1])
    lo, hi = (0, len(src.data)) if whole else src.span(stmt)
    code = src.data[lo:start] + text.encode("utf-8") + src.data[end:hi]
    nested = not whole and stmt.col_offset > 0
    if nested:
        code = b"if 1:\n" + b" " * stmt.col_offset + code
    target = tree if whole else stmt
    undo = change()
    try:
        intended = ast.dump(target)
    finally:
        undo()
    try:
        parsed = ast.parse(code.decode("utf-8"))
    except (SyntaxError, ValueError):
        return False
    got = parsed if whole else parsed.body[0].body[0] if nested else parsed.body[0]
    return (whole or len(parsed.body) == 1) and ast.dump(got) == intended


def mutations(source: str, lines: set[int] | frozenset[int] | None = None) -> list[Mutation]:
    """Every mutation of ``source`` (only those starting on ``lines`` when given), in source
    order; each one checked to parse to exactly the intended tree."""
    src = _Source(source)
    tree = ast.parse(source)
    owners = _owners(tree)
    out: list[Mutation] = []
    seen: set[tuple[int, int, str]] = set()
    for node, (kind, start, end, text, change) in _candidates(tree, src):
        line = bisect.bisect_right(src.starts, start)
        if lines is not None and line not in lines or (start, end, text) in seen or src.text(start, end) == text:
            continue
        seen.add((start, end, text))
        if _parses_as_intended(tree, src, owners.get(id(node)), start, end, text, change):
            out.append(Mutation(kind, line, start, end, src.text(start, end), text))
    return out


def apply(source: str, mutation: Mutation) -> str:
    """``source`` with ``mutation`` applied (ValueError when it does not fit the source)."""
    data = source.encode("utf-8")
    if data[mutation.start:mutation.end].decode("utf-8", "replace") != mutation.original:
        raise ValueError(f"the mutation at line {mutation.line} does not match the source")
    return (data[:mutation.start] + mutation.replacement.encode("utf-8") + data[mutation.end:]).decode("utf-8")
