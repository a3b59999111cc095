"""The live log over websockets: cursor semantics; anonymous sockets closed 4401, other teams' and
missing runs both 4404 (run ids cannot be probed); origins matched exactly."""
from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from controlplane.live.routing import websocket_urlpatterns
from controlplane.runs.models import MetricPoint
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


def _socket(run_id, user):
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), f"/ws/runs/{run_id}/")
    communicator.scope["user"] = user
    return communicator


@database_sync_to_async
def _setup():
    team, other = factories.team("a"), factories.team("b")
    user = factories.member(team, "viewer")
    run, other_run = factories.run(team), factories.run(other)
    return user, run, other_run


@database_sync_to_async
def _write(run, steps):
    MetricPoint.objects.bulk_create([MetricPoint(run=run, step=s, key="reward/x", domain="x", value=s / 10) for s in steps])


async def _drain(communicator, expected: int):
    """The next ``expected`` points the socket sends, then check that nothing more comes."""
    points = []
    while len(points) < expected:
        message = await communicator.receive_json_from(timeout=10)
        if message["type"] in ("status", "events"):
            continue
        assert message["type"] == "metrics"
        points += message["points"]
    assert len(points) == expected
    return points


async def _nothing_more(communicator, timeout=1.5) -> bool:
    """No further metric points arrive (status and event messages may)."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (left := deadline - loop.time()) > 0:
        if await communicator.receive_nothing(timeout=left):
            return True
        message = await communicator.receive_json_from()
        if message["type"] == "metrics":
            return False
    return True


async def _refused_with(communicator) -> int:
    """A refused socket is accepted, then closed at once: the close code says why."""
    connected, _ = await communicator.connect()
    assert connected  # not an HTTP 403 at the handshake: the client must be able to read the code
    message = await communicator.receive_output(timeout=5)
    await communicator.disconnect()
    assert message["type"] == "websocket.close", message
    return message["code"]


async def test_anonymous_socket_is_closed_4401():
    _, run, _ = await _setup()
    assert await _refused_with(_socket(run.id, AnonymousUser())) == 4401


async def test_other_teams_run_is_closed_as_a_missing_one_4404():
    user, _, other_run = await _setup()
    assert await _refused_with(_socket(other_run.id, user)) == 4404


async def test_missing_run_is_closed_4404():
    user, run, other_run = await _setup()
    assert await _refused_with(_socket(max(run.id, other_run.id) + 1000, user)) == 4404


async def test_bad_origin_is_refused_at_the_handshake():
    """The origin check is the outer layer (controlplane/asgi.py): a socket from another site is
    refused before any consumer runs, as an HTTP 403 at the handshake."""
    from controlplane.asgi import application

    user, run, _ = await _setup()
    evil = WebsocketCommunicator(application, f"/ws/runs/{run.id}/", headers=[(b"origin", b"https://evil.example")])
    connected, _ = await evil.connect()
    assert not connected
    await evil.disconnect()
    # The same socket from the site's own origin reaches the consumer (no session: 4401).
    own = WebsocketCommunicator(application, f"/ws/runs/{run.id}/", headers=[(b"origin", b"http://localhost")])
    assert await _refused_with(own) == 4401
    # An origin that only begins like an allowed host is another site's.
    for origin in (b"http://127.0.0.1:8301.evil.example", b"http://localhost:80.evil.example", b"http://user@localhost",
                   b"javascript://localhost"):
        sneaky = WebsocketCommunicator(application, f"/ws/runs/{run.id}/", headers=[(b"origin", origin)])
        connected, _ = await sneaky.connect()
        assert not connected, origin
        await sneaky.disconnect()
    with_port = WebsocketCommunicator(application, f"/ws/runs/{run.id}/", headers=[(b"origin", b"http://127.0.0.1:8301")])
    assert await _refused_with(with_port) == 4401


async def test_reconnect_with_cursor_has_no_gap_and_no_duplicate():
    from controlplane.live.services import run_wake

    user, run, _ = await _setup()
    await _write(run, range(0, 5))
    first = _socket(run.id, user)
    assert (await first.connect())[0]
    await first.send_json_to({"cursor": 0})
    got = await _drain(first, 5)
    assert [p[1] for p in got] == [0, 1, 2, 3, 4]
    await _write(run, range(5, 8))
    await database_sync_to_async(run_wake)(run_id=run.id)
    got += await _drain(first, 3)
    cursor = got[-1][0]
    await first.disconnect()
    # Written while nobody watched.
    await _write(run, range(8, 12))
    second = _socket(run.id, user)
    assert (await second.connect())[0]
    await second.send_json_to({"cursor": cursor})
    got += await _drain(second, 4)
    assert await _nothing_more(second)  # longer than the tail period: still nothing twice
    await second.disconnect()
    steps = [p[1] for p in got]
    assert steps == list(range(12))
    ids = [p[0] for p in got]
    assert len(ids) == len(set(ids))


async def test_bad_cursor_gets_a_clear_error():
    user, run, _ = await _setup()
    communicator = _socket(run.id, user)
    assert (await communicator.connect())[0]
    await communicator.send_json_to({"cursor": -3})
    assert await communicator.receive_json_from() == {"type": "error", "message": "cursor: must be an integer >= 0"}
    await communicator.disconnect()


@pytest.mark.parametrize("raw, message", [
    ('{"cursor": NaN}', "cursor: NaN is not a number JSON can hold"),
    ('[' * 100 + ']' * 100, "nested more than 4 levels deep"),
    ('{"cursor": 1, "x": "' + "a" * 2000 + '"}', "a message is at most 1024 characters"),
    ('{"cursor": "\\u0000"}', "cursor: contains a NUL"),
    ('{"cursor": ', "not valid JSON"),
])
async def test_hostile_messages_get_an_error_and_the_socket_serves_on(raw, message):
    """Client messages go through the API body reader's rules; the socket answers and stays."""
    user, run, _ = await _setup()
    await _write(run, [1, 2])
    communicator = _socket(run.id, user)
    assert (await communicator.connect())[0]
    await communicator.send_to(text_data=raw)
    error = await communicator.receive_json_from(timeout=10)
    assert error["type"] == "error" and message in error["message"], error
    await communicator.send_json_to({"cursor": 0})
    assert len(await _drain(communicator, 2)) == 2
    await communicator.disconnect()


def _runs_socket(user):
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/runs/")
    communicator.scope["user"] = user
    return communicator


async def _next_of(communicator, kind: str):
    while True:
        message = await communicator.receive_json_from(timeout=10)
        if message["type"] == kind:
            return message


async def test_runs_socket_sends_own_teams_runs_and_their_changes():
    from controlplane.runs.models import Run

    user, run, other_run = await _setup()
    assert await _refused_with(_runs_socket(AnonymousUser())) == 4401
    communicator = _runs_socket(user)
    assert (await communicator.connect())[0]
    first = await _next_of(communicator, "runs")
    assert [r["id"] for r in first["runs"]] == [run.id]  # never the other team's run
    await database_sync_to_async(lambda: Run.objects.filter(pk=run.pk).update(current_step=7))()
    run.current_step = 7
    await database_sync_to_async(run.save)()  # a saved run wakes its team's list once committed
    update = await _next_of(communicator, "runs")
    assert [(r["id"], r["step"]) for r in update["runs"]] == [(run.id, 7)]
    await communicator.disconnect()


async def test_events_and_status_follow_their_own_cursor():
    from controlplane.runs.models import RunEvent

    user, run, _ = await _setup()
    await database_sync_to_async(lambda: RunEvent.objects.create(run=run, kind="created", message="one"))()
    first = _socket(run.id, user)
    assert (await first.connect())[0]
    await first.send_json_to({"cursor": 0, "event_cursor": 0})
    status = await _next_of(first, "status")
    assert status["state"] == run.state and status["budget_steps"] == run.budget_steps
    events = await _next_of(first, "events")
    assert [e["message"] for e in events["events"]] == ["one"]
    await database_sync_to_async(lambda: RunEvent.objects.create(run=run, kind="weights", message="two"))()
    events = await _next_of(first, "events")  # the event's save woke the socket
    assert [e["message"] for e in events["events"]] == ["two"]
    cursor = events["event_cursor"]
    await first.disconnect()
    await database_sync_to_async(lambda: RunEvent.objects.create(run=run, kind="paused", message="three"))()
    second = _socket(run.id, user)
    assert (await second.connect())[0]
    await second.send_json_to({"cursor": 0, "event_cursor": cursor})
    events = await _next_of(second, "events")
    assert [e["message"] for e in events["events"]] == ["three"]
    await second.disconnect()


async def test_a_user_removed_from_the_team_gets_nothing_more_and_the_run_socket_closes_4404():
    """The attack: sockets opened while a member kept streaming the team's metrics and runs after
    the membership was deleted (access was checked at connect only)."""
    from controlplane.accounts.models import Membership
    from controlplane.runs.models import Run

    user, run, _ = await _setup()
    watcher = _socket(run.id, user)
    assert (await watcher.connect())[0]
    await watcher.send_json_to({"cursor": 0})
    await _write(run, [1])
    assert len(await _drain(watcher, 1)) == 1
    runs = _runs_socket(user)
    assert (await runs.connect())[0]
    assert [r["id"] for r in (await _next_of(runs, "runs"))["runs"]] == [run.id]

    await database_sync_to_async(lambda: Membership.objects.filter(user=user).delete())()
    await _write(run, [2])
    run.current_step = 9
    await database_sync_to_async(run.save)()  # wakes both sockets
    while True:  # status or event messages may come first; no metric point may
        message = await watcher.receive_output(timeout=10)
        if message["type"] == "websocket.close":
            break
        assert '"metrics"' not in message.get("text", ""), message
    assert message["code"] == 4404  # as for a run that does not exist
    assert await runs.receive_nothing(timeout=2)  # the team's change is not sent
    await runs.disconnect()
