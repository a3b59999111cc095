"""Mathematical equivalence with the math-verify package (imported lazily).

The rules, in order:

1. **One final answer.** The answer is the completion's one answer container (all ``\\boxed{}``
   and ``<answer>`` tags are read; several different ones fail), else its final line (or the
   one math environment in it). An answer that states more values than the gold (``3 or 5``,
   ``x = 2, x = 5``, ``\\pm 3``) fails; see :mod:`trainer.verifiers.answers`.
2. **Delimited LaTeX.** The answer text is handed to math-verify inside ``\\boxed{}``, so all of
   it is parsed (never only the last number of it). ``x**2`` is read as ``x^{2}``, and
   ``1\\,000`` / ``1{,}000`` / ``1,000`` as one thousand.
3. **The variable on the left.** ``x = 5`` is the answer 5 when the gold is not an equation and
   ``x`` is the task's variable (``task.meta["answer_lhs"]`` lists the left-hand sides a domain
   accepts, e.g. ``f'(x)``; without it any single letter is accepted).
4. **The same kind.** Number, set, interval, expression, equation: the answer's kind must be the
   gold's (``3x + 5`` is no answer to a number, ``\\{1, 2\\}`` none to ``2``).
5. **Finite, evaluated, in the asked form.** NaN and complex infinity never match (nor an
   infinity unless the gold is one); an answer may not keep a derivative, integral, limit, sum
   or product the gold does not have (``\\frac{d}{dx}(...)`` is the question, not its answer);
   ``task.meta["form"]`` may ask for ``number`` (a literal: ``\\frac{1}{2}+\\frac{1}{3}`` does
   not simplify anything) or ``expanded`` (no product of sums: the factored question is no
   expansion).
6. **Symbolic equality** by math-verify: every equal form passes (fractions and decimals to
   ``float_rounding`` places, reordered terms and sets, ``\\dfrac``, ``2*x^2``).

>>> from trainer.tasks.base import Task
>>> t = Task("d", "1", "q", answer="\\\\frac{1}{2}")
>>> math_equivalence("The answer is $\\\\boxed{0.5}$", t).outcome.value
'pass'
>>> math_equivalence("$\\\\boxed{2/4}$", t).outcome.value
'pass'
>>> math_equivalence("$\\\\boxed{1/3}$", t).outcome.value
'fail'
>>> math_equivalence("", t).outcome.value
'parse_error'
>>> math_equivalence("\\\\boxed{1/3} or \\\\boxed{1/2}", t).details["error"]
'several different answers: 1/3 | 1/2'
>>> p = Task("d", "1", "q", answer="2x^{2} - 3x + 1")
>>> [math_equivalence(a, p).outcome.value for a in ["1 - 3x + 2x^2", "2*x**2 - 3*x + 1", "(2x - 1)(x - 1)", "2x^2 - 3x"]]
['pass', 'pass', 'pass', 'fail']
>>> n = Task("d", "1", "Solve for x", answer="5", meta={"answer_lhs": ["x"]})
>>> [math_equivalence(a, n).outcome.value for a in ["x = 5", "y = 5", "3x + 5", "x = 4, x = 5", "\\\\text{NaN}"]]
['pass', 'fail', 'fail', 'fail', 'fail']
"""
from __future__ import annotations

import re
from typing import Any

from trainer.outcomes import Outcome, Verification
from trainer.tasks.base import Task
from trainer.verifiers.answers import CONTAINER_METHODS, canonical, distinct_answers, final_answers, final_line, hedge_reason, one_final_answer

MAX_ANSWER_CHARS = 2000
_MATH_ENV = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_GROUPED = re.compile(r"(?<![\d.])\d{1,3}(?:(?:\\,|\\ |~|\{,\}|\u2009|\u202f)\d{3})+(?!\d)")
_POWER = re.compile(r"\*\*\s*(\([^()]*\)|-?[\w.]+)")
_LHS = re.compile(r"^\s*([^=<>]+?)\s*=\s*([^=<>]+)$", re.S)
_SINGLE_LETTER = re.compile(r"[A-Za-z](?:_\{?\w+\}?)?")
_PROSE = re.compile(r"[A-Za-z]{2,}[^A-Za-z\\{}]+[A-Za-z]{2,}")
NON_FINITE_NAMES = frozenset({"nan", "inf", "infinity", "undefined", "none"})


class _Refused(Exception):
    """The answer cannot be accepted whatever its value; ``outcome`` and the message say why."""

    def __init__(self, outcome: Outcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


def _strip_delimiters(text: str) -> str:
    s = text.strip().rstrip(".").strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.endswith(right) and len(s) > len(left) + len(right):
            s = s[len(left):len(s) - len(right)].strip()
    return s


def answer_text(completion: str, gold: Any) -> str:
    """The one final answer of ``completion`` as text (see rule 1); raises :class:`_Refused`."""
    completion = str(completion)
    if final_answers(completion, CONTAINER_METHODS):
        answer, why = one_final_answer(completion, CONTAINER_METHODS, gold=gold)
    else:
        line = final_line(completion)
        if line is None:
            raise _Refused(Outcome.PARSE_ERROR, "no mathematical answer found")
        if len(line) > MAX_ANSWER_CHARS:
            raise _Refused(Outcome.FAIL, f"answer longer than {MAX_ANSWER_CHARS} characters")
        envs = [next(g for g in m.groups() if g is not None) for m in _MATH_ENV.finditer(line)]
        if len(distinct_answers(envs)) > 1:
            raise _Refused(Outcome.FAIL, "several different answers: " + " | ".join(e[:60] for e in distinct_answers(envs)[:5]))
        answer = envs[0] if envs else line
        if not envs and _PROSE.search(answer) and "\\" not in answer:
            raise _Refused(Outcome.PARSE_ERROR, "no mathematical answer found")
        reason = hedge_reason(answer, gold)
        why = None if reason is None else f"hedged answer: {reason}"
        answer = None if why else answer
    if answer is None:
        outcome = Outcome.PARSE_ERROR if why in ("no answer found", "empty answer") else Outcome.FAIL
        raise _Refused(outcome, why or "no mathematical answer found")
    answer = _strip_delimiters(answer)
    if not answer:
        raise _Refused(Outcome.PARSE_ERROR, "empty answer")
    if len(answer) > MAX_ANSWER_CHARS:
        raise _Refused(Outcome.FAIL, f"answer longer than {MAX_ANSWER_CHARS} characters")
    foreign = foreign_reason(answer, gold)
    if foreign is not None:
        raise _Refused(Outcome.FAIL, f"not one value: {foreign}")
    return answer


_ALLOWED_COMMANDS = frozenset(
    "frac dfrac tfrac sqrt cdot times div left right pi infty le leq ge geq lt gt ne neq cup cap in "
    "emptyset varnothing mathbb mathrm mathbf mathit textbf boldsymbol bm displaystyle text sin cos tan "
    "cot sec csc arcsin arccos arctan sinh cosh tanh log ln exp circ degree prime { } , ; : !".split()) | {" "}
"""LaTeX commands a value may be written with; any other (``\\to``, ``\\Rightarrow``, ``\\hspace``,
``\\ldots``, ``\\cancel``, ``\\boxed`` inside the box, ``\\\\``) is refused unless the gold has it."""
_MATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \t\n+-*/^=()[]{},.<>!'~\\"
                        "\u2212\u00d7\u00b7\u00f7\u03c0\u221a\u221e\u2264\u2265\u2260\u222a\u2229\u2208\u00b0")
"""Characters of a written value (ASCII, and the Unicode minus, times, dot, division, pi, root,
infinity, comparisons, union, intersection, element-of, degree)."""
_COMMAND = re.compile(r"\\([A-Za-z]+|.)")
_TEXT_BODY = re.compile(r"\\text\s*\{([^{}]*)\}")


def foreign_reason(answer: str, gold: Any) -> str | None:
    """Why ``answer`` holds something that is not part of one value (a second answer can hide
    behind it: ``w \\to g``, ``g_{w}``, ``g\\text{w}``, ``w \\ldots g``, a zero-width space), or None.
    What the gold itself uses is allowed.

    >>> [foreign_reason(a, "\\\\frac{7}{3}") for a in ["\\\\dfrac{7}{3}", "x = 2.3\\\\,", "\\\\frac{1}{2} \\\\to \\\\frac{7}{3}", "\\\\frac{7}{3}_{5}"]]
    [None, None, '\\\\to is not part of a value', 'a subscript']
    >>> foreign_reason("3\\u200b\\\\frac{7}{3}", "1"), foreign_reason("9\\\\text{21}", "9"), foreign_reason("2 ... 5", "5")
    ('character U+200B is not part of a value', 'text beside the value', "'...' between values")
    """
    gold_text = "" if gold is None else str(gold)
    body = answer.strip()
    for m in _COMMAND.finditer(body):
        name = m.group(1)
        if name not in _ALLOWED_COMMANDS and ("\\" + name) not in gold_text:
            return f"\\{name} is not part of a value"
    if "\\text" in body and "\\text" not in gold_text and not _TEXT_BODY.fullmatch(body):
        return "text beside the value"
    for arrow in ("->", "=>", "<-"):
        if arrow in body and arrow not in gold_text:
            return f"{arrow!r} between values"
    if "~" in _GROUPED.sub("", body) and "~" not in gold_text:  # a tie is a thousands separator only
        return "'~' between values"
    if "_" in body and "_" not in gold_text:
        return "a subscript"
    if "|" in body and "|" not in gold_text:
        return "'|' between values"
    if ".." in body and ".." not in gold_text:
        return "'...' between values"
    for ch in body:
        if ch not in _MATH_CHARS and ch not in gold_text:
            return f"character U+{ord(ch):04X} is not part of a value"
    return None


def strip_lhs(answer: str, allowed: list[str] | None) -> str:
    """``5`` for ``x = 5`` when ``x`` is an accepted left-hand side (rule 3); else ``answer``.

    >>> strip_lhs("x = -\\\\frac{1}{2}", None), strip_lhs("f'(x) = 2x", ["f'(x)"]), strip_lhs("y = 5", ["x"])
    ('-\\\\frac{1}{2}', '2x', 'y = 5')
    """
    m = _LHS.match(answer)
    if m is None:
        return answer
    lhs = m.group(1)
    ok = canonical(lhs) in {canonical(a) for a in allowed} if allowed is not None else bool(_SINGLE_LETTER.fullmatch(lhs.strip()))
    return m.group(2).strip() if ok else answer


_FONT = re.compile(r"\\(?:mathbf|mathrm|mathit|textbf|boldsymbol|bm|displaystyle)\s*(?=\{|\s)")
_TEXT_NUMBER = re.compile(r"\\text\s*\{\s*([-+]?[\d.,/]+)\s*\}")
_E_NOTATION = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)[eE]([-+]?\d+)\s*$")


def _strip_grouping(text: str) -> str:
    """``{5}`` is 5 (a group), not the set of 5; ``\\{5\\}`` stays a set."""
    s = text.strip()
    while s.startswith("{") and s.endswith("}") and _closing(s) == len(s) - 1:
        s = s[1:-1].strip()
    return s


def _closing(s: str) -> int:
    depth = 0
    for i, ch in enumerate(s):
        depth += ch == "{"
        depth -= ch == "}"
        if depth == 0:
            return i
    return -1


def latex_for_math_verify(text: str) -> str:
    """Delimited LaTeX for math-verify: the whole answer in ``\\boxed{}``; ``**`` as ``^``; digit
    groups (``1\\,000``, ``1{,}000``) joined; ``1e3`` as ``1 \\times 10^{3}``; font commands
    (``\\mathbf``, ``\\text{5}``) and a grouping ``{...}`` around the whole answer dropped.

    >>> latex_for_math_verify("2*x**2 - 1\\\\,000"), latex_for_math_verify("{\\\\mathbf{5}}"), latex_for_math_verify("1e3")
    ('\\\\boxed{2*x^{2} - 1000}', '\\\\boxed{5}', '\\\\boxed{1 \\\\times 10^{3}}')
    """
    s = _GROUPED.sub(lambda m: re.sub(r"\D", "", m.group(0)), text)
    s = _POWER.sub(lambda m: "^{" + m.group(1) + "}", s)
    s = _TEXT_NUMBER.sub(lambda m: m.group(1), _FONT.sub("", s))
    s = _E_NOTATION.sub(lambda m: f"{m.group(1)} \\times 10^{{{m.group(2)}}}", s)
    return "\\boxed{" + _strip_grouping(s) + "}"


def parse_math(text: str) -> Any:
    """The sympy value of one answer text, or None when math-verify cannot parse it."""
    from math_verify import parse
    from math_verify.parser import LatexExtractionConfig

    found = parse(latex_for_math_verify(text), extraction_config=[LatexExtractionConfig()], parsing_timeout=None)
    values = [v for v in found if not isinstance(v, str)]
    return values[0] if values else None


def kind(value: Any) -> str:
    """``number``, ``set``, ``interval``, ``equation`` (any relation), ``expression`` or ``other``.

    >>> [kind(parse_math(s)) for s in ["-\\\\frac{7}{3}", "\\\\{1, 2\\\\}", "(1, 2]", "x = 1", "x^2 + 1", "1 < x"]]
    ['number', 'set', 'interval', 'equation', 'expression', 'equation']
    """
    from sympy import Basic, FiniteSet, Interval, MatrixBase, Set, Tuple, Union
    from sympy.logic.boolalg import And, Or
    from sympy.core.relational import Relational

    if isinstance(value, MatrixBase):
        return "matrix"
    if isinstance(value, Relational) or (isinstance(value, (And, Or)) and all(isinstance(a, Relational) for a in value.args)):
        return "equation"
    if isinstance(value, (FiniteSet, Tuple)):
        return "set"
    if isinstance(value, (Interval, Union)) or isinstance(value, Set):
        return "interval"
    if isinstance(value, Basic) and getattr(value, "is_Boolean", False):
        return "other"
    if isinstance(value, Basic):
        return "expression" if value.free_symbols else "number"
    return "other"


def _non_finite(value: Any) -> str | None:
    from sympy import Basic, Symbol, nan, oo, zoo

    if not isinstance(value, Basic):
        return None
    if value.has(nan) or value.has(zoo):
        return "not a number"
    if any(isinstance(s, Symbol) and s.name.lower() in NON_FINITE_NAMES for s in value.free_symbols):
        return "not a number"
    if value.has(oo) or value.has(-oo):
        return "infinite"
    return None


_UNEVALUATED = ("Derivative", "Integral", "Limit", "Sum", "Product", "Subs")


def _operators(value: Any) -> set[str]:
    """Names of the unevaluated calculus operators in ``value``."""
    import sympy

    if not isinstance(value, sympy.Basic):
        return set()
    types = tuple(getattr(sympy, name) for name in _UNEVALUATED)
    return {type(node).__name__ for node in sympy.preorder_traversal(value) if isinstance(node, types)}


MAX_EXPONENT = 10_000
"""A power or factorial beyond this is refused before comparing (``10^{10^{10}}`` has ten billion
digits: comparing it would stall the stage until its timeout)."""


def _oversized(value: Any) -> bool:
    """True when ``value`` holds a power with a numeric exponent, or a factorial of a number,
    larger than ``MAX_EXPONENT`` in size.

    >>> _oversized(parse_math("10^{10^{10}}")), _oversized(parse_math("x^{3} + 2^{10}")), _oversized(parse_math("(10^{6})!"))
    (True, False, True)
    """
    import sympy

    if not isinstance(value, sympy.Basic):
        return False
    for node in sympy.preorder_traversal(value):
        arg = node.exp if isinstance(node, sympy.Pow) else node.args[0] if isinstance(node, sympy.factorial) else None
        if arg is None or not getattr(arg, "is_number", False):
            continue
        try:
            size = abs(complex(sympy.N(arg, 5)))
        except (TypeError, ValueError, OverflowError):
            return True
        if not size <= MAX_EXPONENT:  # also True for nan
            return True
    return False


def is_literal_number(value: Any) -> bool:
    """A number written as one literal: an integer, decimal or fraction, with a sign; no sums,
    roots or powers to evaluate.

    >>> [is_literal_number(parse_math(s)) for s in ["-\\\\frac{67}{20}", "3.35", "\\\\frac{1}{2} + \\\\frac{1}{3}", "\\\\frac{5-2}{3}", "\\\\sqrt{4}"]]
    [True, True, False, False, False]
    """
    from sympy import Mul, Number, Pow, UnevaluatedExpr

    if isinstance(value, Number):
        return True
    if isinstance(value, UnevaluatedExpr):
        return is_literal_number(value.args[0])
    if isinstance(value, Pow):
        return isinstance(value.base, Number) and value.exp == -1
    if isinstance(value, Mul):
        return all(is_literal_number(a) for a in value.args)
    return False


def is_expanded(value: Any) -> bool:
    """No product of a sum with anything but numbers, no power of a sum (``2x^2 - 3x + 1`` and
    ``-(2x^2 - 3x + 1)`` yes; ``(2x - 1)(x - 1)``, ``x(2x - 3) + 1`` and ``(x + 1)^2`` no).

    >>> [is_expanded(parse_math(s)) for s in ["2x^2 - 3x + 1", "-(2x^2 - 3x + 1)", "(2x - 1)(x - 1)", "x(2x - 3) + 1", "(x+1)^2"]]
    [True, True, False, False, False]
    """
    from sympy import Add, Basic, Mul, Pow, preorder_traversal

    if not isinstance(value, Basic):
        return False
    for node in preorder_traversal(value):
        if isinstance(node, Mul):
            sums = [a for a in node.args if isinstance(a, Add)]
            if len(sums) > 1 or (sums and any(not a.is_number for a in node.args if not isinstance(a, Add))):
                return False
        if isinstance(node, Pow) and isinstance(node.base, Add):
            return False
    return True


def _to_gold_kind(found: Any, gold: Any, gold_kind: str, found_kind: str) -> tuple[Any, Any, str]:
    """Bridge the kinds that state the same thing: a gold assignment ``x = 5`` and an answer 5,
    an interval and an inequality, a singleton set and its element."""
    from sympy import Eq, FiniteSet, Symbol

    if gold_kind == "equation" and found_kind != "equation" and isinstance(gold, Eq) and isinstance(gold.lhs, Symbol):
        gold = gold.rhs
        return found, gold, kind(gold)
    if gold_kind == "interval" and found_kind == "equation" and len(getattr(found, "free_symbols", ())) == 1:
        try:
            found = found.as_set()
            return found, gold, kind(found)
        except Exception:  # noqa: BLE001 - not a relation sympy can solve: the kinds stay different
            return found, gold, found_kind
    if gold_kind == "set" and found_kind == "number" and isinstance(gold, FiniteSet) and len(gold) == 1:
        return FiniteSet(found), gold, "set"
    return found, gold, found_kind


def math_equivalence(
    completion: str, task: Task, *, expected: Any = None, float_rounding: int = 6, strict: bool = True
) -> Verification:
    """The completion's one final answer equals the gold answer symbolically (rules above).

    math-verify's own signal-based timeouts are turned off: the cascade enforces the stage
    timeout from outside, in a worker process it can kill.
    """
    from math_verify import verify

    gold_text = task.answer if expected is None else expected
    gold = parse_math(str(gold_text))
    if gold is None:
        raise ValueError(f"expected answer {gold_text!r} cannot be parsed")
    gold_kind = kind(gold)
    try:
        text = answer_text(completion, gold_text if not isinstance(gold_text, (list, dict)) else None)
    except _Refused as refused:
        return Verification.failed(refused.outcome, error=str(refused), expected=str(gold_text), found=str(completion)[-200:])
    if gold_kind != "equation":
        text = strip_lhs(text, task.meta.get("answer_lhs"))
    details: dict[str, Any] = {"expected": str(gold_text), "found": text}
    found = parse_math(text)
    if found is None:
        return Verification.failed(Outcome.PARSE_ERROR, error="the answer is not mathematics math-verify can parse", **details)
    found_kind = kind(found)
    found, gold, found_kind = _to_gold_kind(found, gold, gold_kind, found_kind)
    gold_kind = kind(gold)
    details.update(kind=found_kind, expected_kind=gold_kind)
    if found_kind != gold_kind:
        return Verification.failed(error=f"the answer is of kind {found_kind}, the gold of kind {gold_kind}", **details)
    bad = _non_finite(found)
    if bad is not None and not (bad == "infinite" and _non_finite(gold) == "infinite"):
        return Verification.failed(error=f"the answer is {bad}", **details)
    if _oversized(found) and not _oversized(gold):
        return Verification.failed(error=f"the answer holds a power or factorial beyond {MAX_EXPONENT}", **details)
    extra = _operators(found) - _operators(gold)
    if extra:
        return Verification.failed(error=f"the answer is not evaluated: {', '.join(sorted(extra))}", **details)
    form = task.meta.get("form")
    if form == "number" and not is_literal_number(found):
        return Verification.failed(error="the answer must be one number, simplified", **details)
    if form == "expanded" and not is_expanded(found):
        return Verification.failed(error="the answer must be expanded (no product of sums)", **details)
    ok = verify(gold, found, float_rounding=float_rounding, strict=strict, timeout_seconds=None)
    return Verification.passed(**details) if ok else Verification.failed(**details)


def _warm_math() -> None:
    """math-verify's and sympy's imports and a first parse (a third of a second on a loaded
    machine), done off a stage's clock (:mod:`trainer.verifiers.isolation`)."""
    math_equivalence("\\boxed{1/2}", Task("warm-up", "0", "", answer="0.5"))


math_equivalence.warm_up = _warm_math  # type: ignore[attr-defined]
