"""Writes for runs: validate, create, start, pause, resume, cancel, priorities and weights.

Permissions are enforced here: viewers and reviewers read; members and admins create and control
their team's runs; only admins raise priorities above the member ceiling. Every change is audited.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import F

from controlplane import dispatch
from controlplane.accounts.models import Team
from controlplane.accounts.principal import Principal
from controlplane.accounts.services import audit_record
from controlplane.common.errors import FieldError, InvalidInput, NotFound
from controlplane.domains.models import Domain, DomainVersion
from controlplane.domains.selectors import audit_blockers
from controlplane.runs.models import Run, RunDomain, RunEvent, RunState
from controlplane.runs.schemas import MAX_MEMBER_PRIORITY, STALENESS, run_schema_errors


@dataclass(frozen=True)
class RunPlan:
    """A validated run configuration, ready to be saved."""

    team: Team
    fields: dict[str, Any]
    domains: list[tuple[Domain, float]]

    def as_dict(self) -> dict[str, Any]:
        total = sum(w for _, w in self.domains)
        return {
            "team": self.team.slug,
            **self.fields,
            "domains": [
                {"slug": d.slug, "version": d.version, "weight": w, "share": w / total} for d, w in self.domains
            ],
        }


def _resolve_team(actor: Principal, slug: str | None) -> Team:
    if slug:
        team = Team.objects.filter(slug=slug, pk__in=actor.team_ids).first()
        if team is None:
            raise NotFound(f"team {slug!r} not found")
        return team
    teams = list(Team.objects.filter(pk__in=actor.team_ids)[:2])
    if len(teams) != 1:
        raise InvalidInput.one("team", "required: you belong to several teams" if teams else "you belong to no team")
    return teams[0]


def _looks_like_path(ref: str) -> bool:
    return ref.startswith(("/", "./", "../", "~")) or ref.startswith("var/")


def run_validate(*, actor: Principal, data: Any) -> RunPlan:
    """Check a run configuration completely; raises InvalidInput listing every problem."""
    if not isinstance(data, dict):
        raise InvalidInput.one("", "must be an object")
    errors = run_schema_errors(data)
    if errors:
        raise InvalidInput(errors)
    team = _resolve_team(actor, data.get("team"))
    role = actor.require(team.id, "run.control", "team")

    priority = data.get("priority", MAX_MEMBER_PRIORITY)
    if priority > MAX_MEMBER_PRIORITY and role != "admin":
        errors.append(FieldError("priority", f"above {MAX_MEMBER_PRIORITY} needs the team admin role"))

    ref = data["base_model"].strip()
    if _looks_like_path(ref):
        path = Path(ref).expanduser()
        if not (path / "config.json").is_file():
            errors.append(FieldError("base_model", f"no model at {ref} (expected a directory with config.json)"))

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
    if errors:
        raise InvalidInput(errors)

    budget = data["budget"]
    fields = {
        "name": data["name"].strip() or data["name"],
        "base_model": ref,
        "config": data.get("config", {}),
        "staleness": data.get("staleness", STALENESS["default"]),
        "budget_steps": budget["steps"],
        "budget_tokens": budget.get("tokens"),
        "budget_seconds": budget.get("wall_s"),
        "priority": priority,
        "gpus": data.get("gpus", 0),
    }
    return RunPlan(team=team, fields=fields, domains=domains)


def _unsafe_pins(versions) -> list[FieldError]:
    """A run may not pin a domain version whose verifier audit found false positives, unless an
    admin overrode that audit (the rule and its wording live in the domains app)."""
    versions = list(versions.select_related("domain"))
    blocked = audit_blockers(versions=versions)
    return [FieldError(f"domains.{v.domain.slug}", blocked[v.id]) for v in versions if v.id in blocked]


def _run_audit_view(run: Run) -> dict[str, Any]:
    return {"state": run.state, "priority": run.priority, "name": run.name}


def _event(run: Run, kind: str, message: str, actor: Principal, **data: Any) -> RunEvent:
    return RunEvent.objects.create(run=run, kind=kind, message=message, data=data, actor=actor.user)


@transaction.atomic
def run_create(*, actor: Principal, data: Any) -> Run:
    plan = run_validate(actor=actor, data=data)
    clone_id = data.get("clone_from")
    cloned_from = None
    if clone_id:
        cloned_from = Run.objects.filter(pk=clone_id, team_id__in=actor.team_ids).first()
        if cloned_from is None:
            raise InvalidInput.one("clone_from", f"no run {clone_id} in your teams")
    run = Run(team=plan.team, created_by=actor.user, cloned_from=cloned_from, **plan.fields)
    run.full_clean()
    run.save()
    versions = {
        (dv.domain_id, dv.version): dv
        for dv in DomainVersion.objects.filter(domain__in=[d for d, _ in plan.domains])
    }
    for domain, weight in plan.domains:
        RunDomain.objects.create(run=run, domain=domain, domain_version=versions[(domain.id, domain.version)], weight=weight)
    _event(run, "created", f"created by {actor.name}", actor)
    audit_record(actor=actor, obj=run, action="run.create", after=plan.as_dict(), team=plan.team)
    return run


def _locked(run: Run) -> Run:
    return Run.objects.select_for_update().get(pk=run.pk)


def _control(actor: Principal, run: Run, to: str, kind: str, message: str) -> Run:
    actor.require(run.team_id, "run.control", "run")
    run = _locked(run)
    before = _run_audit_view(run)
    if run.transition(to):
        run.save()
        _event(run, kind, message, actor)
        audit_record(actor=actor, obj=run, action=f"run.{kind}", before=before, after=_run_audit_view(run), team=run.team)
    return run


@transaction.atomic
def run_start(*, actor: Principal, run: Run) -> Run:
    """Queue a draft run; the scheduler admits it when its team quota and a slot allow. Refused
    while a pinned domain version's verifier audit shows false positives (not overridden)."""
    actor.require(run.team_id, "run.control", "run")
    if run.state == RunState.DRAFT:
        errors = _unsafe_pins(DomainVersion.objects.filter(pk__in=run.run_domains.values("domain_version_id")))
        if errors:
            raise InvalidInput(errors)
    run = _control(actor, run, RunState.QUEUED, "queued", f"queued by {actor.name}")
    dispatch.send_on_commit("temper.control.schedule_tick")
    return run


@transaction.atomic
def run_pause(*, actor: Principal, run: Run) -> Run:
    """Pause a running run; its driver checkpoints at the next step boundary and stops."""
    return _control(actor, run, RunState.PAUSED, "paused", f"paused by {actor.name}")


@transaction.atomic
def run_resume(*, actor: Principal, run: Run) -> Run:
    """Put a paused run back in the queue; it resumes from its last checkpoint when admitted."""
    run = _control(actor, run, RunState.QUEUED, "resumed", f"resumed by {actor.name}")
    dispatch.send_on_commit("temper.control.schedule_tick")
    return run


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
        _event(run, "priority", f"priority {before} -> {priority} by {actor.name}", actor, before=before, after=priority)
        audit_record(actor=actor, obj=run, action="run.priority", before={"priority": before}, after={"priority": priority}, team=run.team)
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
        elif isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            errors.append(FieldError(f"weights.{slug}", "must be a number greater than 0"))
    if errors:
        raise InvalidInput(errors)
    before = {slug: rd.weight for slug, rd in rows.items()}
    for slug, weight in weights.items():
        rows[slug].weight = float(weight)
        rows[slug].save(update_fields=["weight"])
    after = {slug: rd.weight for slug, rd in rows.items()}
    if after != before:
        _event(run, "weights", f"domain weights changed by {actor.name}", actor, before=before, after=after)
        audit_record(actor=actor, obj=run, action="run.weights", before=before, after=after, team=run.team)
    return run
