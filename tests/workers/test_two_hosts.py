"""A run moves between hosts through the shared store: two simulated hosts (tests/hosts.py: each
its own network, hostname and a private TEMPER_VAR_DIR, both on the same PostgreSQL and Redis),
each with its own Celery worker. The run checkpoints on host A, host A dies (every process of
it, SIGKILL), and host B resumes the run from the checkpoint in TEMPER_STORE and completes it with
contiguous steps."""
from __future__ import annotations

import os
import signal

import pytest

from controlplane.runs.models import Checkpoint, MetricPoint, Run, RunEvent
from controlplane.runs.services import run_create, run_start
from controlplane.scheduling.services import schedule_tick
from tests import factories
from tests.hosts import host_services, start_host_worker
from tests.services import wait_for

LEASE_S = 6
STEPS = 30


def start_host(name: str, tmp_path, env: dict, relays: dict):
    return start_host_worker(name, tmp_path, env, relays, queues="control,rollout", worker="rollout")


@pytest.mark.slow
def test_a_run_checkpointed_on_one_host_resumes_on_another_from_the_shared_store(transactional_db, tmp_path, settings):
    services = host_services(tmp_path, settings, TEMPER_DRIVER_LEASE_S=str(LEASE_S))
    env, relays, store = services.env, services.relays, services.store
    settings.TEMPER_DRIVER_LEASE_S = LEASE_S
    from trainer.models.tiny import build_tiny

    _, actor = factories.synced_team(["builtin-addition"], "member")
    model = str(build_tiny(tmp_path / "model", layers=2))
    run = run_create(actor=actor, data=factories.run_payload(
        ["builtin-addition"], team="acme", base_model=model, budget={"steps": STEPS},
        config={"rollout": {"prompts_per_step": 4, "n": 4, "max_new_tokens": 4}, "checkpoint": {"every_steps": 2}}))

    host_a = start_host("host-a", tmp_path, env, relays)
    try:
        run_start(actor=actor, run=run)
        wait_for(lambda: Checkpoint.objects.filter(run=run, step__gte=2).exists()
                 and Run.objects.get(pk=run.pk).current_step >= 3, 300, "a checkpoint and step 3 on host A",
                 logs=[tmp_path / "host-a.log"])
    finally:
        os.killpg(host_a.pid, signal.SIGKILL)  # host A goes: its worker, its driver, its private var
        host_a.wait(timeout=30)
    killed_at = Run.objects.get(pk=run.pk).current_step
    first_driver = Run.objects.get(pk=run.pk).driver
    host_b = start_host("host-b", tmp_path, env, relays)
    try:
        wait_for(lambda: schedule_tick() and RunEvent.objects.filter(run=run, kind="recovery").exists(), 120, "recovery")
        final = wait_for(lambda: Run.objects.filter(pk=run.pk, state__in=["completed", "failed"]).first(), 300,
                         "the run to end on host B", logs=[tmp_path / "host-b.log"])
    finally:
        os.killpg(host_b.pid, signal.SIGTERM)
        host_b.wait(timeout=60)
    assert final.state == "completed", final.error
    assert first_driver.endswith("@host-a") and killed_at < STEPS
    drivers = list(RunEvent.objects.filter(run=run, kind="driver").order_by("at", "id").values_list("message", flat=True))
    assert drivers[0].startswith(f"driven by {first_driver}") and "@host-b" in drivers[-1]
    resumed = RunEvent.objects.filter(run=run, kind="resumed").latest("at")
    assert resumed.data["checkpoint_step"] >= 2
    # Every checkpoint is in the store; host A's private TEMPER_VAR_DIR was never visible here.
    paths = list(Checkpoint.objects.filter(run=run).values_list("path", flat=True))
    assert paths and all(p.startswith(str(store / "checkpoints" / f"run-{run.id}")) for p in paths)
    assert not (tmp_path / "var" / "checkpoints").exists()
    steps = list(MetricPoint.objects.filter(run=run, key="stage/step_s").order_by("step").values_list("step", flat=True))
    assert steps == list(range(1, STEPS + 1))
