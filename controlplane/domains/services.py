"""Writes for domains. Every change makes an immutable DomainVersion and an audit row."""
from __future__ import annotations

from typing import Any

from django.db import transaction

from controlplane.accounts.models import Team
from controlplane.accounts.principal import Principal
from controlplane.accounts.services import audit_record
from controlplane.common.errors import FieldError, Forbidden, InvalidInput
from controlplane.domains.models import VERSIONED_FIELDS, Domain, DomainVersion
from controlplane.domains.schemas import domain_errors

QUOTA_FIELDS = ("max_concurrent_sandboxes", "max_share", "task_timeout_s", "priority")


def _require_edit(actor: Principal, team_id: int | None) -> None:
    """Global domains: platform admins; a team's own domains: that team's admins."""
    if team_id is None:
        actor.require_platform_admin("editing the global domain catalogue")
    elif not actor.platform_admin:
        actor.require(team_id, "team.admin", "domain")


def _snapshot_json(domain: Domain) -> dict[str, Any]:
    return domain.snapshot()


def _new_version(domain: Domain, actor: Principal, note: str) -> DomainVersion:
    return DomainVersion.objects.create(
        domain=domain, version=domain.version, snapshot=_snapshot_json(domain), note=note[:200], created_by=actor.user
    )


@transaction.atomic
def domain_create(*, actor: Principal, data: dict, team: Team | None = None, note: str = "created") -> Domain:
    _require_edit(actor, team.id if team else None)
    errors = domain_errors(data, creating=True)
    if not errors and Domain.objects.filter(slug=data["slug"]).exists():
        errors = [InvalidInput.one("slug", f"a domain named {data['slug']!r} exists already").errors[0]]
    if errors:
        raise InvalidInput(errors)
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


MAX_UPLOAD_BYTES = 50 * 1024 * 1024


@transaction.atomic
def domain_upload_jsonl(*, actor: Principal, team: Team, data: dict, jsonl: str | bytes) -> Domain:
    """Create a team domain from uploaded tasks: every line is checked first; one bad line and
    nothing is imported, with every bad line's number and field in the error."""
    import dataclasses

    from trainer.catalogue.jsonl import JSONLError, parse_jsonl

    _require_edit(actor, team.id)
    errors = domain_errors({**data, "task_source": {"family": "jsonl"}}, creating=True)
    if isinstance(jsonl, (str, bytes)) and len(jsonl) > MAX_UPLOAD_BYTES:
        errors.append(FieldError("jsonl", f"larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MiB"))
    if errors:
        raise InvalidInput(errors)
    try:
        tasks = parse_jsonl(jsonl, domain=data["slug"], verifier=data["verifier"])
    except JSONLError as exc:
        raise InvalidInput([
            FieldError(f"jsonl.lines[{line}]" + (f".{field}" if field else ""), message) for line, field, message in exc.errors
        ]) from None
    source = {"family": "jsonl", "tasks": [dataclasses.asdict(t) for t in tasks]}
    return domain_create(actor=actor, data={**data, "family": "jsonl", "task_source": source}, team=team,
                         note=f"uploaded {len(tasks)} tasks")
