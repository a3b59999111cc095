"""Reads for domains and their versions."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from django.db.models import Exists, JSONField, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from controlplane.accounts.principal import Principal
from controlplane.common.errors import InvalidInput, found
from controlplane.common.words import duration
from controlplane.domains.models import AUDIT_OPEN, AuditStatus, Domain, DomainVersion, VerifierAudit, VerifierAuditOverride


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


@dataclass(frozen=True)
class AuditGate:
    """Whether runs may use a domain version now: ``ok``, ``wait`` (its audit is not finished: the
    run waits in the queue and starts when it passes) or ``refuse`` (it found false positives or
    failed, and no admin overrode it), with the reason in words."""

    verdict: str
    reason: str = ""


def _ago(when, now) -> str:
    return duration(max((now - when).total_seconds(), 0.0))


def audit_gates(*, versions: Iterable[DomainVersion], now=None) -> dict[int, AuditGate]:
    """Each version's gate, by version id: audits gate every use of a version.

    * ``ok``: the latest finished audit is clean, or an admin overrode it, or, before any audit
      finished, an admin overrode the open one (audited: ``verifier_audit_override``);
    * ``refuse``: the latest finished audit found false positives, or the only finished audits
      failed (the audit crashed or timed out), not overridden;
    * ``wait``: no audit has finished (or the one that found false positives is being re-run):
      the reason names the audit and how long it has been queued or running.
    A newer audit waiting behind a clean one does not hold runs back."""
    versions = list(versions)
    now = now or timezone.now()
    summaries = audit_summaries(versions=versions)
    latest_ids = {s.audit_id for s in summaries.values() if s.audit_id and s.state in (*AUDIT_OPEN, AuditStatus.FAILED)}
    early = set(VerifierAuditOverride.objects.filter(audit_id__in=latest_ids).values_list("audit_id", flat=True)) if latest_ids else set()
    open_audits = {a.domain_version_id: a for a in VerifierAudit.objects.filter(domain_version__in=versions, status__in=AUDIT_OPEN)
                   .order_by("domain_version_id", "-created_at", "-id")}
    out: dict[int, AuditGate] = {}
    for v in versions:
        s = summaries[v.id]
        name = f"{v.domain.slug} v{v.version}"
        opened = open_audits.get(v.id)
        waiting = ""
        if opened is not None:
            waiting = (f"running for {_ago(opened.started_at, now)}"
                       + (f", {opened.progress_done} of {opened.progress_total} tasks" if opened.progress_total else "")
                       if opened.started_at else f"queued {_ago(opened.created_at, now)} ago")
        if s.state in ("clean", "overridden") or (s.audit_id in early and s.state != "unsafe"):
            out[v.id] = AuditGate("ok")
        elif s.state == "unsafe" and opened is not None:
            out[v.id] = AuditGate("wait", f"waiting on the re-audit of {name} ({waiting}): its last audit found "
                                          f"{s.false_positives} false positive{'s' if s.false_positives != 1 else ''}")
        elif s.state == "unsafe":
            classes = f" in {', '.join(s.classes)}" if s.classes else ""
            out[v.id] = AuditGate("refuse", f"{name}: its verifier audit found {s.false_positives} false "
                                            f"positive{'s' if s.false_positives != 1 else ''}{classes}; a run may use this version only "
                                            f"after an admin overrides the audit (or a fixed verifier passes a new one)")
        elif s.state == "failed":
            out[v.id] = AuditGate("refuse", f"{name}: its verifier audit failed, so nothing shows its verifier holds; "
                                            f"re-run the audit (the domain page, or `manage.py domains audit {v.domain.slug}`), "
                                            f"or an admin overrides it")
        elif opened is not None:
            out[v.id] = AuditGate("wait", f"waiting on the verifier audit of {name}, {waiting}")
        else:
            out[v.id] = AuditGate("wait", f"{name} has no verifier audit: one is requested when a run is queued on it")
    return out


def audit_blockers(*, versions: Iterable[DomainVersion]) -> dict[int, str]:
    """Versions runs may not pin, by version id, with the reason (the ``refuse`` gates): the latest
    finished audit found false positives, or the audits failed, and no admin overrode it."""
    return {vid: gate.reason for vid, gate in audit_gates(versions=versions).items() if gate.verdict == "refuse"}
