"""Wake the browsers watching a run after new rows are committed."""
from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from controlplane.live.consumers import group_name


def run_wake(*, run_id: int) -> None:
    layer = get_channel_layer()
    if layer is not None:
        async_to_sync(layer.group_send)(group_name(run_id), {"type": "run.wake"})
