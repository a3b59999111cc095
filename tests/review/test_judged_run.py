"""A run on a judged domain, end to end through Celery: the driver sends the domain's batches to
the judge queue, the similarity judge grades real completions of a tiny model, and every
recorded trajectory carries the judge version and the verifier version; the run page warns that
the judge is not calibrated."""
from __future__ import annotations


import pytest
from django.core.management import call_command
from django.test import Client

from controlplane.runs.models import MetricPoint, Run, Trajectory
from controlplane.runs.services import run_create, run_start
from tests import factories
from tests.services import celery_workers, require_postgres, wait_for



@pytest.fixture
def workers(transactional_db, tmp_path):
    require_postgres()
    with celery_workers(tmp_path, {"driver": "control,rollout", "judge": "judge"}, prefix="judged-") as var:
        yield var


@pytest.mark.slow
@pytest.mark.services
def test_a_run_on_a_judged_domain_records_judge_versions(workers, tmp_path):
    from trainer.models.tiny import build_tiny

    team = factories.team("acme")
    admin = factories.member(team, "admin", "acme-admin")
    call_command("review", "--user", "acme-admin", "demo", "setup", "acme", verbosity=0)
    model = str(build_tiny(tmp_path / "model", layers=1))
    actor = factories.actor(admin)
    run = run_create(actor=actor, data=factories.run_payload(
        ["capitals-judged"], team="acme", base_model=model, budget={"steps": 2},
        config={"rollout": {"prompts_per_step": 4, "n": 2, "max_new_tokens": 8}}))
    run_start(actor=actor, run=run)
    final = wait_for(lambda: Run.objects.filter(pk=run.pk, state__in=["completed", "failed"]).first(), 600, "the run to end",
                     logs=[workers / "driver.log", workers / "judge.log"])
    assert final.state == "completed", final.error
    assert "temper.judge.batch" in (workers / "judge.log").read_text()
    rows = list(Trajectory.objects.filter(run=run))
    assert rows
    from controlplane.review.models import Judge

    config = Judge.objects.get(slug="acme-similarity").active
    for t in rows:
        assert t.verifier_version == 1
        if t.outcome == "judge_error":
            assert t.reward is None
        else:
            assert t.judge_version == config.pk and t.outcome in ("pass", "fail")
            assert 0.0 <= t.details["details"]["judge_score"] <= 1.0
    assert any(t.outcome in ("pass", "fail") for t in rows)  # the judge really graded them
    assert MetricPoint.objects.filter(run=run, key__startswith="outcome/capitals-judged/").exists()
    c = Client()
    c.force_login(admin)
    assert any("not calibrated" in w for w in c.get(f"/api/runs/{run.pk}").json()["warnings"])
