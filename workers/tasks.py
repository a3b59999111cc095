"""Thin Celery tasks: take ids, call one service, safe to run twice."""
from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone


@shared_task(name="temper.control.worker_sweep", queue="control", soft_time_limit=30, time_limit=60)
def worker_sweep(stale_after_s: float = 60.0) -> dict:
    """Report workers whose heartbeat is older than ``stale_after_s``; forget those gone a day."""
    from controlplane.scheduling.models import WorkerHeartbeat

    now = timezone.now()
    WorkerHeartbeat.objects.filter(last_seen__lt=now - timedelta(days=1)).delete()
    stale = list(WorkerHeartbeat.objects.filter(last_seen__lt=now - timedelta(seconds=stale_after_s)).values_list("worker", flat=True))
    alive = WorkerHeartbeat.objects.filter(last_seen__gte=now - timedelta(seconds=stale_after_s)).count()
    return {"alive": alive, "stale": stale}


@shared_task(name="temper.control.ping", queue="control", soft_time_limit=10, time_limit=20)
def ping(value: int) -> int:
    """Round trip through the broker and a worker; used by health checks and the broker tests."""
    return value + 1
