"""/queue/ shows the verification lanes: each lane's queue with the live workers serving it and
its backlog, and which domains of the viewer's running runs are on the long lane."""
from __future__ import annotations

import pytest
import redis
from django.test import Client

from controlplane.runs.models import MetricPoint, Run
from controlplane.scheduling.selectors import lanes_view, queue_backlog
from tests import factories
from tests.services import require_redis

pytestmark = pytest.mark.django_db


def test_the_queue_page_shows_lanes_their_workers_and_long_lane_domains(world, settings):
    settings.CELERY_BROKER_URL = "filesystem://"
    factories.live_worker(["verify_long"], name="verify-long@h1")
    factories.live_worker(["verify"], name="verify@h1")
    mine = factories.run(world.team, state="running", budget_steps=10, name="mine")
    theirs = factories.run(world.other, state="running", budget_steps=10, name="theirs")
    for run in (mine, theirs):
        Run.objects.filter(pk=run.pk).update(current_step=3)
        MetricPoint.objects.create(run=run, step=3, key="verify/slow-code/long_lane", value=1.0)
        MetricPoint.objects.create(run=run, step=3, key="verify/fast-code/long_lane", value=0.0)
    lanes = {lane["queue"]: lane for lane in lanes_view()}
    assert lanes["verify_long"]["workers"] == ["verify-long@h1"] and lanes["verify"]["workers"] == ["verify@h1"]
    assert lanes["judge"]["workers"] == [] and lanes["verify"]["backlog"] is None  # not a Redis broker
    c = Client()
    c.force_login(world.users["viewer"])
    page = c.get("/queue/").content.decode()
    assert 'data-testid="lane-verify_long"' in page and "verify-long@h1" in page
    assert f'data-testid="long-lane-{mine.id}">Run #{mine.id}: slow-code on the long lane' in page
    assert f"long-lane-{theirs.id}" not in page


@pytest.mark.services
def test_backlog_counts_every_priority_list_on_redis(settings):
    url = require_redis()
    settings.CELERY_BROKER_URL = url
    client = redis.Redis.from_url(url)
    queue = "lane-backlog-test"
    client.delete(queue, *[f"{queue}\x06\x16{p}" for p in range(1, 10)])
    try:
        client.rpush(queue, "a", "b")
        client.rpush(f"{queue}\x06\x163", "c")
        assert queue_backlog(queue) == 3
    finally:
        client.delete(queue, f"{queue}\x06\x163")
