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
