"""Every registered domain: deterministic tasks, a reference answer passes, a wrong one does not."""
from __future__ import annotations

import json
import random

import pytest

from trainer.families.references import reference_completion, wrong_completion
from trainer.outcomes import Outcome
from trainer.catalogue import all_domains
from trainer.verifiers import validate_cascade

DOMAINS = all_domains()
# Level 0 and one harder level per domain; reasoning-gym's hardest levels take seconds per task
# (zebra_puzzles, sokoban), which would blow the folder's time budget.
TOP_LEVEL_TESTED = 3
NOT_PASSING = {Outcome.FAIL, Outcome.PARTIAL, Outcome.PARSE_ERROR}


def test_catalogue_has_at_least_110_domains():
    assert len(DOMAINS) >= 110
    families = {spec.family for spec in DOMAINS.values()}
    assert {"reasoning_gym", "humaneval", "math", "documents", "tool_use", "filings", "repos", "bfcl", "bfcl_multi", "cad", "textgames", "shell", "pkgs"} <= families


def test_every_reasoning_gym_generator_is_a_domain():
    from reasoning_gym.factory import DATASETS

    assert {f"rg-{name}" for name in DATASETS} <= set(DOMAINS)


@pytest.mark.parametrize("slug", sorted(DOMAINS))
def test_domain(slug, request):
    from tests.services import require_java, require_sandbox_libs

    spec = DOMAINS[slug]
    if spec.family == "textgames":
        require_java()
    if spec.family == "cad":
        require_sandbox_libs()
    verify = spec.verify
    if any(stage["type"] in ("code_tests", "repo_tests", "cad_mesh", "shell_state", "pkg_tests") for stage in spec.verifier_spec["stages"]):
        verify = spec.cascade(request.getfixturevalue("real_sandbox"))
    assert validate_cascade(spec.verifier_spec) == []
    json.dumps([spec.verifier_spec, spec.task_source_spec])  # plain JSON data
    assert spec.source.levels >= 1
    for level in sorted({0, min(spec.source.levels - 1, TOP_LEVEL_TESTED)}):
        task = spec.source.sample(random.Random(1000 + level), level)
        again = spec.source.sample(random.Random(1000 + level), level)
        assert (again.id, again.prompt, repr(again.answer)) == (task.id, task.prompt, repr(task.answer))
        assert task.domain == slug and task.prompt

        good = verify(reference_completion(spec, task), task)
        assert good.outcome is Outcome.PASS, (level, good.details)
        assert good.reward == 1.0

        bad = verify(wrong_completion(spec, task), task)
        assert bad.outcome in NOT_PASSING, (level, bad.details)
        assert bad.reward is not None and bad.reward < 1.0
