"""The examples in the review modules' docstrings are tests too."""
from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["controlplane.review.stats", "controlplane.review.sampling", "controlplane.review.selectors",
                                  "trainer.verifiers.judge", "trainer.verifiers.judges"])
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0
