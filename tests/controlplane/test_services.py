"""The real services: PostgreSQL, Redis as broker and channel layer, a real Celery worker.

These fail (not skip) under TEMPER_REQUIRE_SERVICES=1, which CI sets.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.db import connection

from tests.services import require_postgres, require_redis

ROOT = Path(__file__).resolve().parents[2]


def test_suite_runs_on_postgres_when_asked(db):
    require_postgres()
    with connection.cursor() as cur:
        cur.execute("select version()")
        assert cur.fetchone()[0].startswith("PostgreSQL")


@pytest.fixture
def redis_worker(transactional_db):
    """A real Celery worker on Redis, pointed at the test database."""
    require_postgres()
    redis_url = require_redis()
    db = connection.settings_dict
    env = {**os.environ, "REDIS_URL": redis_url,
           "DATABASE_URL": f"postgresql://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"}
    queue = "control"
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "workers.celery", "worker", "-Q", queue, "--pool", "solo",
         "-n", f"test-{os.getpid()}@%h", "--without-mingle", "--without-gossip", "-l", "info"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    lines = []
    for raw in worker.stdout:  # the worker says when it is ready
        lines.append(raw.decode(errors="replace"))
        if " ready." in lines[-1]:
            break
    else:
        raise AssertionError("celery worker exited: " + "".join(lines)[-3000:])
    threading.Thread(target=lambda: [None for _ in worker.stdout], daemon=True).start()  # never let the pipe fill
    yield worker
    worker.terminate()
    worker.wait(timeout=30)


def test_celery_round_trip_through_redis(redis_worker):
    from celery import Celery

    redis_url = require_redis()
    app = Celery("test-producer", broker=redis_url, backend=redis_url)
    result = app.send_task("temper.control.ping", args=(41,), queue="control")
    assert result.get(timeout=60) == 42


def test_worker_records_its_heartbeat(redis_worker):
    from controlplane.scheduling.models import WorkerHeartbeat

    hb = WorkerHeartbeat.objects.get(worker__startswith=f"test-{os.getpid()}@")
    assert hb.queues == ["control"] and hb.meta["pid"] == redis_worker.pid


async def test_redis_channel_layer_delivers_group_messages(settings):
    redis_url = require_redis()
    from channels_redis.core import RedisChannelLayer

    layer = RedisChannelLayer(hosts=[redis_url])
    channel = await layer.new_channel()
    await layer.group_add("run-1", channel)
    await layer.group_send("run-1", {"type": "run.wake"})
    assert await layer.receive(channel) == {"type": "run.wake"}
    await layer.group_discard("run-1", channel)
    await layer.flush()
