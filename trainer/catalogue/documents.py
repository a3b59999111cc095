"""Document analysis over generated financial statements (``doc-*`` domains).

A generated company reports an income statement (page 1), a balance sheet (page 2) and a cash
flow statement (page 3) as text tables, in thousands of dollars, for two (level 0) or three
(level 1) fiscal years. Questions ask for extracted figures, ratios, a JSON object of several
fields, or a cross-page consistency check. Tolerances fit the field: a figure copied from the
document (extraction, JSON, consistency) must be exact; a ratio asked for "rounded to two decimal
places" must be within less than half a unit of that place of the rounded gold (a midpoint such
as 0.285 matches neither neighbour) and a percentage may carry its ``%``.
The consistency question's injected error is uniform over [-500, 500] (0 included), so no constant
answer passes more often than another task's gold; the JSON question's ``fiscal_year`` is given by
the question and earns no partial credit.

>>> import random
>>> doc = make_statements(random.Random(1), years=2)
>>> doc.values[doc.years[-1]]["total_assets"] == doc.values[doc.years[-1]]["total_liabilities_and_equity"]
True
>>> "Page 3 of 3" in doc.text
True
"""
from __future__ import annotations

import dataclasses
import json
import random
from fractions import Fraction
from typing import Any, Callable

from trainer.catalogue import DomainSpec
from trainer.catalogue.define import SeededSource, define_domain
from trainer.tasks.statements import LINES, make_statements, round_half_up
from trainer.tasks.base import Task

FAMILY = "documents"
LEVELS = 2
INSTRUCTION = "\n\nGive your final answer inside <answer></answer> tags."

def q_extraction(rng: random.Random, level: int) -> tuple[str, Any, dict[str, Any]]:
    doc = make_statements(rng, 2 + level)
    year = rng.choice(doc.years)
    key = rng.choice(sorted(LINES))
    question = f"What is '{LINES[key]}' for FY{year}, in thousands of US dollars? Give the number only (negative if shown in parentheses)."
    return doc.text + "\n\n" + question, doc.values[year][key], {"field": key, "year": year}


RATIOS: dict[str, tuple[str, Callable[[dict[str, int], dict[str, int] | None], Fraction]]] = {
    "gross_margin": ("the gross margin (gross profit / revenue) as a percentage", lambda v, p: 100 * Fraction(v["gross_profit"], v["revenue"])),
    "operating_margin": ("the operating margin (operating income / revenue) as a percentage", lambda v, p: 100 * Fraction(v["operating_income"], v["revenue"])),
    "current_ratio": ("the current ratio (total current assets / total current liabilities)", lambda v, p: Fraction(v["current_assets"], v["current_liabilities"])),
    "debt_to_equity": ("long-term debt divided by shareholders' equity", lambda v, p: Fraction(v["long_term_debt"], v["equity"])),
    "revenue_growth": ("revenue growth over the previous fiscal year as a percentage", lambda v, p: 100 * Fraction(v["revenue"] - p["revenue"], p["revenue"])),
}
PERCENTAGES = {"gross_margin", "operating_margin", "revenue_growth"}
"""Ratios asked for as a percentage: ``45.23%`` answers 45.23 (the numeric stage's ``percent``)."""


def q_ratio(rng: random.Random, level: int) -> tuple[str, Any, dict[str, Any]]:
    doc = make_statements(rng, 2 + level)
    name = rng.choice(sorted(RATIOS))
    years = doc.years[1:] if name == "revenue_growth" else doc.years
    year = rng.choice(years)
    text, fn = RATIOS[name]
    prev = doc.values.get(year - 1)
    value = round_half_up(fn(doc.values[year], prev), 2)
    question = f"Compute {text} for FY{year}, rounded to two decimal places. Give the number only."
    meta = {"ratio": name, "year": year, "percent": "points" if name in PERCENTAGES else "fraction"}
    return doc.text + "\n\n" + question, value, meta


JSON_FIELDS = ["revenue", "net_income", "total_assets", "operating_cash_flow"]


def q_json(rng: random.Random, level: int) -> tuple[str, Any, dict[str, Any]]:
    doc = make_statements(rng, 2 + level)
    year = rng.choice(doc.years)
    expected = {k: doc.values[year][k] for k in JSON_FIELDS} | {"fiscal_year": year}
    question = (f"Return a JSON object with the keys {', '.join(JSON_FIELDS)} (numbers, in thousands) and fiscal_year "
                f"for FY{year}, taken from the statements.")
    return doc.text + "\n\n" + question, expected, {"year": year}


CONSISTENCY_ERROR = 500
"""The injected error is uniform over ``[-CONSISTENCY_ERROR, CONSISTENCY_ERROR]``."""


def q_consistency(rng: random.Random, level: int) -> tuple[str, Any, dict[str, Any]]:
    seed = rng.getrandbits(32)
    plain = make_statements(random.Random(seed), 2 + level)
    year = rng.choice(plain.years)
    error = rng.randint(-CONSISTENCY_ERROR, CONSISTENCY_ERROR)  # uniform, 0 included: no constant beats chance
    overrides = {(year, "cash"): plain.values[year]["cash"] + error} if error else {}
    doc = make_statements(random.Random(seed), 2 + level, overrides)
    question = (f"Cross-check the pages: for FY{year}, what is 'Cash at end of year' on page 3 minus 'Cash and cash "
                f"equivalents' on page 2, in thousands? Answer 0 if they agree.")
    return doc.text + "\n\n" + question, -error, {"year": year, "injected_error": error}


EXACT = {"type": "numeric", "params": {"abs_tol": 0}}
"""Figures copied from the document (and differences of them) are integers: exact."""
HALF_CENT = 0.005 * (1 - 1e-6)
"""Just under half a unit of the second decimal place around the rounded gold ("rounded to two
decimal places"): a midpoint such as ``0.285`` matches neither ``0.28`` nor ``0.29``, so no one
number covers two neighbouring golds (with half a unit inclusive it covered both)."""
QUESTIONS: dict[str, tuple[str, Callable[[random.Random, int], tuple[str, Any, dict[str, Any]]], dict[str, Any]]] = {
    "extraction": ("Figure extraction", q_extraction, EXACT),
    "ratios": ("Financial ratios", q_ratio, {"type": "numeric", "params": {"abs_tol": HALF_CENT}}),
    "json": ("Structured extraction (JSON)", q_json, {"type": "json_fields", "params": {"given": ["fiscal_year"]}}),
    "consistency": ("Cross-page consistency", q_consistency, EXACT),
}


def verifier_spec(kind: str) -> dict[str, Any]:
    return {"stages": [{"type": "extract", "params": {"methods": ["answer_tag", "final_line"]}}, QUESTIONS[kind][2]]}


@dataclasses.dataclass
class DocumentSource(SeededSource):
    """Task source for one document question type (``slug``: ``doc-<kind>``)."""

    kind: str
    """Key of ``QUESTIONS``."""
    levels: int = LEVELS
    """Level 0: two fiscal years; level 1: three."""

    def generate(self, seed: int, level: int) -> tuple[str, Any, dict[str, Any]]:
        """The statements and the question with the answer instruction, the gold, and the question's meta."""
        prompt, answer, meta = QUESTIONS[self.kind][1](random.Random(seed), level)
        return prompt + INSTRUCTION, answer, meta


def reference_completion(task: Task) -> str:
    """A correct completion (JSON for the json domain, the number otherwise)."""
    answer = json.dumps(task.answer) if isinstance(task.answer, dict) else str(task.answer)
    return f"<answer>{answer}</answer>"


def register_all() -> list[DomainSpec]:
    specs = []
    for kind, (title, _, _) in QUESTIONS.items():
        vspec = verifier_spec(kind)
        specs.append(define_domain(
            DocumentSource(f"doc-{kind}", kind), vspec,
            title=f"Documents: {title}",
            kind="document",
            family=FAMILY,
            description=f"{title} from generated three-page financial statements, verified with tolerance.",
            task_source_spec={"family": FAMILY, "question": kind, "levels": LEVELS},
        ))
    return specs
