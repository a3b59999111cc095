"""Document analysis over generated financial statements (``doc-*`` domains).

A generated company reports an income statement (page 1), a balance sheet (page 2) and a cash
flow statement (page 3) as text tables, in thousands of dollars, for two (level 0) or three
(level 1) fiscal years. Questions ask for extracted figures, ratios, a JSON object of several
fields, or a cross-page consistency check. Tolerances fit the field: a figure copied from the
document (extraction, JSON, consistency) must be exact; a ratio asked for "rounded to two decimal
places" must be within half a unit of that place (0.005) and a percentage may carry its ``%``.
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
import decimal
import json
import random
from fractions import Fraction
from typing import Any, Callable

from trainer.catalogue import DomainSpec, register
from trainer.tasks.base import Task
from trainer.verifiers.cascade import compile_cascade

FAMILY = "documents"
LEVELS = 2
INSTRUCTION = "\n\nGive your final answer inside <answer></answer> tags."

LINES = {
    "revenue": "Revenue",
    "cogs": "Cost of goods sold",
    "gross_profit": "Gross profit",
    "sga": "Selling, general and administrative",
    "rnd": "Research and development",
    "operating_income": "Operating income",
    "interest": "Interest expense",
    "pretax_income": "Income before taxes",
    "tax": "Income tax expense",
    "net_income": "Net income",
    "cash": "Cash and cash equivalents",
    "receivables": "Accounts receivable",
    "inventory": "Inventory",
    "current_assets": "Total current assets",
    "ppe": "Property, plant and equipment, net",
    "total_assets": "Total assets",
    "payables": "Accounts payable",
    "current_liabilities": "Total current liabilities",
    "long_term_debt": "Long-term debt",
    "total_liabilities": "Total liabilities",
    "equity": "Shareholders' equity",
    "total_liabilities_and_equity": "Total liabilities and equity",
    "depreciation": "Depreciation and amortisation",
    "working_capital_change": "Change in working capital",
    "operating_cash_flow": "Net cash from operating activities",
    "capex": "Capital expenditures",
    "investing_cash_flow": "Net cash used in investing activities",
    "debt_change": "Net borrowing (repayment) of debt",
    "dividends": "Dividends paid",
    "financing_cash_flow": "Net cash from financing activities",
    "net_change_in_cash": "Net change in cash",
    "beginning_cash": "Cash at beginning of year",
    "ending_cash": "Cash at end of year",
}
PAGES = [
    ("Consolidated Income Statement", ["revenue", "cogs", "gross_profit", "sga", "rnd", "operating_income", "interest", "pretax_income", "tax", "net_income"]),
    ("Consolidated Balance Sheet", ["cash", "receivables", "inventory", "current_assets", "ppe", "total_assets", "payables", "current_liabilities", "long_term_debt", "total_liabilities", "equity", "total_liabilities_and_equity"]),
    ("Consolidated Statement of Cash Flows", ["net_income", "depreciation", "working_capital_change", "operating_cash_flow", "capex", "investing_cash_flow", "debt_change", "dividends", "financing_cash_flow", "net_change_in_cash", "beginning_cash", "ending_cash"]),
]
COMPANIES = ["Acme Widgets", "Borealis Foods", "Cobalt Robotics", "Delta Textiles", "Everline Logistics", "Fjord Energy", "Granite Software", "Harbor Pharma"]


@dataclasses.dataclass
class Statements:
    """One generated company's statements."""

    company: str
    """Company name."""
    years: list[int]
    """Fiscal years, oldest first."""
    values: dict[int, dict[str, int]]
    """Year -> line item -> value in thousands."""
    text: str
    """The document as the model sees it (three pages)."""


def _year(rng: random.Random, revenue: int, beginning_cash: int) -> dict[str, int]:
    v: dict[str, int] = {"revenue": revenue}
    v["cogs"] = round(revenue * rng.uniform(0.35, 0.7))
    v["gross_profit"] = v["revenue"] - v["cogs"]
    v["sga"] = round(revenue * rng.uniform(0.08, 0.2))
    v["rnd"] = round(revenue * rng.uniform(0.0, 0.1))
    v["operating_income"] = v["gross_profit"] - v["sga"] - v["rnd"]
    v["interest"] = rng.randint(0, max(1, revenue // 50))
    v["pretax_income"] = v["operating_income"] - v["interest"]
    v["tax"] = max(0, round(v["pretax_income"] * 0.21))
    v["net_income"] = v["pretax_income"] - v["tax"]
    v["depreciation"] = round(revenue * rng.uniform(0.02, 0.06))
    v["working_capital_change"] = rng.randint(-revenue // 40, revenue // 40)
    v["operating_cash_flow"] = v["net_income"] + v["depreciation"] + v["working_capital_change"]
    v["capex"] = -round(revenue * rng.uniform(0.03, 0.09))
    v["investing_cash_flow"] = v["capex"]
    v["debt_change"] = rng.randint(-revenue // 30, revenue // 20)
    v["dividends"] = -round(max(0, v["net_income"]) * rng.uniform(0.0, 0.4))
    v["financing_cash_flow"] = v["debt_change"] + v["dividends"]
    v["net_change_in_cash"] = v["operating_cash_flow"] + v["investing_cash_flow"] + v["financing_cash_flow"]
    v["beginning_cash"] = beginning_cash
    v["ending_cash"] = beginning_cash + v["net_change_in_cash"]
    v["cash"] = v["ending_cash"]
    v["receivables"] = round(revenue * rng.uniform(0.08, 0.18))
    v["inventory"] = round(revenue * rng.uniform(0.05, 0.15))
    v["current_assets"] = v["cash"] + v["receivables"] + v["inventory"]
    v["ppe"] = round(revenue * rng.uniform(0.3, 0.8))
    v["total_assets"] = v["current_assets"] + v["ppe"]
    v["payables"] = round(revenue * rng.uniform(0.05, 0.12))
    v["current_liabilities"] = v["payables"] + round(revenue * rng.uniform(0.01, 0.05))
    v["long_term_debt"] = round(revenue * rng.uniform(0.1, 0.5))
    v["total_liabilities"] = v["current_liabilities"] + v["long_term_debt"]
    v["equity"] = v["total_assets"] - v["total_liabilities"]
    v["total_liabilities_and_equity"] = v["total_liabilities"] + v["equity"]
    return v


def _fmt(value: int) -> str:
    return f"({abs(value):,})" if value < 0 else f"{value:,}"


def render(company: str, years: list[int], values: dict[int, dict[str, int]], overrides: dict[tuple[int, str], int] | None = None) -> str:
    """The three pages as fixed-width text tables (``overrides`` change printed figures only)."""
    overrides = overrides or {}
    pages = []
    for number, (title, keys) in enumerate(PAGES, start=1):
        width = max(len(LINES[k]) for k in keys) + 2
        header = " " * width + "".join(f"{'FY' + str(y):>14}" for y in years)
        rows = [f"{LINES[k]:<{width}}" + "".join(f"{_fmt(overrides.get((y, k), values[y][k])):>14}" for y in years) for k in keys]
        pages.append(f"--- Page {number} of 3 ---\n{company}\n{title}\n(in thousands of US dollars)\n\n{header}\n" + "\n".join(rows))
    return "\n\n".join(pages)


def make_statements(rng: random.Random, years: int = 2, overrides: dict[tuple[int, str], int] | None = None) -> Statements:
    """Generate consistent statements for ``years`` consecutive fiscal years."""
    company = rng.choice(COMPANIES)
    first = rng.randint(2015, 2022)
    fiscal = list(range(first, first + years))
    revenue = rng.randint(20_000, 900_000)
    cash = round(revenue * rng.uniform(0.05, 0.2))
    values = {}
    for y in fiscal:
        values[y] = _year(rng, revenue, cash)
        cash = values[y]["ending_cash"]
        revenue = round(revenue * rng.uniform(0.85, 1.3))
    return Statements(company, fiscal, values, render(company, fiscal, values, overrides))


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


def round_half_up(value: Fraction, places: int = 2) -> float:
    """``value`` rounded to ``places`` decimals, halves away from zero (as people round).

    >>> round_half_up(Fraction(45235, 1000)), round_half_up(Fraction(-45235, 1000)), round(45.235, 2)
    (45.24, -45.24, 45.23)
    """
    exact = decimal.Decimal(value.numerator) / decimal.Decimal(value.denominator)
    return float(exact.quantize(decimal.Decimal(1).scaleb(-places), rounding=decimal.ROUND_HALF_UP))


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
HALF_CENT = 0.005 * (1 + 1e-6)
"""Half a unit in the second decimal place (and a hair for binary floats): "rounded to two decimal places"."""
QUESTIONS: dict[str, tuple[str, Callable[[random.Random, int], tuple[str, Any, dict[str, Any]]], dict[str, Any]]] = {
    "extraction": ("Figure extraction", q_extraction, EXACT),
    "ratios": ("Financial ratios", q_ratio, {"type": "numeric", "params": {"abs_tol": HALF_CENT}}),
    "json": ("Structured extraction (JSON)", q_json, {"type": "json_fields", "params": {"given": ["fiscal_year"]}}),
    "consistency": ("Cross-page consistency", q_consistency, EXACT),
}


def verifier_spec(kind: str) -> dict[str, Any]:
    return {"stages": [{"type": "extract", "params": {"methods": ["answer_tag", "final_line"]}}, QUESTIONS[kind][2]]}


@dataclasses.dataclass
class DocumentSource:
    """Task source for one document question type."""

    slug: str
    """Domain slug, ``doc-<kind>``."""
    kind: str
    """Key of ``QUESTIONS``."""
    levels: int = LEVELS
    """Level 0: two fiscal years; level 1: three."""

    def sample(self, rng: random.Random, level: int = 0) -> Task:
        level = max(0, min(int(level), self.levels - 1))
        seed = rng.getrandbits(32)
        prompt, answer, meta = QUESTIONS[self.kind][1](random.Random(seed), level)
        return Task(self.slug, f"L{level}-{seed}", prompt + INSTRUCTION, answer, level, meta)


def reference_completion(task: Task) -> str:
    """A correct completion (JSON for the json domain, the number otherwise)."""
    answer = json.dumps(task.answer) if isinstance(task.answer, dict) else str(task.answer)
    return f"<answer>{answer}</answer>"


def register_all() -> list[DomainSpec]:
    specs = []
    for kind, (title, _, _) in QUESTIONS.items():
        vspec = verifier_spec(kind)
        specs.append(register(DomainSpec(
            slug=f"doc-{kind}",
            title=f"Documents: {title}",
            kind="document",
            family=FAMILY,
            source=DocumentSource(f"doc-{kind}", kind),
            verify=compile_cascade(vspec),
            description=f"{title} from generated three-page financial statements, verified with tolerance.",
            verifier_spec=vspec,
            task_source_spec={"family": FAMILY, "question": kind, "levels": LEVELS},
        )))
    return specs
