"""The run driver, in process: a tiny model trains on built-in domains; pause, resume, cancel,
weights and recovery from a checkpoint keep the metric steps contiguous without duplicates."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane.runs import services as run_services
from controlplane.runs.models import MetricPoint, Run, RunEvent, Trajectory
from controlplane.runs.services import run_pause, run_set_weights
from tests import factories
from tests.workers.driving import SMALL, Replies, code_domain, running_run
from tests.workers.steps import after_each_step
from workers.driver import drive

pytestmark = pytest.mark.django_db(transaction=True)

DOMAINS = ["builtin-addition", "builtin-reversal", "builtin-parity"]


@pytest.fixture
def setup(tiny_model, settings, tmp_path, monkeypatch):
    from controlplane import dispatch

    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: None)  # no broker in these in-process tests
    settings.VAR_DIR = tmp_path
    settings.TEMPER_WORKER_STALE_S = 24 * 3600  # a heartbeat a test records stays live however slow the machine
    _, admin = factories.synced_team(DOMAINS)
    return admin, tiny_model


def _no_send(name, args):
    raise AssertionError("built-in domains verify inline; nothing goes to the verify queue")


def steps_of(run, key="stage/step_s"):
    return list(MetricPoint.objects.filter(run=run, key=key).order_by("step").values_list("step", flat=True))


def test_run_completes_with_per_domain_metrics(setup):
    actor, model = setup
    run = running_run(actor, model, steps=4, domains=DOMAINS)
    assert drive(run.id, worker="w1", send=_no_send) == "completed"
    run.refresh_from_db()
    assert run.state == "completed" and run.current_step == 4 and run.driver == ""
    assert steps_of(run) == [1, 2, 3, 4]
    for step in range(1, 5):
        domains_with_reward = set(MetricPoint.objects.filter(run=run, step=step, key__startswith="reward/").exclude(domain="").values_list("domain", flat=True))
        assert domains_with_reward, f"step {step} has no reward points"
        assert domains_with_reward <= set(DOMAINS)
        # Outcome counts add up to the samples of each domain.
        for d in domains_with_reward:
            counts = MetricPoint.objects.filter(run=run, step=step, domain=d, key__startswith=f"outcome/{d}/")
            assert sum(p.value for p in counts) > 0
    assert Trajectory.objects.filter(run=run).exists()
    assert run.checkpoints.filter(step=4).exists()
    latency = MetricPoint.objects.filter(run=run, key__startswith="verify/", key__endswith="/p99_s").exclude(domain="")
    assert latency.exists() and all(p.value >= 0 for p in latency)
    # Usage is recorded with each step: per domain, the verifications match the step's outcome
    # counts; per step, wall and CPU seconds; no GPU on a CPU run.
    from controlplane.runs.models import UsageRecord

    for step in range(1, 5):
        rows = {u.domain: u for u in UsageRecord.objects.filter(run=run, step=step)}
        assert rows[""].wall_s > 0 and rows[""].cpu_s > 0 and rows[""].gpu_s == 0
        for d in set(rows) - {""}:
            outcome_points = MetricPoint.objects.filter(run=run, step=step, domain=d, key__startswith=f"outcome/{d}/")
            assert sum(rows[d].outcomes.values()) == rows[d].completions == sum(p.value for p in outcome_points)
            assert rows[d].generated_tokens > 0 and rows[d].trained_tokens <= rows[d].generated_tokens


def test_with_staleness_each_step_records_the_policy_version_it_trained_on(setup):
    actor, model = setup
    run = running_run(actor, model, steps=4, domains=DOMAINS, staleness=1)
    assert drive(run.id, worker="w1", send=_no_send) == "completed"
    lag = dict(MetricPoint.objects.filter(run=run, key="batch/policy_lag", domain="").values_list("step", "value"))
    version = dict(MetricPoint.objects.filter(run=run, key="batch/policy_version", domain="").values_list("step", "value"))
    assert lag == {1: 0.0, 2: 1.0, 3: 1.0, 4: 1.0}  # never more than the run's staleness
    assert version == {1: 0.0, 2: 0.0, 3: 1.0, 4: 2.0}
    for key in ("pipeline/generate_busy_s", "pipeline/verify_busy_s", "pipeline/update_busy_s"):
        assert steps_of(run, key) == [1, 2, 3, 4]
    run.refresh_from_db()
    assert run.inflight == {}  # cleared when the run finished, not rewritten by the lease thread


def test_pause_checkpoints_then_resume_continues_without_gaps(setup):
    actor, model = setup
    run = running_run(actor, model, steps=4, domains=DOMAINS)
    calls = {"n": 0}

    def pause_after_second(**kw):
        calls["n"] += 1
        if calls["n"] == 2:
            run_pause(actor=actor, run=Run.objects.get(pk=kw["run"].pk))

    with after_each_step(pause_after_second):
        assert drive(run.id, worker="w1", send=_no_send) == "paused"
    run.refresh_from_db()
    assert run.state == "paused" and run.checkpoints.filter(step=2).exists()
    run.transition("queued"); run.transition("running"); run.save()
    assert drive(run.id, worker="w2", send=_no_send) == "completed"
    assert steps_of(run) == [1, 2, 3, 4]
    assert RunEvent.objects.filter(run=run, kind="resumed").exists()


def test_a_dead_driver_is_replaced_and_no_step_is_recorded_twice(setup):
    actor, model = setup
    run = running_run(actor, model, steps=5, domains=DOMAINS)
    original = run_services.run_record_step
    calls = {"n": 0}

    def die_after_three(**kw):
        calls["n"] += 1
        if calls["n"] == 4:
            raise SystemExit("worker killed")  # the process dies mid-step 4: nothing after step 3 is written
        return original(**kw)

    run_services.run_record_step = die_after_three
    try:
        with pytest.raises(SystemExit):
            drive(run.id, worker="dead", send=_no_send)
    finally:
        run_services.run_record_step = original
    assert steps_of(run) == [1, 2, 3]
    # The lease is still held by the dead worker: nobody else may take it until it expires.
    assert drive(run.id, worker="w2", send=_no_send).startswith("not claimed")
    Run.objects.filter(pk=run.pk).update(driver_seen_at=timezone.now() - timedelta(seconds=run_services.lease_s() + 1))  # expired
    assert drive(run.id, worker="w2", send=_no_send) == "completed"
    assert steps_of(run) == [1, 2, 3, 4, 5]  # resumed from step 2's checkpoint; step 3 rewritten once


def _weights_after_step(actor, step: int, weights: dict[str, float]):
    """Change the run's weights through the service once ``step`` is recorded."""
    def change(**kw):
        if kw["step"] == step:
            run_set_weights(actor=actor, run=Run.objects.get(pk=kw["run"].pk), weights=weights)
    return after_each_step(change)


def test_weight_change_is_applied_at_a_step_boundary(setup):
    actor, model = setup
    run = running_run(actor, model, steps=2, domains=DOMAINS)
    with _weights_after_step(actor, 1, {"builtin-addition": 5.0}):
        assert drive(run.id, worker="w1", send=_no_send) == "completed"
    applied = RunEvent.objects.get(run=run, kind="weights_applied")
    assert applied.data["weights"]["builtin-addition"] == 5.0 and "at step 1" in applied.message


def test_a_weight_of_0_pauses_a_domain_from_the_next_step(setup):
    """A domain set to weight 0 mid-run is no longer sampled from the next step on, the run goes
    on with the others, and both events say the values."""
    actor, model = setup
    run = running_run(actor, model, steps=4, domains=DOMAINS)
    with _weights_after_step(actor, 1, {"builtin-parity": 0}):
        assert drive(run.id, worker="w1", send=_no_send) == "completed"
    assert steps_of(run) == [1, 2, 3, 4]
    sampled = set(MetricPoint.objects.filter(run=run, domain="builtin-parity", key__startswith="outcome/")
                  .values_list("step", flat=True))
    assert sampled <= {1}, f"a paused domain was sampled at steps {sorted(sampled - {1})}"
    others = set(MetricPoint.objects.filter(run=run, key__startswith="outcome/", step__gt=1).values_list("domain", flat=True))
    assert others and "builtin-parity" not in others
    changed = RunEvent.objects.get(run=run, kind="weights")
    assert "builtin-parity 1 -> 0 (paused)" in changed.message
    applied = RunEvent.objects.get(run=run, kind="weights_applied")
    assert applied.data["paused"] == ["builtin-parity"] and "builtin-parity 0" in applied.message


def test_cancel_stops_the_driver(setup):
    actor, model = setup
    run = running_run(actor, model, steps=3, domains=DOMAINS)
    Run.objects.filter(pk=run.pk).update(state="cancelled")
    assert drive(run.id, worker="w1", send=_no_send).startswith("not claimed")


def test_domain_with_infrastructure_errors_is_quarantined_and_the_run_goes_on(setup):
    actor, model = setup
    code_domain(actor, "flaky-code", "Flaky")
    run = running_run(actor, model, steps=5, domains=["builtin-addition", "flaky-code"])
    factories.live_worker(["verify"])  # alive, but its sandboxes fail: the domain's fault to quarantine
    engine_down = {"outcome": "sandbox_error", "score": 0.0, "details": {"error": "docker engine down"}}

    assert drive(run.id, worker="w1", send=lambda name, args: Replies.each(engine_down, len(args[2]))) == "completed"
    event = RunEvent.objects.get(run=run, kind="quarantine")
    assert event.data["domain"] == "flaky-code" and "the run goes on" in event.message
    after = MetricPoint.objects.filter(run=run, domain="flaky-code", key__startswith="outcome/", step__gt=event.data["step"])
    assert not after.exists(), "a quarantined domain was still sampled"
    assert steps_of(run) == [1, 2, 3, 4, 5]



def test_with_staleness_remote_verification_runs_on_the_jobs_verify_thread(setup):
    """A sandboxed domain's batches go to the verify queue from the Job's verify thread while the
    driver's thread trains; every item comes back and each step stays within the staleness bound."""
    actor, model = setup
    code_domain(actor, "remote-code", "Remote")
    run = running_run(actor, model, steps=3, domains=["remote-code"], staleness=1,
                      config={**SMALL, "artifacts": {"keep": False}})
    factories.live_worker(["verify"])
    senders, settings = set(), []

    def send(name, args):
        senders.add(threading.current_thread().name)
        settings.append(args[4])  # the run's artifacts setting rides with every batch: the worker drops what the run drops
        return Replies.each({"outcome": "pass", "score": 1.0, "details": {"verify_s": 0.01}}, len(args[2]))

    assert drive(run.id, worker="w1", send=send) == "completed"
    assert senders and all(name.startswith("verify") for name in senders)
    assert settings and all(s == {"keep": False, "max_bytes": 256 << 10} for s in settings)
    passes = MetricPoint.objects.filter(run=run, key="outcome/remote-code/pass").order_by("step")
    assert [p.value for p in passes] == [16.0, 16.0, 16.0]
    lag = list(MetricPoint.objects.filter(run=run, key="batch/policy_lag", domain="").order_by("step").values_list("value", flat=True))
    assert lag == [0.0, 1.0, 1.0]
    assert list(MetricPoint.objects.filter(run=run, key="verify/remote-code/p50_s").values_list("value", flat=True)) == [0.01] * 3


class _Gated(Replies):
    """Replies that arrive only once ``gate`` is set (a verification on a slow lane)."""

    def __init__(self, result: dict, n: int, gate: threading.Event):
        super().__init__([result] * n)
        self.gate = gate

    def get(self, timeout=None, **kw):
        from celery.exceptions import TimeoutError as ResultTimeout

        if not self.gate.wait(timeout):
            raise ResultTimeout("not yet")
        return super().get(**kw)


def test_a_step_waits_for_a_slow_lane_only_as_long_as_its_budget_and_its_groups_join_the_next_step(setup, monkeypatch):
    """A sandboxed domain whose results come back only after the step is recorded: with
    rollout.verify_budget_s the step trains on the inline domain's groups, the slow domain's join
    the next step (one update staler, within staleness 1), and the run completes with contiguous
    steps instead of waiting out the slow lane at every step."""
    actor, model = setup
    code_domain(actor, "slow-code", "Slow")
    config = {**SMALL, "rollout": {**SMALL["rollout"], "verify_budget_s": 1.0}}
    run = running_run(actor, model, steps=3, domains=["builtin-addition", "slow-code"], config=config, staleness=1)
    factories.live_worker(["verify"])
    gates: list[threading.Event] = []

    def send(name, args):
        gates.append(threading.Event())
        return _Gated({"outcome": "pass", "score": 1.0, "details": {"verify_s": 0.01}}, len(args[2]), gates[-1])

    record = run_services.run_record_step

    def record_then_release(**kw):  # the slow lane answers once the step that sent it is recorded
        record(**kw)
        for gate in list(gates):
            gate.set()

    monkeypatch.setattr("workers.driver.runs.run_record_step", record_then_release)
    assert drive(run.id, worker="w1", send=send) == "completed"
    assert steps_of(run) == [1, 2, 3]

    def series(key, domain=""):
        return dict(MetricPoint.objects.filter(run=run, key=key, domain=domain).values_list("step", "value"))

    out, into = series("batch/groups_carried_out"), series("batch/groups_carried_in")
    assert out[1] >= 1 and into[1] == 0
    assert into[2] == out[1] and into[3] == out[2]
    assert series("outcome/slow-code/pass", "slow-code").keys() == {2, 3}  # step 1 trained on addition alone
    assert set(series("batch/policy_lag").values()) <= {0.0, 1.0}


@pytest.mark.parametrize("long_lane_served", [True, False])
def test_a_slow_domain_moves_to_the_long_lane_while_a_worker_serves_it(setup, long_lane_served):
    """Duration-aware dispatch: a sandboxed domain whose verifications take 3 s (as the workers
    report them) is measured in the first step and its later batches go to the long lane
    (temper.verify.batch_long) when a live worker serves verify_long; with none, they stay on
    verify (lanes degrade, never stall)."""
    actor, model = setup
    code_domain(actor, "slow-code", "Slow")
    run = running_run(actor, model, steps=3, domains=["slow-code"])
    factories.live_worker(["verify", "verify_long"] if long_lane_served else ["verify"])
    names = []

    def send(name, args):
        names.append(name)
        return Replies.each({"outcome": "pass", "score": 1.0, "details": {"verify_s": 3.0}}, len(args[2]))

    assert drive(run.id, worker="w1", send=send) == "completed"
    event = RunEvent.objects.get(run=run, kind="lane")
    assert (event.data["domain"], event.data["from"], event.data["to"], event.data["step"]) == ("slow-code", "short", "long", 1)
    first = names[0]
    later = set(names[1:])
    assert first == "temper.verify.batch"
    assert later == ({"temper.verify.batch_long"} if long_lane_served else {"temper.verify.batch"}), names
    lane = list(MetricPoint.objects.filter(run=run, key="verify/slow-code/long_lane").order_by("step").values_list("value", flat=True))
    assert lane == ([1.0] * 3 if long_lane_served else [0.0] * 3)


def test_the_driver_task_is_not_cut_off_by_the_default_task_time_limit(settings):
    """A run lasts longer than the default task limit (5 minutes); the driver's own limits say so
    explicitly (a limit of None would fall back to the default and fail the run mid-training)."""
    from workers.tasks import drive_run

    assert drive_run.soft_time_limit >= 7 * 24 * 3600 > settings.CELERY_TASK_SOFT_TIME_LIMIT
    assert drive_run.time_limit > drive_run.soft_time_limit


def test_trainer_config_gives_the_trainer_the_runs_own_values(settings, tmp_path):
    """Every setting the run owns comes from the run (whatever an older config row says); the run's
    defaults fill what its config leaves out and never override what it sets."""
    from trainer.config import has_path, load_config
    from trainer.run_fields import RUN_DEFAULTS, RUN_OWNED
    from trainer.config_schema import config_setting
    from controlplane.runs.preflight import checkpoint_root, trainer_config

    settings.VAR_DIR = tmp_path
    team = factories.team("acme")
    addition, parity = factories.domain("addition"), factories.domain("parity")
    stale = config_setting("rollout.staleness").bounds["le"]
    run = factories.run(team, domains=[addition, parity], base_model="/models/tiny", staleness=stale,
                        budget_steps=7, budget_seconds=90.0,
                        # a row written before the API refused run-owned settings in config
                        config={"rollout": {"staleness": 0, "n": 4}, "limits": {"max_wall_s": 5.0}, "sampler": {"holdout_fraction": 0.25}})
    rows = list(run.run_domains.select_related("domain", "domain_version"))
    raw = trainer_config(run, rows)
    cfg = load_config(raw)
    assert cfg.name == f"run-{run.id}" and cfg.model.path == "/models/tiny"
    assert set(cfg.domains) == {"addition", "parity"} and sum(cfg.domains.values()) == pytest.approx(1.0)
    assert cfg.rollout.staleness == stale and cfg.rollout.n == 4
    assert (cfg.limits.max_steps, cfg.limits.max_wall_s) == (7, 90.0)
    assert cfg.checkpoint.dir == str(checkpoint_root(run.id))
    assert cfg.sampler.holdout_fraction == 0.25  # set by the run's config: kept
    assert cfg.checkpoint.every_steps == RUN_DEFAULTS["checkpoint.every_steps"]  # left out: the run's default
    assert all(has_path(raw, o.path) for o in RUN_OWNED)

    run.budget_seconds = None
    run.config = {}
    cfg = load_config(trainer_config(run, rows))
    assert cfg.limits.max_wall_s == 0.0  # the trainer's "no limit"
    assert cfg.sampler.holdout_fraction == RUN_DEFAULTS["sampler.holdout_fraction"]


def test_a_reward_collapse_fires_one_signed_webhook_from_the_driver_within_the_step(setup, monkeypatch):
    """A collapse injected into a real run's reward (the trainer's outcome metrics, scripted for
    one domain) fires the team's rule in the step it first holds: one signed POST to a local
    receiver, sent before the next step is written, linked to the chart at that step."""
    import hashlib
    import hmac

    import trainer.job
    from controlplane import dispatch
    from controlplane.alerts import services as alerts
    from controlplane.alerts.models import AlertFiring, AlertRule
    from tests.alerts_receiver import Receiver

    actor, model = setup
    series = [0.9] * 4 + [0.0] * 4
    real, calls = trainer.job.outcome_metrics, []

    def scripted(trajs):
        out = real(trajs)
        if trajs:
            calls.append(1)
            out["reward/builtin-addition"] = series[min(len(calls), len(series)) - 1]
        return out

    monkeypatch.setattr(trainer.job, "outcome_metrics", scripted)
    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: alerts.deliver(*args) if name == "temper.notify.deliver" else None)
    AlertRule.objects.filter(team__isnull=True).delete()
    run = running_run(actor, model, steps=len(series), domains=DOMAINS)
    secret = "driver-test-secret-0001"
    with Receiver() as receiver:
        AlertRule.objects.create(team=run.team, name="addition collapse", condition="drop", metric="reward/builtin-addition",
                                 threshold=0.3, window=2, channels=[{"type": "webhook", "url": receiver.url, "secret": secret}])
        assert drive(run.id, worker="w1", send=_no_send) == "completed"
        requests = list(receiver.requests)
    firing = AlertFiring.objects.get(run=run)
    a, ema, best, expected = 2 / 3, None, None, None  # the first step whose EMA is 0.3 below its best
    for i, v in enumerate(series, start=1):
        ema = v if ema is None else a * v + (1 - a) * ema
        best = ema if best is None else max(best, ema)
        if expected is None and i >= 2 and best - ema >= 0.3:
            expected = i
    assert firing.step == expected == 5
    (request,) = requests
    headers = {k.lower(): v for k, v in request["headers"].items()}
    mac = hmac.new(secret.encode(), headers["x-temper-timestamp"].encode() + b"." + request["body"], hashlib.sha256)
    assert headers["x-temper-signature"] == "sha256=" + mac.hexdigest()
    assert request["json"]["url"].endswith(f"/runs/{run.id}/?step={expected}&metric=reward/builtin-addition#charts")
    delivery = firing.deliveries.get()
    next_step_written = MetricPoint.objects.filter(run=run, step=expected + 1).order_by("time").first().time
    assert delivery.status == "sent" and delivery.sent_at < next_step_written
    assert RunEvent.objects.filter(run=run, kind="alert", data__step=expected).count() == 1
