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
import random
from fractions import Fraction
from typing import Callable

from trainer.registry import DomainSpec, register
from trainer.tasks.base import Task

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


def poly_latex(coeffs: list[int]) -> str:
    """Polynomial in x from coefficients, highest degree first: ``2x^{2} - 3x + 1``."""
    degree = len(coeffs) - 1
    terms = []
    for i, c in enumerate(coeffs):
        power = degree - i
        if c == 0:
            continue
        mag = abs(c)
        body = ("" if mag == 1 and power else str(mag)) + ("x" if power >= 1 else "") + (f"^{{{power}}}" if power > 1 else "")
        terms.append(("-" if c < 0 else "+", body))
    if not terms:
        return "0"
    text = ("-" if terms[0][0] == "-" else "") + terms[0][1]
    for sign, body in terms[1:]:
        text += f" {sign} {body}"
    return text


def _bound(level: int) -> int:
    return (9, 30, 200)[max(0, min(level, LEVELS - 1))]


def _nonzero(rng: random.Random, bound: int) -> int:
    return rng.choice([v for v in range(-bound, bound + 1) if v != 0]) if bound < 50 else (rng.randint(1, bound) * rng.choice([-1, 1]))


def linear(rng: random.Random, level: int) -> tuple[str, str, str]:
    b = _bound(level)
    a, c, d = _nonzero(rng, b), rng.randint(-b, b), rng.randint(-b, b)
    x = Fraction(d - c, a)
    return f"Solve for x: ${a}x + {c} = {d}$".replace("+ -", "- "), latex_fraction(x), latex_fraction(x + 1)


def fractions_sum(rng: random.Random, level: int) -> tuple[str, str, str]:
    b = _bound(level)
    p, q = Fraction(rng.randint(1, b), rng.randint(2, b + 1)), Fraction(rng.randint(1, b), rng.randint(2, b + 1))
    total = p + q
    return (f"Compute and simplify: $\\frac{{{p.numerator}}}{{{p.denominator}}} + \\frac{{{q.numerator}}}{{{q.denominator}}}$",
            latex_fraction(total), latex_fraction(total + Fraction(1, 2)))


def quadratic_root(rng: random.Random, level: int) -> tuple[str, str, str]:
    b = _bound(level)
    r1, r2 = rng.randint(-b, b), rng.randint(-b, b)
    while r2 == r1:
        r2 = rng.randint(-b, b)
    coeffs = [1, -(r1 + r2), r1 * r2]
    return f"Find the larger root of ${poly_latex(coeffs)} = 0$", str(max(r1, r2)), str(min(r1, r2))


def expand(rng: random.Random, level: int) -> tuple[str, str, str]:
    b = _bound(level)
    a, c, d, e = _nonzero(rng, b), rng.randint(-b, b), _nonzero(rng, b), rng.randint(-b, b)
    coeffs = [a * d, a * e + c * d, c * e]
    wrong = [coeffs[0], coeffs[1] + 1, coeffs[2]]
    left = f"({poly_latex([a, c])})({poly_latex([d, e])})"
    return f"Expand ${left}$", poly_latex(coeffs), poly_latex(wrong)


def derivative(rng: random.Random, level: int) -> tuple[str, str, str]:
    b = _bound(level)
    degree = 2 + level
    coeffs = [_nonzero(rng, b)] + [rng.randint(-b, b) for _ in range(degree)]
    n = len(coeffs) - 1
    deriv = [c * (n - i) for i, c in enumerate(coeffs[:-1])]
    wrong = deriv[:-1] + [deriv[-1] + 1]
    return f"Differentiate with respect to x: $f(x) = {poly_latex(coeffs)}$. Give $f'(x)$.", poly_latex(deriv), poly_latex(wrong)


FAMILIES: dict[str, Callable[[random.Random, int], tuple[str, str, str]]] = {
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
class MathSource:
    """Task source for one generated math family."""

    slug: str
    """Domain slug, ``math-<family>``."""
    family: str
    """Key of ``FAMILIES``."""
    levels: int = LEVELS
    """Coefficient-size levels."""

    def sample(self, rng: random.Random, level: int = 0) -> Task:
        level = max(0, min(int(level), self.levels - 1))
        seed = rng.getrandbits(32)
        question, answer, wrong = FAMILIES[self.family](random.Random(seed), level)
        return Task(self.slug, f"L{level}-{seed}", question + INSTRUCTION, answer, level, {"wrong_answer": wrong})


def register_all() -> list[DomainSpec]:
    from trainer.verifiers.cascade import compile_cascade

    verify = compile_cascade(VERIFIER_SPEC)
    return [register(DomainSpec(
        slug=f"math-{name}",
        title=f"Math: {TITLES[name]}",
        kind="math",
        family=FAMILY,
        source=MathSource(f"math-{name}", name),
        verify=verify,
        description=f"Generated {TITLES[name].lower()}; the boxed answer is checked with math-verify.",
        verifier_spec=VERIFIER_SPEC,
        task_source_spec={"family": FAMILY, "generator": name, "levels": LEVELS},
    )) for name in FAMILIES]
