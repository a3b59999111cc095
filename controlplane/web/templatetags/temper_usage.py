"""Template filters for usage figures and their cost."""
from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django import template

from controlplane.common.words import duration

register = template.Library()
register.filter("duration", duration)


@register.filter
def money(amount: str | Decimal | None) -> str:
    """A cost (a decimal string of the usage API, None when unknown) for a page: cents, or below
    a cent as many places as it takes (to the API's 6), and "unknown" for None, never 0.

    >>> money("1234.5678"), money("0.100000"), money("0.001200"), money("0.000000"), money(None)
    ('1234.57', '0.10', '0.0012', '0', 'unknown')
    """
    if amount is None or amount == "":
        return "unknown"
    try:
        value = Decimal(amount)
    except (InvalidOperation, TypeError):
        return "unknown"
    if value == 0:
        return "0"
    if abs(value) >= 1 or -value.normalize().as_tuple().exponent <= 2:
        return f"{value:.2f}"
    return f"{value.normalize():f}"
