"""A run on a judged domain, end to end through Celery: the driver sends the domain's batches to
the judge queue, the similarity judge grades real completions of a tiny model, and every
recorded trajectory carries the judge version and the verifier version; the run page warns that
the judge is not calibrated."""
from __future__ import annotations


import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client

from controlplane.runs.models import MetricPoint, Run, Trajectory
from controlplane.runs.services import run_create, run_start
from tests import factories
from tests.services import require_postgres, require_redis, start_celery_worker, wait_for, worker_env



@pytest.fixture
def workers(transactional_db, tmp_path):
    require_postgres()
    redis_url = require_redis()
    env = worker_env(connection.settings_dict, redis_url, TEMPER_VAR_DIR=str(tmp_path / "var"))
    procs = [start_celery_worker(env, f"judged-{name}", queues, concurrency=1, log_path=tmp_path / f"{name}.log")
             for name, queues in (("driver", "control,rollout"), ("judge", "judge"))]
    yield tmp_path
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(timeout=60)


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
    try:
        final = wait_for(lambda: Run.objects.filter(pk=run.pk, state__in=["completed", "failed"]).first(), 600, "the run to end")
    except AssertionError:
        raise AssertionError("driver log:\n" + (workers / "driver.log").read_text()[-4000:]
                             + "\njudge log:\n" + (workers / "judge.log").read_text()[-3000:]) from None
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
