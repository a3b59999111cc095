"""Reads for scheduling: which queues a live worker serves, from the workers' heartbeats."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from controlplane.scheduling.models import WorkerHeartbeat


def worker_stale_s() -> float:
    """A worker silent this long serves nothing (TEMPER_WORKER_STALE_S, 60 s: four missed
    heartbeats of CELERY_HEARTBEAT_PERIOD_S)."""
    return float(settings.TEMPER_WORKER_STALE_S)


@dataclass(frozen=True)
class QueueService:
    """Who serves the work queues now: the queues with a live worker, and each queue's newest
    heartbeat from any worker (live or not), which says since when a queue has gone unserved."""

    live: frozenset[str]
    last_seen: dict[str, datetime]

    def served(self, queue: str) -> bool:
        return queue in self.live

    def unserved_note(self, queue: str) -> str:
        """``no live worker on queue verify since 10:42 UTC; start one: celery -A ...``"""
        seen = self.last_seen.get(queue)
        since = f" since {seen:%H:%M} UTC" if seen is not None else " (none has served it)"
        return f"no live worker on queue {queue}{since}; start one: celery -A workers.celery worker -Q {queue}"


def queue_service(*, now: datetime | None = None) -> QueueService:
    """The queues served by a worker whose heartbeat is younger than ``worker_stale_s()``. One
    small query: a deployment has a handful of workers."""
    cutoff = (now or timezone.now()) - timedelta(seconds=worker_stale_s())
    live: set[str] = set()
    last_seen: dict[str, datetime] = {}
    for queues, seen in WorkerHeartbeat.objects.values_list("queues", "last_seen"):
        for queue in queues or []:
            if seen >= cutoff:
                live.add(queue)
            if queue not in last_seen or seen > last_seen[queue]:
                last_seen[queue] = seen
    return QueueService(live=frozenset(live), last_seen=last_seen)
