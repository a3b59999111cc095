"""Cost in money: usage figures times prices. Pure: no database, no settings, no side effects at
import (the plan before a run and the usage reports both call :func:`cost`).

The prices are the platform admin's, one per resource pool (``ResourcePool.price``,
docs/orchestration.md, "Cost in money"), in the installation's one currency
(``TEMPER_CURRENCY``). Each usage figure is priced by one kind of pool:

=================  ===========  ======================================================
figure             pool kind    price unit
=================  ===========  ======================================================
``gpu_s``          train_gpu    per GPU-hour (a run's GPUs are its train_gpu slots)
``cpu_s``          cpu          per CPU-hour (the driver's CPU seconds)
``sandbox_s``      sandbox      per sandbox-hour (sandbox verification stages' time)
``judge_tokens``   judge        per million judge tokens (as the endpoint reports them)
=================  ===========  ======================================================

Several pools of one kind: the highest of their prices (a run's placement names a worker, not a
pool, so a cost is never under-stated); a kind with an unpriced pool, or no pool, has no price.
A figure of 0 costs 0 whatever its price; a figure above 0 without a price has an unknown cost
(None, never 0), and so has the total.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Context, Decimal, DivisionByZero, InvalidOperation, Overflow, localcontext
from typing import Callable, Iterable, Mapping, TypeVar

PARTS: tuple[tuple[str, str, str, int], ...] = (
    ("gpu", "gpu_s", "train_gpu", 3600),
    ("cpu", "cpu_s", "cpu", 3600),
    ("sandbox", "sandbox_s", "sandbox", 3600),
    ("judge", "judge_tokens", "judge", 1_000_000),
)
"""Each part of a cost: (part, usage figure, pool kind whose price it takes, figure units per
priced unit: seconds per hour, tokens per million)."""

CENT_PLACES = Decimal("0.000001")
"""A cost shown is rounded to this (half to even); sums are of the exact amounts, rounded once."""


MONEY_CONTEXT = Context(prec=60, rounding=ROUND_HALF_EVEN, traps=[InvalidOperation, DivisionByZero, Overflow])
"""The decimal context every amount is computed in: Python's decimal context is per thread and
libraries change it (reasoning-gym's decimal arithmetic sets the precision to its task's, in the
processes that generate tasks: the driver, the audit), so money never uses the ambient one."""

_F = TypeVar("_F", bound=Callable)


def exact(fn: _F) -> _F:
    """Run ``fn`` in :data:`MONEY_CONTEXT`, whatever the thread's decimal context is."""
    @functools.wraps(fn)
    def in_money_context(*args, **kwargs):
        with localcontext(MONEY_CONTEXT):
            return fn(*args, **kwargs)
    return in_money_context  # type: ignore[return-value]


@dataclass(frozen=True)
class Prices:
    """One price per part (None: not set), in ``currency``."""

    gpu: Decimal | None = None
    """Per GPU-hour."""
    cpu: Decimal | None = None
    """Per CPU-hour."""
    sandbox: Decimal | None = None
    """Per sandbox-hour."""
    judge: Decimal | None = None
    """Per million judge tokens."""
    currency: str = "USD"
    """ISO 4217 code of every price (and so of every cost)."""

    def as_dict(self) -> dict[str, str | None]:
        """JSON-safe: each price as a decimal string (None where unset), and the currency."""
        return {**{part: amount_text(getattr(self, part)) for part, *_ in PARTS}, "currency": self.currency}


def amount_text(amount: Decimal | None) -> str | None:
    """A price or a budget as the shortest exact decimal text, without an exponent (None stays None).

    >>> amount_text(Decimal("2.400000000")), amount_text(Decimal("100.000")), amount_text(None)
    ('2.4', '100', None)
    """
    return None if amount is None else f"{amount.normalize():f}"


@exact
def prices_from_pools(pools: Iterable[tuple[str, Decimal | None]], currency: str = "USD") -> Prices:
    """The :class:`Prices` of ``(kind, price)`` pairs, one per pool: per kind the highest price,
    None when no pool of the kind exists or one of them is unpriced.

    >>> prices_from_pools([("train_gpu", Decimal("2.50")), ("train_gpu", Decimal("3")), ("cpu", None),
    ...                    ("cpu", Decimal("0.1")), ("sandbox", Decimal("0.2"))])
    Prices(gpu=Decimal('3'), cpu=None, sandbox=Decimal('0.2'), judge=None, currency='USD')
    """
    by_kind: dict[str, list[Decimal | None]] = {}
    for kind, price in pools:
        by_kind.setdefault(kind, []).append(price)
    found = {}
    for part, _, kind, _ in PARTS:
        listed = by_kind.get(kind) or [None]
        found[part] = None if any(p is None for p in listed) else max(listed)
    return Prices(**found, currency=currency)


def _amount(value: float | int | Decimal) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(repr(value) if isinstance(value, float) else value)


@exact
def cost(usage: Mapping[str, float | int | Decimal], prices: Prices, *, rounded: bool = True) -> dict[str, Decimal | None]:
    """Each part's cost (``gpu``, ``cpu``, ``sandbox``, ``judge``) and the ``total``, as Decimals
    rounded to :data:`CENT_PLACES` (``rounded=False``: exact, for sums that round once at the
    end): the figure (``gpu_s``, ``cpu_s``, ``sandbox_s``, ``judge_tokens``; a missing one is 0,
    one given as None is not known) over its unit, times its price. A part with usage and no
    price, or with a figure not known, is None, and then so is the total.

    >>> p = Prices(gpu=Decimal("2.40"), cpu=Decimal("0.036"), sandbox=Decimal("0.72"), judge=Decimal("5"))
    >>> c = cost({"gpu_s": 1800, "cpu_s": 100.0, "sandbox_s": 5.0, "judge_tokens": 2000}, p)
    >>> c["gpu"], c["cpu"], c["sandbox"], c["judge"], c["total"]
    (Decimal('1.200000'), Decimal('0.001000'), Decimal('0.001000'), Decimal('0.010000'), Decimal('1.212000'))
    >>> cost({"gpu_s": 0, "cpu_s": 36.0}, Prices(cpu=Decimal("1")))
    {'gpu': Decimal('0.000000'), 'cpu': Decimal('0.010000'), 'sandbox': Decimal('0.000000'), 'judge': Decimal('0.000000'), 'total': Decimal('0.010000')}
    >>> cost({"gpu_s": 3600}, Prices())["total"] is None
    True
    >>> cost({"gpu_s": None, "cpu_s": 3600}, Prices(gpu=Decimal(2), cpu=Decimal(1)))["gpu"] is None
    True
    """
    out: dict[str, Decimal | None] = {}
    for part, figure, _, unit in PARTS:
        if figure in usage and usage[figure] is None:  # not known (an estimate that could not measure it)
            out[part] = None
            continue
        amount = _amount(usage.get(figure) or 0)
        price = getattr(prices, part)
        if amount == 0:
            out[part] = Decimal(0)
        elif price is None:
            out[part] = None
        else:
            out[part] = amount * price / unit
        if rounded and out[part] is not None:
            out[part] = round_amount(out[part])
    parts = [out[part] for part, *_ in PARTS]
    out["total"] = None if any(v is None for v in parts) else sum(parts, Decimal(0))
    return out


@exact
def round_amount(amount: Decimal) -> Decimal:
    """``amount`` to :data:`CENT_PLACES`, half to even.

    >>> round_amount(Decimal("0.0000025")), round_amount(Decimal("2"))
    (Decimal('0.000002'), Decimal('2.000000'))
    """
    return amount.quantize(CENT_PLACES, rounding=ROUND_HALF_EVEN)


@exact
def add_costs(costs: Iterable[Mapping[str, Decimal | None]]) -> dict[str, Decimal | None]:
    """The sum of several :func:`cost` results, part by part (unknown where any is unknown).

    >>> add_costs([{"gpu": Decimal("1"), "cpu": None, "sandbox": Decimal(0), "judge": Decimal(0), "total": None},
    ...            {"gpu": Decimal("2"), "cpu": Decimal(0), "sandbox": Decimal(0), "judge": Decimal(0), "total": Decimal("2")}])
    {'gpu': Decimal('3'), 'cpu': None, 'sandbox': Decimal('0'), 'judge': Decimal('0'), 'total': None}
    """
    out: dict[str, Decimal | None] = {k: Decimal(0) for k in (*(p for p, *_ in PARTS), "total")}
    for c in costs:
        for k in out:
            out[k] = None if out[k] is None or c[k] is None else out[k] + c[k]
    return out


@exact
def as_json(c: Mapping[str, Decimal | None]) -> dict[str, str | None]:
    """A cost with each amount rounded (:func:`round_amount`) as a decimal string (exact in
    JSON), None where unknown.

    >>> as_json({"gpu": Decimal("1.2"), "total": None})
    {'gpu': '1.200000', 'total': None}
    """
    return {k: None if v is None else str(round_amount(v)) for k, v in c.items()}


MAX_AMOUNT = Decimal("999999999")
_AMOUNT_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(nan|snan|inf|infinity)", re.ASCII | re.IGNORECASE)
"""A decimal as text: ASCII digits (``Decimal`` would also take ``1_000`` and other scripts' digits)."""
"""A price or a money budget at most (the database keeps 9 digits before the point, 9 after)."""


@exact
def parse_amount(value: object, *, positive: bool = False) -> Decimal:
    """A price or a budget from a JSON number or a decimal string, exactly as written (a number
    through its shortest text: 0.1 is Decimal('0.1')); ValueError saying what is wrong.

    >>> parse_amount("2.40"), parse_amount(0.1), parse_amount(3)
    (Decimal('2.40'), Decimal('0.1'), Decimal('3'))
    >>> parse_amount("NaN")
    Traceback (most recent call last):
    ...
    ValueError: must be a finite amount of money, got 'NaN'
    >>> parse_amount(0, positive=True)
    Traceback (most recent call last):
    ...
    ValueError: must be above 0
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise ValueError(f"must be a number or a decimal string, got {type(value).__name__}")
    if isinstance(value, str) and not _AMOUNT_TEXT.fullmatch(value.strip()):
        raise ValueError(f"must be a decimal number, got {value[:40]!r}")
    try:
        amount = Decimal(repr(value) if isinstance(value, float) else value.strip() if isinstance(value, str) else value)
    except ArithmeticError:
        raise ValueError(f"must be a decimal number, got {str(value)[:40]!r}") from None
    if not amount.is_finite():
        raise ValueError(f"must be a finite amount of money, got {str(value)[:40]!r}")
    amount += 0  # -0 is 0
    if amount < 0 or (positive and amount == 0):
        raise ValueError("must be above 0" if positive else "must be 0 or more")
    if amount > MAX_AMOUNT:
        raise ValueError(f"must be at most {MAX_AMOUNT}")
    if amount != amount.quantize(Decimal("1e-9")):
        raise ValueError("may have 9 decimal places at most")
    return amount
