"""Figures in words, one way everywhere: the pages (the ``duration`` template filter) and the
reasons the services write (a run waiting on an audit, ...)."""
from __future__ import annotations


def duration(seconds) -> str:
    """Seconds as ``42 s``, ``12.5 min``, ``3.2 h`` or ``4.1 d``.

    >>> duration(42), duration(750), duration(11520), duration(354240), duration(None)
    ('42 s', '12.5 min', '3.2 h', '4.1 d', '–')
    """
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        return "–"
    if s < 120:
        return f"{s:.3g} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"
