"""Impossible canaries inside the job (trainer/integrity.py): planted at the run's share, never
trained on, left out of the domain's reward, counted in hack/*, and kept as evidence when they pass."""
from __future__ import annotations

import pytest

from trainer.batch import rewards_of
from trainer.job import Job
from trainer.outcomes import Outcome, Verification


def record(into: list):
    def cb(step, metrics, samples):
        into.append((step, dict(metrics), samples))
    return cb


def gaming(items):
    """Every canary passes (what a policy that special-cases the shown example earns); real tasks alternate."""
    return [Verification.passed() if task.meta.get("canary") or i % 2 else Verification.failed()
            for i, (_, task) in enumerate(items)]


@pytest.fixture
def code_config(base_config):
    return {**base_config, "domains": {"code-humaneval": 1.0}, "integrity": {"canary_fraction": 0.5},
            "rollout": {**base_config["rollout"], "prompts_per_step": 8, "n": 2},
            "tokenizer": {"max_prompt_tokens": 64}}


def test_canaries_are_planted_masked_counted_and_kept_as_evidence(code_config):
    seen = []
    job = Job(code_config, callbacks=[record(seen)], verify_batch=gaming, samples_per_step=2)
    metrics = job.step()
    generated = job.last_generated
    canaries = [t for t in generated if t.task.meta.get("canary")]
    real = [t for t in generated if not t.task.meta.get("canary")]
    assert canaries and real  # at a share of 0.5 of 8 groups, both (seeded)
    assert all(t.task.id.endswith("~canary") and t.task.meta["canary"]["recipe"] == "oneoff" for t in canaries)
    # never trained on: not valid, not in what the update saw
    _, _, valid = rewards_of(generated)
    assert [bool(v) for v in valid] == [not t.task.meta.get("canary") for t in generated]
    assert not any(t.task.meta.get("canary") for t in job.last_trained)
    # counted apart: the domain's reward and pass rate are its real tasks'
    assert metrics["hack/canaries/code-humaneval"] == len(canaries)
    assert metrics["hack/canary_pass_rate/code-humaneval"] == 1.0
    assert metrics["reward/code-humaneval"] == pytest.approx(sum(t.verification.reward for t in real) / len(real))
    assert sum(v for k, v in metrics.items() if k.startswith("outcome/code-humaneval/")) == len(real)
    # every passing canary is among the step's samples (beyond samples_per_step), marked
    samples = seen[0][2]
    marked = [s for s in samples if "canary" in s]
    assert len(marked) == len(canaries) and len(samples) >= len(canaries)
    assert all(s["outcome"] == "pass" and s["canary"]["of"] + "~canary" == s["task_id"] for s in marked)


def test_an_honest_policy_shows_a_zero_canary_pass_rate_and_no_evidence(code_config):
    seen = []
    honest = lambda items: [Verification.failed() if task.meta.get("canary") else Verification.passed()  # noqa: E731
                            for _, task in items]
    job = Job(code_config, callbacks=[record(seen)], verify_batch=honest, samples_per_step=2)
    metrics = job.step()
    assert metrics["hack/canary_pass_rate/code-humaneval"] == 0.0 and metrics["hack/canaries/code-humaneval"] > 0
    assert metrics["pass_rate/code-humaneval"] == 1.0  # the impossible twins do not drag the real curve down
    assert not [s for s in seen[0][2] if "canary" in s and s["outcome"] == "pass"]


def test_no_canaries_where_no_recipe_applies_or_the_share_is_zero(base_config):
    job = Job({**base_config, "integrity": {"canary_fraction": 0.5}}, verify_batch=gaming)
    metrics = job.step()  # builtin-addition: an exact answer has no impossible twin
    assert not any(k.startswith("hack/") for k in metrics)
    job = Job({**base_config, "domains": {"code-humaneval": 1.0}, "integrity": {"canary_fraction": 0.0},
               "tokenizer": {"max_prompt_tokens": 64}}, verify_batch=gaming)
    job.step()
    assert not any(t.task.meta.get("canary") for t in job.last_generated)


def test_a_share_of_the_passes_is_regraded_and_disagreements_are_counted_and_kept(code_config):
    seen, asked = [], []

    def fitted(items):
        """Passes every task's own tests and fails every stricter grading (a policy fit to the tests)."""
        asked.append([task for _, task in items])
        return [Verification.failed() if task.meta.get("regrade") else Verification.passed() for _, task in items]

    config = {**code_config, "integrity": {"canary_fraction": 0.0, "regrade_fraction": 1.0}}
    job = Job(config, callbacks=[record(seen)], verify_batch=fitted, samples_per_step=2)
    metrics = job.step()
    regraded = [task for batch in asked for task in batch if task.meta.get("regrade")]
    passes = [t for t in job.last_generated if t.verification.outcome is Outcome.PASS]
    assert len(regraded) == len(passes) == metrics["hack/regraded/code-humaneval"]  # a share of 1.0: every pass
    assert all(task.meta["regrade"]["variants"] > 0 and "_temper_agrees" in task.answer["tests"] for task in regraded)
    assert metrics["hack/regrade_disagreement/code-humaneval"] == 1.0
    assert metrics["reward/code-humaneval"] == 1.0  # the reward stays the first grading's
    kept = [s for s in seen[0][2] if "regrade" in s]
    assert len(kept) == len(passes) and all(s["regrade"]["outcome"] == "fail" for s in kept)


def test_an_honest_policy_agrees_with_its_regrades_and_no_share_regrades_none(code_config):
    config = {**code_config, "integrity": {"canary_fraction": 0.0, "regrade_fraction": 1.0}}
    job = Job(config, verify_batch=lambda items: [Verification.passed() for _ in items])
    metrics = job.step()
    assert metrics["hack/regraded/code-humaneval"] > 0 and metrics["hack/regrade_disagreement/code-humaneval"] == 0.0
    job = Job({**config, "integrity": {"canary_fraction": 0.0, "regrade_fraction": 0.0}},
              verify_batch=lambda items: [Verification.passed() for _ in items])
    assert not any(k.startswith("hack/regrade") for k in job.step())
