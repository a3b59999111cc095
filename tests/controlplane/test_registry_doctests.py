"""The registry's docstring examples (kept apart from tests/test_doctests.py to merge cleanly)."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["trainer.holdout", "trainer.evaluation", "controlplane.registry.stats", "controlplane.registry.services"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0, f"{result.failed} doctest(s) failed in {name}"
