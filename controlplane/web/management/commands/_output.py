"""Kept for ``domains.py`` only, until it imports ``table`` from controlplane.common.cli."""
from controlplane.common.cli import table  # noqa: F401
