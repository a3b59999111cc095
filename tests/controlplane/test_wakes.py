"""The pages watching a run wake after what the run's writes commit, though runs never imports live:
the live app connects post_save of Run and RunEvent (controlplane/live/apps.py)."""
from __future__ import annotations

import pytest

from controlplane.live import services as live
from controlplane.registry.services import run_record_eval
from controlplane.runs import services as run_services
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def wakes(monkeypatch):
    woken = []
    monkeypatch.setattr(live, "run_wake", lambda *, run_id, team_id=None: woken.append(run_id))
    return woken


def test_a_step_write_wakes_the_run_once_after_commit(world, wakes, django_capture_on_commit_callbacks):
    run = factories.run(world.team, domains=[world.domain], state="running", driver="w1")
    with django_capture_on_commit_callbacks(execute=True):
        run_services.run_record_step(run=run, worker="w1", step=1, metrics={"reward/addition": 0.5}, samples=[],
                                verifier_versions={})
        assert wakes == []  # not before the rows are visible
    assert wakes == [run.pk]


def test_a_lease_renewal_wakes_nobody(world, wakes, django_capture_on_commit_callbacks):
    run = factories.run(world.team, domains=[world.domain], state="running", driver="w1")
    with django_capture_on_commit_callbacks(execute=True):
        run.save(update_fields=["driver_seen_at", "updated_at"])
    assert wakes == []


def test_an_event_and_an_eval_write_wake_the_run(world, wakes, django_capture_on_commit_callbacks):
    run = factories.run(world.team, domains=[world.domain], state="running", driver="w1")
    with django_capture_on_commit_callbacks(execute=True):
        run.events.create(kind="paused", message="x")
    with django_capture_on_commit_callbacks(execute=True):
        run_record_eval(run=run, step=3, metrics={"eval/addition/mean": 0.25})
    assert wakes == [run.pk, run.pk]
