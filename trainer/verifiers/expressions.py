"""Guards over an answer's text before a scorer sees it: a non-finite number the gold does not
state, and an expression that is not plain arithmetic (what sympy's ``parse_expr`` may safely
``eval``). Used by the reasoning-gym scorers (:mod:`trainer.verifiers.rg_score`).
"""
from __future__ import annotations

import math
import re

_NONFINITE = re.compile(r"(?<![A-Za-z_])(?:nan|inf(?:inity)?|z?oo)[ij]?(?![A-Za-z_])", re.I)
_EXPONENT_LITERAL = re.compile(r"\d+(?:\.\d*)?[eE][-+]?\d+")


def nonfinite_reason(answer: str, gold: str) -> str | None:
    """Why ``answer`` states a non-finite number (``nan``, ``inf``, sympy's ``oo``, ``1e999``) that
    the gold does not, else None. Only where the gold has a digit: ``Nan`` can be a name.

    >>> nonfinite_reason("1e999", "3"), nonfinite_reason("-Infinity", "3"), nonfinite_reason("3 + nani", "3 + 2i")
    ("non-finite number '1e999'", "non-finite number 'Infinity'", "non-finite number 'nani'")
    >>> nonfinite_reason("Nan is a knight", "Nan is a knight") is None, nonfinite_reason("infeasible", "3") is None
    (True, True)
    """
    if not any(ch.isdigit() for ch in gold):
        return None
    m = _NONFINITE.search(answer)
    if m and not _NONFINITE.search(gold):
        return f"non-finite number {m.group(0)!r}"
    for m in _EXPONENT_LITERAL.finditer(answer):
        if math.isinf(float(m.group(0))):
            return f"non-finite number {m.group(0)!r}"
    return None


FUNCTIONS = frozenset({
    "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "acot", "asec", "acsc",
    "sinh", "cosh", "tanh", "coth", "sech", "csch", "asinh", "acosh", "atanh",
    "exp", "log", "ln", "sqrt", "pi", "E", "I", "Abs",
})
"""Names an expression answer may use besides the gold's own names and ``C``/``c``."""
_EXPR_TOKEN = re.compile(r"\s*(?:(?P<num>\d+(?:\.\d*)?|\.\d+)|(?P<name>[A-Za-z]\w*)|(?P<op>\*\*|[-+*/^()]))\s*")
MAX_EXPONENT = 1000


def expression_reason(answer: str, gold: str, *, names: bool = True) -> str | None:
    """Why ``answer`` is not a plain arithmetic expression safe to hand to sympy's ``parse_expr``
    (which calls ``eval``), else None. Allowed: numbers, ``+ - * / ** ^ ( )``, and (``names``)
    the gold's names (its variables), the constant ``C`` or ``c`` and :data:`FUNCTIONS` (another
    letter would be a constant to the scorer, so ``F + C/W(X)`` would pass); an exponent written
    as a number is at most :data:`MAX_EXPONENT` and powers do not stack (``9**9**9`` would hang
    the scorer).

    >>> expression_reason("3*x**2 + C", "x**3 + C"), expression_reason("(1+2)*8", "24", names=False)
    (None, None)
    >>> expression_reason("x**3/3 + C/X**9", "x**3/3 + C")
    "name 'X' is not allowed in an expression"
    >>> expression_reason("x**2 or x", "x**2")
    "name 'or' is not allowed in an expression"
    >>> expression_reason("x**2, x", "x**2")
    "character ',' is not allowed in an expression"
    >>> expression_reason("9**9**9", "24", names=False)
    'exponent 9**9 is out of range'
    """
    allowed = (FUNCTIONS | {"C", "c"} | set(re.findall(r"[A-Za-z]\w*", gold))) if names else frozenset()
    pos = 0
    tokens: list[str] = []
    while pos < len(answer):
        m = _EXPR_TOKEN.match(answer, pos)
        if m is None or m.end() == pos:
            return f"character {answer[pos]!r} is not allowed in an expression"
        name = m.group("name")
        if name and name not in allowed:
            return f"name {m.group('name')!r} is not allowed in an expression"
        tokens.append(m.group("num") or m.group("name") or m.group("op"))
        pos = m.end()
    for i, token in enumerate(tokens):
        if token in ("**", "^"):
            j = i + 1
            while j < len(tokens) and tokens[j] in ("(", "-", "+"):
                j += 1
            if j < len(tokens) and re.fullmatch(r"[\d.]+", tokens[j]):
                if float(tokens[j]) > MAX_EXPONENT:
                    return f"exponent {tokens[j]} is out of range"
                if j + 1 < len(tokens) and tokens[j + 1] in ("**", "^"):
                    return f"exponent {tokens[j]}**{tokens[j + 2] if j + 2 < len(tokens) else ''} is out of range"
    return None
