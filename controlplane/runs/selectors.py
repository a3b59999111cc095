"""Reads for runs and what they produce, filtered to the actor's teams."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from django.db.models import Avg, Max, Min, Q, QuerySet, Sum
from django.db.models.functions import Length
from django.dispatch import Signal
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from controlplane.accounts.principal import Principal
from controlplane.common.errors import InvalidInput, found
from controlplane.common.queries import filter_given
from controlplane.domains.models import Domain
from controlplane.domains.selectors import audit_summaries
from controlplane.runs import store
from controlplane.runs.models import MetricPoint, Run, RunDomain, RunEvent, RunTag, Trajectory
from trainer.outcomes import OUTCOME_VALUES

MAX_PAGE = 5000

run_warnings_wanted = Signal()
"""Sent (``sender=Run, run=...``) when a run's page or API detail is read: each receiver returns
a list of warnings about the run (the review app: a judge its domains use is not calibrated).
Apps that build on runs connect to it in their AppConfig.ready, so runs never imports them."""


def run_warnings(*, run: Run) -> list[str]:
    """What the apps connected to :data:`run_warnings_wanted` warn about ``run``."""
    return [w for _, warnings in run_warnings_wanted.send(sender=Run, run=run) for w in warnings]


ADVICE_KINDS = ("advice", "autoscale")
"""The run events of the split advisor (workers/compute_observers.py ``SplitAdvice``): a proposal, or a
change autoscale made."""


def run_split_advice(*, run: Run) -> RunEvent | None:
    """The split advisor's latest word on ``run`` (its proposal or the change it made), or None."""
    return RunEvent.objects.filter(run=run, kind__in=ADVICE_KINDS).order_by("-at", "-id").first()


def run_list(*, actor: Principal, state: str = "", team: str = "", tag: str = "") -> QuerySet[Run]:
    qs = Run.objects.filter(team_id__in=actor.team_ids).select_related("team", "created_by").prefetch_related("tags")
    return filter_given(qs, tags__name=tag, state=state, team__slug=team)


def tag_names(*, actor: Principal, team: str = "") -> list[str]:
    """Every tag on the runs ``actor`` sees (of ``team``), for the runs list's filter."""
    qs = RunTag.objects.filter(run__team_id__in=actor.team_ids)
    if team:
        qs = qs.filter(run__team__slug=team)
    return list(qs.order_by("name").values_list("name", flat=True).distinct())


def run_get(*, actor: Principal, run_id: int) -> Run:
    # created_by too: the API's run detail names its creator (a query of its own otherwise).
    return found(Run.objects.filter(pk=run_id, team_id__in=actor.team_ids).select_related("team", "created_by").first(),
                 f"run {run_id} not found")


METRIC_FIELDS = ("id", "step", "domain", "key", "value", "time")


def metrics_after(*, run: Run, cursor: int = 0, limit: int = 1000, keys: list[str] | None = None) -> tuple[list[dict[str, Any]], int]:
    """Metric points with id above ``cursor`` in id order (as dicts of :data:`METRIC_FIELDS`), and
    the cursor to ask with next.

    Ids are the live log's cursor: a client that reconnects with its cursor misses nothing and
    receives nothing twice. Plain rows, not model instances: a page is up to 5000 points, and
    building a model per point cost three times the query (bench/api_load.py).
    """
    if cursor < 0:
        raise InvalidInput.one("after", "must be at least 0")
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput.one("limit", f"must be between 1 and {MAX_PAGE}")
    qs = MetricPoint.objects.filter(run=run, id__gt=cursor)
    if keys:
        qs = qs.filter(key__in=keys)
    points = list(qs.order_by("id").values(*METRIC_FIELDS)[:limit])
    return points, (points[-1]["id"] if points else cursor)


def trajectory_list(*, run: Run, step: int | None = None, domain: str = "", outcome: str = "", task_id: str = "",
                    min_reward: float | None = None, max_reward: float | None = None,
                    min_length: int | None = None, max_length: int | None = None,
                    trajectory: int | None = None, flag: str = "") -> QuerySet[Trajectory]:
    """A run's sampled trajectories, filtered (the trajectory explorer): one step or all, a
    domain, an outcome, one task across steps, a reward range (masked outcomes, which have none,
    fall outside any range), a completion length range in characters, and the reward-hacking
    watch's evidence (``flag``: ``canary``, the impossible canaries; ``tampered``, episodes whose
    verdict lists test or harness files they changed; ``regrade``, passes a stricter grading
    failed); or one trajectory."""
    qs = filter_given(Trajectory.objects.filter(run=run), pk=trajectory, step=step, domain=domain, outcome=outcome,
                      task_id=task_id)
    if flag == "canary":
        qs = qs.filter(details__has_key="canary")
    elif flag == "tampered":
        qs = qs.filter(details__details__tampered__0__isnull=False)
    elif flag == "regrade":
        qs = qs.filter(details__has_key="regrade")
    elif flag:
        raise InvalidInput.one("flag", "must be canary, tampered or regrade")
    qs = filter_given(qs, reward__gte=min_reward, reward__lte=max_reward)
    if min_length is not None or max_length is not None:
        qs = filter_given(qs.annotate(completion_length=Length("completion")),
                          completion_length__gte=min_length, completion_length__lte=max_length)
    return qs.order_by("step", "id")


def trajectory_artifact(*, run: Run, trajectory_id: int, index: int) -> tuple[dict, Path]:
    """One stored artifact of one of ``run``'s trajectories: its listing entry and its file
    (NotFound when the trajectory is not the run's, has no such artifact, or its bytes were not
    stored or are gone with a rewind or a restart)."""
    row = found(Trajectory.objects.filter(run=run, pk=trajectory_id).values("step", "artifacts").first(),
                f"trajectory {trajectory_id} not found in run {run.pk}")
    entries = row["artifacts"] if isinstance(row["artifacts"], list) else []
    entry = entries[index] if 0 <= index < len(entries) and isinstance(entries[index], dict) else None
    entry = found(entry if entry and entry.get("stored") else None, f"trajectory {trajectory_id} has no stored artifact {index}")
    path = store.artifact_path(run.pk, row["step"], trajectory_id, index)
    return found(entry if path.is_file() else None, f"artifact {index} of trajectory {trajectory_id} is no longer stored"), path


def run_domains(*, run: Run) -> list[RunDomain]:
    """The run's domains with their pinned versions."""
    return list(RunDomain.objects.filter(run=run).select_related("domain", "domain_version"))


def run_weights(*, run: Run) -> dict[str, float]:
    """The run's current domain weights, by slug."""
    return dict(RunDomain.objects.filter(run=run).values_list("domain__slug", "weight"))


def run_quarantined_domains(*, run: Run) -> set[str]:
    """The domains this run has quarantined (it survives a resume)."""
    return set(RunEvent.objects.filter(run=run, kind="quarantine").values_list("data__domain", flat=True))


def event_list(*, run: Run) -> QuerySet[RunEvent]:
    return RunEvent.objects.filter(run=run).order_by("at", "id")


def run_explain(*, run: Run, now=None) -> dict:
    """Why a queued run waits (position, the binding resource, the numbers), what a running run
    waits on (the driver's phase and the work in flight per domain, with ages), or why a paused
    run is paused and whether it resumes by itself (``resume_when_served``: a queue's worker)."""
    now = now or timezone.now()
    out: dict = {"state": run.state, "step": run.current_step, "queued": None, "running": None, "paused": None}
    if run.state == "queued":
        note = dict(run.scheduler_note or {})
        out["queued"] = note or {"reason": "waiting for the next scheduler tick"}
    elif run.state == "paused":
        # Paused by the system (no live worker on a queue, storage errors) the note says why; a
        # user's pause has none: the run's events say who.
        note = dict(run.scheduler_note or {})
        out["paused"] = note or {"reason": "paused by a user; resume it to continue"}
    elif run.state == "running":
        inflight = run.inflight or {}
        since = parse_datetime(inflight["since"]) if inflight.get("since") else None
        out["running"] = {
            "driver": run.driver or None,
            "driver_seen_s_ago": (now - run.driver_seen_at).total_seconds() if run.driver_seen_at else None,
            "phase": inflight.get("phase") or ("starting" if not run.driver else "unknown"),
            "phase_age_s": (now - since).total_seconds() if since else None,
            "in_flight": [{"domain": d, "items": n} for d, n in sorted((inflight.get("per_domain") or {}).items())],
            "preempt_requested": run.preempt_requested,
        }
    return out


def domain_stats(*, actor: Principal, domain: Domain, window: timedelta = timedelta(hours=1)) -> dict[str, Any]:
    """Verification latency (p50, p99) and the outcome mix over ``window``, across the actor's runs."""
    since = timezone.now() - window
    points = MetricPoint.objects.filter(run__team_id__in=actor.team_ids, time__gte=since)
    latency = {
        name: points.filter(key=f"verify/{domain.slug}/{name}_s").order_by("-id").values_list("value", flat=True).first()
        for name in ("p50", "p99")
    }
    prefix = f"outcome/{domain.slug}/"
    mix = dict(points.filter(key__startswith=prefix).values_list("key").annotate(n=Sum("value")).order_by())
    outcomes = [(o, int(mix.get(prefix + o, 0))) for o in OUTCOME_VALUES]
    total = sum(n for _, n in outcomes)
    return {
        "p50_s": latency["p50"], "p99_s": latency["p99"], "total": total, "window_minutes": int(window.total_seconds() // 60),
        "outcomes": [{"outcome": o, "count": n, "share": n / total if total else 0.0} for o, n in outcomes if n],
        "runs": points.filter(key__startswith=prefix).values("run").distinct().count(),
    }


def _from_rates(points: QuerySet, rate_key: str, of_key: str) -> tuple[int, int | None]:
    """A count summed from a per-step rate and the per-step count it is a share of (steps recorded
    before the trainer wrote the count itself), and the first step with a non-zero rate."""
    of = dict(points.filter(key=of_key).values_list("step", "value"))
    rates = list(points.filter(key=rate_key).order_by("step").values_list("step", "value"))
    return round(sum(rate * of.get(step, 0.0) for step, rate in rates)), next((step for step, rate in rates if rate > 0), None)


COUNTED = ("hack/canaries/", "hack/canary_passes/", "hack/regraded/", "hack/regrade_disagreements/")
"""The reward-hacking watch's per-step counts (trainer/integrity.py), summed over a run."""


def run_integrity(*, run: Run, firing: set[str] = frozenset()) -> list[dict[str, Any]]:
    """The reward-integrity panel: per domain of the run, its pinned version's verifier audit and
    what the run's reward-hacking watch has seen (trainer/integrity.py): canaries planted and
    passed (and the first step one passed), regrades and disagreements, the share of episodes
    that touched tests or harness files (last step and whole run), and which of the metric keys
    ``firing`` (the alerts firing on the run now) are the domain's. Aggregated by the database: a
    fixed number of queries whatever the run's length and domains."""
    rds = list(RunDomain.objects.filter(run=run).select_related("domain", "domain_version"))
    summaries = audit_summaries(versions=[rd.domain_version for rd in rds])
    slugs = [rd.domain.slug for rd in rds]
    points = MetricPoint.objects.filter(run=run)
    sums = dict(points.filter(key__in=[f"{p}{s}" for p in COUNTED for s in slugs]).values("key")
                .annotate(total=Sum("value")).values_list("key", "total"))
    tamper = {key.removeprefix("hack/tamper_rate/"): (mean, last_step) for key, mean, last_step in
              points.filter(key__in=[f"hack/tamper_rate/{s}" for s in slugs]).values("key")
              .annotate(mean=Avg("value"), last_step=Max("step")).values_list("key", "mean", "last_step")}
    last = Q(pk__in=[])
    for slug, (_, step) in tamper.items():
        last |= Q(key=f"hack/tamper_rate/{slug}", step=step)
    tamper_last = {key.removeprefix("hack/tamper_rate/"): value for key, value in points.filter(last).values_list("key", "value")}
    first_pass = {key.removeprefix("hack/canary_passes/"): step for key, step in
                  points.filter(key__in=[f"hack/canary_passes/{s}" for s in slugs], value__gt=0).values("key")
                  .annotate(first=Min("step")).values_list("key", "first")}
    out = []
    for rd in rds:
        slug = rd.domain.slug
        count = {p: int(round(sums.get(f"{p}{slug}", 0.0))) for p in COUNTED}
        for counted, rate, of in (("hack/canary_passes/", "hack/canary_pass_rate/", "hack/canaries/"),
                                  ("hack/regrade_disagreements/", "hack/regrade_disagreement/", "hack/regraded/")):
            if f"{counted}{slug}" not in sums and f"{of}{slug}" in sums:  # recorded before the counts were
                count[counted], first = _from_rates(points, f"{rate}{slug}", f"{of}{slug}")
                if counted == "hack/canary_passes/":
                    first_pass[slug] = first
        out.append({
            "domain": slug, "version": rd.domain_version.version, "audit": summaries[rd.domain_version_id],
            "canaries": count["hack/canaries/"], "canary_passes": count["hack/canary_passes/"],
            "first_pass_step": first_pass.get(slug),
            "tamper_last": tamper_last.get(slug), "tamper_mean": tamper[slug][0] if slug in tamper else None,
            "regraded": count["hack/regraded/"], "regrade_disagreements": count["hack/regrade_disagreements/"],
            "firing": sorted(k for k in firing if k.startswith("hack/") and k.endswith(f"/{slug}")),
            "watched": any(f"{p}{slug}" in sums for p in COUNTED) or slug in tamper,
        })
    return out
