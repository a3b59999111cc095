"""Long generated annual reports (10-K-like filings) and questions that need several far-apart
facts and a computation (the ``filing-*`` domains, :mod:`trainer.catalogue.filings`).

A filing has the sections of an annual report: the business, risk factors, management's
discussion, the statements for three (level 0) or five fiscal years (income statement, balance
sheet, cash flows, in thousands of dollars) and the notes: segments, debt, shares, charges and
subsequent events. The notes carry what changes an answer: a segment moved to discontinued
operations (shown in the segment table, left out of consolidated revenue), impairment and
restructuring charges inside SG&A, a stock split and an early repayment after the year end.
The narrative sections are what makes it long: the level sets the length, from about 4,000
tokens (level 0) to about 50,000 (level 3), so one family serves short- and long-context models.

Everything is a function of ``(seed, level)``: the environment rebuilds the document from the
task's meta instead of carrying it (:func:`filing`, cached).

>>> doc = filing(7, 0)
>>> doc.section("statements").text.count("Consolidated Income Statement"), len(doc.years)
(1, 3)
>>> 3_000 < doc.tokens < 6_000, 40_000 < filing(7, 3).tokens < 60_000
(True, True)
>>> sum(t.principal for t in doc.tranches) == doc.values[doc.years[-1]]["long_term_debt"]
True
"""
from __future__ import annotations

import dataclasses
import functools
import random
from fractions import Fraction

from trainer.tasks.statements import _year, render, round_half_up

LEVELS = 4
TARGET_TOKENS = (4_000, 10_000, 25_000, 50_000)
"""About how long a filing of each level is (tokens estimated as characters / 4)."""
CHARS_PER_TOKEN = 4

SEGMENTS = ["Industrial Systems", "Consumer Products", "Healthcare Solutions", "Software and Services",
            "Energy Equipment", "Logistics", "Specialty Materials"]
LEGACY = "Legacy Products"
COMPANIES = ["Northwind Holdings", "Bluestone Industries", "Crescent Dynamics", "Ironwood Group", "Lakeshore Systems",
             "Meridian Works", "Summit Ridge Corp", "Tidewater Technologies"]

_RISKS = [
    "Our results depend on demand in the end markets of our {segment} segment, which can fall quickly when customers delay purchases.",
    "We rely on a limited number of suppliers for certain components, and a disruption at any of them could delay shipments.",
    "Changes in interest rates affect the cost of our variable-rate borrowings and the value of our pension obligations.",
    "We operate in {n} countries and are exposed to changes in exchange rates, tariffs and trade policies.",
    "Cyber attacks on our systems or those of our vendors could interrupt operations and expose confidential data.",
    "Our ability to attract and retain skilled employees affects our capacity to deliver projects on schedule.",
    "Competitors with greater resources may introduce products that reduce demand for ours or pressure our prices.",
    "Regulation of products sold by our {segment} segment may change, which could increase our costs of compliance.",
    "Acquisitions we make may not deliver the benefits we expect, and integrating them may divert management attention.",
    "Severe weather and other natural events could damage our facilities and interrupt the supply of materials.",
    "Our indebtedness requires us to meet financial covenants; a breach could accelerate the repayment of our notes.",
    "Impairments of goodwill or long-lived assets could reduce our reported earnings in the period they are recognised.",
]
_BUSINESS = [
    "The {segment} segment designs, manufactures and services products sold to {customers} through direct sales teams and distributors.",
    "Within {segment}, the Company competes on product performance, reliability, service coverage and total cost of ownership.",
    "Research and development in {segment} focuses on efficiency, connectivity and the reduction of maintenance costs for customers.",
    "The Company's backlog in {segment} consists of firm orders expected to be delivered within the next twelve months.",
    "Seasonality in {segment} is modest; shipments are typically somewhat higher in the fourth fiscal quarter.",
]
_MDNA = [
    "Management reviews segment operating income, excluding unallocated corporate costs, to assess performance and allocate resources.",
    "Pricing actions taken during the year offset part of the increase in material and freight costs.",
    "The Company continued to invest in capacity and digital tools, which is reflected in capital expenditures.",
    "Working capital movements reflect the timing of customer collections and inventory built ahead of product launches.",
    "Liquidity is provided by cash from operations, cash on hand and the revolving credit facility, which was undrawn at year end.",
    "Foreign currency movements had an immaterial effect on the comparison of revenue between the years presented.",
]
_CUSTOMERS = ["utilities", "hospitals", "retailers", "manufacturers", "government agencies", "distributors", "fleet operators"]


@dataclasses.dataclass(frozen=True)
class Tranche:
    """One issue of notes: principal in thousands, due in fiscal year ``due``."""

    name: str
    principal: int
    due: int
    rate: float


@dataclasses.dataclass(frozen=True)
class Section:
    id: str
    title: str
    text: str

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


@dataclasses.dataclass(frozen=True)
class Filing:
    """One generated annual report and the facts its questions are computed from."""

    seed: int
    level: int
    company: str
    years: list[int]
    values: dict[int, dict[str, int]]
    segments: list[str]
    """Continuing segments (their revenues sum to consolidated revenue)."""
    segment_revenue: dict[int, dict[str, int]]
    """Year -> segment -> revenue in thousands, the discontinued ``LEGACY`` included."""
    charges: dict[int, int]
    """Year -> impairment and restructuring charges included in SG&A (thousands)."""
    diluted_shares: dict[int, int]
    """Year -> weighted average diluted shares in thousands, before the split."""
    split: int
    """The k-for-1 stock split effected after the last year end."""
    tranches: list[Tranche]
    repaid: str
    """The tranche repaid in full after the last year end."""
    sections: list[Section]

    @property
    def text(self) -> str:
        return "\n\n".join(f"== {s.title} ==\n{s.text}" for s in self.sections)

    @property
    def tokens(self) -> int:
        return len(self.text) // CHARS_PER_TOKEN

    def section(self, id: str) -> Section:
        return next(s for s in self.sections if s.id == id)

    def toc(self) -> str:
        return "\n".join(f"{s.id}: {s.title} ({len(s.lines)} lines)" for s in self.sections)


def _paragraphs(rng: random.Random, templates: list[str], count: int, segments: list[str]) -> str:
    out = []
    for _ in range(count):
        sentences = [rng.choice(templates).format(segment=rng.choice(segments), n=rng.randint(12, 60),
                                                  customers=rng.choice(_CUSTOMERS)) for _ in range(rng.randint(3, 5))]
        out.append(" ".join(sentences))
    return "\n\n".join(out)


def _table(title: str, years: list[int], rows: list[tuple[str, dict[int, int]]], unit: str = "in thousands of US dollars") -> str:
    width = max(len(label) for label, _ in rows) + 2
    header = " " * width + "".join(f"{'FY' + str(y):>14}" for y in years)
    body = [f"{label:<{width}}" + "".join(f"{values[y]:>14,}" for y in years) for label, values in rows]
    return f"{title}\n({unit})\n\n{header}\n" + "\n".join(body)


@functools.lru_cache(maxsize=64)
def filing(seed: int, level: int) -> Filing:
    """The filing of ``(seed, level)``: the same document every time."""
    level = max(0, min(int(level), LEVELS - 1))
    rng = random.Random(seed)
    company = rng.choice(COMPANIES)
    n_years = 3 if level == 0 else 5
    first = rng.randint(2012, 2020)
    years = list(range(first, first + n_years))
    revenue = rng.randint(200_000, 2_000_000)
    cash = round(revenue * rng.uniform(0.05, 0.2))
    values: dict[int, dict[str, int]] = {}
    for y in years:
        values[y] = _year(rng, revenue, cash)
        cash = values[y]["ending_cash"]
        revenue = round(revenue * rng.uniform(0.9, 1.25))
    last = years[-1]
    segments, segment_revenue, segment_income = _segments(rng, years, values)
    charges = {y: round(values[y]["sga"] * rng.uniform(0.05, 0.3)) for y in years}
    diluted = {y: rng.randint(20_000, 400_000) for y in years}
    basic = {y: round(diluted[y] * rng.uniform(0.94, 0.99)) for y in years}
    split = rng.choice([2, 3, 4])
    debt = values[last]["long_term_debt"]
    tranches = _tranches(rng, debt, last)
    repaid = rng.choice(tranches[1:]).name  # never the only tranche due soonest: some debt always falls due
    repay_day = f"{rng.choice(['February', 'March'])} {rng.randint(2, 27)}, {last + 1}"
    split_day = f"{rng.choice(['January', 'February', 'March'])} {rng.randint(2, 27)}, {last + 1}"

    statements = render(company, years, values)
    seg_rows = [(s, {y: segment_revenue[y][s] for y in years}) for s in segments + [LEGACY]]
    seg_rows.append(("Total segment revenue", {y: sum(segment_revenue[y].values()) for y in years}))
    inc_rows = [(s, {y: segment_income[y][s] for y in years}) for s in segments + [LEGACY]]
    notes = [
        Section("note-1", "Note 1. Basis of presentation",
                f"The consolidated financial statements include {company} and its subsidiaries. All amounts are in "
                "thousands of US dollars unless stated otherwise; share amounts are in thousands."),
        Section("note-2", "Note 2. Segment information",
                _table("Revenue by segment", years, seg_rows) + "\n\n" + _table("Operating income by segment", years, inc_rows)
                + f"\n\nIn FY{last} the Board approved the exit of the {LEGACY} business. Its results are presented as "
                  "discontinued operations for every year shown: consolidated revenue on the income statement excludes "
                  f"{LEGACY}, which the tables above show for reference only, so the total segment revenue is not "
                  "consolidated revenue."),
        Section("note-3", "Note 3. Debt",
                "\n".join(f"{t.name}: principal {t.principal:,}, due {t.due}" for t in tranches)
                + f"\nTotal long-term debt at the end of FY{last}: {debt:,}. The notes are unsecured and rank equally."),
        Section("note-4", "Note 4. Earnings per share",
                _table("Weighted average shares outstanding", years,
                       [("Basic", basic), ("Diluted", diluted)], unit="in thousands of shares")
                + "\n\nShare amounts in this note are stated before the stock split described in Note 6."),
        Section("note-5", "Note 5. Impairment and restructuring charges",
                _table("Impairment and restructuring charges", years, [("Charges", charges)])
                + "\n\nThese charges are included in selling, general and administrative expenses on the income "
                  "statement. Management considers them non-recurring and excludes them from adjusted operating income."),
        Section("note-6", "Note 6. Subsequent events",
                f"On {split_day}, the Board effected a {split}-for-1 stock split. Share and per-share amounts in these "
                f"statements have not been adjusted for it.\n\nOn {repay_day}, the Company repaid the {repaid} in full "
                "from cash on hand; no other notes were repaid or issued after the year end."),
    ]
    fixed = [Section("statements", "Item 8. Financial statements", statements)] + notes
    sections = _narrative(rng, level, sum(len(s.text) for s in fixed), segments) + fixed
    return Filing(seed, level, company, years, values, segments, segment_revenue, charges, diluted, split,
                  tranches, repaid, sections)


def _segments(rng: random.Random, years: list[int], values: dict[int, dict[str, int]]
              ) -> tuple[list[str], dict[int, dict[str, int]], dict[int, dict[str, int]]]:
    """The continuing segments, and each year's revenue and operating income by segment (the
    legacy business's among them): continuing segments sum to consolidated revenue."""
    segments = rng.sample(SEGMENTS, rng.randint(3, 4))
    segment_revenue: dict[int, dict[str, int]] = {}
    segment_income: dict[int, dict[str, int]] = {}
    for y in years:
        weights = [rng.uniform(0.5, 2.0) for _ in segments]
        total = values[y]["revenue"]
        shares = [round(total * w / sum(weights)) for w in weights]
        shares[-1] = total - sum(shares[:-1])  # continuing segments sum to consolidated revenue
        segment_revenue[y] = dict(zip(segments, shares)) | {LEGACY: round(total * rng.uniform(0.04, 0.12))}
        segment_income[y] = {s: round(r * rng.uniform(0.05, 0.25)) for s, r in segment_revenue[y].items()}
    return segments, segment_revenue, segment_income


def _tranches(rng: random.Random, debt: int, last: int) -> list[Tranche]:
    """The long-term ``debt`` at the end of FY``last`` as 3 to 5 notes, due in the ten years after."""
    n_tranches = rng.randint(3, 5)
    cuts = sorted(rng.sample(range(1, max(debt, n_tranches + 1)), n_tranches - 1))
    principals = [b - a for a, b in zip([0, *cuts], [*cuts, debt])]
    dues = sorted(rng.sample(range(last + 1, last + 11), n_tranches))
    return [Tranche(f"{rate:.2f}% Senior Notes due {due}", p, due, rate)
            for p, due, rate in zip(principals, dues, [round(rng.uniform(2.0, 7.5), 2) for _ in principals])]


def _narrative(rng: random.Random, level: int, fixed_chars: int, segments: list[str]) -> list[Section]:
    """The narrative items, which take the rest of the level's length after the statements and
    notes (``fixed_chars``): business 30%, risk factors 40%, MD&A 30%."""
    budget = max(TARGET_TOKENS[level] * CHARS_PER_TOKEN - fixed_chars, 2_000)
    narrative = []
    for id, title, templates, share in (("business", "Item 1. Business", _BUSINESS, 0.3),
                                        ("risks", "Item 1A. Risk factors", _RISKS, 0.4),
                                        ("mdna", "Item 7. Management's discussion and analysis", _MDNA, 0.3)):
        text, goal = "", budget * share
        while len(text) < goal:
            text += ("\n\n" if text else "") + _paragraphs(rng, templates, 1, segments + [LEGACY])
        narrative.append(Section(id, title, text))
    return narrative


# ---- questions ------------------------------------------------------------------------------

def q_adjusted_margin(doc: Filing, rng: random.Random) -> tuple[str, float, dict, list[tuple[str, str]]]:
    y = rng.choice(doc.years)
    v = doc.values[y]
    value = round_half_up(100 * Fraction(v["operating_income"] + doc.charges[y], v["revenue"]), 2)
    question = (f"What was {doc.company}'s adjusted operating margin for FY{y}: operating income with the impairment "
                "and restructuring charges added back, divided by revenue, as a percentage rounded to two decimal places?")
    reads = [("search", "restructuring"), ("read", "note-5"), ("read", "statements")]
    expr = f"100 * ({v['operating_income']} + {doc.charges[y]}) / {v['revenue']}"
    return question, value, {"percent": "points", "expression": expr}, reads


def q_segment_share(doc: Filing, rng: random.Random) -> tuple[str, float, dict, list[tuple[str, str]]]:
    y = rng.choice(doc.years)
    s = rng.choice(doc.segments)
    value = round_half_up(100 * Fraction(doc.segment_revenue[y][s], doc.values[y]["revenue"]), 2)
    question = (f"What share of {doc.company}'s consolidated revenue in FY{y} came from its {s} segment, as a "
                "percentage rounded to two decimal places?")
    expr = f"100 * {doc.segment_revenue[y][s]} / {doc.values[y]['revenue']}"
    return question, value, {"percent": "points", "expression": expr}, [("read", "note-2"), ("read", "statements")]


def q_debt_due(doc: Filing, rng: random.Random) -> tuple[str, int, dict, list[tuple[str, str]]]:
    last = doc.years[-1]
    earliest = min(t.due for t in doc.tranches if t.name != doc.repaid)
    repaid_due = next(t.due for t in doc.tranches if t.name == doc.repaid)
    if rng.random() < 0.75:  # mostly a window that holds the repaid notes: the note then changes the answer
        horizon = rng.randint(max(earliest, repaid_due) - last, 10)
    else:
        horizon = rng.randint(earliest - last, min(earliest - last + 4, 10))
    due = [t for t in doc.tranches if t.due <= last + horizon and t.name != doc.repaid]
    value = sum(t.principal for t in due)
    question = (f"As of the date of this filing, how much principal of {doc.company}'s notes (in thousands) falls due "
                f"in FY{last + 1} through FY{last + horizon}? Take events after the year end into account.")
    expr = " + ".join(str(t.principal) for t in due)
    return question, value, {"expression": expr}, [("read", "note-3"), ("search", "repaid")]


class NoQuestion(ValueError):
    """This report cannot carry the question well (the source draws another report)."""


MIN_EPS = 0.05
"""EPS questions ask about a year whose EPS is at least this far from 0, so the constant answer 0
never passes (within the half-cent tolerance it would for a year near break-even)."""


def q_eps(doc: Filing, rng: random.Random) -> tuple[str, float, dict, list[tuple[str, str]]]:
    def eps(y: int) -> Fraction:
        return Fraction(doc.values[y]["net_income"], doc.diluted_shares[y] * doc.split)

    clear = [y for y in doc.years if abs(eps(y)) >= MIN_EPS]
    if not clear:
        raise NoQuestion(f"no year of filing {doc.seed} has an EPS at least {MIN_EPS} from 0")
    y = rng.choice(clear)
    ni, shares = doc.values[y]["net_income"], doc.diluted_shares[y]
    value = round_half_up(Fraction(ni, shares * doc.split), 2)
    question = (f"What were {doc.company}'s diluted earnings per share for FY{y} in US dollars, restated for every "
                "share event disclosed in the filing, rounded to two decimal places?")
    expr = f"{ni} / ({shares} * {doc.split})"
    return question, value, {"expression": expr}, [("read", "note-4"), ("read", "note-6"), ("read", "statements")]


UNDER_HALF_CENT = 0.005 * (1 - 1e-6)
"""The tolerance of a value asked for rounded to two decimals, around the rounded gold: under
half a unit of the second decimal, so that no one number (``0.285``) matches two neighbouring
rounded values (``0.28`` and ``0.29``) and a constant cannot cover twice the golds."""

QUESTIONS = {
    "adjusted-margin": ("Adjusted operating margin", q_adjusted_margin, UNDER_HALF_CENT),
    "segment-share": ("Segment share of continuing revenue", q_segment_share, UNDER_HALF_CENT),
    "debt-due": ("Debt falling due, after subsequent events", q_debt_due, 0.0),
    "eps": ("Diluted EPS after a stock split", q_eps, UNDER_HALF_CENT),
}
"""Question kind -> (title, generator, absolute tolerance). Rounded values are within less than
half a unit of the second decimal place; sums of figures copied from the filing are exact."""

TOOLS = ('Tools (reply with exactly one JSON object per turn): {"tool": "toc"}, '
         '{"tool": "read", "section": ID, "start": LINE, "lines": N} (at most 60 lines), '
         '{"tool": "search", "query": TEXT} (lines containing it), {"tool": "calc", "expression": "arithmetic"}, '
         '{"tool": "answer", "value": NUMBER} (your one final answer; it ends the episode).')


def prompt(doc: Filing, question: str) -> str:
    return (f"You are analysing the annual report of {doc.company} (about {doc.tokens:,} tokens, too long to show at "
            f"once). Sections:\n{doc.toc()}\n\nQuestion: {question}\n\n{TOOLS}")


def line_cites(doc: Filing, query: str, limit: int = 12) -> list[str]:
    """``section:line: text`` for the lines containing ``query`` (case-insensitive), in order."""
    q = query.casefold()
    hits = []
    for s in doc.sections:
        for i, line in enumerate(s.lines, start=1):
            if q in line.casefold():
                hits.append(f"{s.id}:{i}: {line.strip()[:200]}")
                if len(hits) >= limit:
                    return hits
    return hits


__all__ = ["Filing", "LEVELS", "QUESTIONS", "TOOLS", "Tranche", "filing", "line_cites", "prompt"]
