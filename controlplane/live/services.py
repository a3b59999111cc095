"""Wake the browsers watching a run (and its team's run list) after new rows are committed."""
from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from controlplane.live.consumers import group_name, team_group_name


def run_wake(*, run_id: int, team_id: int | None = None) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    async_to_sync(layer.group_send)(group_name(run_id), {"type": "run.wake"})
    if team_id is None:
        from controlplane.runs.models import Run

        team_id = Run.objects.filter(pk=run_id).values_list("team_id", flat=True).first()
    if team_id is not None:
        async_to_sync(layer.group_send)(team_group_name(team_id), {"type": "runs.wake"})


def wake_on_commit(run) -> None:
    """Wake the run's watchers once the current transaction commits; never fails the caller."""
    from django.db import transaction

    run_id, team_id = run.pk, run.team_id

    def _wake():
        try:
            run_wake(run_id=run_id, team_id=team_id)
        except Exception:  # a missing channel layer never breaks a write; clients also tail the log
            pass

    transaction.on_commit(_wake)
