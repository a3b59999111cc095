"""Generated math problems verified with math-verify (``math-*`` domains).

Each family draws its numbers from the caller's rng, with larger coefficients at higher levels;
answers are LaTeX that math-verify parses, and a completion gives its answer in ``\\boxed{}``.
The cascade tries a cheap exact match on the boxed answer first and falls back to symbolic
equivalence, so ``\\boxed{1/2}`` passes for ``\\frac{1}{2}``.

>>> import random
>>> t = FAMILIES["linear"](random.Random(0), 0)
>>> t[0].startswith("Solve for x")
True
"""
from __future__ import annotations

import dataclasses
import math
import random
from fractions import Fraction
from typing import Any, Callable

from trainer.catalogue import DomainSpec, register
from trainer.catalogue.define import SeededSource
from trainer.tasks.base import Task
from trainer.verifiers.answers import canonical

FAMILY = "math"
LEVELS = 3
INSTRUCTION = "\n\nPut your final answer in \\boxed{}."
VERIFIER_SPEC = {"stages": [
    {"type": "extract", "params": {"methods": ["boxed", "answer_tag", "final_line"]}},
    {"type": "exact"},
    {"type": "math", "timeout_s": 10.0},
]}


def latex_fraction(value: Fraction) -> str:
    """``3``, ``-\\frac{1}{2}``: how the reference answer is written."""
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def poly_text(coeffs: list[int], *, ascending: bool = False, times: str = "", power: str = "^{%d}") -> str:
    """Polynomial in x from coefficients, highest degree first, as the reference answer writes it
    (``2x^{2} - 3x + 1``); or written another way: terms in ascending order, ``times`` between
    coefficient and ``x`` (``*``, ``\\cdot``), ``power`` as ``^{%d}``, ``^%d`` or ``**%d``.

    >>> poly_text([2, -3, 1])
    '2x^{2} - 3x + 1'
    >>> poly_text([2, -3, 1], ascending=True, power="^%d"), poly_text([2, -3, 1], times="*", power="**%d")
    ('1 - 3x + 2x^2', '2*x**2 - 3*x + 1')
    """
    degree = len(coeffs) - 1
    terms = []
    for i, c in enumerate(coeffs):
        p = degree - i
        if c == 0:
            continue
        mag = abs(c)
        coef = "" if mag == 1 and p else str(mag)
        body = coef + (times if coef and p else "") + ("x" if p else "") + (power % p if p > 1 else "")
        terms.append(("-" if c < 0 else "+", body))
    if ascending:
        terms.reverse()
    if not terms:
        return "0"
    text = ("-" if terms[0][0] == "-" else "") + terms[0][1]
    return text + "".join(f" {sign} {body}" for sign, body in terms[1:])


def _bound(level: int) -> int:
    return (9, 30, 200)[max(0, min(level, LEVELS - 1))]


def _nonzero(rng: random.Random, bound: int) -> int:
    return rng.choice([v for v in range(-bound, bound + 1) if v != 0]) if bound < 50 else (rng.randint(1, bound) * rng.choice([-1, 1]))


Generated = tuple[str, str, str, dict]
"""``(question, answer LaTeX, a wrong answer's LaTeX, meta)``; meta holds ``value`` (the exact
number, ``p/q``) or ``coeffs`` (the polynomial, highest degree first) for the answer's forms,
and what the ``math`` stage reads: ``answer_lhs`` and ``form``."""
DERIVATIVE_LHS = ["f'(x)", "f^{\\prime}(x)", "f^\\prime(x)", "y'", "\\frac{d}{dx}f(x)", "\\frac{df}{dx}", "\\frac{dy}{dx}"]


def linear(rng: random.Random, level: int) -> Generated:
    b = _bound(level)
    a, c, d = _nonzero(rng, b), rng.randint(-b, b), rng.randint(-b, b)
    x = Fraction(d - c, a)
    question = f"Solve for x: ${a}x + {c} = {d}$".replace("+ -", "- ")
    return question, latex_fraction(x), latex_fraction(x + 1), {"value": str(x), "answer_lhs": ["x"]}


def fractions_sum(rng: random.Random, level: int) -> Generated:
    b = _bound(level)
    p, q = Fraction(rng.randint(1, b), rng.randint(2, b + 1)), Fraction(rng.randint(1, b), rng.randint(2, b + 1))
    total = p + q
    summands = f"\\frac{{{p.numerator}}}{{{p.denominator}}} + \\frac{{{q.numerator}}}{{{q.denominator}}}"
    return (f"Compute and simplify: ${summands}$", latex_fraction(total), latex_fraction(total + Fraction(1, 2)),
            {"value": str(total), "answer_lhs": [], "form": "number", "question_expression": summands})


def quadratic_root(rng: random.Random, level: int) -> Generated:
    b = _bound(level)
    r1, r2 = rng.randint(-b, b), rng.randint(-b, b)
    while r2 == r1:
        r2 = rng.randint(-b, b)
    coeffs = [1, -(r1 + r2), r1 * r2]
    return (f"Find the larger root of ${poly_text(coeffs)} = 0$", str(max(r1, r2)), str(min(r1, r2)),
            {"value": str(max(r1, r2)), "answer_lhs": ["x"], "other_root": min(r1, r2)})


def expand(rng: random.Random, level: int) -> Generated:
    b = _bound(level)
    a, c, d, e = _nonzero(rng, b), rng.randint(-b, b), _nonzero(rng, b), rng.randint(-b, b)
    coeffs = [a * d, a * e + c * d, c * e]
    wrong = [coeffs[0], coeffs[1] + 1, coeffs[2]]
    left = f"({poly_text([a, c])})({poly_text([d, e])})"
    return (f"Expand ${left}$", poly_text(coeffs), poly_text(wrong),
            {"coeffs": coeffs, "answer_lhs": [], "form": "expanded", "question_expression": left})


def derivative(rng: random.Random, level: int) -> Generated:
    b = _bound(level)
    degree = 2 + level
    coeffs = [_nonzero(rng, b)] + [rng.randint(-b, b) for _ in range(degree)]
    n = len(coeffs) - 1
    deriv = [c * (n - i) for i, c in enumerate(coeffs[:-1])]
    wrong = deriv[:-1] + [deriv[-1] + 1]
    return (f"Differentiate with respect to x: $f(x) = {poly_text(coeffs)}$. Give $f'(x)$.", poly_text(deriv), poly_text(wrong),
            {"coeffs": deriv, "answer_lhs": DERIVATIVE_LHS, "question_expression": poly_text(coeffs)})


FAMILIES: dict[str, Callable[[random.Random, int], Generated]] = {
    "linear": linear,
    "fractions": fractions_sum,
    "quadratic": quadratic_root,
    "expand": expand,
    "derivative": derivative,
}
TITLES = {
    "linear": "Linear equations",
    "fractions": "Fraction arithmetic",
    "quadratic": "Quadratic roots",
    "expand": "Polynomial expansion",
    "derivative": "Polynomial derivatives",
}


@dataclasses.dataclass
class MathSource(SeededSource):
    """Task source for one generated math family (``slug``: ``math-<family>``)."""

    family: str
    """Key of ``FAMILIES``."""
    levels: int = LEVELS
    """Coefficient-size levels."""

    def generate(self, seed: int, level: int) -> tuple[str, str, dict[str, Any]]:
        """The family's question with the answer instruction, its answer, and a wrong answer in the meta."""
        question, answer, wrong, meta = FAMILIES[self.family](random.Random(seed), level)
        return question + INSTRUCTION, answer, {"wrong_answer": wrong, **meta}


def _number_forms(value: Fraction) -> list[str]:
    """Ways to write one number: LaTeX and plain fractions, the sign inside, decimals, grouping."""
    forms = [latex_fraction(value)]
    if value.denominator == 1:
        n = value.numerator
        forms += [f"{n}.0", f"{n:.2f}"]
        if abs(n) >= 1000:
            forms += [f"{n:,}", f"{n:,}".replace(",", "{,}"), f"{n:,}".replace(",", "\\,")]
    else:
        num, den = value.numerator, value.denominator
        sign = "-" if value < 0 else ""
        forms += [f"{sign}\\dfrac{{{abs(num)}}}{{{den}}}", f"{sign}\\tfrac{{{abs(num)}}}{{{den}}}", f"\\frac{{{num}}}{{{den}}}",
                  f"{num}/{den}", f"\\frac{{{2 * num}}}{{{2 * den}}}", f"{float(value):.6f}", f"{float(value):.9f}"]
        if all(p in (2, 5) for p in _prime_factors(den)):
            forms.append(str(float(value)))
    return forms


def _prime_factors(n: int) -> set[int]:
    out, d = set(), 2
    while d * d <= n:
        while n % d == 0:
            out.add(d)
            n //= d
        d += 1
    return out | ({n} if n > 1 else set())


def _answer_forms(task: Task) -> list[str]:
    """Equivalent answer texts (what goes inside the box) for a generated task."""
    if "value" in task.meta:
        forms = _number_forms(Fraction(task.meta["value"]))
        for lhs in task.meta.get("answer_lhs", [])[:1]:
            forms += [f"{lhs} = {forms[0]}", f"{lhs}={forms[-1]}"]
        return forms
    coeffs = task.meta["coeffs"]
    forms = [task.answer, poly_text(coeffs, ascending=True), poly_text(coeffs, power="^%d"),
             poly_text(coeffs, ascending=True, power="^%d"), poly_text(coeffs, times="*", power="**%d"),
             poly_text(coeffs, times=" \\cdot ", power="^{%d}"), poly_text(coeffs, power="^%d").replace(" ", ""),
             poly_text(coeffs, times="*", power="^%d")]
    if task.meta.get("form") != "expanded":
        g = math.gcd(*coeffs)
        if g > 1:
            forms.append(f"{g}\\left({poly_text([c // g for c in coeffs])}\\right)")
    for lhs in task.meta.get("answer_lhs", [])[:2]:
        forms.append(f"{lhs} = {task.answer}")
    return forms


def equivalent_forms(task: Task) -> list[str]:
    """Completions equal to the gold in other forms, each of which the domain's verifier must
    pass: other ways to write the value (fractions and decimals, ``\\dfrac``, reordered terms,
    ``2x^2`` / ``2x^{2}`` / ``2*x**2``, thousands separators, ``x = ...`` where the task names a
    variable) in a ``\\boxed{}``, and the gold in other containers (``$\\boxed{}$``, an
    ``<answer>`` tag, a display, the same box twice). Every form holds a ``\\boxed{}`` or an
    ``<answer>`` tag, so it is a whole completion as it stands.

    >>> import random
    >>> task = MathSource("math-expand", "expand").sample(random.Random(1), 0)
    >>> len(equivalent_forms(task)) > 8
    True
    """
    forms = [f"The answer is $\\boxed{{{text}}}$." for text in _answer_forms(task)]
    gold = task.answer
    forms += [f"\\boxed{{{gold}}}", f"<answer>{gold}</answer>", f"Let me think.\n\nSo $\\boxed{{{gold}}}$, i.e. \\boxed{{{gold}}}.",
              f"<answer>\\boxed{{{gold}}}</answer>", f"\\[\\boxed{{{gold}}}\\]"]
    return list(dict.fromkeys(forms))


def wrong_forms(task: Task) -> list[str]:
    """Completions the domain's verifier must not pass: the wrong answer and the gold hedged
    together in both orders (two boxes, one box with a comma or ``\\text{ or }``, ``x = a, x = b``,
    a tag and a box), the gold inside an expression (``3x + gold``), the question copied back
    (the product to expand, ``\\frac{d}{dx}`` of the function, the unsimplified sum), constants,
    non-finite numbers, an empty box, and a long answer listing many candidates."""
    gold, wrong = task.answer, task.meta["wrong_answer"]
    forms = [f"\\boxed{{{wrong}}}"]
    for a, b in ((wrong, gold), (gold, wrong)):
        forms += [f"\\boxed{{{a}}} or \\boxed{{{b}}}", f"\\boxed{{{a}, {b}}}", f"\\boxed{{{a} \\text{{ or }} {b}}}",
                  f"<answer>{a}</answer> \\boxed{{{b}}}", f"\\boxed{{{a}}}\n\\boxed{{{b}}}", f"\\boxed{{{a}; {b}}}",
                  f"$\\boxed{{{a}}}$ or maybe $\\boxed{{{b}}}$"]
        if "value" in task.meta:
            forms += [f"\\boxed{{x = {a}, x = {b}}}", f"\\boxed{{\\{{{a}, {b}\\}}}}"]
    if "value" in task.meta:
        value = Fraction(task.meta["value"])
        forms += [f"\\boxed{{3x + {gold}}}", f"\\boxed{{{gold}x}}", f"\\boxed{{x - {gold}}}" if value else "\\boxed{x}",
                  f"\\boxed{{{latex_fraction(value + 1)}}}", f"\\boxed{{{latex_fraction(-value)}}}" if value else "\\boxed{1}"]
        if value:
            forms.append(f"\\boxed{{\\pm {latex_fraction(abs(value))}}}")
        if "other_root" in task.meta:
            forms += [f"\\boxed{{{task.meta['other_root']}}}", f"\\boxed{{x = {task.meta['other_root']}, x = {gold}}}"]
    else:
        coeffs = task.meta["coeffs"]
        forms += [f"\\boxed{{{poly_text(coeffs[:-1] + [coeffs[-1] + 1])}}}", f"\\boxed{{y = {gold}}}", f"\\boxed{{{gold} = 0}}"]
    question = task.meta.get("question_expression")
    if question and task.domain != "math-derivative":
        forms.append(f"\\boxed{{{question}}}")
    if question and task.domain == "math-derivative":
        forms += [f"\\boxed{{\\frac{{d}}{{dx}}\\left({question}\\right)}}", f"\\boxed{{{question}}}"]
    constants = ["0", "1", "-1", "\\text{Yes}", "\\text{None}", "\\{\\}", "[]", "\\emptyset", "\\text{NaN}", "\\infty", "-\\infty",
                 "\\frac{0}{0}", "\\frac{1}{0}", "x", ""]
    forms += [f"\\boxed{{{c}}}" for c in constants if canonical(c) != canonical(gold)]
    forms += ["", "no idea", "<answer></answer>", "The answer is NaN.", "nan", "inf"]
    many = [latex_fraction(Fraction(k, 2)) for k in range(-60, 61)] + [gold]
    forms += ["\\boxed{" + ", ".join(many) + "}", " ".join(f"\\boxed{{{m}}}" for m in many)]
    return list(dict.fromkeys(f for f in forms if canonical(f) != canonical(f"\\boxed{{{gold}}}")))


def register_all() -> list[DomainSpec]:
    return [register(DomainSpec(
        slug=f"math-{name}",
        title=f"Math: {TITLES[name]}",
        kind="math",
        family=FAMILY,
        source=MathSource(f"math-{name}", name),
        description=f"Generated {TITLES[name].lower()}; the boxed answer is checked with math-verify.",
        verifier_spec=VERIFIER_SPEC,
        task_source_spec={"family": FAMILY, "generator": name, "levels": LEVELS},
    )) for name in FAMILIES]
