"""Enqueue Celery tasks by name, after the surrounding transaction commits.

The control plane never imports ``workers``: it only knows task names and queues. The producer app
here reads the same CELERY_* settings as the workers, so it talks to the same broker. A CLI that
is asked to do one job in its own process (``--here``) runs the task by name too, through the
worker app named in ``TEMPER_WORKER_APP``, loaded the way ``celery -A`` loads it.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from celery import Celery
from celery.utils.imports import symbol_by_name
from django.conf import settings
from django.db import transaction

# Task name -> queue. Workers register tasks under exactly these names.
TASK_QUEUES = {
    "temper.control.ping": "control",
    "temper.control.worker_sweep": "control",
    "temper.control.schedule_tick": "control",
    "temper.notify.deliver": "notify",
    "temper.control.alert_sweep": "control",
    "temper.rollout.drive_run": "rollout",
    "temper.train.drive_run": "train",
    "temper.train.join_run": "train",
    "temper.verify.batch": "verify",
    "temper.verify.batch_long": "verify_long",
    "temper.verify.audit": "audit",
    "temper.pkgs.build": "verify_long",
    "temper.eval.run": "eval",
    "temper.judge.batch": "judge",
    "temper.judge.shadow": "judge",
    "temper.review.sample": "judge",
}


@lru_cache(maxsize=1)
def producer() -> Celery:
    app = Celery("temper-dispatch")
    app.config_from_object("django.conf:settings", namespace="CELERY")
    return app


def send(name: str, *args: Any, countdown: float | None = None, queue: str | None = None, **kwargs: Any) -> None:
    """Send task ``name`` to its queue now (``queue``: one worker's own queue for it instead, see
    ``scheduling.selectors.direct_queue``)."""
    if name not in TASK_QUEUES:
        raise KeyError(f"unknown task {name!r}; known: {', '.join(sorted(TASK_QUEUES))}")
    producer().send_task(name, args=args, kwargs=kwargs, queue=queue or TASK_QUEUES[name], countdown=countdown)


def send_on_commit(name: str, *args: Any, **kwargs: Any) -> None:
    """Send task ``name`` once the current transaction commits (never for a rolled-back change)."""
    if name not in TASK_QUEUES:
        raise KeyError(f"unknown task {name!r}")
    transaction.on_commit(lambda: send(name, *args, **kwargs))


def run_here(name: str, *args: Any) -> Any:
    """Run task ``name`` in this process, as a worker would, and return its result (errors raise)."""
    if name not in TASK_QUEUES:
        raise KeyError(f"unknown task {name!r}; known: {', '.join(sorted(TASK_QUEUES))}")
    app = symbol_by_name(settings.TEMPER_WORKER_APP)
    app.loader.import_default_modules()  # the task modules, as a starting worker imports them
    return app.tasks[name].apply(args=args, throw=True).get()
