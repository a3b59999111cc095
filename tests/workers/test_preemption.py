"""Preemption: a priority-90 run arrives while a priority-10 run holds the only slot. The low run
checkpoints and yields, the high run runs and completes, then the low run resumes and completes."""
from __future__ import annotations

import pytest

from controlplane import dispatch
from controlplane.runs.models import MetricPoint, Run, RunEvent
from controlplane.runs.selectors import run_explain
from controlplane.scheduling.services import schedule_tick
from tests import factories
from tests.workers.steps import after_each_step
from workers.driver import drive

pytestmark = pytest.mark.django_db(transaction=True)
SMALL = {"rollout": {"prompts_per_step": 4, "n": 2, "max_new_tokens": 3}, "checkpoint": {"every_steps": 10}}


@pytest.fixture
def sent(monkeypatch):
    calls = []
    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: calls.append((name, args)))
    return calls


def test_high_priority_preempts_then_low_resumes(sent, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    new_run = factories.one_slot_contest(tmp_path, SMALL)
    low = new_run("low", 10, 4)
    assert schedule_tick(min_run=0).admit == [low.id]
    assert ("temper.rollout.drive_run", (low.id,)) in sent

    state = {}

    def high_arrives_after_step_2(**kw):
        if kw["run"].pk == low.id and kw["step"] == 2 and "high" not in state:
            state["high"] = new_run("high", 90, 2)
            decision = schedule_tick(min_run=0)
            assert decision.preempt == [low.id] and decision.admit == []
            state["explain"] = run_explain(run=Run.objects.get(pk=state["high"].id))

    with after_each_step(high_arrives_after_step_2):
        assert drive(low.id, worker="w1", send=None) == "preempted"
    high = state["high"]
    assert state["explain"]["queued"]["binding"] == "cpu"
    assert f"waiting for run {low.id} (priority 10)" in state["explain"]["queued"]["reason"]
    low.refresh_from_db()
    assert low.state == "queued" and low.checkpoints.filter(step=2).exists()
    assert RunEvent.objects.filter(run=low, kind="preempted").exists()

    assert schedule_tick(min_run=0).admit == [high.id]
    explain_low = run_explain(run=Run.objects.get(pk=low.id))
    assert explain_low["queued"]["position"] == 1 and "no free cpu slot" in explain_low["queued"]["reason"]
    assert drive(high.id, worker="w1", send=None) == "completed"

    assert schedule_tick(min_run=0).admit == [low.id]
    assert drive(low.id, worker="w2", send=None) == "completed"
    low.refresh_from_db()
    assert low.state == "completed"
    steps = list(MetricPoint.objects.filter(run=low, key="stage/step_s").order_by("step").values_list("step", flat=True))
    assert steps == [1, 2, 3, 4]
