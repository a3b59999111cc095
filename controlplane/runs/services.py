"""Writes for runs: validate, create, start, pause, resume, cancel, priorities and weights.

Permissions are enforced here: viewers and reviewers read; members and admins create and control
their team's runs; only admins raise priorities above the member ceiling. Every change is audited.

The run driver's and the scheduler's writes (system actors) are here too. The driver owns a run through a lease (``Run.driver`` + ``driver_seen_at``); a driver whose
lease was taken over stops at its next step boundary. Step writes are idempotent: metric points
are unique per run/step/domain/key and a step's trajectories are replaced as a whole, so a retried
or resumed step never records anything twice.
"""
from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from controlplane import dispatch
from controlplane.accounts.models import Team
from controlplane.accounts.principal import Principal
from controlplane.accounts.services import audit_record
from controlplane.common.body import storable
from controlplane.common.engines import engine_errors
from controlplane.common.errors import FieldError, InvalidInput, found
from controlplane.common.model_refs import ModelRefused, config_refs, resolve_model
from controlplane.domains.models import Domain, DomainVersion
from controlplane.domains.selectors import audit_blockers
from controlplane.domains.services import audit_ensure
from controlplane.runs import series, store
from controlplane.runs.models import (Checkpoint, MetricPoint, Run, RunDomain, RunEvent, RunState, RunTag, Trajectory,
                                      UsageRecord)
from controlplane.runs.usage import USAGE_FIELDS
from controlplane.runs.schemas import MAX_MEMBER_PRIORITY, run_schema_errors
from controlplane.runs.spec import RunSpec
from controlplane.runs.ceilings import gpu_request_errors, rank_errors, run_body_ceiling_errors
from trainer.config import MAX_DOMAIN_WEIGHT, RolloutConfig
from trainer.outcomes import OUTCOME_VALUES

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunPlan:
    """A validated run configuration, ready to be saved."""

    team: Team
    spec: RunSpec
    domains: list[tuple[Domain, float]]
    cloned_from: Run | None = None

    @property
    def fields(self) -> dict[str, Any]:
        """The run's model fields (the spec's)."""
        return self.spec.columns()

    def as_dict(self) -> dict[str, Any]:
        total = sum(w for _, w in self.domains)
        return {
            "team": self.team.slug,
            **self.fields,
            "budget_cost": None if self.spec.budget_cost is None else str(self.spec.budget_cost),  # JSON: exact text
            "domains": [
                {"slug": d.slug, "version": d.version, "weight": w, "share": w / total} for d, w in self.domains
            ],
        }


def _resolve_team(actor: Principal, slug: str | None) -> Team:
    if slug:
        return found(Team.objects.filter(slug=slug, pk__in=actor.team_ids).first(), f"team {slug!r} not found")
    teams = list(Team.objects.filter(pk__in=actor.team_ids)[:2])
    if len(teams) != 1:
        raise InvalidInput.one("team", "required: you belong to several teams" if teams else "you belong to no team")
    return teams[0]


def _model_ref_errors(team: Team, ref: str, config: Any) -> list[FieldError]:
    """The run's base model and the model and tokenizer directories its config names, each a
    reference its team may use (controlplane/common/model_refs.py); another team's registry
    version or checkpoint reads as not found."""
    errors = []
    refs = [("base_model", ref, "config.json")] + [(f"config.{path}", value, needs) for path, value, needs in config_refs(config)]
    for field, value, needs in refs:
        try:
            resolve_model(value, team_id=team.id, needs=needs)
        except ModelRefused as exc:
            errors.append(FieldError(field, str(exc)))
    return errors


def run_validate(*, actor: Principal, data: Any) -> RunPlan:
    """Check a run configuration completely; raises InvalidInput listing every problem."""
    if not isinstance(data, dict):
        raise InvalidInput.one("", "must be an object")
    errors = run_schema_errors(data)
    if errors:
        raise InvalidInput(errors)
    team = _resolve_team(actor, data.get("team"))
    role = actor.require(team.id, "run.control", "team")

    if not data["name"].strip():
        errors.append(FieldError("name", "must not be blank"))
    priority = data.get("priority", MAX_MEMBER_PRIORITY)
    if priority > MAX_MEMBER_PRIORITY and role != "admin":
        errors.append(FieldError("priority", f"above {MAX_MEMBER_PRIORITY} needs the team admin role"))
    errors += run_body_ceiling_errors(team=team, data=data)  # the team's ceilings on run sizes
    errors += gpu_request_errors(team=team, gpus=data.get("gpus", 0))  # GPUs no pool or quota could ever give
    errors += rank_errors(gpus=data.get("gpus", 0), config=data.get("config"))
    rollout = (data.get("config") or {}).get("rollout") or {}
    errors += engine_errors(rollout.get("engine", RolloutConfig.engine), "config.rollout.engine")

    ref = data["base_model"].strip()
    errors += _model_ref_errors(team, ref, data.get("config", {}))

    slugs = [d["slug"] for d in data["domains"]]
    visible = {d.slug: d for d in Domain.objects.filter(slug__in=slugs).filter(team__isnull=True) | Domain.objects.filter(slug__in=slugs, team=team)}
    seen: set[str] = set()
    domains: list[tuple[Domain, float]] = []
    for i, entry in enumerate(data["domains"]):
        slug = entry["slug"]
        if slug in seen:
            errors.append(FieldError(f"domains[{i}].slug", f"{slug!r} is listed twice"))
            continue
        seen.add(slug)
        domain = visible.get(slug)
        if domain is None:
            errors.append(FieldError(f"domains[{i}].slug", f"unknown domain {slug!r}"))
        elif not domain.is_active:
            errors.append(FieldError(f"domains[{i}].slug", f"domain {slug!r} is disabled"))
        else:
            domains.append((domain, float(entry["weight"])))
    errors += _unsafe_pins(DomainVersion.objects.filter(domain__in=[d for d, _ in domains], version=F("domain__version")))
    cloned_from = None
    if data.get("clone_from"):  # checked here, so /api/runs/validate says what /api/runs would
        cloned_from = Run.objects.filter(pk=data["clone_from"], team_id__in=actor.team_ids).first()
        if cloned_from is None:
            errors.append(FieldError("clone_from", f"no run {data['clone_from']} in your teams"))
    if errors:
        raise InvalidInput(errors)

    return RunPlan(team=team, spec=RunSpec.from_body(data), domains=domains, cloned_from=cloned_from)


def _unsafe_pins(versions) -> list[FieldError]:
    """A run may not pin a domain version whose verifier audit found false positives or failed,
    unless an admin overrode that audit (the rule and its wording live in the domains app:
    ``audit_gates``)."""
    versions = list(versions.select_related("domain"))
    blocked = audit_blockers(versions=versions)
    return [FieldError(f"domains.{v.domain.slug}", blocked[v.id]) for v in versions if v.id in blocked]


def _run_audit_view(run: Run) -> dict[str, Any]:
    return {"state": run.state, "priority": run.priority, "name": run.name}


def _user_event(run: Run, kind: str, message: str, actor: Principal, **data: Any) -> RunEvent:
    return RunEvent.objects.create(run=run, kind=kind, message=message, data=data, actor=actor.user)


@transaction.atomic
def run_create(*, actor: Principal, data: Any) -> Run:
    plan = run_validate(actor=actor, data=data)
    run = Run(team=plan.team, created_by=actor.user, cloned_from=plan.cloned_from, **plan.fields)
    run.initial_priority = run.priority
    run.full_clean()
    run.save()
    versions = {
        (dv.domain_id, dv.version): dv
        for dv in DomainVersion.objects.filter(domain__in=[d for d, _ in plan.domains])
    }
    for domain, weight in plan.domains:
        RunDomain.objects.create(run=run, domain=domain, domain_version=versions[(domain.id, domain.version)], weight=weight,
                                 initial_weight=weight)
    _user_event(run, "created", f"created by {actor.name}", actor)
    audit_record(actor=actor, obj=run, action="run.create", after=plan.as_dict(), team=plan.team)
    return run


def _locked(run: Run) -> Run:
    return Run.objects.select_for_update().get(pk=run.pk)


def _control(actor: Principal, run: Run, to: str, kind: str, message: str) -> Run:
    """A user moves ``run`` to state ``to``; a run put in the queue wakes the scheduler, which
    admits it when its team quota and a slot allow."""
    actor.require(run.team_id, "run.control", "run")
    run = _locked(run)
    before = _run_audit_view(run)
    if run.transition(to):
        run.save()
        _user_event(run, kind, message, actor)
        audit_record(actor=actor, obj=run, action=f"run.{kind}", before=before, after=_run_audit_view(run), team=run.team)
    elif to == RunState.PAUSED and (run.scheduler_note or {}).get(RESUME_WHEN_SERVED):
        # Paused by the system for want of a worker, now paused by a user: it stays paused.
        run.scheduler_note = {}
        run.save(update_fields=["scheduler_note", "updated_at"])
        _user_event(run, kind, f"{message}: it stays paused when a worker returns", actor)
    if to == RunState.QUEUED:
        dispatch.send_on_commit("temper.control.schedule_tick")
    return run


@transaction.atomic
def run_start(*, actor: Principal, run: Run) -> Run:
    """Queue a draft run; the scheduler admits it when its team quota and a slot allow and every
    pinned domain version's verifier audit has cleared it (until then it waits, with the reason).
    Refused while a pinned version's audit found false positives or failed (not overridden); a
    version never audited gets its audit requested now."""
    actor.require(run.team_id, "run.control", "run")
    if run.state == RunState.DRAFT:
        _check_pins(actor, run)
    return _control(actor, run, RunState.QUEUED, "queued", f"queued by {actor.name}")


def _check_pins(actor: Principal, run: Run) -> None:
    """Refuse the run's unsafe or failed pins; request the audits its never-audited pins lack."""
    versions = DomainVersion.objects.filter(pk__in=run.run_domains.values("domain_version_id"))
    errors = _unsafe_pins(versions)
    if errors:
        raise InvalidInput(errors)
    audit_ensure(versions=list(versions), requested_by=actor.user, note=f"run {run.pk} is queued on it")


@transaction.atomic
def run_pause(*, actor: Principal, run: Run) -> Run:
    """Pause a running run; its driver checkpoints at the next step boundary and stops."""
    return _control(actor, run, RunState.PAUSED, "paused", f"paused by {actor.name}")


@transaction.atomic
def run_resume(*, actor: Principal, run: Run) -> Run:
    """Put a paused run back in the queue; it resumes from its last checkpoint when admitted (its
    pins are checked as at the start)."""
    actor.require(run.team_id, "run.control", "run")
    if run.state == RunState.PAUSED:
        _check_pins(actor, run)
    return _control(actor, run, RunState.QUEUED, "resumed", f"resumed by {actor.name}")


@transaction.atomic
def run_cancel(*, actor: Principal, run: Run) -> Run:
    return _control(actor, run, RunState.CANCELLED, "cancelled", f"cancelled by {actor.name}")


@transaction.atomic
def run_set_priority(*, actor: Principal, run: Run, priority: int) -> Run:
    actor.require(run.team_id, "team.admin", "run")
    if not isinstance(priority, int) or isinstance(priority, bool) or not 1 <= priority <= 99:
        raise InvalidInput.one("priority", "must be an integer from 1 to 99")
    run = _locked(run)
    if run.is_terminal:
        raise InvalidInput.one("priority", f"run {run.pk} has ended ({run.state})")
    before = run.priority
    if before != priority:
        run.priority = priority
        run.save(update_fields=["priority", "updated_at"])
        _user_event(run, "priority", f"priority {before} -> {priority} by {actor.name}", actor, before=before, after=priority)
        audit_record(actor=actor, obj=run, action="run.priority", before={"priority": before}, after={"priority": priority}, team=run.team)
    return run


MAX_TAGS = 20
TAG_RE = re.compile(r"[a-z0-9][a-z0-9._:-]{0,31}")
"""A tag: lower-case letters, digits and ``. _ : -``, starting with a letter or digit, at most 32."""


def tag_errors(tags: Any, path: str = "tags") -> list[FieldError]:
    if not isinstance(tags, list):
        return [FieldError(path, "must be a list of tags")]
    errors = [FieldError(f"{path}[{i}]", "must be lower-case letters, digits and . _ : -, starting with a letter "
                                         "or digit, at most 32 characters" + (f" (got {t!r})" if isinstance(t, str) else ""))
              for i, t in enumerate(tags) if not isinstance(t, str) or not TAG_RE.fullmatch(t)]
    if len(set(t for t in tags if isinstance(t, str))) > MAX_TAGS:
        errors.append(FieldError(path, f"at most {MAX_TAGS} tags"))
    return errors


@transaction.atomic
def run_set_tags(*, actor: Principal, run: Run, tags: list[str]) -> Run:
    """Replace the run's tags (a run that has ended may be tagged too: tags are for finding runs)."""
    actor.require(run.team_id, "run.control", "run")
    errors = tag_errors(tags)
    if errors:
        raise InvalidInput(errors)
    run = _locked(run)
    wanted = list(dict.fromkeys(tags))
    before = sorted(run.tags.values_list("name", flat=True))
    if before != sorted(wanted):
        run.tags.exclude(name__in=wanted).delete()
        RunTag.objects.bulk_create([RunTag(run=run, name=t) for t in wanted if t not in before])
        after = sorted(wanted)
        _user_event(run, "tags", f"tags {', '.join(before) or 'none'} -> {', '.join(after) or 'none'} by {actor.name}",
                    actor, before=before, after=after)
        audit_record(actor=actor, obj=run, action="run.tags", before={"tags": before}, after={"tags": after}, team=run.team)
    return run


@transaction.atomic
def run_set_weights(*, actor: Principal, run: Run, weights: dict[str, float]) -> Run:
    """Change domain weights; the driver applies them at the next step boundary."""
    actor.require(run.team_id, "run.control", "run")
    run = _locked(run)
    if run.is_terminal:
        raise InvalidInput.one("weights", f"run {run.pk} has ended ({run.state})")
    rows = {rd.domain.slug: rd for rd in run.run_domains.select_related("domain")}
    errors = []
    if not isinstance(weights, dict) or not weights:
        raise InvalidInput.one("weights", "must be a non-empty object of domain slug to weight")
    for slug, weight in weights.items():
        if slug not in rows:
            errors.append(FieldError(f"weights.{slug}", "not a domain of this run"))
        elif (isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight)
              or not 0 <= weight <= MAX_DOMAIN_WEIGHT):
            errors.append(FieldError(f"weights.{slug}", f"must be a finite number from 0 (pauses the domain) to {MAX_DOMAIN_WEIGHT:g}"))
    if errors:
        raise InvalidInput(errors)
    if not any((weights.get(slug, rd.weight)) > 0 for slug, rd in rows.items()):
        raise InvalidInput.one("weights", "at least one domain must keep a weight above 0 (a weight of 0 pauses a domain)")
    before = {slug: rd.weight for slug, rd in rows.items()}
    for slug, weight in weights.items():
        rows[slug].weight = float(weight)
        rows[slug].save(update_fields=["weight"])
    after = {slug: rd.weight for slug, rd in rows.items()}
    if after != before:
        changes = ", ".join(f"{slug} {before[slug]:g} -> {after[slug]:g}" + (" (paused)" if after[slug] == 0 else "")
                            for slug in rows if before[slug] != after[slug])
        _user_event(run, "weights", f"domain weights changed by {actor.name}: {changes}", actor, before=before, after=after)
        audit_record(actor=actor, obj=run, action="run.weights", before=before, after=after, team=run.team)
    return run


# ----------------------------------------------------------------------------- the driver's writes
def lease_s() -> float:
    """A driver silent for this long is presumed dead and the scheduler hands its run to another
    worker (TEMPER_DRIVER_LEASE_S, 40 s: with ticks every 10 s, noticed within a minute). A live
    driver renews its lease every quarter of it from a thread, however long a step takes."""
    return float(settings.TEMPER_DRIVER_LEASE_S)



class LeaseLost(Exception):
    """Another worker owns the run now; this driver must stop without writing."""


def run_event_record(*, run: Run, kind: str, message: str, data: dict[str, Any] | None = None) -> RunEvent:
    """Record what happened to a run and why, as the system (the driver, the scheduler)."""
    return RunEvent.objects.create(run=run, kind=kind, message=message, data=data or {})


def _event(run: Run, kind: str, message: str, **data: Any) -> RunEvent:
    return run_event_record(run=run, kind=kind, message=message, data=data)


def metric_domain(key: str, domains: set[str]) -> str:
    """The domain a metric belongs to (a path segment naming one of the run's domains), or ''.

    >>> d = {"builtin-parity"}
    >>> metric_domain("outcome/builtin-parity/pass", d), metric_domain("response/length/builtin-parity", d), metric_domain("reward/mean", d)
    ('builtin-parity', 'builtin-parity', '')
    """
    return next((part for part in key.split("/")[1:] if part in domains), "")


@transaction.atomic
def run_claim(*, run_id: int, worker: str) -> Run | None:
    """Take the run's lease when it is running and nobody alive holds it."""
    run = Run.objects.select_for_update().filter(pk=run_id).first()
    if run is None or run.state != RunState.RUNNING:
        return None
    now = timezone.now()
    if run.driver and run.driver != worker and run.driver_seen_at and (now - run.driver_seen_at).total_seconds() < lease_s():
        return None
    previous = run.driver
    run.driver, run.driver_seen_at = worker, now
    run.save(update_fields=["driver", "driver_seen_at", "updated_at"])
    _event(run, "driver", f"driven by {worker}" + (f" (took over from {previous})" if previous and previous != worker else ""),
           worker=worker, previous=previous)
    return run


@transaction.atomic
def run_heartbeat(*, run_id: int, worker: str) -> Run:
    """Renew the lease; returns the run as it is now (state, weights, flags)."""
    run = Run.objects.select_for_update().get(pk=run_id)
    if run.driver != worker:
        raise LeaseLost(f"run {run_id} is driven by {run.driver or 'nobody'} now")
    run.driver_seen_at = timezone.now()
    run.save(update_fields=["driver_seen_at"])
    return run


def run_renew(*, run_id: int, worker: str) -> bool:
    """Renew the lease from the driver's heartbeat thread; False once another worker owns it."""
    return Run.objects.filter(pk=run_id, driver=worker).update(driver_seen_at=timezone.now()) == 1


@transaction.atomic
def run_rewind(*, run: Run, to_step: int) -> int:
    """Forget what was recorded after ``to_step`` (the driver resumes from that checkpoint)."""
    deleted, _ = MetricPoint.objects.filter(run=run, step__gt=to_step).delete()
    series.rewind(run, to_step)
    Trajectory.objects.filter(run=run, step__gt=to_step).delete()
    store.forget_steps(run.id, after=to_step)
    Run.objects.filter(pk=run.pk).update(current_step=to_step)
    return deleted


def _finite(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


@transaction.atomic
def run_record_step(*, run: Run, worker: str, step: int, metrics: dict[str, float], samples: list[dict],
                    verifier_versions: dict[str, int], tokens: int = 0, usage: dict[str, dict] | None = None) -> int:
    """Write one step's metrics, sampled trajectories and usage (domain -> figures, "" for the
    step's own: workers/usage.py); idempotent. Returns points written."""
    locked = Run.objects.select_for_update().get(pk=run.pk)
    if locked.driver != worker:
        raise LeaseLost(f"run {run.pk} is driven by {locked.driver or 'nobody'} now")
    now = timezone.now()
    domains = set(run.run_domains.values_list("domain__slug", flat=True))
    points = []
    for key, value in metrics.items():
        v = _finite(value)
        if v is not None:
            points.append(MetricPoint(run=run, step=step, domain=metric_domain(key, domains), key=key, value=v, time=now))
    # A retried write keeps the points already there; only new ones go into the buckets.
    present = set(MetricPoint.objects.filter(run=run, step=step).values_list("domain", "key"))
    points = [p for p in points if (p.domain, p.key) not in present]
    MetricPoint.objects.bulk_create(points, ignore_conflicts=True)
    series.rollup(points)
    Trajectory.objects.filter(run=run, step=step).delete()
    store.forget_steps(run.id, step=step)
    samples = [storable(s) for s in samples]  # a completion or a check's output may hold NUL: kept, replaced
    listed = [store.listing(s) for s in samples]  # artifacts: listed on the row, bytes to the store
    rows = Trajectory.objects.bulk_create([
        Trajectory(
            run=run, step=step, domain=s["domain"], task_id=str(s.get("task_id", ""))[:200], prompt=s["prompt"],
            completion=s["completion"], reward=_finite(s.get("reward")),
            outcome=s["outcome"] if s["outcome"] in OUTCOME_VALUES else "sandbox_error",
            details={k: v for k, v in s.items() if k not in ("domain", "task_id", "prompt", "completion", "reward", "outcome", "artifacts")},
            verifier_version=verifier_versions.get(s["domain"]),
            judge_version=judge_config_id(s), artifacts=entries,
        )
        for s, (entries, _blobs) in zip(samples, listed)
    ])
    store.keep(run.id, step, rows, listed)
    if usage:
        UsageRecord.objects.bulk_create([
            UsageRecord(run=run, team_id=run.team_id, step=step, domain=domain[:100], driver=worker[:200], at=now,
                        outcomes={k: int(v) for k, v in (figures.get("outcomes") or {}).items()},
                        **{f: figures.get(f, 0) for f in USAGE_FIELDS})
            for domain, figures in usage.items()
        ], ignore_conflicts=True)
    locked.current_step = max(locked.current_step, step)
    locked.tokens_used += int(tokens)
    locked.driver_seen_at = now
    # This save wakes the run's pages (and with them the new metric points): the live app connects post_save.
    locked.save(update_fields=["current_step", "tokens_used", "driver_seen_at", "updated_at"])
    return len(points)


def judge_config_id(sample: dict) -> int | None:
    """The judge version (review JudgeConfig id) that produced a sample's reward, if a judge did.

    >>> judge_config_id({"details": {"judge_config_id": 7}}), judge_config_id({"details": {}})
    (7, None)
    """
    value = (sample.get("details") or {}).get("judge_config_id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@transaction.atomic
def run_record_checkpoint(*, run: Run, step: int, path: str, metrics: dict | None = None) -> Checkpoint:
    ckpt, created = Checkpoint.objects.update_or_create(run=run, step=step, defaults={"path": path, "metrics": metrics or {}})
    if created:
        _event(run, "checkpoint", f"checkpoint at step {step}", step=step, path=path)
    return ckpt


def latest_checkpoint(run: Run) -> Checkpoint | None:
    for ckpt in Checkpoint.objects.filter(run=run).order_by("-step"):
        if Path(ckpt.path, "state.json").is_file():
            return ckpt
    return None


@transaction.atomic
def run_park(*, run: Run, worker: str) -> Run:
    """At a step boundary after a checkpoint: pause (user) or requeue (preemption); drop the lease."""
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.driver != worker:
        raise LeaseLost(f"run {run.pk} is driven by {run.driver or 'nobody'} now")
    if run.preempt_requested and run.state == RunState.RUNNING:
        run.transition(RunState.PAUSED)
        run.transition(RunState.QUEUED)
        _event(run, "preempted", f"preempted at step {run.current_step}; queued to resume from its checkpoint")
    run.preempt_requested = False
    run.driver, run.driver_seen_at, run.inflight = "", None, {}
    run.save()
    transaction.on_commit(lambda: _tick())
    return run


RESUME_WHEN_SERVED = "resume_when_served"
"""The key of a paused run's ``scheduler_note`` naming the queue whose worker it waits for: the
scheduler queues the run again as soon as a live worker serves that queue."""


@transaction.atomic
def run_pause_system(*, run: Run, worker: str, cause: str, message: str, data: dict[str, Any] | None = None,
                     wait_for_queue: str = "") -> Run:
    """The system pauses a running run for a cause outside the run, which must not fail it: no live
    worker on a queue its work needs, storage that refuses its checkpoint. The run keeps its
    checkpoints and resumes from the last intact one; nothing the driver recorded is lost.

    ``worker`` is the driver that holds the lease ("" for the scheduler, when no driver holds
    it). With ``wait_for_queue`` the scheduler resumes the run by itself once a live worker
    serves that queue (an infrastructure cause a user would expect to heal by itself); without
    it (storage) the run waits for a user's resume. A ``paused`` event with ``data.cause`` says why.
    """
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.driver != worker:
        raise LeaseLost(f"run {run.pk} is driven by {run.driver or 'nobody'} now")
    if run.state == RunState.RUNNING:
        run.transition(RunState.PAUSED)
    elif run.state != RunState.PAUSED:  # cancelled meanwhile: that decision stands; let go
        run.driver, run.driver_seen_at, run.inflight = "", None, {}
        run.save(update_fields=["driver", "driver_seen_at", "inflight", "updated_at"])
        return run
    run.driver, run.driver_seen_at, run.inflight = "", None, {}
    run.preempt_requested = False
    note: dict[str, Any] = {"binding": f"queue {wait_for_queue}" if wait_for_queue else cause, "reason": message[:500]}
    if wait_for_queue:
        note[RESUME_WHEN_SERVED] = wait_for_queue
    run.scheduler_note = note
    run.save()
    _event(run, "paused", message[:2000], cause=cause, step=run.current_step, **(data or {}))
    transaction.on_commit(lambda: _tick())
    return run


@transaction.atomic
def run_finish(*, run: Run, worker: str, state: str, error: str = "") -> Run:
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.driver and run.driver != worker:
        raise LeaseLost(f"run {run.pk} is driven by {run.driver} now")
    if run.is_terminal:  # cancelled while the step ran: just let go
        run.driver, run.driver_seen_at = "", None
        run.save(update_fields=["driver", "driver_seen_at", "updated_at"])
        return run
    run.transition(state)
    run.error = error[:10000]
    run.driver, run.driver_seen_at, run.inflight = "", None, {}
    run.preempt_requested = False
    run.save()
    _event(run, state, error.splitlines()[-1][:500] if error else f"{state} at step {run.current_step}")
    transaction.on_commit(lambda: _tick())
    return run


def _tick() -> None:
    """Ask the scheduler for a tick now. A broker that is unreachable (the outage that may be why
    a run pauses) only delays it: beat sends one every few seconds anyway."""
    try:
        dispatch.send("temper.control.schedule_tick")
    except Exception as exc:  # noqa: BLE001 - kombu's OperationalError and the transports' own
        log.warning("could not ask for a scheduler tick now (%s); beat's next one will do", exc)


def run_record_inflight(*, run_id: int, worker: str, inflight: dict[str, Any]) -> bool:
    """Write what the driver waits on, while ``worker`` still drives the run; False otherwise.
    (An update fires no save hook: the caller wakes the page.)"""
    return bool(Run.objects.filter(pk=run_id, driver=worker).update(inflight=inflight))
