"""``module:attribute`` references, imported when first used.

The trainer's registries (verifier stage types, environments, the families' parts that the
general code calls) name what they hold this way, so that a registry in a general package can
name a family's code without importing it: the general packages import downward only, and
importing a registry imports no optional dependency.

>>> imported("json:dumps")([1])
'[1]'
"""
from __future__ import annotations

import importlib
from typing import Any


def imported(reference: str) -> Any:
    """The attribute a ``module:attribute`` reference names (its module imported now, once)."""
    module, _, attr = reference.partition(":")
    if not attr:
        raise ValueError(f"{reference!r} is not a 'module:attribute' reference")
    return getattr(importlib.import_module(module), attr)
