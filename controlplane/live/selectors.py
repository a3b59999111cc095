"""What the live sockets send: a run's status line and the summaries of a team's runs."""
from __future__ import annotations

from datetime import timedelta

from django.db.models import OuterRef, Subquery
from django.utils import timezone

from controlplane.runs.models import MetricPoint, Run

SUMMARY_LIMIT = 200
OVERLAP = timedelta(seconds=5)
"""Runs changed this long before the last send are sent again: a transaction that committed late
is never missed, and a summary sent twice just replaces itself."""


def run_status(run_id: int) -> dict | None:
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        return None
    return {
        "state": run.state, "step": run.current_step, "budget_steps": run.budget_steps, "priority": run.priority,
        "error": run.error[-2000:], "inflight": run.inflight or {}, "driver": run.driver,
        "preempt_requested": run.preempt_requested, "tokens_used": run.tokens_used,
        "queued": run.scheduler_note or {} if run.state == "queued" else {},
        # Why the system paused it (a lost rank, no live worker, storage), for the "Waiting on"
        # panel; a user's pause has no note.
        "paused": run.scheduler_note or {} if run.state == "paused" else {},
    }


def run_summaries(*, team_ids: list[int], since=None) -> tuple[list[dict], object]:
    """Runs of the teams changed after ``since`` (all, newest first, when None) and the next ``since``."""
    now = timezone.now()
    latest_reward = (MetricPoint.objects.filter(run=OuterRef("pk"), key="reward/mean").order_by("-step").values("value")[:1])
    qs = Run.objects.filter(team_id__in=team_ids).select_related("team").annotate(reward=Subquery(latest_reward))
    if since is not None:
        qs = qs.filter(updated_at__gte=since - OVERLAP)
    runs = [
        {"id": r.id, "name": r.name, "team": r.team.slug, "state": r.state, "step": r.current_step,
         "budget_steps": r.budget_steps, "priority": r.priority, "reward": r.reward,
         "progress": min(1.0, r.current_step / r.budget_steps) if r.budget_steps else 0.0}
        for r in qs.order_by("-updated_at")[:SUMMARY_LIMIT]
    ]
    return runs, now
