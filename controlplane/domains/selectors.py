"""Reads for domains and their versions."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from django.db.models import Exists, JSONField, OuterRef, Q, QuerySet, Subquery

from controlplane.accounts.principal import Principal
from controlplane.common.errors import InvalidInput, found
from controlplane.domains.models import AuditStatus, Domain, DomainVersion, VerifierAudit, VerifierAuditOverride


def domain_list(*, actor: Principal, search: str = "", kind: str = "") -> QuerySet[Domain]:
    """Global domains plus the actor's teams' own domains."""
    qs = Domain.objects.filter(Q(team__isnull=True) | Q(team_id__in=actor.team_ids))
    if search:
        qs = qs.filter(Q(slug__icontains=search) | Q(title__icontains=search) | Q(description__icontains=search))
    if kind:
        qs = qs.filter(kind=kind)
    return qs.order_by("slug")


def domain_get(*, actor: Principal, slug: str) -> Domain:
    return found(domain_list(actor=actor).filter(slug=slug).first(), f"domain {slug!r} not found")


def domain_version_get(*, domain: Domain, version: int) -> DomainVersion:
    return found(DomainVersion.objects.filter(domain=domain, version=version).first(), f"domain {domain.slug!r} has no version {version}")


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


# ----------------------------------------------------------------------------- the verifier audit
AUDIT_STATES = ("none", "pending", "running", "failed", "clean", "unsafe", "overridden")


@dataclass(frozen=True)
class AuditSummary:
    """What a version's audits say, in one word and a few numbers.

    The latest *finished* (done) audit decides: ``unsafe`` when it found a false positive and no
    admin overrode it (runs may not pin the version), ``overridden`` when one did, ``clean``
    otherwise. Without a finished audit the latest audit's status is shown (``pending``,
    ``running``, ``failed``) and nothing is blocked; ``none`` when the version was never audited.
    """

    version: int
    state: str
    audit_id: int | None = None
    """The audit that decides (the latest done one), else the latest one."""
    latest_status: str | None = None
    """Status of the newest audit, which may be a re-run still waiting or running."""
    probes: int | None = None
    false_positives: int | None = None
    false_negatives_gold: int | None = None
    classes: list[str] = field(default_factory=list)
    """Probe classes with a false positive."""
    overridden: bool = False

    @property
    def blocks(self) -> bool:
        return self.state == "unsafe"

    @property
    def rerun_open(self) -> bool:
        """A newer audit waits or runs behind the one that decides."""
        return self.state in ("clean", "unsafe", "overridden") and self.latest_status in (AuditStatus.PENDING, AuditStatus.RUNNING)

    @property
    def warning(self) -> bool:
        """Gold answers that do not pass: a verifier that is too strict (not a block)."""
        return (self.false_negatives_gold or 0) > 0

    @property
    def tone(self) -> str:
        """The badge's colour, by what the audit found: ``ok`` (green) only when nothing fails and no
        re-audit is open; ``warn`` for failing golds (a too-strict verifier) or an open re-audit;
        ``unsafe``, ``overridden`` and ``failed`` their own; ``waiting`` for pending and running;
        ``none`` never audited.

        >>> AuditSummary(version=1, state="clean", false_negatives_gold=0).tone
        'ok'
        >>> AuditSummary(version=1, state="clean", false_negatives_gold=12).tone, AuditSummary(version=1, state="pending").tone
        ('warn', 'waiting')
        """
        if self.state == "clean":
            return "warn" if self.warning or self.rerun_open else "ok"
        return {"pending": "waiting", "running": "waiting"}.get(self.state, self.state)

    @property
    def label(self) -> str:
        """The badge's words.

        >>> AuditSummary(version=1, state="clean", false_positives=0, false_negatives_gold=12).label
        'no false positives · 12 gold failing'
        >>> AuditSummary(version=1, state="clean", false_positives=0, false_negatives_gold=0).label
        'audited clean'
        """
        fp = self.false_positives or 0
        text = {
            "none": "not audited", "pending": "audit pending", "running": "audit running", "failed": "audit failed",
            "clean": "no false positives" if self.warning else "audited clean",
            "unsafe": f"{fp} false positive{'s' if fp != 1 else ''}",
            "overridden": f"overridden ({fp} false positive{'s' if fp != 1 else ''})",
        }[self.state]
        if self.warning:
            text += f" · {self.false_negatives_gold} gold failing"
        if self.rerun_open:
            text += f" · re-audit {self.latest_status}"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "blocks": self.blocks, "warning": self.warning, "rerun_open": self.rerun_open,
                "tone": self.tone, "label": self.label}

    @classmethod
    def build(cls, *, version: int, latest: dict | None, decisive: dict | None, overridden: bool) -> "AuditSummary":
        """From the newest audit and the newest done audit (rows with status, id and counts)."""
        if decisive is not None:
            fp = decisive["false_positives"] or 0
            return cls(version=version, state=("overridden" if overridden else "unsafe") if fp > 0 else "clean",
                       audit_id=decisive["id"], latest_status=latest["status"] if latest else None,
                       probes=decisive["probes"], false_positives=fp,
                       false_negatives_gold=decisive["false_negatives_gold"], classes=list(decisive["false_positive_classes"] or []),
                       overridden=overridden)
        if latest is not None:
            return cls(version=version, state=latest["status"], audit_id=latest["id"], latest_status=latest["status"])
        return cls(version=version, state="none")


_SUMMARY_FIELDS = ("id", "domain_version_id", "status", "probes", "false_positives", "false_negatives_gold", "false_positive_classes")


def audit_summaries(*, versions: Iterable[DomainVersion]) -> dict[int, AuditSummary]:
    """Summaries of many versions by version id, in two queries (the reports are not read)."""
    versions = list(versions)
    latest: dict[int, dict] = {}
    decisive: dict[int, dict] = {}
    rows = VerifierAudit.objects.filter(domain_version__in=versions).order_by("domain_version_id", "-created_at", "-id")
    for row in rows.values(*_SUMMARY_FIELDS):
        vid = row["domain_version_id"]
        latest.setdefault(vid, row)
        if row["status"] == AuditStatus.DONE:
            decisive.setdefault(vid, row)
    overridden = set(VerifierAuditOverride.objects.filter(audit_id__in=[r["id"] for r in decisive.values()])
                     .values_list("audit_id", flat=True)) if decisive else set()
    return {
        v.id: AuditSummary.build(version=v.version, latest=latest.get(v.id), decisive=decisive.get(v.id),
                                 overridden=v.id in decisive and decisive[v.id]["id"] in overridden)
        for v in versions
    }


def audit_summary(*, version: DomainVersion) -> AuditSummary:
    return audit_summaries(versions=[version])[version.id]


def with_audit_summary(domains: QuerySet[Domain]) -> QuerySet[Domain]:
    """Domains annotated with their current version's audit summary (read with
    :func:`domain_audit_summary`), so a list page or a paginated API list stays one query."""
    current = VerifierAudit.objects.filter(domain_version__domain=OuterRef("pk"), domain_version__version=OuterRef("version"))
    newest = current.order_by("-created_at", "-id")
    done = newest.filter(status=AuditStatus.DONE)
    return domains.annotate(
        audit_latest_id=Subquery(newest.values("id")[:1]),
        audit_latest_status=Subquery(newest.values("status")[:1]),
        audit_done_id=Subquery(done.values("id")[:1]),
        audit_done_probes=Subquery(done.values("probes")[:1]),
        audit_done_fp=Subquery(done.values("false_positives")[:1]),
        audit_done_fng=Subquery(done.values("false_negatives_gold")[:1]),
        audit_done_classes=Subquery(done.values("false_positive_classes")[:1], output_field=JSONField()),
        audit_overridden=Exists(VerifierAuditOverride.objects.filter(audit_id=OuterRef("audit_done_id"))),
    )


def domain_audit_summary(domain: Domain) -> AuditSummary:
    """The audit summary of a domain's current version (from :func:`with_audit_summary`'s
    annotations when present, else read)."""
    if not hasattr(domain, "audit_latest_id"):
        version = DomainVersion.objects.filter(domain=domain, version=domain.version).first()
        return audit_summary(version=version) if version else AuditSummary(version=domain.version, state="none")
    latest = {"id": domain.audit_latest_id, "status": domain.audit_latest_status} if domain.audit_latest_id else None
    decisive = {"id": domain.audit_done_id, "probes": domain.audit_done_probes, "false_positives": domain.audit_done_fp,
                "false_negatives_gold": domain.audit_done_fng, "false_positive_classes": domain.audit_done_classes} \
        if domain.audit_done_id else None
    return AuditSummary.build(version=domain.version, latest=latest, decisive=decisive, overridden=bool(domain.audit_overridden))


def audit_latest(*, version: DomainVersion) -> VerifierAudit | None:
    """The newest audit of a version, whatever its status (with its override, if any)."""
    return (VerifierAudit.objects.filter(domain_version=version).select_related("override", "requested_by")
            .order_by("-created_at", "-id").first())


def audit_decisive(*, version: DomainVersion) -> VerifierAudit | None:
    """The newest finished (done) audit of a version: the one that decides whether runs may pin it."""
    return (VerifierAudit.objects.filter(domain_version=version, status=AuditStatus.DONE)
            .select_related("override", "requested_by").order_by("-created_at", "-id").first())


def audit_blockers(*, versions: Iterable[DomainVersion]) -> dict[int, str]:
    """Versions runs may not pin, by version id, with the reason: the latest finished audit found
    false positives and no admin overrode it. A pending, running or failed audit does not block."""
    versions = list(versions)
    summaries = audit_summaries(versions=versions)
    out = {}
    for v in versions:
        s = summaries[v.id]
        if s.blocks:
            classes = f" in {', '.join(s.classes)}" if s.classes else ""
            out[v.id] = (f"{v.domain.slug} v{v.version}: its verifier audit found {s.false_positives} false "
                         f"positive{'s' if s.false_positives != 1 else ''}{classes}; a run may use this version only "
                         f"after an admin overrides the audit (or a fixed verifier passes a new one)")
    return out
