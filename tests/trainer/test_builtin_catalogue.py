"""The built-in domains as the control plane sees them through the catalogue."""
from __future__ import annotations

from trainer import catalogue
from trainer.outcomes import Verification


def test_builtin_domains_are_registered():
    domains = catalogue.all_domains()
    expected = {"builtin-addition": "math", "builtin-reversal": "text", "builtin-parity": "reasoning",
                "builtin-sorting": "reasoning"}
    for slug, kind in expected.items():
        spec = domains[slug]
        assert spec.kind == kind and spec.family == "builtin"
        assert spec.verifier_spec["stages"][0]["params"] == {}
        assert spec.verifier_spec["stages"][0]["timeout_s"] == 1.0
        import random

        task = spec.source.sample(random.Random(0))
        assert task.domain == slug
        assert isinstance(spec.verify(str(task.answer), task), Verification)
