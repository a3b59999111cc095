"""A live socket outlives its channel layer's faults: Redis losing its data, Redis unreachable.

The layer is a Redis of the test's own behind a proxy the test can cut (tests/faults.py); the run's
points are written by the driver's own service (``run_record_step``, whose commit wakes the run's
group) and the run ends through ``run_finish``. Each test asserts that the client gets every point
exactly once, sees the run end, and is told when it was catching up and when it was live again.
"""
from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import transaction

from controlplane.live.routing import websocket_urlpatterns
from controlplane.runs import services as run_services
from tests import factories
from tests.faults import CuttableProxy, private_redis, redis_command

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services, pytest.mark.slow]

WORKER = "driver@test"


@pytest.fixture
def layer(settings, tmp_path):
    """The channel layer on a private Redis behind a cuttable proxy: (redis port, proxy)."""
    with private_redis(tmp_path) as port, CuttableProxy(port) as proxy:
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "controlplane.live.layers.RedisChannelLayer",
                                               "CONFIG": {"hosts": [f"redis://127.0.0.1:{proxy.port}/0"]}}}
        settings.TEMPER_LIVE_POLL_S = 0.5  # the safety poll's period (5 s by default)
        yield port, proxy


@database_sync_to_async
def _setup():
    team = factories.team("a")
    domain = factories.domain("addition")
    user = factories.member(team, "viewer")
    run = factories.run(team, domains=[domain], state="running", driver=WORKER, budget_steps=100)
    return user, run


@database_sync_to_async
def _steps(run, steps):
    """The driver's step writes: each commits its points, then wakes the run's group."""
    for step in steps:
        with transaction.atomic():
            run_services.run_record_step(run=run, worker=WORKER, step=step, metrics={"reward/mean": step / 100},
                                         samples=[], verifier_versions={})


@database_sync_to_async
def _finish(run):
    with transaction.atomic():
        run_services.run_finish(run=run, worker=WORKER, state="completed")


class Client:
    """What a page's client keeps: the points by id, the run's last status, the feed states seen."""

    def __init__(self, communicator):
        self.communicator = communicator
        self.points: list[list] = []
        self.state = None
        self.feed: list[str] = []

    async def until(self, condition, what: str, timeout: float = 30):
        """Receive messages until ``condition(self)`` holds; fails naming ``what`` after ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not condition(self):
            left = deadline - loop.time()
            assert left > 0, f"timed out waiting for {what}: steps {self.steps()}, state {self.state}, feed {self.feed}"
            try:
                message = await self.communicator.receive_json_from(timeout=left)
            except asyncio.TimeoutError:
                continue
            if message["type"] == "metrics":
                self.points += message["points"]
            elif message["type"] == "status":
                self.state = message["state"]
            elif message["type"] == "feed":
                self.feed.append(message["state"])
                assert message["state"] == "live" or message["reason"]

    def steps(self) -> list[int]:
        return sorted(p[1] for p in self.points)


async def _connect(user, run) -> Client:
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), f"/ws/runs/{run.id}/")
    communicator.scope["user"] = user
    assert (await communicator.connect())[0]
    await communicator.send_json_to({"cursor": 0, "event_cursor": 0})
    return Client(communicator)


def _exactly_once(client: Client, steps) -> None:
    ids = [p[0] for p in client.points]
    assert len(ids) == len(set(ids)), "a point was sent twice"
    assert client.steps() == list(steps)


async def test_flushdb_of_the_layer_loses_no_point_and_the_run_end_is_seen(layer):
    port, _ = layer
    user, run = await _setup()
    client = await _connect(user, run)
    await _steps(run, range(1, 6))
    await client.until(lambda c: c.steps() == [1, 2, 3, 4, 5], "the first points")
    assert redis_command(port, "FLUSHDB").startswith(b"+OK")  # the groups' members are gone with the data
    await _steps(run, range(6, 31))
    await client.until(lambda c: len(c.points) >= 30, "every point written after the flush")
    await client.until(lambda c: c.feed[-1:] == ["live"], "the feed to be live again")
    assert client.feed == ["catching_up", "live"]
    # Re-joined: the last point and the run's end come by wake-ups again.
    await _steps(run, [31])
    await _finish(run)
    await client.until(lambda c: 31 in c.steps() and c.state == "completed", "the last point and the run's end")
    assert client.feed == ["catching_up", "live"]
    _exactly_once(client, range(1, 32))
    await client.communicator.disconnect()


async def test_layer_unreachable_for_a_while_loses_no_point_and_the_socket_stays_open(layer):
    _, proxy = layer
    user, run = await _setup()
    client = await _connect(user, run)
    await _steps(run, range(1, 4))
    await client.until(lambda c: c.steps() == [1, 2, 3], "the first points")
    proxy.cut()
    await _steps(run, range(4, 11))  # their wake-ups fail (never failing the writes)
    await client.until(lambda c: c.steps() == list(range(1, 11)) and c.feed == ["catching_up"],
                       "the points written while Redis is unreachable, and the feed catching up")
    await _steps(run, range(11, 14))  # only the database poll can bring these
    await client.until(lambda c: c.steps() == list(range(1, 14)), "points from the poll during the outage")
    proxy.restore()
    await client.until(lambda c: c.feed[-1:] == ["live"], "the feed to be live once Redis answers")
    await _steps(run, range(14, 19))
    await _finish(run)
    await client.until(lambda c: len(c.points) >= 18 and c.state == "completed", "later points and the run's end")
    _exactly_once(client, range(1, 19))
    assert client.feed == ["catching_up", "live"]
    await client.communicator.disconnect()
