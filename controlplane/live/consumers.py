"""The live log over websockets: rows after the client's cursor, never twice, coalesced.

The database is the log (DESIGN.md). Workers bulk-insert rows, then wake the group ``run-<id>``
(and ``team-<id>`` for run lists); each socket sends its client the rows after the client's
cursor. A reconnecting client sends its cursors and loses nothing. Wake-ups that arrive within
``COALESCE_S`` of the last send are merged into one send. With the in-memory channel layer
(embedded default) workers live in other processes and cannot wake us, so the consumers also
tail the database once a second.

With Redis, wake-ups can be lost (Redis restarted, or came back without its data and so without
the groups' members). Every ``TEMPER_LIVE_POLL_S`` a socket re-joins its groups (idempotent) and
reads the database anyway, so a client misses nothing and sees the run end; the cursors make sure
nothing is sent twice. A run socket says when it finds its updates were cut off:
``{"type": "feed", "state": "catching_up", "reason"}`` while Redis is unreachable (updates then
come from the database every poll), or when a re-join finds that Redis had forgotten the socket
(the rows missed since follow from the database); then ``{"type": "feed", "state": "live"}`` once
it is joined again and has sent everything. An outage shorter than one poll period can go
unnoticed: its rows still come, up to one period late.

Messages a run socket sends (after the client's first ``{"cursor": n, "event_cursor": m}``):

- ``{"type": "metrics", "cursor", "points": [[id, step, domain, key, value, time_ms], ...]}``
- ``{"type": "events", "event_cursor", "events": [{"id", "at", "kind", "message", "data"}]}``
- ``{"type": "status", "state", "step", "budget_steps", "priority", "error", "inflight", ...}``
  whenever the run's row changed.
"""
from __future__ import annotations

import asyncio
import logging
import time

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.db import DatabaseError

from controlplane.accounts.principal import Principal
from controlplane.common.body import loads
from controlplane.common.errors import InvalidInput
from controlplane.live.layers import LAYER_ERRORS
from controlplane.live.selectors import run_status, run_summaries
from controlplane.runs.models import MetricPoint, Run, RunEvent

BATCH = 5000
MAX_MESSAGE_CHARS = 1024
"""A client sends only cursors (``{"cursor": n, "event_cursor": m}``): longer messages are refused."""
MAX_MESSAGE_DEPTH = 4
TAIL_PERIOD_S = 1.0
COALESCE_S = 0.1
UNREACHABLE = "the live channel (Redis) is unreachable: updates come from the database every {:g} s"
MISSED = "updates were missed (Redis restarted or lost its data): sending them from the database"

log = logging.getLogger(__name__)


def group_name(run_id: int) -> str:
    return f"run-{run_id}"


def team_group_name(team_id: int) -> str:
    return f"team-{team_id}"


def _in_memory_layer() -> bool:
    return settings.CHANNEL_LAYERS["default"]["BACKEND"].endswith("InMemoryChannelLayer")


CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
"""Close codes of a refused socket. The socket is accepted first and closed at once with one of
these, so the client reads the reason (a close before accepting is an HTTP 403 at the handshake,
indistinguishable from a network error). Another team's run is closed as a missing one is
(4404), as the API answers 404 for it: run ids cannot be probed. A bad ``Origin`` is still
refused at the handshake by the outer layer in ``controlplane/asgi.py`` (``controlplane.live.origins``)."""


@database_sync_to_async
def _run_refusal(user, run_id: int) -> int | None:
    """Why the user may not follow this run (a close code), or None when they may: one query,
    the same for a run that does not exist and one of another team."""
    mine = Run.objects.filter(pk=run_id, team_id__in=Principal.for_user(user).team_ids).exists()
    return None if mine else CLOSE_NOT_FOUND


@database_sync_to_async
def _team_ids(user) -> list[int]:
    """The user's teams."""
    return Principal.for_user(user).team_ids


def _ms(dt) -> int:
    return int(dt.timestamp() * 1000)


@database_sync_to_async
def _rows_after(run_id: int, cursor: int, event_cursor: int, seen_update) -> dict:
    rows = list(
        MetricPoint.objects.filter(run_id=run_id, id__gt=cursor)
        .order_by("id")
        .values_list("id", "step", "domain", "key", "value", "time")[:BATCH]
    )
    events = list(RunEvent.objects.filter(run_id=run_id, id__gt=event_cursor).order_by("id")
                  .values("id", "at", "kind", "message", "data")[:500])
    status = run_status(run_id)
    return {
        "points": [[i, s, d, k, v, _ms(t)] for i, s, d, k, v, t in rows],
        "cursor": rows[-1][0] if rows else cursor,
        "full": len(rows) == BATCH,
        "events": [{**e, "at": e["at"].isoformat()} for e in events],
        "event_cursor": events[-1]["id"] if events else event_cursor,
        "status": status if status != seen_update else None,
    }


class _Coalescing(AsyncJsonWebsocketConsumer):
    """Flushes on wake-ups, at most one send per ``COALESCE_S``; tails the database without Redis.
    Anonymous users are closed (4401) in ``connect``; a signed-in user goes to ``connect_user``."""

    groups_to_join: list[str]

    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.refuse(CLOSE_UNAUTHENTICATED)
            return
        self.user = user
        await self.connect_user(user)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        """A client's message under the API body reader's rules (no NaN, lone surrogates or NUL,
        a depth limit), at most ``MAX_MESSAGE_CHARS`` long; anything else is answered with an
        error message and dropped (the socket stays: the next good message is served)."""
        if text_data is None:
            await self.send_json({"type": "error", "message": "send JSON text, not binary frames"})
            return
        if len(text_data) > MAX_MESSAGE_CHARS:
            await self.send_json({"type": "error", "message": f"a message is at most {MAX_MESSAGE_CHARS} characters"})
            return
        try:
            content = loads(text_data, max_depth=MAX_MESSAGE_DEPTH)
        except InvalidInput as exc:
            await self.send_json({"type": "error", "message": "; ".join(str(e) for e in exc.errors)})
            return
        await self.receive_json(content, **kwargs)

    async def refuse(self, code: int) -> None:
        """Accept, then close with ``code`` (CLOSE_*): the client sees the code and stops."""
        await self.accept()
        await self.close(code=code)

    async def connect_user(self, user) -> None:  # pragma: no cover - abstract
        """Check what the user may see, then ``start`` with the groups to join (or close)."""
        raise NotImplementedError

    reports_feed = False
    """Whether the socket tells its client ``{"type": "feed", ...}`` (live or catching up)."""

    async def start(self, groups: list[str]) -> None:
        self.joined = groups
        self.lock = asyncio.Lock()
        self.pending: asyncio.Task | None = None
        self.last_flush = 0.0
        self.in_memory = _in_memory_layer()
        self.poll_s = TAIL_PERIOD_S if self.in_memory else settings.TEMPER_LIVE_POLL_S
        self.feed = "live"
        joined = await self._join(first=True)
        await self.accept()
        self.tail: asyncio.Task | None = asyncio.create_task(self._watch())
        if joined is None:
            await self._set_feed("catching_up", UNREACHABLE.format(self.poll_s))

    async def disconnect(self, code):
        for task in (getattr(self, "tail", None), getattr(self, "pending", None)):
            if task:
                task.cancel()
        for g in getattr(self, "joined", []):
            try:
                await self.channel_layer.group_discard(g, self.channel_name)
            except LAYER_ERRORS:  # Redis is away; its group entry expires (channels-redis group_expiry)
                pass

    async def _join(self, first: bool = False) -> bool | None:
        """(Re-)join the groups: whether Redis had forgotten this socket (so wake-ups were lost), or
        None when the layer is unreachable. Joining is idempotent (it refreshes the member's
        entry), so re-joining on every poll restores what a Redis that lost its data forgot, and
        keeps the entry from expiring on a long watch."""
        rejoin = None if first else getattr(self.channel_layer, "group_rejoin", None)
        lost = False
        try:
            for g in self.joined:
                if rejoin is None:
                    await asyncio.wait_for(self.channel_layer.group_add(g, self.channel_name), timeout=self.poll_s)
                else:
                    lost |= await asyncio.wait_for(rejoin(g, self.channel_name), timeout=self.poll_s)
        except LAYER_ERRORS as exc:
            log.info("live socket %s could not join %s: %r", self.channel_name, self.joined, exc)
            return None
        return lost

    async def _set_feed(self, state: str, reason: str = "") -> None:
        """Tell the client whether its updates are live or being caught up (on a change only)."""
        if not self.reports_feed or state == self.feed:
            return
        self.feed = state
        await self.send_json({"type": "feed", "state": state, "reason": reason})

    async def wake(self) -> None:
        """Flush now, or once the coalescing window since the last flush has passed."""
        if self.pending is not None and not self.pending.done():
            return  # a flush is already due; it will read everything committed by then
        delay = self.last_flush + COALESCE_S - time.monotonic()
        self.pending = asyncio.create_task(self._flush_after(max(0.0, delay)))

    async def _flush_after(self, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        await self.flush()
        await self._set_feed("live")  # a wake-up arrived: the layer delivers again

    async def _watch(self):
        """The safety net: every ``poll_s``, re-join the groups and read the database for what no
        wake-up announced (in-memory layer: the only way rows arrive; Redis: rows a restart or a
        data loss dropped the wake-ups of)."""
        while not getattr(self, "closed", False):
            await asyncio.sleep(self.poll_s)
            try:
                await self._poll()
            except DatabaseError as exc:  # the database briefly away: the next poll tries again
                log.warning("live socket %s could not read the log: %r", self.channel_name, exc)

    async def _poll(self) -> None:
        if self.in_memory:
            await self.flush()
            return
        lost = await self._join()
        if lost is None:
            await self._set_feed("catching_up", UNREACHABLE.format(self.poll_s))
            await self.flush()
            return
        if lost:
            await self._set_feed("catching_up", MISSED)
        await self.flush()
        await self._set_feed("live")  # joined again, and everything up to now is sent

    async def flush(self) -> None:
        async with self.lock:
            self.last_flush = time.monotonic()
            refusal = await self.refusal()
            if refusal is not None:
                await self.end(refusal)
                return
            await self.send_new()

    async def refusal(self) -> int | None:  # pragma: no cover - abstract
        """Why the user may no longer see what this socket sends (a close code), or None. Asked
        before every send, not only at connect: a user removed from the team (or deactivated)
        while the socket is open gets nothing more of it."""
        raise NotImplementedError

    async def end(self, code: int) -> None:
        """Close the socket with ``code`` and stop its watch; its groups are left on disconnect."""
        if getattr(self, "closed", False):
            return
        self.closed = True
        await self.close(code=code)
        tail = getattr(self, "tail", None)
        if tail is not None and tail is not asyncio.current_task():
            tail.cancel()

    async def send_new(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class RunConsumer(_Coalescing):
    """One run's metric points, events and status, after the client's cursors."""

    reports_feed = True

    async def connect_user(self, user) -> None:
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        refusal = await _run_refusal(user, self.run_id)
        if refusal is not None:
            await self.refuse(refusal)
            return
        self.cursor = None  # set by the client's first message
        self.event_cursor = 0
        self.seen_update = None
        await self.start([group_name(self.run_id)])

    async def receive_json(self, content, **kwargs):
        if not isinstance(content, dict):
            await self.send_json({"type": "error", "message": "send an object: {\"cursor\": n, \"event_cursor\": m}"})
            return
        for name in ("cursor", "event_cursor"):
            value = content.get(name, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                await self.send_json({"type": "error", "message": f"{name}: must be an integer >= 0"})
                return
        async with self.lock:
            self.cursor, self.event_cursor, self.seen_update = content.get("cursor", 0), content.get("event_cursor", 0), None
        await self.flush()

    async def run_wake(self, event):
        await self.wake()

    async def refusal(self) -> int | None:
        return await _run_refusal(self.user, self.run_id)

    async def send_new(self) -> None:
        if self.cursor is None:
            return
        while True:
            new = await _rows_after(self.run_id, self.cursor, self.event_cursor, self.seen_update)
            if new["status"] is not None:
                self.seen_update = new["status"]
                await self.send_json({"type": "status", **new["status"]})
            if new["events"]:
                self.event_cursor = new["event_cursor"]
                await self.send_json({"type": "events", "event_cursor": self.event_cursor, "events": new["events"]})
            if new["points"]:
                self.cursor = new["cursor"]
                await self.send_json({"type": "metrics", "cursor": self.cursor, "points": new["points"]})
            if not new["full"]:
                return


@database_sync_to_async
def _runs_changed(team_ids: list[int], since) -> tuple[list[dict], object]:
    return run_summaries(team_ids=team_ids, since=since)


class RunsConsumer(_Coalescing):
    """Summaries of the runs of the user's teams whenever they change (the runs list)."""

    async def connect_user(self, user) -> None:
        self.team_ids = await _team_ids(user)
        self.since = None
        await self.start([team_group_name(t) for t in self.team_ids])
        await self.flush()

    async def receive_json(self, content, **kwargs):
        await self.send_json({"type": "error", "message": "this socket takes no messages"})

    async def runs_wake(self, event):
        await self.wake()

    async def refusal(self) -> int | None:
        """The user's teams as they are now: a team the user left is no longer read and its
        group is left (the socket stays, for the teams that remain or are joined again later:
        a team joined after connecting is read once the page reconnects)."""
        now = await _team_ids(self.user)
        for gone in set(self.team_ids) - set(now):
            try:
                await self.channel_layer.group_discard(team_group_name(gone), self.channel_name)
            except LAYER_ERRORS:
                pass
        self.team_ids = [t for t in self.team_ids if t in now]
        return None

    async def send_new(self) -> None:
        runs, self.since = await _runs_changed(self.team_ids, self.since)
        if runs:
            await self.send_json({"type": "runs", "runs": runs})
