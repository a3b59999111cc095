"""Recovery with real processes: the worker running a run's driver is killed with SIGKILL; its
silent lease is noticed, another worker resumes the run from its last checkpoint and completes
it, and the metric steps are contiguous without duplicates."""
from __future__ import annotations

import os
import signal
import threading

import pytest
from django.db import connection

from controlplane.runs.models import Checkpoint, MetricPoint, Run, RunEvent
from controlplane.runs.services import run_create, run_start
from controlplane.scheduling.services import schedule_tick
from tests import factories
from tests.services import (celery_worker, require_postgres, require_redis, start_celery_worker, stop_processes, wait_for,
                            worker_env)

LEASE_S = 6
STEPS = 40
"""Long enough that the run cannot finish between the poll that sees step 3 and the kill."""


DRIVER_QUEUES = "control,rollout"
"""The queues of a worker that drives runs."""


@pytest.mark.slow
def test_sigkilled_driver_is_replaced_and_steps_stay_contiguous(transactional_db, tmp_path, settings):
    require_postgres()
    redis_url = require_redis()
    from trainer.models.tiny import build_tiny

    settings.TEMPER_DRIVER_LEASE_S = LEASE_S
    env = worker_env(connection.settings_dict, redis_url, TEMPER_VAR_DIR=str(tmp_path / "var"), TEMPER_DRIVER_LEASE_S=str(LEASE_S))
    _, actor = factories.synced_team(["builtin-addition"], "member")
    model = str(build_tiny(tmp_path / "model", layers=2))
    run = run_create(actor=actor, data=factories.run_payload(
        ["builtin-addition"], team="acme", base_model=model, budget={"steps": STEPS},
        config={"rollout": {"prompts_per_step": 4, "n": 4, "max_new_tokens": 4}, "checkpoint": {"every_steps": 2}}))

    first = start_celery_worker(env, "first", DRIVER_QUEUES, log_path=tmp_path / "first.log")
    try:
        run_start(actor=actor, run=run)
        wait_for(lambda: Checkpoint.objects.filter(run=run, step__gte=2).exists()
                 and Run.objects.get(pk=run.pk).current_step >= 3, 300, "a checkpoint and step 3")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the worker and its pool child, mid-run
        first.wait(timeout=30)
    killed_at = Run.objects.get(pk=run.pk).current_step
    with celery_worker(env, "second", DRIVER_QUEUES, log_path=tmp_path / "second.log"):
        # Beat's job in production: tick until the silent lease is noticed and the run handed over.
        wait_for(lambda: schedule_tick() and RunEvent.objects.filter(run=run, kind="recovery").exists(), 120, "recovery")
        final = wait_for(lambda: Run.objects.filter(pk=run.pk, state__in=["completed", "failed"]).first(), 300, "the run to end")
    assert final.state == "completed", final.error
    assert final.driver == "" and killed_at < STEPS
    steps = list(MetricPoint.objects.filter(run=run, key="stage/step_s").order_by("step").values_list("step", flat=True))
    assert steps == list(range(1, STEPS + 1))
    assert RunEvent.objects.filter(run=run, kind="resumed").exists()


def start_verify_worker(env, name, log_path, received: threading.Event):
    def watch(line: bytes) -> None:
        if b"temper.verify.batch" in line and b"received" in line.lower():
            received.set()

    return start_celery_worker(env, name, "verify", log_path=log_path, on_line=watch)


@pytest.mark.slow
def test_a_verify_worker_killed_mid_batch_is_re_dispatched(transactional_db, tmp_path, settings):
    require_postgres()
    redis_url = require_redis()
    from trainer.models.tiny import build_tiny
    from workers.sandbox import bwrap
    from tests.services import require

    require(bwrap.available(), "bubblewrap for the sandboxed code domain")
    env = worker_env(connection.settings_dict, redis_url, TEMPER_VAR_DIR=str(tmp_path / "var"), TEMPER_VERIFY_DEADLINE_S="15")
    _, actor = factories.synced_team(["code-humaneval"], "member")
    model = str(build_tiny(tmp_path / "model", layers=2))
    run = run_create(actor=actor, data=factories.run_payload(
        ["code-humaneval"], team="acme", base_model=model, budget={"steps": 2},
        config={"rollout": {"prompts_per_step": 2, "n": 2, "max_new_tokens": 8}}))
    received = threading.Event()
    doomed = start_verify_worker(env, "doomed", tmp_path / "doomed.log", received)
    with celery_worker(env, "driver", DRIVER_QUEUES, log_path=tmp_path / "driver.log"):
        run_start(actor=actor, run=run)
        assert received.wait(300), "no verification batch reached the verify worker"
        os.killpg(doomed.pid, signal.SIGKILL)  # mid-batch: its result never comes
        doomed.wait(timeout=30)
        with celery_worker(env, "rescue", "verify", log_path=tmp_path / "rescue.log"):
            final = wait_for(lambda: Run.objects.filter(pk=run.pk, state__in=["completed", "failed"]).first(), 300, "the run to end")
    assert final.state == "completed", final.error
    resent = MetricPoint.objects.filter(run=run, key="verify/resent_batches").order_by("-step").values_list("value", flat=True).first()
    assert resent and resent >= 1
    lost = MetricPoint.objects.filter(run=run, key="verify/lost_items").order_by("-step").values_list("value", flat=True).first()
    assert lost == 0  # the re-sent batch was verified by the other worker


@pytest.mark.slow
def test_preemption_through_celery_workers(transactional_db, tmp_path):
    """A priority-90 run arrives while a priority-10 run holds the only slot: the low run
    checkpoints and yields, the high run runs to completion, then the low run resumes and completes."""
    require_postgres()
    redis_url = require_redis()
    env = worker_env(connection.settings_dict, redis_url, TEMPER_VAR_DIR=str(tmp_path / "var"), TEMPER_MIN_RUN_S="0")
    new_run = factories.one_slot_contest(
        tmp_path, {"rollout": {"prompts_per_step": 4, "n": 4, "max_new_tokens": 4}, "checkpoint": {"every_steps": 2}})
    # The scheduler's ticks have a worker of their own, as in every deployment (docs/orchestration.md,
    # "A scheduler that cannot starve"): on one worker serving both queues, the tick that preempts
    # could be handed to the process busy driving the low run and wait for it to finish.
    scheduler = start_celery_worker(env, "preempt-control", "control", concurrency=1, log_path=tmp_path / "control.log")
    worker = start_celery_worker(env, "preempt", "rollout", concurrency=2, log_path=tmp_path / "worker.log")
    try:
        low = new_run("low", 10, 40)
        wait_for(lambda: Run.objects.get(pk=low.pk).current_step >= 2, 300, "the low run to train")
        high = new_run("high", 90, 3)
        done_high = wait_for(lambda: Run.objects.filter(pk=high.pk, state__in=["completed", "failed"]).first(), 300, "the high run to end")
        done_low = wait_for(lambda: Run.objects.filter(pk=low.pk, state__in=["completed", "failed"]).first(), 600, "the low run to end")
    finally:
        stop_processes([worker, scheduler])
    assert done_high.state == "completed" and done_low.state == "completed", (done_high.error, done_low.error)
    kinds = list(RunEvent.objects.filter(run=low).order_by("at", "id").values_list("kind", flat=True))
    assert "preemption" in kinds and "preempted" in kinds and "resumed" in kinds
    assert done_high.finished_at < done_low.finished_at
    steps = list(MetricPoint.objects.filter(run=low, key="stage/step_s").order_by("step").values_list("step", flat=True))
    assert steps == list(range(1, 41))
