"""When the scheduler last ran, and whether it is late and why: the tick records itself, and
/queue/ and GET /api/scheduler show it to every signed-in user."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from controlplane.scheduling.models import SchedulerTick
from controlplane.scheduling.selectors import scheduler_status
from controlplane.scheduling.services import schedule_tick
from tests import factories

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def test_before_any_tick_the_scheduler_is_late_and_the_reason_names_the_control_queue(world):
    SchedulerTick.objects.all().delete()
    status = client_for(world.users["viewer"]).get("/api/scheduler").json()
    assert status["at"] is None and status["late"] is True
    assert "control queue" in status["reason"]
    factories.live_worker(["control"], name="control@test")
    assert "has not run yet" in scheduler_status()["reason"]


def test_a_tick_records_when_it_ran_and_what_it_admitted(world, settings):
    factories.live_worker(["control", "rollout", "verify"])
    run = factories.run(world.team, domains=[world.domain], state="queued", queued_at=timezone.now())
    schedule_tick(worker="control@host")
    tick = SchedulerTick.objects.get(pk=1)
    assert tick.admitted == 1 and tick.worker == "control@host" and tick.duration_ms >= 0
    status = client_for(world.users["viewer"]).get("/api/scheduler").json()
    assert status["late"] is False and status["admitted"] == 1 and status["period_s"] == settings.TEMPER_SCHEDULE_PERIOD_S
    page = client_for(world.users["viewer"]).get("/queue/").content.decode()
    assert 'data-testid="scheduler"' in page and "last ran" in page and "admitted 1" in page and "Late:" not in page
    run.refresh_from_db()
    assert run.state == "running"


def test_three_periods_without_a_tick_is_late(world, settings):
    factories.live_worker(["control"], name="control@test")
    schedule_tick()
    later = timezone.now() + timedelta(seconds=3 * settings.TEMPER_SCHEDULE_PERIOD_S + 1)
    status = scheduler_status(now=later)
    assert status["late"] is True and "beat" in status["reason"]
    assert scheduler_status(now=timezone.now())["late"] is False


def test_the_scheduler_status_needs_a_signed_in_user(db):
    assert Client().get("/api/scheduler").status_code == 401


def test_queue_page_shows_each_workers_gpus_and_a_pool_that_promises_others(world):
    """Workers report their host's GPUs in their heartbeat (workers/devices.py reads nvidia-smi;
    here a fake inventory); /queue/ lists them, and says so when the train GPU pools promise a
    different number than the live train workers have."""
    from controlplane.scheduling.models import ResourcePool
    from controlplane.scheduling.services import heartbeat_record

    h200 = [{"index": i, "name": "NVIDIA H200", "memory_gib": 140.4} for i in range(2)]
    heartbeat_record(worker="train@gpu-a", queues=["train"], meta={"pid": 1, "devices": h200})
    heartbeat_record(worker="verify@cpu-b", queues=["verify"], meta={"pid": 2, "devices": []})
    ResourcePool.objects.create(name="h200", kind="train_gpu", capacity=4)
    page = client_for(world.users["viewer"]).get("/queue/").content.decode()
    table = page[page.index('data-testid="worker-devices"'):]
    assert "#0 NVIDIA H200 (140.4 GiB, free), #1 NVIDIA H200 (140.4 GiB, free)" in table[table.index('data-worker="train@gpu-a"'):]
    assert "none" in table[table.index('data-worker="verify@cpu-b"'):]
    assert "pools hold 4 GPU(s); the live workers on the train queue report 2" in page
    ResourcePool.objects.filter(name="h200").update(capacity=2)
    assert 'data-testid="gpu-note"' not in client_for(world.users["viewer"]).get("/queue/").content.decode()
