"""Writes made by the run driver and the scheduler (system actors, not users).

The driver owns a run through a lease (``Run.driver`` + ``driver_seen_at``); a driver whose
lease was taken over stops at its next step boundary. Step writes are idempotent: metric points
are unique per run/step/domain/key and a step's trajectories are replaced as a whole, so a retried
or resumed step never records anything twice.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane import dispatch
from controlplane.runs import series
from controlplane.runs.models import Checkpoint, MetricPoint, Run, RunEvent, RunState, Trajectory
from trainer.outcomes import OUTCOME_VALUES

def lease_s() -> float:
    """A driver silent for this long is presumed dead and the scheduler hands its run to another
    worker (TEMPER_DRIVER_LEASE_S, 40 s: with ticks every 10 s, noticed within a minute). A live
    driver renews its lease every quarter of it from a thread, however long a step takes."""
    return float(settings.TEMPER_DRIVER_LEASE_S)



class LeaseLost(Exception):
    """Another worker owns the run now; this driver must stop without writing."""


def _event(run: Run, kind: str, message: str, **data: Any) -> None:
    RunEvent.objects.create(run=run, kind=kind, message=message, data=data)


def metric_domain(key: str, domains: set[str]) -> str:
    """The domain a metric belongs to (a path segment naming one of the run's domains), or ''.

    >>> d = {"builtin-parity"}
    >>> metric_domain("outcome/builtin-parity/pass", d), metric_domain("response/length/builtin-parity", d), metric_domain("reward/mean", d)
    ('builtin-parity', 'builtin-parity', '')
    """
    return next((part for part in key.split("/")[1:] if part in domains), "")


@transaction.atomic
def run_claim(*, run_id: int, worker: str) -> Run | None:
    """Take the run's lease when it is running and nobody alive holds it."""
    run = Run.objects.select_for_update().filter(pk=run_id).first()
    if run is None or run.state != RunState.RUNNING:
        return None
    now = timezone.now()
    if run.driver and run.driver != worker and run.driver_seen_at and (now - run.driver_seen_at).total_seconds() < lease_s():
        return None
    previous = run.driver
    run.driver, run.driver_seen_at = worker, now
    run.save(update_fields=["driver", "driver_seen_at", "updated_at"])
    _event(run, "driver", f"driven by {worker}" + (f" (took over from {previous})" if previous and previous != worker else ""),
           worker=worker, previous=previous)
    return run


@transaction.atomic
def run_heartbeat(*, run_id: int, worker: str) -> Run:
    """Renew the lease; returns the run as it is now (state, weights, flags)."""
    run = Run.objects.select_for_update().get(pk=run_id)
    if run.driver != worker:
        raise LeaseLost(f"run {run_id} is driven by {run.driver or 'nobody'} now")
    run.driver_seen_at = timezone.now()
    run.save(update_fields=["driver_seen_at"])
    return run


def run_renew(*, run_id: int, worker: str) -> bool:
    """Renew the lease from the driver's heartbeat thread; False once another worker owns it."""
    return Run.objects.filter(pk=run_id, driver=worker).update(driver_seen_at=timezone.now()) == 1


@transaction.atomic
def run_rewind(*, run: Run, to_step: int) -> int:
    """Forget what was recorded after ``to_step`` (the driver resumes from that checkpoint)."""
    deleted, _ = MetricPoint.objects.filter(run=run, step__gt=to_step).delete()
    series.rewind(run, to_step)
    Trajectory.objects.filter(run=run, step__gt=to_step).delete()
    Run.objects.filter(pk=run.pk).update(current_step=to_step)
    return deleted


def _finite(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


@transaction.atomic
def run_record_step(*, run: Run, worker: str, step: int, metrics: dict[str, float], samples: list[dict],
                    verifier_versions: dict[str, int], tokens: int = 0) -> int:
    """Write one step's metrics and sampled trajectories; idempotent. Returns points written."""
    locked = Run.objects.select_for_update().get(pk=run.pk)
    if locked.driver != worker:
        raise LeaseLost(f"run {run.pk} is driven by {locked.driver or 'nobody'} now")
    now = timezone.now()
    domains = set(run.run_domains.values_list("domain__slug", flat=True))
    points = []
    for key, value in metrics.items():
        v = _finite(value)
        if v is not None:
            points.append(MetricPoint(run=run, step=step, domain=metric_domain(key, domains), key=key, value=v, time=now))
    # A retried write keeps the points already there; only new ones go into the buckets.
    present = set(MetricPoint.objects.filter(run=run, step=step).values_list("domain", "key"))
    points = [p for p in points if (p.domain, p.key) not in present]
    MetricPoint.objects.bulk_create(points, ignore_conflicts=True)
    series.rollup(points)
    Trajectory.objects.filter(run=run, step=step).delete()
    Trajectory.objects.bulk_create([
        Trajectory(
            run=run, step=step, domain=s["domain"], task_id=str(s.get("task_id", ""))[:200], prompt=s["prompt"],
            completion=s["completion"], reward=_finite(s.get("reward")),
            outcome=s["outcome"] if s["outcome"] in OUTCOME_VALUES else "sandbox_error",
            details={k: v for k, v in s.items() if k not in ("domain", "task_id", "prompt", "completion", "reward", "outcome")},
            verifier_version=verifier_versions.get(s["domain"]),
            judge_version=judge_config_id(s),
        )
        for s in samples
    ])
    locked.current_step = max(locked.current_step, step)
    locked.tokens_used += int(tokens)
    locked.driver_seen_at = now
    # This save wakes the run's pages (and with them the new metric points): the live app connects post_save.
    locked.save(update_fields=["current_step", "tokens_used", "driver_seen_at", "updated_at"])
    return len(points)


def judge_config_id(sample: dict) -> int | None:
    """The judge version (review JudgeConfig id) that produced a sample's reward, if a judge did.

    >>> judge_config_id({"details": {"judge_config_id": 7}}), judge_config_id({"details": {}})
    (7, None)
    """
    value = (sample.get("details") or {}).get("judge_config_id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@transaction.atomic
def run_record_checkpoint(*, run: Run, step: int, path: str, metrics: dict | None = None) -> Checkpoint:
    ckpt, created = Checkpoint.objects.update_or_create(run=run, step=step, defaults={"path": path, "metrics": metrics or {}})
    if created:
        _event(run, "checkpoint", f"checkpoint at step {step}", step=step, path=path)
    return ckpt


def latest_checkpoint(run: Run) -> Checkpoint | None:
    for ckpt in Checkpoint.objects.filter(run=run).order_by("-step"):
        if Path(ckpt.path, "state.json").is_file():
            return ckpt
    return None


@transaction.atomic
def run_park(*, run: Run, worker: str) -> Run:
    """At a step boundary after a checkpoint: pause (user) or requeue (preemption); drop the lease."""
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.driver != worker:
        raise LeaseLost(f"run {run.pk} is driven by {run.driver or 'nobody'} now")
    if run.preempt_requested and run.state == RunState.RUNNING:
        run.transition(RunState.PAUSED)
        run.transition(RunState.QUEUED)
        _event(run, "preempted", f"preempted at step {run.current_step}; queued to resume from its checkpoint")
    run.preempt_requested = False
    run.driver, run.driver_seen_at, run.inflight = "", None, {}
    run.save()
    transaction.on_commit(lambda: _tick())
    return run


@transaction.atomic
def run_finish(*, run: Run, worker: str, state: str, error: str = "") -> Run:
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.driver and run.driver != worker:
        raise LeaseLost(f"run {run.pk} is driven by {run.driver} now")
    if run.is_terminal:  # cancelled while the step ran: just let go
        run.driver, run.driver_seen_at = "", None
        run.save(update_fields=["driver", "driver_seen_at", "updated_at"])
        return run
    run.transition(state)
    run.error = error[:10000]
    run.driver, run.driver_seen_at, run.inflight = "", None, {}
    run.preempt_requested = False
    run.save()
    _event(run, state, error.splitlines()[-1][:500] if error else f"{state} at step {run.current_step}")
    transaction.on_commit(lambda: _tick())
    return run


def _tick() -> None:
    dispatch.send("temper.control.schedule_tick")
