"""The split advisor in the run driver (workers/compute_observers.py ``SplitAdvice``): on a run whose
verification is the bottleneck it proposes more verify lanes; with ``autoscale: on`` the driver
makes the change at a step boundary, as an event with before, after and why, and the pipeline runs
with it from the next step; with it off the proposal is an event and the run page shows it."""
from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from controlplane.runs.models import MetricPoint, RunEvent
from tests import factories
from tests.workers.driving import SMALL, Replies, code_domain, running_run
from trainer.advisor import Advisor
from trainer.pipeline import VERIFY_THREADS, OverlappedPipeline, StageClocks
from workers.driver import drive
from workers.compute_observers import SplitAdvice
from workers.observers import StepDone

pytestmark = pytest.mark.django_db(transaction=True)

VERIFY_BOUND = {"pipeline/window_s": 2.0, "pipeline/generate_busy_s": 0.6, "pipeline/verify_busy_s": 1.8,
                "pipeline/update_busy_s": 0.4, "pipeline/generate_idle_frac": 0.7, "pipeline/verify_idle_frac": 0.1,
                "pipeline/update_idle_frac": 0.8}
"""A step's stage figures recorded on a run whose sandboxed verification is slow: verification busy
90% of the step, generation idle 70% of it (the wall clock of a test machine would give other
figures at every run, so the clocks report these)."""


@pytest.fixture
def slow_verify_run(tiny_model, settings, tmp_path, monkeypatch):
    from controlplane import dispatch

    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: None)  # no broker in these in-process tests
    monkeypatch.setattr(StageClocks, "window_metrics", lambda self: dict(VERIFY_BOUND))
    settings.VAR_DIR = tmp_path
    settings.TEMPER_WORKER_STALE_S = 24 * 3600
    _, actor = factories.synced_team(["builtin-addition"])
    code_domain(actor, "slow-code", "Slow code")
    factories.live_worker(["verify"])

    def make(autoscale: str):
        return running_run(actor, tiny_model, steps=6, domains=["slow-code"], staleness=1, autoscale=autoscale,
                           config={**SMALL, "checkpoint": {"every_steps": 6}})
    return make


def _send(name, args):
    return Replies.each({"outcome": "pass", "score": 1.0, "details": {"verify_s": 0.01}}, len(args[2]))


def _lanes(run) -> list[float]:
    return list(MetricPoint.objects.filter(run=run, key="advisor/verify_lanes", domain="").order_by("step").values_list("value", flat=True))


def test_autoscale_on_makes_the_steady_proposal_at_a_step_boundary_as_an_event(slow_verify_run, client):
    run = slow_verify_run("on")
    assert drive(run.id, worker="w1", send=_send) == "completed"
    changes = list(RunEvent.objects.filter(run=run, kind="autoscale").order_by("id"))
    assert changes, list(RunEvent.objects.filter(run=run).values_list("kind", "message"))
    first = changes[0]
    # steady after two windows, made after step 2; the next waits out the cooldown (3 windows)
    assert (first.data["knob"], first.data["before"], first.data["after"], first.data["step"]) == ("verify_lanes", VERIFY_THREADS, 4, 2)
    assert first.data["bottleneck"] == "verify" and first.data["step_s"][1] < first.data["step_s"][0]
    assert "verify_lanes 2 -> 4 from step 3" in first.message and "verification is the bottleneck" in first.message
    assert [(e.data["before"], e.data["after"], e.data["step"]) for e in changes[1:]] == [(4, 8, 5)]  # the domain's 8 sandboxes
    # what the pipeline ran with after each step: the change holds from the step after it
    assert _lanes(run) == [2.0, 4.0, 4.0, 4.0, 8.0, 8.0]
    client.force_login(factories.member(run.team, "viewer", "advice-viewer"))
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert 'data-testid="split-advice-text" data-kind="autoscale" data-knob="verify_lanes"' in page


def test_autoscale_off_only_proposes_and_the_run_page_shows_it(slow_verify_run, client):
    run = slow_verify_run("off")
    assert drive(run.id, worker="w1", send=_send) == "completed"
    assert not RunEvent.objects.filter(run=run, kind="autoscale").exists()
    assert _lanes(run) == [float(VERIFY_THREADS)] * 6
    advice = list(RunEvent.objects.filter(run=run, kind="advice"))
    assert [(a.data["knob"], a.data["before"], a.data["after"], a.data["step"]) for a in advice] == [("verify_lanes", 2, 4, 2)]
    assert "autoscale is off" in advice[0].message
    gains = list(MetricPoint.objects.filter(run=run, key="advisor/expected_gain").order_by("step").values_list("value", flat=True))
    assert gains[0] == 0.0 and all(g > 0.4 for g in gains[1:])  # steady from the second step
    client.force_login(factories.member(run.team, "viewer", "advice-viewer"))
    page = client.get(f"/runs/{run.id}/").content.decode()
    assert 'data-kind="advice" data-knob="verify_lanes"' in page and "proposed at step 2" in page
    assert "<td>step seconds</td><td>2.00</td><td>1.10</td>" in page
    assert "<td>generate idle</td><td>70%</td><td>45%</td></tr><tr><td>verify idle</td>" in page  # the stages in order


def test_the_observer_records_advice_only_when_the_steady_proposal_changes():
    """The observer alone (a real overlapped pipeline, the driver's hold replaced by a list): a
    proposal is an event once steady, a window that only unsettles it records nothing, and a
    balanced pipeline after a proposal is one ``balanced`` event."""
    pipeline = OverlappedPipeline(None, None, lambda reqs: [], lambda items: [], StageClocks(), staleness=1, chunk_size=8)
    job = NS(config=NS(rollout=NS(autoscale="off", staleness=1)), pipeline=pipeline)
    events = []
    advice = SplitAdvice(job, lambda: 4, lambda fn, **kw: events.append(kw))
    balanced = {**VERIFY_BOUND, "pipeline/generate_busy_s": 1.9, "pipeline/verify_busy_s": 1.85, "pipeline/update_busy_s": 1.9}
    # one step where generation was slow and verification idled: it leads to giving a lane back
    # for one window only (not steady, so not shown; the advisor reads one window at a time here)
    slow_generation = {**VERIFY_BOUND, "pipeline/generate_busy_s": 1.9, "pipeline/verify_busy_s": 0.3}
    advice.advisor = Advisor(advice.advisor.knobs, advice.advisor.bounds, history=1)
    try:
        for step, metrics in enumerate([VERIFY_BOUND, VERIFY_BOUND, slow_generation, VERIFY_BOUND, VERIFY_BOUND, balanced], 1):
            advice.after_step(StepDone(run=NS(id=1), step=step, metrics=dict(metrics), trajectories=[], samples=[], tokens=0, usage=None))
    finally:
        pipeline.close()
    assert [(e["kind"], e["data"]["knob"], e["data"]["step"]) for e in events] == [("advice", "verify_lanes", 2), ("advice", None, 6)]
    assert "balanced" in events[1]["message"]
