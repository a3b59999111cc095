"""Each worker records a heartbeat row every CELERY_HEARTBEAT_PERIOD_S from a daemon thread: its
queues, its pid, its host's GPUs (workers/devices.py) and its host's sandbox pools (sizes, waits,
creations per second: workers/sandbox/figures.py). A worker on the train queue also consumes
its own direct queue (``train.<worker>``), where the scheduler sends the GPU runs it assigned to
this worker's devices."""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from celery.signals import worker_process_shutdown, worker_ready, worker_shutdown
from django.conf import settings
from django.db import close_old_connections

from controlplane.scheduling.selectors import TRAIN_QUEUE, direct_queue
from controlplane.scheduling.services import heartbeat_record
from workers.devices import device_inventory
from workers import sandbox
from workers.sandbox import close_runtimes

log = logging.getLogger(__name__)
_stop = threading.Event()


def sandbox_figures_dir() -> Path:
    """Where this host's worker processes leave their sandbox pools' figures (workers/sandbox/figures.py)."""
    return Path(settings.VAR_DIR) / "sandbox-pools"


def publish_sandbox_figures() -> None:
    """After a task that ran sandbox jobs: this process's pool figures, for the next heartbeat."""
    figures = sandbox.pool_figures()
    if figures:
        try:
            sandbox.write_pool_figures(sandbox_figures_dir(), figures)
        except OSError:  # the figures are for the queue page: never fail the batch over them
            log.exception("could not write the sandbox pool figures")


def heartbeat_meta(devices: list[dict]) -> dict:
    """What a heartbeat says of its worker: its pid, its GPUs and its processes' sandbox pools."""
    return {"pid": os.getpid(), "devices": devices, "sandbox_pools": sandbox.read_pool_figures(sandbox_figures_dir())}


def _record(hostname: str, queues: list[str], devices: list[dict]) -> None:
    try:
        close_old_connections()
        heartbeat_record(worker=hostname, queues=queues, meta=heartbeat_meta(devices))
    except Exception:  # the database may be briefly unavailable; try again next period
        log.exception("heartbeat failed for %s", hostname)


def _beat(hostname: str, queues: list[str], devices: list[dict]) -> None:
    while not _stop.wait(settings.CELERY_HEARTBEAT_PERIOD_S):
        _record(hostname, queues, devices)


@worker_ready.connect
def _start(sender=None, **kwargs) -> None:
    consumer = sender
    hostname = consumer.hostname
    if consumer.task_consumer and any(q.name == TRAIN_QUEUE for q in consumer.task_consumer.queues):
        own = direct_queue(hostname)  # routing key = name: the key a producer's auto-declared queue binds
        consumer.add_task_queue(own, routing_key=own)
    queues = sorted(q.name for q in consumer.task_consumer.queues) if consumer.task_consumer else []
    devices = device_inventory()  # read once: a host's GPUs do not come and go while it serves
    _record(hostname, queues, devices)  # before the first task is consumed
    threading.Thread(target=_beat, args=(hostname, queues, devices), name="temper-heartbeat", daemon=True).start()


@worker_shutdown.connect
def _stop_beat(**kwargs) -> None:
    _stop.set()
    _close_sandboxes()


@worker_process_shutdown.connect
def _close_sandboxes(**kwargs) -> None:
    """A worker (or a prefork child) that stops removes its warm sandboxes and their cgroups; what
    a killed one leaves is removed by the reaper when the next worker starts."""
    try:
        close_runtimes()
    except Exception:  # shutting down: never turn a clean stop into a crash
        pass
