"""Generated financial statements: a company's income statement, balance sheet and cash flow
statement for consecutive fiscal years, consistent with each other, rendered as fixed-width text
tables in thousands of dollars. The ``doc-*`` domains (:mod:`trainer.catalogue.documents`) ask
about three-page documents of them; the ``filing-*`` domains (:mod:`trainer.tasks.filings`) put
them inside long annual reports.
"""
from __future__ import annotations

import dataclasses
import decimal
import random
from fractions import Fraction

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


def round_half_up(value: Fraction, places: int = 2) -> float:
    """``value`` rounded to ``places`` decimals, halves away from zero (as people round).

    >>> round_half_up(Fraction(45235, 1000)), round_half_up(Fraction(-45235, 1000)), round(45.235, 2)
    (45.24, -45.24, 45.23)
    """
    exact = decimal.Decimal(value.numerator) / decimal.Decimal(value.denominator)
    return float(exact.quantize(decimal.Decimal(1).scaleb(-places), rounding=decimal.ROUND_HALF_UP))
