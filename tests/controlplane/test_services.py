"""The real services: PostgreSQL, Redis as broker and channel layer, a real Celery worker.

These fail (not skip) under TEMPER_REQUIRE_SERVICES=1, which CI sets.
"""
from __future__ import annotations

import os

import pytest
from django.db import connection

from tests.services import require_postgres, require_redis, start_celery_worker, worker_env



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
    worker = start_celery_worker(worker_env(connection.settings_dict, redis_url), "test", "control", pool="solo")
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
