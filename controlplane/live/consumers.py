"""The live log over websockets: metric points after the client's cursor, never twice.

The database is the log (DESIGN.md). Workers bulk-insert rows, then wake the group ``run-<id>``;
each socket sends its client the rows after the client's cursor. A reconnecting client sends its
cursor and loses nothing. With the in-memory channel layer (embedded default) workers live in
other processes and cannot wake us, so the consumer also tails the database once a second.
"""
from __future__ import annotations

import asyncio

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

BATCH = 2000
TAIL_PERIOD_S = 1.0


def group_name(run_id: int) -> str:
    return f"run-{run_id}"


@database_sync_to_async
def _visible_run(user, run_id: int) -> bool:
    from controlplane.accounts.principal import Principal
    from controlplane.runs.models import Run

    actor = Principal.for_user(user)
    return Run.objects.filter(pk=run_id, team_id__in=actor.team_ids).exists()


@database_sync_to_async
def _rows_after(run_id: int, cursor: int) -> tuple[list[list], int, str]:
    from controlplane.runs.models import MetricPoint, Run

    rows = list(
        MetricPoint.objects.filter(run_id=run_id, id__gt=cursor)
        .order_by("id")
        .values_list("id", "step", "domain", "key", "value")[:BATCH]
    )
    state = Run.objects.filter(pk=run_id).values_list("state", flat=True).first() or ""
    return [list(r) for r in rows], (rows[-1][0] if rows else cursor), state


class RunConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        if not await _visible_run(user, self.run_id):
            await self.close(code=4404)
            return
        self.cursor = None  # set by the client's first message
        self.lock = asyncio.Lock()
        self.tail = None
        await self.channel_layer.group_add(group_name(self.run_id), self.channel_name)
        await self.accept()
        if settings.CHANNEL_LAYERS["default"]["BACKEND"].endswith("InMemoryChannelLayer"):
            self.tail = asyncio.create_task(self._tail())

    async def disconnect(self, code):
        if getattr(self, "tail", None):
            self.tail.cancel()
        if hasattr(self, "run_id"):
            await self.channel_layer.group_discard(group_name(self.run_id), self.channel_name)

    async def receive_json(self, content, **kwargs):
        cursor = content.get("cursor", 0) if isinstance(content, dict) else None
        if isinstance(cursor, bool) or not isinstance(cursor, int) or cursor < 0:
            await self.send_json({"type": "error", "message": "cursor: must be an integer >= 0"})
            return
        self.cursor = cursor
        await self._flush()

    async def run_wake(self, event):
        await self._flush()

    async def _tail(self):
        while True:
            await asyncio.sleep(TAIL_PERIOD_S)
            await self._flush()

    async def _flush(self):
        if self.cursor is None:
            return
        async with self.lock:
            while True:
                rows, cursor, state = await _rows_after(self.run_id, self.cursor)
                if not rows:
                    return
                self.cursor = cursor
                await self.send_json({"type": "metrics", "cursor": cursor, "state": state, "points": rows})
                if len(rows) < BATCH:
                    return
