"""The workers' Celery app plus one task a broker-fault test needs: one that takes a while.

``celery -A tests.workers.broker_app worker`` runs the real app (the same settings, queues and
tasks as ``workers.celery``), so a test can have a late-acknowledged task in flight while it
cuts the broker."""
from __future__ import annotations

import time
from pathlib import Path

from workers.celery import app

__all__ = ["app"]


@app.task(name="tests.sleep", acks_late=True)
def sleep(seconds: float, started: str | None = None) -> float:
    """Sleep ``seconds``; first create the file ``started`` (when given), so a test knows the
    task is running in a pool process, not merely received by the worker."""
    if started:
        Path(started).touch()
    time.sleep(seconds)
    return seconds
