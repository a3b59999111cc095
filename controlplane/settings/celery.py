"""Celery settings: Redis when REDIS_URL is set, otherwise a file-system transport (no server)."""
from __future__ import annotations

import os
from pathlib import Path

from controlplane.settings.env import env_bool

_VAR = Path(os.environ.get("TEMPER_VAR_DIR", Path(__file__).resolve().parent.parent.parent / "var")).resolve()
_REDIS = os.environ.get("REDIS_URL", "")

CELERY_QUEUES_ALL = ("control", "notify", "rollout", "train", "verify", "verify_long", "judge", "eval", "audit")
CELERY_QUEUES_RUN = tuple(q for q in CELERY_QUEUES_ALL if q not in ("audit", "notify"))
"""The queues a run's work uses. ``audit`` (verifier audits of new domain versions: minutes of
CPU after a catalogue sync) has a worker of its own, so audits never wait in front of a run;
``notify`` (alert deliveries: a receiver may take seconds to answer) is served beside the
control queue by processes of its own, never by those that train or schedule."""
TEMPER_WORKER_APP = "workers.celery:app"
"""The Celery app workers run (``celery -A workers.celery``); named here, never imported by the
control plane, for a CLI that runs one job in its own process (``dispatch.run_here``)."""

if _REDIS:
    CELERY_BROKER_URL = _REDIS
    CELERY_RESULT_BACKEND = _REDIS
    # Above the longest task (the run driver checkpoints well within this).
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 6 * 3600}
else:
    _broker = _VAR / "celery" / "broker"
    for sub in ("in", "staging", "processed", "control"):
        (_broker / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT = "controlplane.common.fs_broker:Transport"
    """kombu's file-system transport with messages renamed into place whole (controlplane/common/fs_broker.py)."""
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker / "in"),
        "data_folder_out": str(_broker / "in"),
        "staging_folder": str(_broker / "staging"),
        "processed_folder": str(_broker / "processed"),
        "control_folder": str(_broker / "control"),  # the exchange tables (kombu's default: ./control)
        "store_processed": False,
    }
    (_VAR / "celery" / "results").mkdir(parents=True, exist_ok=True)
    CELERY_RESULT_BACKEND = f"file://{_VAR / 'celery' / 'results'}"

CELERY_TASK_DEFAULT_QUEUE = "control"
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = int(os.environ.get("CELERY_TASK_SOFT_TIME_LIMIT", 300))
CELERY_TASK_TIME_LIMIT = int(os.environ.get("CELERY_TASK_TIME_LIMIT", 360))
CELERY_RESULT_EXPIRES = 3600
CELERY_BEAT_SCHEDULE_FILENAME = str(_VAR / "celerybeat-schedule")
CELERY_HEARTBEAT_PERIOD_S = 15.0
TEMPER_SCHEDULE_PERIOD_S = min(max(float(os.environ.get("TEMPER_SCHEDULE_PERIOD_S", 10)), 1.0), 600.0)
"""How often beat asks the scheduler to admit, preempt and recover (1 to 600 s). A run started,
paused or ended asks at once as well; the tick runs on the ``control`` queue, whose worker does
nothing long (scheduling, the worker sweep, pings), so it never waits behind training."""
TEMPER_WORKER_STALE_S = float(os.environ.get("TEMPER_WORKER_STALE_S", 60))
"""A worker whose heartbeat is older than this no longer serves its queues: a run whose verify
(or judge, or rollout) work has no worker left is paused naming the queue, not failed."""

TEMPER_VERIFY_LANES = env_bool("TEMPER_VERIFY_LANES", True)
"""Duration-aware dispatch (workers/lanes.py): a domain whose verification p95 reaches
``TEMPER_VERIFY_LONG_S`` sends its batches to the ``verify_long`` queue while a worker serves it."""
TEMPER_VERIFY_LONG_S = float(os.environ.get("TEMPER_VERIFY_LONG_S", 1.0))
if not 0 < TEMPER_VERIFY_LONG_S <= 3600:
    raise ValueError(f"TEMPER_VERIFY_LONG_S: must be a number of seconds in (0, 3600], not {TEMPER_VERIFY_LONG_S!r}")
