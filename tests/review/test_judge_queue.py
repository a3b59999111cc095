"""A real Celery worker on the judge queue: judged verification batches routed there by the
driver's fan-out, and shadow re-scoring of a proposed version, against PostgreSQL and Redis."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from controlplane import dispatch
from controlplane.review import queues, services
from controlplane.review.models import JudgeConfig, ReviewItem, ReviewQueue, ShadowScore
from tests import factories
from tests.review.conftest import SIM_VERIFIER, judged_samples, record_judged_run
from tests.services import celery_workers, require_postgres, wait_for
from workers.verify import make_verify_batch


@pytest.fixture
def judge_worker(transactional_db, tmp_path):
    require_postgres()
    with celery_workers(tmp_path, {"judge": "judge"}) as var:
        yield var



@pytest.mark.slow
@pytest.mark.services
def test_judged_batches_and_shadow_scoring_run_on_the_judge_queue(judge_worker):
    team = factories.team("acme")
    admin_user = factories.member(team, "admin", "acme-admin")
    reviewer = factories.member(team, "reviewer", "acme-reviewer")
    admin = factories.actor(admin_user)
    judge = services.judge_create(actor=admin, data={"team": "acme", "slug": "sim", "title": "Similarity", "kind": "similarity",
                                                     "score_format": "binary", "params": {"similarity_cut": 0.75, "max_concurrent": 2}})
    domain = factories.domain("capitals", kind="text", verifier=SIM_VERIFIER)

    sent = []

    def send(name, args):
        sent.append(name)
        return dispatch.producer().send_task(name, args=args, queue=dispatch.TASK_QUEUES[name])

    verify, gatherer = make_verify_batch(cascades={"capitals": SIM_VERIFIER}, versions={"capitals": 1},
                                         timeouts={"capitals": 60.0}, send=send, deadline_s=240)
    rows = judged_samples("capitals")[:6]
    results = verify([(completion, task) for task, completion, _ in rows])
    assert set(sent) == {"temper.judge.batch"}
    assert gatherer.stats["lost_items"] == 0
    assert {v.outcome.value for v in results} <= {"pass", "fail"} and "pass" in {v.outcome.value for v in results}
    assert all(v.details["judge_config_id"] == judge.active_id for v in results)

    # labelled items of v1, then v2 re-scored in shadow by the worker
    record_judged_run(team=team, domain=domain, by=admin_user)
    queue = queues.queue_create(actor=admin, team=team, data={"domain": "capitals", "judge": "sim", "name": "q", "size": 5})
    assert queue.state == "sampling" and not queue.items.exists()  # the request's part: saved, not drawn
    wait_for(lambda: ReviewQueue.objects.get(pk=queue.pk).state != "sampling", 240, "the judge worker to sample the queue")
    queue.refresh_from_db()
    assert queue.state == "ready" and queue.sampling["stage"] == "done" and queue.population == 45
    c = Client()
    c.force_login(reviewer)
    for item in ReviewItem.objects.filter(queue=queue):
        assert c.post(f"/api/review/queues/{queue.id}/next").status_code == 200
        assert c.post(f"/api/review/items/{item.id}/label", json.dumps({"value": 1}), content_type="application/json").status_code == 201
    v2 = services.judge_version_create(actor=admin, judge=judge, changes={"params": {"similarity_cut": 0.9}})
    assert services.judge_shadow_start(actor=admin, config=v2) == queue.items.count()  # 5, topped up to both classes
    wait_for(lambda: ShadowScore.objects.filter(judge_config=v2).count() == queue.items.count(), 240, "shadow scores of v2")
    assert ShadowScore.objects.filter(judge_config=v2, raw__isnull=True).count() == 0
    assert JudgeConfig.objects.get(pk=v2.pk).version == 2
