"""Reads for domains and their versions."""
from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from controlplane.accounts.principal import Principal
from controlplane.common.errors import InvalidInput, NotFound
from controlplane.domains.models import Domain, DomainVersion


def domain_list(*, actor: Principal, search: str = "", kind: str = "") -> QuerySet[Domain]:
    """Global domains plus the actor's teams' own domains."""
    qs = Domain.objects.filter(Q(team__isnull=True) | Q(team_id__in=actor.team_ids))
    if search:
        qs = qs.filter(Q(slug__icontains=search) | Q(title__icontains=search) | Q(description__icontains=search))
    if kind:
        qs = qs.filter(kind=kind)
    return qs.order_by("slug")


def domain_get(*, actor: Principal, slug: str) -> Domain:
    domain = domain_list(actor=actor).filter(slug=slug).first()
    if domain is None:
        raise NotFound(f"domain {slug!r} not found")
    return domain


def domain_version_get(*, domain: Domain, version: int) -> DomainVersion:
    dv = DomainVersion.objects.filter(domain=domain, version=version).first()
    if dv is None:
        raise NotFound(f"domain {domain.slug!r} has no version {version}")
    return dv


def json_diff(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """Leaf-level differences between two JSON values, as ``{path, before, after}`` rows.

    >>> json_diff({"a": 1, "b": {"c": [1, 2]}}, {"a": 1, "b": {"c": [1, 3]}, "d": 0})
    [{'path': 'b.c[1]', 'before': 2, 'after': 3}, {'path': 'd', 'before': None, 'after': 0}]
    """
    if isinstance(before, dict) and isinstance(after, dict):
        rows = []
        for key in sorted(set(before) | set(after), key=str):
            sub = f"{path}.{key}" if path else str(key)
            rows += json_diff(before.get(key), after.get(key), sub)
        return rows
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        rows = []
        for i, (b, a) in enumerate(zip(before, after)):
            rows += json_diff(b, a, f"{path}[{i}]")
        return rows
    return [] if before == after else [{"path": path, "before": before, "after": after}]


def domain_version_diff(*, domain: Domain, a: int, b: int) -> list[dict[str, Any]]:
    if a < 1 or b < 1:
        raise InvalidInput.one("a" if a < 1 else "b", "must be at least 1")
    va = domain_version_get(domain=domain, version=a)
    vb = domain_version_get(domain=domain, version=b)
    return json_diff(va.snapshot, vb.snapshot)


def domain_can_edit(*, actor: Principal, domain: Domain) -> bool:
    """Whether ``domain_update`` would let the actor edit it (the page hides the form otherwise)."""
    if domain.team_id is None or actor.platform_admin:
        return actor.platform_admin
    return actor.can(domain.team_id, "team.admin")
