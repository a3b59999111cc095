"""End to end with real services: PostgreSQL, Redis and Celery workers started by the test.

A run of the tiny model on three built-in domains and the sandboxed HumanEval domain is started
through the service layer; the scheduler tick admits it, the driver trains it with sandbox
verification fanned out to the verify queue, and it completes with every step's metrics.
"""
from __future__ import annotations


import pytest

from controlplane.runs.models import MetricPoint, Run
from controlplane.runs.services import run_create, run_start
from tests import factories
from tests.services import celery_workers, require, require_postgres, wait_for

DOMAINS = ["builtin-addition", "builtin-reversal", "builtin-parity", "code-humaneval"]



@pytest.fixture
def workers(transactional_db, tmp_path):
    require_postgres()
    from workers.sandbox import bwrap

    require(bwrap.available(), "bubblewrap (apt-get install bubblewrap) for the sandboxed code domain")
    with celery_workers(tmp_path, {"driver": "control,rollout", "verify": "verify"}, prefix="e2e-", concurrency=2) as var:
        yield var


@pytest.mark.slow
def test_tiny_model_run_completes_through_celery(workers, tmp_path):
    from trainer.models.tiny import build_tiny

    model = str(build_tiny(tmp_path / "model", layers=2))
    _, actor = factories.synced_team(DOMAINS, "member")
    run = run_create(actor=actor, data=factories.run_payload(
        DOMAINS, team="acme", base_model=model, budget={"steps": 3},
        config={"rollout": {"prompts_per_step": 8, "n": 2, "max_new_tokens": 8}, "checkpoint": {"every_steps": 2}}))
    run_start(actor=actor, run=run)  # the tick that admits it is sent after this commit
    final = wait_for(lambda: Run.objects.filter(pk=run.pk, state__in=["completed", "failed"]).first(), 600, "the run to end",
                     logs=[workers / "driver.log", workers / "verify.log"])
    assert final.state == "completed", final.error
    steps = sorted(set(MetricPoint.objects.filter(run=run, key="stage/step_s").values_list("step", flat=True)))
    assert steps == [1, 2, 3]
    code_outcomes = MetricPoint.objects.filter(run=run, domain="code-humaneval", key__startswith="outcome/code-humaneval/")
    assert code_outcomes.exists(), "the code domain was never sampled or verified"
    assert "code-humaneval" in set(MetricPoint.objects.filter(run=run, key__startswith="reward/").values_list("domain", flat=True)) \
        or code_outcomes.filter(key="outcome/code-humaneval/sandbox_error").exists()
    for step in steps:
        per_domain = MetricPoint.objects.filter(run=run, step=step, key__startswith="outcome/").exclude(domain="")
        assert per_domain.exists()
