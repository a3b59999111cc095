"""The Celery app. Start a worker with ``celery -A workers.celery worker -Q <queues>``.

Queues: control (scheduler ticks, bookkeeping), rollout and train (the run driver), verify
(sandbox and CPU verifiers), judge, eval (evaluations of model versions, controlplane/registry). Tasks are registered under explicit names that the control
plane's dispatch module knows (controlplane/dispatch.py).
"""
from __future__ import annotations

import os

from celery import Celery
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
