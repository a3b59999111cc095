"""The Celery app. Start a worker with ``celery -A workers.celery worker -Q <queues>``.

Queues: control (scheduler ticks, bookkeeping), rollout and train (the run driver), verify
(sandbox and CPU verifiers), judge, eval (evaluations of model versions, controlplane/registry). Tasks are registered under explicit names that the control
plane's dispatch module knows (controlplane/dispatch.py).
"""
from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_process_init
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402

from workers import broker  # noqa: E402

app = Celery("temper")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = [Queue(name) for name in settings.CELERY_QUEUES_ALL]
app.conf.beat_schedule = {
    "schedule-tick": {
        "task": "temper.control.schedule_tick",
        "schedule": settings.TEMPER_SCHEDULE_PERIOD_S,
        "options": {"queue": "control", "expires": settings.TEMPER_SCHEDULE_PERIOD_S},
    },
    "worker-sweep": {
        "task": "temper.control.worker_sweep",
        "schedule": 60.0,
        "options": {"queue": "control", "expires": 60.0},
    },
    "alert-sweep": {
        "task": "temper.control.alert_sweep",
        "schedule": settings.TEMPER_ALERT_SWEEP_S,
        "options": {"queue": "control", "expires": settings.TEMPER_ALERT_SWEEP_S},
    },
}
broker.configure(app)  # reconnect after any broker outage (workers/broker.py)
app.autodiscover_tasks(["workers"], related_name="tasks", force=True)

import workers.heartbeat  # noqa: E402,F401  (connects the worker_ready signal)

WORKER_DB_MAX_AGE_S = 300
"""How long a worker's pool process keeps a database connection between tasks
(``TEMPER_WORKER_DB_MAX_AGE_S``; 0: a new connection for every task, Django's default)."""


@worker_process_init.connect
def _keep_database_connections(**kwargs) -> None:
    """A pool process keeps its database connection from task to task (Celery's Django fix-up
    closes a connection after each task unless it is younger than ``CONN_MAX_AGE``): on
    PostgreSQL a new connection is a new server process, which cost a verification batch more
    than verifying it. The connection is checked before a task reuses it (a restarted database
    costs one reconnection, not a failed task)."""
    max_age = float(os.environ.get("TEMPER_WORKER_DB_MAX_AGE_S", WORKER_DB_MAX_AGE_S))
    for database in settings.DATABASES.values():  # the dicts the connections read (Django shares them)
        database["CONN_MAX_AGE"] = max_age
        database["CONN_HEALTH_CHECKS"] = max_age > 0
