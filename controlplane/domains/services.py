"""Writes for domains. Every change makes an immutable DomainVersion and an audit row."""
from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import IO, Any

from django.conf import settings
from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from controlplane import dispatch
from controlplane.accounts.models import Team
from controlplane.accounts.principal import SYSTEM, Principal
from controlplane.accounts.services import audit_record
from controlplane.common.body import line_loads
from controlplane.common.errors import Conflict, FieldError, Forbidden, InvalidInput
from controlplane.domains.models import (
    AUDIT_COUNTS,
    AUDIT_OPEN,
    VERSIONED_FIELDS,
    AuditStatus,
    Domain,
    DomainVersion,
    VerifierAudit,
    VerifierAuditOverride,
)
from controlplane.domains.schemas import UPLOAD_FAMILY, audit_report_errors, domain_errors, judge_stage_refs, task_source_errors
from trainer.catalogue.jsonl import JSONLError, parse_jsonl

QUOTA_FIELDS = ("max_concurrent_sandboxes", "max_share", "task_timeout_s", "priority")

judges_visible_wanted = Signal()
"""Sent (``sender=Domain, team_id=..., names=[...]``) when a verifier with judge stages is saved:
each receiver returns the names among ``names`` that a domain of team ``team_id`` (None: a global
domain) may use (the review app: judges of that team). Apps that build on domains connect to it
in their AppConfig.ready, so domains never imports them."""


def _judge_errors(verifier: Any, team_id: int | None) -> list[FieldError]:
    """A judge stage may name only a judge of the domain's own team; another team's judge reads
    exactly like a missing one (its name, version and calibration are that team's)."""
    refs = judge_stage_refs(verifier)
    if not refs:
        return []
    names = sorted({name for _, name in refs})
    visible = {n for _, found in judges_visible_wanted.send(sender=Domain, team_id=team_id, names=names) for n in found}
    whose = "this domain's team" if team_id is not None else "global domains (none: judges belong to teams)"
    return [FieldError(path, f"judge {name!r} not found (a judge stage names a judge of {whose})")
            for path, name in refs if name not in visible]


def _require_edit(actor: Principal, team_id: int | None) -> None:
    """Global domains: platform admins; a team's own domains: that team's admins."""
    if team_id is None:
        actor.require_platform_admin("editing the global domain catalogue")
    elif not actor.platform_admin:
        actor.require(team_id, "team.admin", "domain")


def _snapshot_json(domain: Domain) -> dict[str, Any]:
    return domain.snapshot()


def _new_version(domain: Domain, actor: Principal, note: str) -> DomainVersion:
    """A new immutable version, with its verifier audit requested (run by a worker after commit)."""
    version = DomainVersion.objects.create(
        domain=domain, version=domain.version, snapshot=_snapshot_json(domain), note=note[:200], created_by=actor.user
    )
    _audit_create(version=version, requested_by=actor.user, note=f"new version: {note}")
    return version


@transaction.atomic
def domain_create(*, actor: Principal, data: dict, team: Team | None = None, note: str = "created",
                  uploaded: list[dict] | None = None) -> Domain:
    """Create a domain from ``data``; ``uploaded`` holds the checked tasks of an upload
    (:func:`domain_upload_jsonl`), the only way a domain gets tasks of its own."""
    _require_edit(actor, team.id if team else None)
    if uploaded is not None:
        data = {**data, "family": UPLOAD_FAMILY, "task_source": {"family": UPLOAD_FAMILY}}
    errors = domain_errors(data, creating=True)
    if not errors and uploaded is None:
        errors = task_source_errors(data.get("task_source"))
    if not errors:
        errors = _judge_errors(data.get("verifier"), team.id if team else None)
    if not errors and Domain.objects.filter(slug=data["slug"]).exists():
        errors = [InvalidInput.one("slug", f"a domain named {data['slug']!r} exists already").errors[0]]
    if errors:
        raise InvalidInput(errors)
    if uploaded is not None:
        data = {**data, "task_source": {"family": UPLOAD_FAMILY, "tasks": uploaded}}
    domain = Domain(team=team, version=1, **data)
    domain.full_clean()
    domain.save()
    _new_version(domain, actor, note)
    audit_record(actor=actor, obj=domain, action="domain.create", after=domain.snapshot(), team=team)
    return domain


@transaction.atomic
def domain_update(*, actor: Principal, domain: Domain, changes: dict, note: str = "") -> Domain:
    """Apply ``changes``; a new version is made only when something actually changed."""
    _require_edit(actor, domain.team_id)
    if "slug" in changes and changes["slug"] != domain.slug:
        raise InvalidInput.one("slug", "cannot be changed; create a new domain instead")
    changes = {k: v for k, v in changes.items() if k != "slug"}
    errors = domain_errors(changes, creating=False)
    if not errors and "task_source" in changes:
        errors = task_source_errors(changes["task_source"])
    if not errors and "verifier" in changes:
        errors = _judge_errors(changes["verifier"], domain.team_id)
    if errors:
        raise InvalidInput(errors)
    domain = Domain.objects.select_for_update().get(pk=domain.pk)
    before = domain.snapshot()
    for name, value in changes.items():
        setattr(domain, name, value)
    after = domain.snapshot()
    if after == before:
        return domain
    domain.version += 1
    domain.full_clean()
    domain.save()
    changed = sorted(k for k in VERSIONED_FIELDS if before[k] != after[k])
    _new_version(domain, actor, note or "changed " + ", ".join(changed))
    action = "domain.quota" if set(changed) <= set(QUOTA_FIELDS) else "domain.update"
    audit_record(
        actor=actor, obj=domain, action=action,
        before={k: before[k] for k in changed}, after={k: after[k] for k in changed}, team=domain.team,
    )
    return domain


@transaction.atomic
def domain_sync(*, actor: Principal, specs: list[dict], progress=None) -> dict[str, int]:
    """Create or update global domains from plain specs (the trainer's catalogue).

    Idempotent: a domain whose spec is unchanged is left alone, so a second sync changes nothing.
    Returns counts of created, updated and unchanged domains.
    """
    if not actor.platform_admin:
        raise Forbidden("syncing the catalogue needs a platform admin")
    counts = {"created": 0, "updated": 0, "unchanged": 0}
    existing = {d.slug: d for d in Domain.objects.filter(slug__in=[s["slug"] for s in specs])}
    for spec in specs:
        domain = existing.get(spec["slug"])
        if domain is None:
            domain_create(actor=actor, data=spec, note="catalogue sync")
            counts["created"] += 1
        else:
            # Quota and priority belong to the admins once a domain exists: sync never resets them.
            catalogue = {k: v for k, v in spec.items() if k not in QUOTA_FIELDS and k != "slug"}
            if all(getattr(domain, k) == v for k, v in catalogue.items()):
                counts["unchanged"] += 1
            else:
                domain_update(actor=actor, domain=domain, changes=catalogue, note="catalogue sync")
                counts["updated"] += 1
        if progress is not None:
            progress(1)
    return counts


@transaction.atomic
def domain_upload_jsonl(*, actor: Principal, team: Team, data: dict, jsonl: str | bytes | IO[bytes]) -> Domain:
    """Create a team domain from uploaded tasks: every line is checked first; one bad line and
    nothing is imported, with every bad line's number and field in the error. ``jsonl`` is the
    text, or an uploaded file read a line at a time (its size was checked with the request's)."""

    _require_edit(actor, team.id)
    errors = domain_errors({**data, "task_source": {"family": UPLOAD_FAMILY}}, creating=True)
    limit = settings.TEMPER_UPLOAD_MAX_BYTES
    if isinstance(jsonl, (str, bytes)) and len(jsonl) > limit:
        errors.append(FieldError("jsonl", f"larger than {limit / (1024 * 1024):g} MiB (TEMPER_UPLOAD_MAX_BYTES)"))
    if errors:
        raise InvalidInput(errors)
    try:
        # Each line under the API body's rules: no NaN, NUL or lone surrogate reaches the database.
        tasks = parse_jsonl(jsonl, domain=data["slug"], verifier=data["verifier"], loads=line_loads())
    except JSONLError as exc:
        raise InvalidInput([
            FieldError(f"jsonl.lines[{line}]" + (f".{field}" if field else ""), message) for line, field, message in exc.errors
        ]) from None
    return domain_create(actor=actor, data=data, team=team, note=f"uploaded {len(tasks)} tasks",
                         uploaded=[dataclasses.asdict(t) for t in tasks])


# ----------------------------------------------------------------------------- the verifier audit
AUDIT_TASK = "temper.verify.audit"
AUDIT_LOST_AFTER_S = 3 * 3600
"""An audit still waiting or running this long after it was requested or started has lost its
task (its worker was killed past the task's hard time limit, or the message was lost): a new
request marks it failed and starts another. Above the task's time limit (workers/tasks.py)."""


def _audit_create(*, version: DomainVersion, requested_by=None, note: str = "", enqueue: bool = True) -> VerifierAudit:
    """Request an audit of ``version``; joins the one already waiting or running, if any."""
    open_ = VerifierAudit.objects.select_for_update().filter(domain_version=version, status__in=AUDIT_OPEN).first()
    if open_ is not None:
        since = open_.started_at or open_.created_at
        if since > timezone.now() - timedelta(seconds=AUDIT_LOST_AFTER_S):
            return open_
        open_.error = f"no result {AUDIT_LOST_AFTER_S} s after it was {'started' if open_.started_at else 'requested'}: its task was lost"
        open_.terminate(AuditStatus.FAILED)
        open_.full_clean()
        open_.save()
    audit = VerifierAudit(domain_version=version, requested_by=requested_by, note=note[:200])
    audit.full_clean()
    audit.save()
    if enqueue:
        dispatch.send_on_commit(AUDIT_TASK, audit.pk)
    return audit


@transaction.atomic
def verifier_audit_request(*, actor: Principal, version: DomainVersion, note: str = "re-run", enqueue: bool = True) -> VerifierAudit:
    """Ask for (another) audit of a version: team admins for their team's domains, platform admins
    for the catalogue. Joins an audit that is already waiting or running. With ``enqueue=False``
    the caller runs it (``manage.py domains audit``, in its own process)."""
    domain = version.domain
    _require_edit(actor, domain.team_id)
    audit = _audit_create(version=version, requested_by=actor.user, note=note, enqueue=enqueue)
    audit_record(actor=actor, obj=domain, action="domain.audit.request",
                 after={"version": version.version, "audit": audit.pk, "note": note[:200]}, team=domain.team)
    return audit


@transaction.atomic
def verifier_audit_start(*, audit_id: int) -> VerifierAudit | None:
    """The worker takes an audit; None when it is unknown or finished already (a repeated task)."""
    audit = (VerifierAudit.objects.select_for_update().select_related("domain_version__domain")
             .filter(pk=audit_id).first())
    if audit is None or not audit.start():
        return None
    audit.full_clean()
    audit.save()
    return audit


@transaction.atomic
def verifier_audit_progress(*, audit: VerifierAudit, done: int, total: int) -> None:
    """How far a running audit is (probes done of total), for the page and the API."""
    VerifierAudit.objects.filter(pk=audit.pk, status=AuditStatus.RUNNING).update(
        progress_done=max(int(done), 0), progress_total=max(int(total), 0))


@transaction.atomic
def verifier_audit_record(*, audit: VerifierAudit, report: dict | None = None, error: str = "") -> VerifierAudit:
    """Record an audit's report (done) or why it failed (``error``). An audit that has finished
    already is left as it is, so a repeated task changes nothing. A report that is not the
    auditor's shape is recorded as a failure, never as a clean result."""
    audit = VerifierAudit.objects.select_for_update().get(pk=audit.pk)
    if audit.is_finished:
        return audit
    if report is not None and not error:
        problems = audit_report_errors(report)
        if problems:
            error = "the auditor's report is not valid: " + "; ".join(map(str, problems))
    if error or report is None:
        audit.error = (error or "the auditor returned no report")[-10000:]
        audit.terminate(AuditStatus.FAILED)
    else:
        for name in AUDIT_COUNTS:
            setattr(audit, name, int(report[name]))
        audit.wall_s = float(report["wall_s"])
        audit.auditor_version = str(report["auditor_version"])[:64]
        audit.report = report
        audit.false_positive_classes = sorted(c for c, row in report["classes"].items() if row["false_positives"] > 0)
        audit.progress_done = audit.progress_total = audit.probes
        audit.terminate(AuditStatus.DONE)
    audit.full_clean()
    audit.save()
    early = VerifierAuditOverride.objects.filter(audit=audit).select_related("audit__domain_version__domain").first()
    if early is not None and audit.is_unsafe:
        # An override given while the audit was open let runs use the version before a result; it
        # never covers the false positives found since: those need an admin's override of their own.
        domain = early.audit.domain_version.domain
        audit_record(actor=SYSTEM, obj=domain, action="domain.audit.override_lapsed",
                     before={"version": early.audit.domain_version.version, "audit": audit.pk, "reason": early.reason,
                             "admin": early.admin_name},
                     after={"false_positives": audit.false_positives, "classes": audit.false_positive_classes}, team=domain.team)
        early.delete()
    dispatch.send_on_commit(SCHEDULE_TICK)  # runs waiting on this audit start (or learn why not) now
    return audit


SCHEDULE_TICK = "temper.control.schedule_tick"


def audit_ensure(*, versions: list[DomainVersion], requested_by=None, note: str = "") -> list[VerifierAudit]:
    """Request an audit of each of ``versions`` that has never had one (a run is about to wait on
    it: audits gate every use). Versions with an audit, finished or not, are left alone."""
    have = set(VerifierAudit.objects.filter(domain_version__in=versions).values_list("domain_version_id", flat=True))
    return [_audit_create(version=v, requested_by=requested_by, note=note) for v in versions if v.id not in have]


@transaction.atomic
def verifier_audit_override(*, actor: Principal, version: DomainVersion, reason: str) -> VerifierAuditOverride:
    """Let runs use ``version`` although its audit does not clear it: the latest finished audit
    found false positives, or (before any audit finished) its audit is still waiting, running or
    failed. Team admins for their team's domains, platform admins for the catalogue; audited, with
    the reason. The override covers that audit only: a later audit with false positives blocks again."""
    domain = version.domain
    _require_edit(actor, domain.team_id)
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput.one("reason", "required: say why this version may be used although its audit does not clear it")
    audit = (VerifierAudit.objects.select_for_update().filter(domain_version=version, status=AuditStatus.DONE)
             .order_by("-created_at", "-id").first())
    if audit is None:  # before any audit finished: the newest one, waiting, running or failed
        audit = VerifierAudit.objects.select_for_update().filter(domain_version=version).order_by("-created_at", "-id").first()
        if audit is None:
            raise Conflict(f"{version} has no verifier audit to override: request one first")
    elif not audit.is_unsafe:
        raise Conflict(f"the latest audit of {version} found no false positives: there is nothing to override")
    if VerifierAuditOverride.objects.filter(audit=audit).exists():
        raise Conflict(f"audit {audit.pk} of {version} is overridden already")
    override = VerifierAuditOverride(audit=audit, admin=actor.user, admin_name=actor.name, reason=reason.strip())
    override.full_clean()
    override.save()
    audit_record(actor=actor, obj=domain, action="domain.audit.override",
                 before={"version": version.version, "audit": audit.pk, "status": audit.status,
                         "false_positives": audit.false_positives, "classes": audit.false_positive_classes},
                 after={"reason": override.reason}, team=domain.team)
    return override
