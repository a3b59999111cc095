"""Reads for scheduling: which queues a live worker serves, from the workers' heartbeats, and
when the scheduler last ran."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from controlplane.scheduling.models import PoolKind, ResourcePool, SchedulerTick, WorkerHeartbeat


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


TRAIN_QUEUE = "train"
"""The queue of the workers that run GPU runs; each such worker also serves its own
:func:`direct_queue`, so the scheduler can send a run to the worker whose devices it assigned."""


def direct_queue(worker: str, queue: str = TRAIN_QUEUE) -> str:
    """The queue only ``worker`` consumes, for work bound to its devices. Its name is also its
    exchange's, and every transport Temper runs on must take it: kombu's file-system transport
    (the embedded default) takes only ``[A-Za-z0-9._-]``, while a Celery worker's name holds an
    ``@`` and may hold anything a host name does. Other characters, and ``_`` itself, are written
    ``_xx`` (their code in hex; ``_uxxxxxx`` past 255), so two workers never share a queue.

    >>> direct_queue("train-gpu@node3"), direct_queue("a_b@h"), direct_queue("a@b") != direct_queue("a_40b")
    ('train.train-gpu_40node3', 'train.a_5fb_40h', True)
    """
    return f"{queue}.{''.join(_queue_char(c) for c in worker)}"


def _queue_char(c: str) -> str:
    if c.isascii() and (c.isalnum() or c in ".-"):
        return c
    return f"_{ord(c):02x}" if ord(c) < 256 else f"_u{ord(c):06x}"


def train_workers(*, now: datetime | None = None) -> dict[str, tuple[int, ...]]:
    """Each live worker that serves the train queue and its own direct queue -> the indices of the
    GPUs its heartbeat reports (workers/devices.py; empty for a worker without GPUs). A run
    spread over several hosts (``config.parallel.hosts``) is placed on these."""
    cutoff = (now or timezone.now()) - timedelta(seconds=worker_stale_s())
    workers = {}
    for worker, queues, meta in WorkerHeartbeat.objects.filter(last_seen__gte=cutoff).values_list("worker", "queues", "meta"):
        queues = queues or []
        devices = (meta or {}).get("devices") if isinstance(meta, dict) else None
        if TRAIN_QUEUE not in queues or direct_queue(worker) not in queues or not isinstance(devices, list):
            continue
        workers[worker] = tuple(sorted({d["index"] for d in devices if isinstance(d, dict) and isinstance(d.get("index"), int)}))
    return workers


def train_hosts(*, now: datetime | None = None) -> dict[str, tuple[int, ...]]:
    """:func:`train_workers` with GPUs: each one's device indices."""
    return {worker: devices for worker, devices in train_workers(now=now).items() if devices}


SCHEDULER_LATE_PERIODS = 3
"""The scheduler is late when its last tick is older than this many periods."""


def scheduler_status(*, now: datetime | None = None) -> dict:
    """When the scheduler last ran (``at``, ``age_s``; None: never), its period, what that tick
    did, and ``late`` with the reason when no tick came for ``SCHEDULER_LATE_PERIODS`` periods
    (no worker on the ``control`` queue, beat not running, or its worker busy)."""
    now = now or timezone.now()
    period = float(settings.TEMPER_SCHEDULE_PERIOD_S)
    tick = SchedulerTick.objects.filter(pk=1).first()
    at = tick.at if tick else None
    age = None if at is None else max((now - at).total_seconds(), 0.0)
    late = age is None or age > SCHEDULER_LATE_PERIODS * period
    reason = ""
    if late:
        served = queue_service(now=now).served("control")
        reason = ("no live worker serves the control queue; start one: celery -A workers.celery worker -Q control"
                  if not served else
                  f"no tick for {SCHEDULER_LATE_PERIODS} periods: is celery beat running, and is the control queue's "
                  "worker free (a worker that also trains or verifies delays it)?" if at else
                  "the scheduler has not run yet; is celery beat running?")
    return {"at": at, "age_s": None if age is None else round(age, 1), "period_s": period, "late": late,
            "reason": reason, "duration_ms": tick.duration_ms if tick and at else None,
            "admitted": tick.admitted if tick else 0, "preempted": tick.preempted if tick else 0,
            "queued": tick.queued if tick else 0, "worker": tick.worker if tick else ""}


LANE_QUEUES = (("verify", "short sandbox verifications"), ("verify_long", "long sandbox verifications (p95 from TEMPER_VERIFY_LONG_S)"),
               ("judge", "judged verifications"))
"""The verification lanes (workers/lanes.py) /queue/ shows, with what each carries."""


def queue_backlog(queue: str) -> int | None:
    """Messages waiting in ``queue`` on a Redis broker (all its priority lists); None when the
    broker is not Redis or does not answer."""
    url = settings.CELERY_BROKER_URL
    if not url.startswith(("redis://", "rediss://")):
        return None
    try:
        import redis  # lazy: only a Redis broker has a backlog to read

        client = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
        keys = [queue] + [f"{queue}\x06\x16{p}" for p in range(1, 10)]  # kombu's priority lists
        pipe = client.pipeline()
        for key in keys:
            pipe.llen(key)
        return int(sum(pipe.execute()))
    except Exception:  # noqa: BLE001 - a page shows "unknown" rather than fail on the broker
        return None


def lanes_view(*, now: datetime | None = None) -> list[dict]:
    """Per verification lane: its queue, the live workers serving it and the messages waiting."""
    cutoff = (now or timezone.now()) - timedelta(seconds=worker_stale_s())
    live = list(WorkerHeartbeat.objects.filter(last_seen__gte=cutoff).values_list("worker", "queues"))
    return [{"queue": q, "what": what, "workers": sorted(w for w, queues in live if q in (queues or [])),
             "backlog": queue_backlog(q)} for q, what in LANE_QUEUES]


def gpu_quota_note(max_gpus: int, *, gpu_slots: int | None = None) -> str:
    """Why a team's quota of ``max_gpus`` cannot all be used ("" when it can): no GPU pool to draw
    from, or pools that hold fewer GPUs than it (``gpu_slots``: their capacity, read when None).

    >>> gpu_quota_note(4, gpu_slots=0)
    'no GPU pool exists (kind train_gpu): a quota of 4 GPUs has nothing to draw from until a platform admin adds one'
    >>> gpu_quota_note(4, gpu_slots=2), gpu_quota_note(2, gpu_slots=2), gpu_quota_note(0, gpu_slots=0)
    ('the GPU pools hold 2 GPUs: at most 2 of this quota of 4 can be used at once', '', '')
    """
    if max_gpus <= 0:
        return ""
    if gpu_slots is None:
        gpu_slots = sum(ResourcePool.objects.filter(kind=PoolKind.TRAIN_GPU).values_list("capacity", flat=True))
    if gpu_slots <= 0:
        return (f"no GPU pool exists (kind train_gpu): a quota of {max_gpus} GPUs has nothing to draw from until a "
                "platform admin adds one")
    if gpu_slots < max_gpus:
        return f"the GPU pools hold {gpu_slots} GPUs: at most {gpu_slots} of this quota of {max_gpus} can be used at once"
    return ""
