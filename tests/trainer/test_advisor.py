"""The split advisor (trainer/advisor.py) on recorded stage figures: which change it proposes for
each shape of pipeline, what it expects of it, and that its hysteresis keeps the split from
flapping; and the pipeline's knobs it turns (trainer/pipeline.py)."""
from __future__ import annotations

import pytest

from trainer.advisor import Advisor, Bounds, Knobs, Window, apply, pipeline_knobs, proposals
from trainer.job import Job
from trainer.pipeline import VERIFY_THREADS, OverlappedPipeline, StageClocks, SyncPipeline


def metrics(g: float, v: float, u: float, w: float) -> dict[str, float]:
    """A step's ``pipeline/*`` metrics as the stage clocks record them."""
    return {"pipeline/generate_busy_s": g, "pipeline/verify_busy_s": v, "pipeline/update_busy_s": u,
            "pipeline/window_s": w, **{f"pipeline/{s}_idle_frac": 1 - b / w for s, b in
                                       (("generate", g), ("verify", v), ("update", u))}}


OVERLAPPED = Knobs(staleness=1, verify_lanes=2)
ROOM = Bounds(staleness=3, verify_lanes=8)


def test_verify_bound_gets_more_lanes_with_the_expected_step_time():
    # verification busy 90% of the step, generation idles 70%: the lanes double, verify halves
    found = proposals(Window(0.6, 1.8, 0.4, 2.0), OVERLAPPED, ROOM)
    best = found[0]
    assert (best.knob, best.before, best.after, best.applicable) == ("verify_lanes", 2, 4, True)
    assert best.bottleneck == "verify" and "verification is the bottleneck" in best.reason
    assert best.step_s == (2.0, pytest.approx(0.9 + 0.2))  # max(0.6, 1.8 / 2, 0.4) + the 0.2 s no overlap hid
    assert best.idle["generate"][1] < best.idle["generate"][0]  # the stage that waited on verification idles less
    assert best.gain > 0.4


def test_verify_bound_at_the_workers_limit_is_advice_for_more_workers():
    found = proposals(Window(0.6, 1.8, 0.4, 2.0), Knobs(staleness=3, verify_lanes=8), ROOM)
    assert [(p.knob, p.applicable) for p in found] == [("verify_workers", False)]
    assert Advisor(Knobs(3, 8), ROOM).due(found[0]) is False  # a person adds workers; the driver does not


def test_generate_bound_with_a_gap_no_overlap_hides_queues_one_more_batch():
    # generation is the slowest stage and 0.6 s of the 2.0 s step is not hidden by any overlap
    best = proposals(Window(1.4, 0.5, 0.3, 2.0), OVERLAPPED, ROOM)[0]
    assert (best.knob, best.before, best.after, best.bottleneck) == ("staleness", 1, 2, "generate")
    assert best.step_s[1] == pytest.approx(1.4 + 0.6 / 2)
    assert "within the run's bound of 3" in best.reason


def test_update_bound_at_the_runs_staleness_bound_proposes_no_speed_up():
    # the trainer is the limit and the staleness is at the run's bound: nothing the driver controls
    # makes the step faster; the idle verify lane is given back, at no cost to the step
    found = proposals(Window(0.5, 0.4, 1.7, 2.0), Knobs(staleness=3, verify_lanes=2), ROOM)
    assert [(p.knob, p.after, p.bottleneck) for p in found] == [("verify_lanes", 1, "update")]
    assert found[0].step_s[1] == pytest.approx(2.0)
    assert proposals(Window(0.5, 0.4, 1.7, 2.0), Knobs(staleness=3, verify_lanes=1), ROOM) == []


def test_balanced_pipeline_proposes_no_change():
    assert proposals(Window(1.9, 1.85, 1.9, 2.0), OVERLAPPED, ROOM) == []
    adv = Advisor(OVERLAPPED, ROOM)
    assert all(adv.observe(metrics(1.9, 1.85, 1.9, 2.0)) is None for _ in range(6))


def test_idle_verification_gives_lanes_back_when_the_step_does_not_slow():
    # verification idles 80%: one lane fewer keeps it under generation's 1.8 s
    found = proposals(Window(1.8, 0.4, 0.3, 2.0), Knobs(staleness=1, verify_lanes=4), Bounds(staleness=1, verify_lanes=8))
    assert [(p.knob, p.before, p.after) for p in found] == [("verify_lanes", 4, 3)]
    assert found[0].step_s[1] == pytest.approx(2.0)


def test_a_run_in_turn_is_told_what_overlap_would_save():
    found = proposals(Window(1.0, 1.2, 0.5, 2.8), Knobs(staleness=0, verify_lanes=1), Bounds(staleness=0, verify_lanes=8))
    assert [(p.knob, p.applicable) for p in found] == [("overlap", False)]
    assert found[0].step_s[1] == pytest.approx(1.2 + 0.1)


def test_a_proposal_is_made_only_once_it_is_steady_and_not_again_during_the_cooldown():
    adv = Advisor(OVERLAPPED, ROOM, patience=2, cooldown=3)
    verify_bound = metrics(0.6, 1.8, 0.4, 2.0)
    assert adv.observe(verify_bound) is None  # one window is not enough
    steady = adv.observe(verify_bound)
    assert steady is not None and adv.due(steady)
    adv.applied(steady)
    assert adv.knobs == Knobs(staleness=1, verify_lanes=4)
    # still verify-bound after the change: the next doubling waits for the cooldown
    assert [adv.due(adv.observe(verify_bound)) for _ in range(3)] == [False, False, True]


def test_flapping_between_shapes_is_held():
    """Windows that swing between verify-bound and verify-idle: the lanes go up once, and the
    advisor does not take them back down within its hold."""
    def changes_with(hold: int) -> list[tuple[str, int, int, int]]:
        adv = Advisor(Knobs(staleness=1, verify_lanes=2), Bounds(staleness=1, verify_lanes=4), patience=2, cooldown=3, hold=hold)
        changes = []
        for i in range(30):
            shape = metrics(0.6, 1.8, 0.4, 2.0) if (i // 4) % 2 == 0 else metrics(1.8, 0.3, 0.3, 2.0)
            steady = adv.observe(shape)
            if adv.due(steady):
                changes.append((steady.knob, steady.before, steady.after, i))
                adv.applied(steady)
        return changes

    assert len(changes_with(hold=0)) >= 5  # without the hold these windows flap the lanes up and down
    changes = changes_with(hold=20)
    assert changes[0][:3] == ("verify_lanes", 2, 4)
    reversals = [c for c in changes if c[2] < c[1] and c[3] - changes[0][3] < 20]
    assert reversals == [], changes
    assert len(changes) <= 2


def test_overlapped_pipeline_turns_its_knobs_between_steps_within_the_bound():
    pipe = OverlappedPipeline(None, None, lambda reqs: [], lambda items: [], StageClocks(), staleness=2, chunk_size=8)
    try:
        assert pipeline_knobs(pipe) == Knobs(staleness=2, verify_lanes=VERIFY_THREADS)
        pipe._verify_on("code", []).result()  # the domain's verify threads start
        first = pipe.verify_threads["code"]
        best = proposals(Window(0.6, 1.8, 0.4, 2.0), pipeline_knobs(pipe), Bounds(staleness=2, verify_lanes=4))[0]
        apply(pipe, best)
        assert pipeline_knobs(pipe) == Knobs(staleness=2, verify_lanes=4)
        pipe._verify_on("code", []).result()
        assert pipe.verify_threads["code"] is not first and pipe.verify_threads["code"]._max_workers == 4
        assert first in pipe.retired  # still finishing what was queued on it, shut down at close
        pipe.set_knobs(staleness=1)
        assert pipe.lookahead == 1 and pipe.staleness == 2  # every batch is still checked against the run's bound
        with pytest.raises(ValueError, match="outside 1..2"):
            pipe.set_knobs(staleness=3)
    finally:
        pipe.close()
    in_turn = SyncPipeline(None, None, lambda reqs: [], lambda items: [], StageClocks(), staleness=0, chunk_size=8)
    assert pipeline_knobs(in_turn) == Knobs(staleness=0, verify_lanes=1)
    with pytest.raises(ValueError, match="in turn"):
        in_turn.set_knobs(verify_lanes=4)


def test_a_job_takes_new_knobs_between_steps_and_stays_within_its_bound(base_config):
    """A real job at staleness 2: the staleness in force lowered to 1 between steps drains the batch
    queued ahead (no batch is refused, none is older than the run's bound), then trains one update
    behind; raised back to 2 it queues two again. More verify lanes verify every sample as before."""
    base_config["rollout"]["staleness"] = 2
    base_config["limits"]["max_steps"] = 12
    job = Job(base_config)
    try:
        lags = [job.step()["batch/policy_lag"] for _ in range(3)]
        job.pipeline.set_knobs(staleness=1, verify_lanes=4)
        lags += [job.step()["batch/policy_lag"] for _ in range(4)]
        assert pipeline_knobs(job.pipeline) == Knobs(staleness=1, verify_lanes=4)
        assert all(t.verification is not None for t in job.last_generated)
        job.pipeline.set_knobs(staleness=2)
        lags += [job.step()["batch/policy_lag"] for _ in range(4)]
    finally:
        job.close()
    assert lags[:3] == [0.0, 1.0, 2.0]
    assert max(lags) == 2.0 and lags[5:7] == [1.0, 1.0]  # the batch queued at 2 drained, then one behind
    assert lags[-1] == 2.0
