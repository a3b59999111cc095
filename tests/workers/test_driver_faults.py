"""Faults outside a run pause it with an event naming the cause, and it resumes once the cause is
gone: no live worker on a queue its verification needs (not a quarantine of its domains),
storage that refuses a checkpoint (not a failure). A step whose samples were all masked records
no reward (not 0). A dead driver is recovered once, with one event, however many schedulers see it.

In process (the driver runs in the test, ``send`` stands in for the verify workers), except the
last test, which uses real Celery workers."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.db import connection, connections
from django.utils import timezone

from controlplane.runs import series
from controlplane.runs.models import Checkpoint, MetricPoint, Run, RunEvent
from controlplane.runs.selectors import run_explain
from controlplane.runs.services import lease_s, run_create, run_pause, run_resume
from controlplane.scheduling.models import WorkerHeartbeat
from controlplane.scheduling.services import schedule_tick
from tests import factories
from tests.services import celery_worker, require_postgres, require_redis, wait_for, worker_env
from tests.workers.driving import Replies, code_domain, running_run
from tests.workers.steps import after_each_step
from controlplane.runs.preflight import checkpoint_root
from workers.driver import drive

pytestmark = pytest.mark.django_db(transaction=True)

PASS = {"outcome": "pass", "score": 1.0, "details": {"verify_s": 0.01}}


@pytest.fixture
def setup(tiny_model, settings, tmp_path, monkeypatch):
    from controlplane import dispatch

    sent = []
    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: sent.append((name, args)))  # no broker here
    settings.VAR_DIR = tmp_path
    settings.TEMPER_WORKER_STALE_S = 24 * 3600  # a recorded heartbeat stays live however slow the machine
    _, admin = factories.synced_team(["builtin-addition"])
    return SimpleNamespace(actor=admin, model=tiny_model, sent=sent)


class _NoResult:
    """What waiting on a batch whose worker died looks like: each wait runs out with no result."""

    def get(self, timeout, **kw):
        threading.Event().wait(timeout)
        raise TimeoutError(f"no result within {timeout:.1f} s")

    def revoke(self):
        pass


def _values(run, key):
    return dict(MetricPoint.objects.filter(run=run, key=key).values_list("step", "value"))


def _steps(run):
    return list(MetricPoint.objects.filter(run=run, key="stage/step_s").order_by("step").values_list("step", flat=True))


def _silence(hb):
    WorkerHeartbeat.objects.filter(pk=hb.pk).update(last_seen=timezone.now() - timedelta(days=2))


def test_a_verify_queue_with_no_live_worker_pauses_the_run_and_a_returning_worker_resumes_it(setup):
    """The verify worker dies while step 2 is being verified: step 2's samples are all masked (no
    reward point, the masked count kept), the run pauses naming the queue with no domain
    quarantined, and once a worker is back the scheduler resumes it and no step is lost or doubled."""
    code_domain(setup.actor, "remote-code")
    run = running_run(setup.actor, setup.model, steps=4, domains=["remote-code"])
    hb = factories.live_worker(["verify"])

    def send(name, args):
        assert name == "temper.verify.batch"
        if Run.objects.get(pk=run.pk).current_step == 0:
            return Replies.each(PASS, len(args[2]))
        _silence(hb)  # step 2: the worker took the batch and died; its heartbeat stops
        return _NoResult()

    assert drive(run.id, worker="w1", send=send) == "paused (no live worker on queue verify)"
    run.refresh_from_db()
    assert run.state == "paused" and run.driver == "" and run.current_step == 2
    assert not RunEvent.objects.filter(run=run, kind="quarantine").exists()
    event = RunEvent.objects.filter(run=run, kind="paused").get()
    assert event.data["cause"] == "no_worker" and event.data["queue"] == "verify"
    assert "no live worker on queue verify since" in event.message
    assert "celery -A workers.celery worker -Q verify" in event.message
    assert run_explain(run=run)["paused"]["resume_when_served"] == "verify"

    # (b) step 2 was all masked: no reward point at all, the masked samples counted.
    assert sorted(_values(run, "reward/mean")) == [1]
    assert sorted(_values(run, "reward/remote-code")) == [1]
    assert _values(run, "outcome/remote-code/sandbox_error") == {2: 16.0}
    assert _values(run, "batch/infra_masked") == {1: 0.0, 2: 16.0}
    assert series.series(run=run, keys=["reward/mean"])["series"]["reward/mean"]["step"] == [1]
    assert Checkpoint.objects.filter(run=run).values_list("step", flat=True).get() == 2

    schedule_tick()  # still no worker: it stays paused
    assert Run.objects.get(pk=run.pk).state == "paused"
    factories.live_worker(["verify"], name="verify-2@test")
    schedule_tick()  # the worker is back: queued again and admitted in the same tick
    run.refresh_from_db()
    assert run.state == "running" and run.scheduler_note == {}
    assert RunEvent.objects.filter(run=run, kind="resumed", data__cause="worker_back").exists()
    assert ("temper.rollout.drive_run", (run.id,)) in setup.sent

    assert drive(run.id, worker="w2", send=lambda name, args: Replies.each(PASS, len(args[2]))) == "completed"
    assert _steps(run) == [1, 2, 3, 4]
    assert sorted(_values(run, "reward/mean")) == [1, 3, 4]
    assert not RunEvent.objects.filter(run=run, kind="quarantine").exists()


def test_a_run_admitted_with_no_verify_worker_pauses_before_its_first_step(setup):
    code_domain(setup.actor, "remote-code")
    run = running_run(setup.actor, setup.model, steps=2, domains=["remote-code", "builtin-addition"])

    def send(name, args):
        raise AssertionError("nothing is sent to a queue nobody serves")

    assert drive(run.id, worker="w1", send=send) == "paused (no live worker on queue verify)"
    run.refresh_from_db()
    assert run.state == "paused" and run.current_step == 0 and not _steps(run)
    assert "(none has served it)" in RunEvent.objects.get(run=run, kind="paused").message
    # A user who pauses it too keeps it paused when a worker comes.
    run_pause(actor=setup.actor, run=run)
    factories.live_worker(["verify"])
    schedule_tick()
    assert Run.objects.get(pk=run.pk).state == "paused"
    run_resume(actor=setup.actor, run=run)
    schedule_tick()
    assert Run.objects.get(pk=run.pk).state == "running"
    assert drive(run.id, worker="w2", send=lambda name, args: Replies.each(PASS, len(args[2]))) == "completed"
    assert _steps(run) == [1, 2]


def test_masked_samples_of_a_live_worker_still_count_toward_quarantine(setup):
    """Only verifications that no worker was there to do are left out: a live worker whose
    sandboxes fail still gets the domain quarantined (the run goes on with the others)."""
    code_domain(setup.actor, "flaky-code")
    run = running_run(setup.actor, setup.model, steps=3, domains=["builtin-addition", "flaky-code"])
    factories.live_worker(["verify"])
    down = {"outcome": "sandbox_error", "score": 0.0, "details": {"error": "docker engine down"}}
    assert drive(run.id, worker="w1", send=lambda name, args: Replies.each(down, len(args[2]))) == "completed"
    assert RunEvent.objects.get(run=run, kind="quarantine").data["domain"] == "flaky-code"


def test_batches_no_worker_answers_are_masked_then_pause_the_run_but_never_quarantine(setup, settings):
    """The verify worker looks alive (its heartbeat is not stale yet) but no batch comes back,
    through every re-send: the items are masked and the domain is not quarantined (before, one
    such step quarantined the run's only domain and failed the run); after SilentQueues.STEPS
    such steps in a row the run pauses naming the queue (masked steps would go on for ever), at a
    checkpoint, waiting for a user's resume."""
    from workers.observers import SilentQueues

    settings.TEMPER_VERIFY_DEADLINE_S = 0.05
    code_domain(setup.actor, "remote-code")
    run = running_run(setup.actor, setup.model, steps=SilentQueues.STEPS + 3, domains=["remote-code"])
    factories.live_worker(["verify"])
    assert drive(run.id, worker="w1", send=lambda name, args: _NoResult()) == "paused (workers on queue verify answer nothing)"
    assert not RunEvent.objects.filter(run=run, kind="quarantine").exists()
    steps = range(1, SilentQueues.STEPS + 1)
    assert _values(run, "outcome/remote-code/sandbox_error") == {s: 16.0 for s in steps}
    assert _values(run, "reward/mean") == {}
    assert _values(run, "verify/lost_items")[SilentQueues.STEPS] == 16.0 * SilentQueues.STEPS
    run.refresh_from_db()
    assert run.state == "paused" and run.current_step == SilentQueues.STEPS
    assert run.checkpoints.filter(step=SilentQueues.STEPS).exists()
    event = RunEvent.objects.get(run=run, kind="paused")
    assert event.data["cause"] == "unanswered" and event.data["queue"] == "verify"
    assert "look alive but answered none" in event.message
    schedule_tick()  # the queue looks served: the scheduler must not resume it by itself
    run.refresh_from_db()
    assert run.state == "paused"


def test_outcome_metrics_of_an_all_masked_batch_have_no_reward():
    from trainer.batch import outcome_metrics
    from trainer.outcomes import Outcome, Verification

    def traj(domain, verification):
        return SimpleNamespace(task=SimpleNamespace(domain=domain, meta={}), verification=verification, loss_mask=[1, 1], truncated=False)

    masked = [traj("code", Verification(Outcome.SANDBOX_ERROR)) for _ in range(3)]
    metrics = outcome_metrics(masked)
    assert "reward/mean" not in metrics and "reward/code" not in metrics and "pass_rate/code" not in metrics
    assert metrics["batch/infra_masked"] == 3.0 and metrics["outcome/code/sandbox_error"] == 3.0
    mixed = outcome_metrics(masked + [traj("math", Verification(Outcome.PASS, 1.0)), traj("math", Verification(Outcome.FAIL))])
    assert mixed["reward/mean"] == 0.5 and mixed["reward/math"] == 0.5 and "reward/code" not in mixed


def test_a_checkpoint_the_storage_refuses_pauses_the_run_and_it_resumes_from_the_last_intact_one(setup):
    """The checkpoint of step 4 cannot be written (a file stands where its directory goes: the
    storage answers EEXIST to the real save). The run pauses with the error, keeps step 2's
    checkpoint as its last, and once the storage is fixed it resumes from step 2 with no step
    lost or doubled."""
    run = running_run(setup.actor, setup.model, steps=6, domains=["builtin-addition"])
    blocker = checkpoint_root(run.id) / "step-4.tmp"

    def break_storage(**kw):
        if kw["step"] == 3:
            blocker.write_text("not a directory")

    with after_each_step(break_storage):
        assert drive(run.id, worker="w1", send=None) == "paused (storage error)"
    run.refresh_from_db()
    assert run.state == "paused" and run.driver == "" and run.error == ""
    event = RunEvent.objects.get(run=run, kind="paused")
    assert event.data["cause"] == "storage" and event.data["failed_step"] == 4 and event.data["intact_step"] == 2
    assert event.message.startswith(f"checkpoint at step 4 could not be written to {checkpoint_root(run.id)}: [Errno 17] File exists")
    assert "the run is paused at its last intact checkpoint, step 2" in event.message
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [2]
    assert not (checkpoint_root(run.id) / "step-4").exists()
    assert run_explain(run=run)["paused"]["binding"] == "storage"

    blocker.unlink()  # the storage is fixed; a user resumes the run
    run_resume(actor=setup.actor, run=run)
    schedule_tick()
    assert Run.objects.get(pk=run.pk).state == "running"
    assert drive(run.id, worker="w2", send=None) == "completed"
    assert RunEvent.objects.filter(run=run, kind="resumed", data__checkpoint_step=2).exists()
    assert _steps(run) == [1, 2, 3, 4, 5, 6]
    assert list(Checkpoint.objects.filter(run=run).order_by("step").values_list("step", flat=True)) == [2, 4, 6]
    assert sorted(p.name for p in checkpoint_root(run.id).iterdir()) == ["step-4", "step-6"]  # keep_last 2, no .tmp left


@pytest.mark.slow
def test_a_checkpoint_write_the_file_system_refuses_midway_leaves_nothing_behind(tmp_path):
    """The real save (safetensors, torch.save) against a file system that refuses to grow a file
    (RLIMIT_FSIZE: EFBIG from the kernel), in a process of its own: CheckpointWriteError with the
    errno, no step-N and no step-N.tmp left, and the earlier checkpoint untouched."""
    script = r"""
import errno, resource, signal, sys
from pathlib import Path
import torch
from trainer.checkpoint import Checkpoint, CheckpointWriteError
from trainer.config import load_config
from trainer.models.tiny import build_tiny
from transformers import AutoModelForCausalLM, AutoTokenizer

root = Path(sys.argv[1])
path = build_tiny(root / "model", layers=2)
model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
cfg = load_config({"model": {"path": str(path)}, "domains": {"builtin-addition": 1.0}, "checkpoint": {"dir": str(root / "ck")}})
ck = Checkpoint(step=2, config=cfg, sampler={}, optimizer={}, engine_rng=None, torch_rng=torch.get_rng_state(), ahead=[],
                sft={"steps_done": 0, "rng": None, "optimizer": None})
ck.save(root / "ck" / "step-2", model, tok)
ck.step = 4
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
try:
    ck.save(root / "ck" / "step-4", model, tok)
except CheckpointWriteError as exc:
    print("ERRNO", exc.errno, "|", exc)
"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    assert "ERRNO 27 |" in out.stdout, out.stdout + out.stderr[-3000:]
    assert "checkpoint at step 4 could not be written to" in out.stdout and "File too large" in out.stdout
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["step-2"]
    assert (tmp_path / "ck" / "step-2" / "state.json").is_file()


def test_concurrent_schedulers_recover_a_dead_driver_once(setup):
    """Four scheduler ticks at once (and more after) see a driver's lease expire: one recovery
    event, one re-dispatch. A re-dispatch that no driver claims is sent again without a second
    recovery; with no live rollout worker the run pauses naming the queue, and resumes when one is
    back."""
    require_postgres()
    run = running_run(setup.actor, setup.model, steps=3, domains=["builtin-addition"])
    dead = timezone.now() - timedelta(seconds=lease_s() * 3)
    Run.objects.filter(pk=run.pk).update(driver="dead@host", driver_seen_at=dead)
    factories.live_worker(["control", "rollout"], name="rollout@test")
    barrier, errors = threading.Barrier(4), []

    def tick():
        try:
            barrier.wait()
            schedule_tick()
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=tick) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    schedule_tick()
    recoveries = RunEvent.objects.filter(run=run, kind="recovery")
    assert recoveries.count() == 1 and recoveries.get().data["previous_driver"] == "dead@host"
    assert setup.sent.count(("temper.rollout.drive_run", (run.id,))) == 1
    run.refresh_from_db()
    assert run.driver == "" and run.state == "running"

    # The re-dispatched driver never came (its message lost): sent again, no second recovery.
    Run.objects.filter(pk=run.pk).update(driver_seen_at=dead)
    schedule_tick()
    assert RunEvent.objects.filter(run=run, kind="recovery").count() == 1
    assert setup.sent.count(("temper.rollout.drive_run", (run.id,))) == 2

    # No rollout worker left at all: paused, naming the queue; resumed when one is back.
    Run.objects.filter(pk=run.pk).update(driver_seen_at=dead)
    WorkerHeartbeat.objects.all().delete()
    schedule_tick()
    run.refresh_from_db()
    assert run.state == "paused" and RunEvent.objects.filter(run=run, kind="recovery").count() == 1
    assert "no live worker on queue rollout" in RunEvent.objects.get(run=run, kind="paused").message
    factories.live_worker(["control", "rollout"], name="rollout-2@test")
    schedule_tick()
    assert Run.objects.get(pk=run.pk).state == "running"
    assert drive(run.id, worker="w2", send=None) == "completed"
    assert RunEvent.objects.filter(run=run, kind="recovery").count() == 1


@pytest.mark.slow
def test_with_real_workers_a_run_waits_paused_for_its_verify_worker(transactional_db, tmp_path):
    """Real Celery workers: a control + rollout worker and no verify worker. The run with a
    sandboxed code domain pauses naming the verify queue, no domain quarantined; a verify worker
    starts, the scheduler's tick (beat's job) resumes the run and it completes."""
    require_postgres()
    redis_url = require_redis()
    from trainer.models.tiny import build_tiny
    from workers.sandbox import bwrap
    from tests.services import require

    require(bwrap.available(), "bubblewrap for the sandboxed code domain")
    env = worker_env(connection.settings_dict, redis_url, TEMPER_VAR_DIR=str(tmp_path / "var"))
    _, actor = factories.synced_team(["builtin-addition"])
    code_domain(actor, "remote-code")
    model = str(build_tiny(tmp_path / "model", layers=2))
    run = run_create(actor=actor, data=factories.run_payload(
        ["remote-code"], team="acme", base_model=model, budget={"steps": 2},
        config={"rollout": {"prompts_per_step": 2, "n": 2, "max_new_tokens": 8}}))
    logs = [tmp_path / "driver.log", tmp_path / "verify.log"]
    with celery_worker(env, "driver", "control,rollout", log_path=logs[0]):
        from controlplane.runs.services import run_start

        run_start(actor=actor, run=run)
        paused = wait_for(lambda: RunEvent.objects.filter(run=run, kind="paused", data__cause="no_worker").first(), 300,
                          "the run to pause for want of a verify worker", logs=logs[:1])
        assert "no live worker on queue verify" in paused.message
        assert Run.objects.get(pk=run.pk).state == "paused"
        with celery_worker(env, "verify", "verify", log_path=logs[1]):
            final = wait_for(lambda: schedule_tick() and Run.objects.filter(pk=run.pk, state__in=["completed", "failed"]).first(),
                             300, "the run to end", logs=logs)
    assert final.state == "completed", final.error
    assert not RunEvent.objects.filter(run=run, kind="quarantine").exists()
    assert _steps(run) == [1, 2]
    assert _values(run, "outcome/remote-code/sandbox_error") == {}
