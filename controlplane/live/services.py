"""Wake the browsers watching a run (and its team's run list) after new rows are committed."""
from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from controlplane.live.consumers import group_name, team_group_name
from controlplane.runs.models import Run


def run_wake(*, run_id: int, team_id: int | None = None) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    async_to_sync(layer.group_send)(group_name(run_id), {"type": "run.wake"})
    if team_id is None:
        team_id = Run.objects.filter(pk=run_id).values_list("team_id", flat=True).first()
    if team_id is not None:
        async_to_sync(layer.group_send)(team_group_name(team_id), {"type": "runs.wake"})


def wake_on_commit(run) -> None:
    """Wake the run's watchers once the current transaction commits; never fails the caller."""
    run_id, team_id = run.pk, run.team_id

    def _wake():
        try:
            run_wake(run_id=run_id, team_id=team_id)
        except Exception:  # a missing channel layer never breaks a write; clients also tail the log
            pass

    transaction.on_commit(_wake)


LEASE_ONLY = frozenset({"driver_seen_at", "updated_at"})
"""A driver's lease renewal changes nothing a page shows: no wake-up for it."""


def run_saved(sender, instance, update_fields=None, **kw) -> None:
    """post_save of a Run: wake its watchers, unless only the lease changed."""
    if update_fields is not None and set(update_fields) <= LEASE_ONLY:
        return
    wake_on_commit(instance)


def event_saved(sender, instance, **kw) -> None:
    """post_save of a RunEvent: wake the run's watchers."""
    wake_on_commit(instance.run)
