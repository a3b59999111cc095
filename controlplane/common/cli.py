"""Readable terminal output for the management commands."""
from __future__ import annotations

from typing import Any, Iterable, Sequence


def table(rows: Iterable[Sequence[Any]], headers: Sequence[str]) -> str:
    rows = [["" if v is None else str(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(v)) for w, v in zip(widths, row)]
    line = "  ".join(h.upper().ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in rows]
    if not rows:
        out.append("(none)")
    return "\n".join(out)
