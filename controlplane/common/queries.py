"""Small pieces of query building the selectors share."""
from __future__ import annotations

from typing import Any

from django.db.models import QuerySet


def filter_given(qs: QuerySet, **lookups: Any) -> QuerySet:
    """``qs`` filtered by each lookup whose value was given (neither ``None`` nor ``""``; ``0``
    counts), one ``filter()`` a lookup in the order named, as a chain of ``if value:`` filters
    would (the same SQL): the list filters of an API or page, where a blank parameter means "any"."""
    for lookup, value in lookups.items():
        if value is not None and value != "":
            qs = qs.filter(**{lookup: value})
    return qs
