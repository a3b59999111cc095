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
        assert spec.verifier_spec["stages"][0]["params"] == {"literal": True}  # as verify_exact, in process
        assert spec.verifier_spec["stages"][0]["timeout_s"] == 1.0
        import random

        task = spec.source.sample(random.Random(0))
        assert task.domain == slug
        assert isinstance(spec.verify(str(task.answer), task), Verification)


def test_the_platform_stage_and_the_in_process_check_agree_on_hostile_answers():
    """The built-ins' own check (``verify_exact``) and their cascade (the ``exact`` stage, which the
    trainer's inline path and the platform both run): both are literal, so case, Unicode
    compatibility forms (fullwidth, ligatures, superscripts), inner spaces and hedges fail in both."""
    from trainer.tasks.base import Task
    from trainer.catalogue.builtin import EXACT_MATCH_SPEC, verify_exact
    from trainer.verifiers.cascade import run_cascade

    cases = [("dba", "abd", c) for c in ("abd", " abd\n", "ABD", "ａｂｄ", "ᵃᵇᵈ", "a\u00adbd", "a b d", "abd or adb",
                                          "abd\nadb", "", "dba")]
    cases += [("ss", "ss", "ß"), ("if", "fi", "ﬁ"), ("ffi", "ffi", "ﬃ"), ("ts", "st", "ﬆ")]
    for text, gold, completion in cases:
        task = Task(domain="builtin-sorting", id=text, prompt=f"sort({text})=", answer=gold)
        inline = verify_exact(completion, task).outcome.value
        platform = run_cascade(EXACT_MATCH_SPEC, completion, task, isolation="inline").outcome.value
        assert inline == platform, (completion, inline, platform)
        assert (inline == "pass") == (completion.strip() == gold), completion
