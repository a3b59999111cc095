"""What the management commands read and print: data files, ``FIELD=VALUE`` arguments, tables."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from django.core.management.base import CommandError

from controlplane.common import yaml_text


def read_data_file(path: str):
    """The data in a JSON (``.json``) or YAML file (JSON's values only: controlplane.common.yaml_text);
    CommandError when it is missing or unreadable."""
    p = Path(path)
    if not p.is_file():
        raise CommandError(f"{path}: no such file")
    try:
        return json.loads(p.read_text()) if p.suffix == ".json" else yaml_text.loads(p.read_text())
    except ValueError as exc:  # YamlTextError is one
        raise CommandError(f"{path}: not valid {'JSON' if p.suffix == '.json' else 'YAML'}: {exc}") from None


def parse_value(raw: str):
    """A value from the command line: JSON when it parses (``5``, ``true``, ``{"a": 1}``), else the text.

    >>> parse_value("0.5"), parse_value('{"a": 1}'), parse_value("hello")
    (0.5, {'a': 1}, 'hello')
    """
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def assignments(items: Iterable[str], *, parse: Callable[[str], bool] = lambda key: True) -> dict[str, Any]:
    """``FIELD=VALUE`` arguments as a dict; a value goes through :func:`parse_value` when
    ``parse(field)``, else it stays text.

    >>> assignments(["weight=2", "name=7"], parse=lambda key: key != "name")
    {'weight': 2, 'name': '7'}
    """
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise CommandError(f"{item!r}: expected FIELD=VALUE")
        out[key] = parse_value(raw) if parse(key) else raw
    return out


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
