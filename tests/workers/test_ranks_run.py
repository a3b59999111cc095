"""A CPU run of two ranks through a real Celery worker: the drive task launches torchrun, rank 0
drives the run and leads, rank 1 follows (trainer/ranks.py), and the run completes with its
steps, checkpoints and a ``ranks`` event; a run with more ranks than the cpu pools hold is refused
at submission."""
from __future__ import annotations

import pytest
from django.db import connection

from controlplane.common.errors import InvalidInput
from controlplane.runs.models import Checkpoint, MetricPoint, Run, RunEvent
from controlplane.runs.services import run_create, run_start
from controlplane.scheduling.models import ResourcePool
from tests import factories
from tests.services import celery_workers, require_postgres

STEPS = 4


@pytest.mark.slow
def test_a_two_rank_cpu_run_completes_through_a_celery_worker(transactional_db, tmp_path):
    require_postgres()
    from trainer.models.tiny import build_tiny
    from tests.services import wait_for

    _, actor = factories.synced_team(["builtin-addition"], "member")
    model = str(build_tiny(tmp_path / "model", layers=2))
    payload = factories.run_payload(["builtin-addition"], team="acme", base_model=model, budget={"steps": STEPS},
                                    config={"rollout": {"prompts_per_step": 4, "n": 4, "max_new_tokens": 4},
                                            "checkpoint": {"every_steps": 2}, "parallel": {"ranks": 2}})
    with pytest.raises(InvalidInput) as refused:  # one cpu slot by default: two ranks could never run
        run_create(actor=actor, data=payload)
    assert any(e.path == "config.parallel.ranks" and "cpu pools hold 1" in e.message for e in refused.value.errors)
    ResourcePool.objects.create(name="cpu", kind="cpu", capacity=2)
    run = run_create(actor=actor, data=payload)
    with celery_workers(tmp_path, {"ranks": "control,rollout"}, concurrency=2):
        run_start(actor=actor, run=run)
        final = wait_for(lambda: Run.objects.filter(pk=run.pk, state__in=["completed", "failed"]).first(), 300,
                         "the two-rank run to end", logs=[tmp_path / "ranks.log"])
    assert final.state == "completed", final.error
    event = RunEvent.objects.get(run=run, kind="ranks")
    assert event.data["world"] == 2 and event.data["backend"] == "gloo"
    steps = list(MetricPoint.objects.filter(run=run, key="stage/step_s").order_by("step").values_list("step", flat=True))
    assert steps == list(range(1, STEPS + 1))
    assert Checkpoint.objects.filter(run=run, step=STEPS).exists()
    assert MetricPoint.objects.filter(run=run, key="batch/groups_generated", value=4.0).count() == STEPS
