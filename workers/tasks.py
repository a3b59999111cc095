"""Thin Celery tasks: take ids, call one service, safe to run twice."""
from __future__ import annotations

from celery import shared_task
from django.db import OperationalError
from psycopg.errors import DeadlockDetected

from controlplane.alerts import services as alerts
from controlplane.domains.pins import domain_quotas, pinned_verifier
from controlplane.review.queues import queue_sample
from controlplane.runs.models import Run
from controlplane.scheduling import services as scheduling
from trainer.verifiers.artifacts import retain_results
from workers import verify
from workers.audit import run_audit
from workers.domains import worker_name
from workers.driver import drive
from workers.evaluate import run_eval
from workers.heartbeat import publish_sandbox_figures
from workers.judge import shadow_run
from workers.launch import JOIN_TASK, drive_launched, drive_on_devices, join_node
from workers.pkgs_build import build_and_write


@shared_task(name="temper.control.worker_sweep", queue="control", soft_time_limit=30, time_limit=60)
def worker_sweep(stale_after_s: float = 60.0) -> dict:
    """Report workers whose heartbeat is older than ``stale_after_s``; forget those gone a day."""
    return scheduling.worker_sweep(stale_after_s=stale_after_s)


@shared_task(name="temper.control.ping", queue="control", soft_time_limit=10, time_limit=20)
def ping(value: int) -> int:
    """Round trip through the broker and a worker; used by health checks and the broker tests."""
    return value + 1


DEADLOCK_RETRIES = 3
"""Times a tick aborted by a deadlock is run again at once."""


@shared_task(name="temper.control.schedule_tick", queue="control", soft_time_limit=30, time_limit=60, ignore_result=True,
             bind=True)
def schedule_tick(self) -> dict:
    """Admit queued runs, ask lower-priority runs to yield, re-dispatch runs whose driver died.

    A tick locks every queued and running run while drivers write their own; where PostgreSQL
    breaks a lock cycle by aborting the tick (its transaction rolled back whole), it ticks again
    at once instead of leaving a preemption or an admission to the next period."""
    retries = DEADLOCK_RETRIES
    while True:
        try:
            decision = scheduling.schedule_tick(worker=self.request.hostname or "")
            return {"admit": decision.admit, "preempt": decision.preempt}
        except OperationalError as exc:
            if not retries or not isinstance(exc.__cause__, DeadlockDetected):
                raise
            retries -= 1


@shared_task(name="temper.notify.deliver", queue="notify", soft_time_limit=30, time_limit=60, ignore_result=True)
def alert_deliver(delivery_id: int) -> str:
    """Try one alert delivery (a webhook, a Slack message, an e-mail); a failed try is scheduled
    again with backoff, and the sweep retries any whose message was lost."""
    delivery = alerts.deliver(delivery_id)
    return delivery.status if delivery is not None else "not due"


@shared_task(name="temper.control.alert_sweep", queue="control", soft_time_limit=60, time_limit=120, ignore_result=True)
def alert_sweep() -> dict:
    """Alerts no step announces: stalled runs, events of runs that stopped, deliveries due again."""
    return alerts.alerts_sweep()


DRIVE_TIME_LIMIT_S = 30 * 24 * 3600
"""A driver owns its run until the run ends or parks: days, not the default limit of minutes (a
limit of None falls back to ``CELERY_TASK_SOFT_TIME_LIMIT``, which would fail any run that lasts
longer). A dead driver is caught by its lease, not by this limit."""


@shared_task(name="temper.rollout.drive_run", queue="rollout", acks_late=True, soft_time_limit=DRIVE_TIME_LIMIT_S,
             time_limit=DRIVE_TIME_LIMIT_S + 300, ignore_result=True)
def drive_run(run_id: int) -> str:
    """Own one run until it ends, pauses or is preempted (safe to run twice: the lease decides);
    a run of several ranks is driven by its launched rank 0 (workers/launch.py)."""
    run = Run.objects.filter(pk=run_id).first()
    if run is not None and run.ranks > 1:
        return drive_launched(run_id, worker_name(), ranks=run.ranks)
    return drive(run_id)


@shared_task(name="temper.train.drive_run", queue="train", acks_late=True, soft_time_limit=DRIVE_TIME_LIMIT_S,
             time_limit=DRIVE_TIME_LIMIT_S + 300, ignore_result=True)
def train_drive_run(run_id: int) -> str:
    """Own one GPU run on the devices the scheduler assigned to this worker, in a process of its
    own with CUDA_VISIBLE_DEVICES set to them (workers/launch.py)."""
    return drive_on_devices(run_id, worker_name())


@shared_task(name=JOIN_TASK, queue="train", acks_late=True, soft_time_limit=DRIVE_TIME_LIMIT_S,
             time_limit=DRIVE_TIME_LIMIT_S + 300, ignore_result=True)
def train_join_run(run_id: int, node_rank: int, master: str) -> str:
    """Run node ``node_rank`` of a run spread over several hosts: this worker's share of its ranks,
    joined to the rendezvous at ``master`` that the run's driving worker published (sent to this
    worker's own queue; workers/launch.py)."""
    return join_node(run_id, worker_name(), node_rank, master)


@shared_task(name="temper.verify.batch", queue="verify", acks_late=True, soft_time_limit=600, time_limit=660)
def verify_batch(domain: str, version: int, items: list[dict], digest: str | None = None,
                 artifacts: dict | None = None) -> list[dict]:
    """Verify a batch with a domain version's pinned cascade (sandbox stages run here, within the
    domain's live sandbox quota). ``digest``: the pinned spec's (:func:`~workers.verify.pinned_spec`:
    a process that read that spec before verifies without reading it again). ``artifacts``: the
    run's artifacts setting (``{keep, max_bytes}``), applied here so that what the run drops is
    never sent back."""
    verifier = verify.pinned_spec(domain, version, digest, lambda slug, v: pinned_verifier(slug=slug, version=v))
    if not any(stage.get("type") in verify.SANDBOX_STAGES for stage in verifier.get("stages", [])):
        return retain_results(verify.verify_items(verifier, items), artifacts)  # no sandbox: no quota to read
    quota = domain_quotas(slugs=[domain])[domain]
    try:
        return retain_results(verify.verify_items(verifier, items, max_concurrent_sandboxes=quota.max_concurrent_sandboxes),
                              artifacts)
    finally:
        publish_sandbox_figures()


@shared_task(name="temper.verify.batch_long", queue="verify_long", acks_late=True, soft_time_limit=600, time_limit=660)
def verify_batch_long(domain: str, version: int, items: list[dict], digest: str | None = None,
                      artifacts: dict | None = None) -> list[dict]:
    """The same as temper.verify.batch, on the long lane (workers/lanes.py): domains whose
    verifications take long, so they never hold the workers of the short ones."""
    return verify_batch(domain, version, items, digest, artifacts)


@shared_task(name="temper.verify.audit", queue="audit", acks_late=True, soft_time_limit=3600, time_limit=3720)
def verify_audit(audit_id: int) -> str:
    """Run one domain version's verifier audit and record it (safe to run twice; a crash is
    recorded as a failed audit). Below ``AUDIT_LOST_AFTER_S`` in controlplane/domains/services.py."""
    return run_audit(audit_id)


@shared_task(name="temper.eval.run", queue="eval", acks_late=True, soft_time_limit=3 * 3600, time_limit=3 * 3600 + 300,
             ignore_result=True)
def eval_run(eval_run_id: int) -> str:
    """Evaluate one model version on one eval suite version (safe to run twice)."""
    return run_eval(eval_run_id)


@shared_task(name="temper.judge.batch", queue="judge", acks_late=True, soft_time_limit=600, time_limit=660)
def judge_batch(domain: str, version: int, items: list[dict], digest: str | None = None,
                artifacts: dict | None = None) -> list[dict]:
    """Verify a batch whose cascade has a judge stage (same contract as temper.verify.batch)."""
    return verify_batch(domain, version, items, digest, artifacts)


@shared_task(name="temper.judge.shadow", queue="judge", acks_late=True, soft_time_limit=3600, time_limit=3700)
def judge_shadow(config_id: int) -> dict:
    """Shadow re-scoring of a judge version (idempotent: items already scored are skipped)."""
    return shadow_run(config_id)


@shared_task(name="temper.review.sample", queue="judge", acks_late=True, soft_time_limit=3600, time_limit=3700)
def review_sample(queue_id: int) -> str:
    """Draw a review queue's items (controlplane/review/queues.py; a queue no longer sampling is left
    as it is, so a redelivered message does nothing twice)."""
    return queue_sample(queue_id)


@shared_task(name="temper.pkgs.build", queue="verify_long", soft_time_limit=3 * 3600, time_limit=3 * 3600 + 300)
def pkgs_build(name: str, seed: int = 0) -> dict:
    """Build one swe-pkg package's task set in the sandbox and write its file (workers/pkgs_build.py;
    the same pin and seed give the same file, so running it twice is harmless)."""
    return build_and_write(name, seed=seed)
