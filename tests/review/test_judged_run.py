"""A run on a judged domain, end to end through Celery: the driver sends the domain's batches to
the judge queue, the similarity judge grades real completions of a tiny model, and every
recorded trajectory carries the judge version and the verifier version; the run page warns that
the judge is not calibrated. The run is the demo's judged run."""
from __future__ import annotations


import pytest
from django.test import Client

from controlplane.review import queues
from controlplane.review.sampling import MIN_PER_CLASS
from controlplane.runs.models import MetricPoint, Run, RunEvent, Trajectory
from tests import factories
from tests.services import celery_workers, require_postgres, wait_for



@pytest.fixture
def workers(transactional_db, tmp_path):
    require_postgres()
    with celery_workers(tmp_path, {"driver": "control,rollout", "judge": "judge"}, prefix="judged-") as var:
        yield var


@pytest.mark.slow
@pytest.mark.services
def test_the_demos_judged_run_records_judge_versions_and_gives_both_classes_to_review(workers, tmp_path):
    """The demo's judged run (run 2 of ``make demo``): from the demo's tiny model, SFT'd on the
    domain's reference sentences, its sampled answers are ones the judge passes and ones it fails,
    so a review queue of them has something to calibrate."""
    from controlplane.web.management.commands.demo_setup import JUDGED_DOMAIN, judged_run
    from trainer.models.tiny import build_tiny

    team = factories.team("demo")
    admin = factories.member(team, "admin", "demo-admin")
    run = judged_run(user=admin, team=team, base_model=str(build_tiny(tmp_path / "tiny-demo")))
    final = wait_for(lambda: Run.objects.filter(pk=run.pk, state__in=["completed", "failed"]).first(), 900, "the run to end",
                     logs=[workers / "driver.log", workers / "judge.log"])
    assert final.state == "completed", final.error
    assert "temper.judge.batch" in (workers / "judge.log").read_text()
    assert RunEvent.objects.filter(run=run, kind="sft").exists()
    rows = list(Trajectory.objects.filter(run=run))
    assert rows
    from controlplane.review.models import Judge

    config = Judge.objects.get(slug="demo-similarity").active
    for t in rows:
        assert t.verifier_version == 1
        if t.outcome == "judge_error":
            assert t.reward is None
        else:
            assert t.judge_version == config.pk and t.outcome in ("pass", "fail")
            assert 0.0 <= t.details["details"]["judge_score"] <= 1.0
    assert MetricPoint.objects.filter(run=run, key__startswith=f"outcome/{JUDGED_DOMAIN}/").exists()
    c = Client()
    c.force_login(admin)
    assert any("not calibrated" in w for w in c.get(f"/api/runs/{run.pk}").json()["warnings"])

    scores = [t.details["details"]["judge_score"] for t in rows if t.outcome in ("pass", "fail")]
    passed = sum(s >= 0.5 for s in scores)
    print(f"judged run: {len(scores)} judged answers, {passed} passed")
    assert 0 < passed < len(scores)  # the judge really graded them, both ways
    # Both classes are there to review: the run holds at least a queue's minimum of each, and a
    # uniform queue of it holds them (drawn, or a class topped up to the minimum and reweighted:
    # whether a draw of 20 from this run's answers needed that is chance, about even odds).
    assert min(passed, len(scores) - passed) >= MIN_PER_CLASS
    queue = queues.queue_create(actor=factories.actor(admin), team=team,
                                  data={"domain": JUDGED_DOMAIN, "judge": "demo-similarity", "name": "first", "size": 20})
    items = list(queue.items.all())
    for judged_pass in (True, False):
        assert sum((i.judge_score >= 0.5) == judged_pass for i in items) >= MIN_PER_CLASS, queue.params
