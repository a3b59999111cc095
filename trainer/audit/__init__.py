"""The verifier audit: adversarial probes generated from a domain's own tasks, run through its
real verify path, so that every domain version carries evidence that its reward cannot be gamed.

    from trainer.audit import audit_domain, source_for_snapshot
    report = audit_domain(slug=slug, verifier=spec, source=source_for_snapshot(slug, snapshot),
                          family=snapshot.get("family", ""), verify_many=fn, progress=cb)
    report.false_positives, report.to_dict()

Probe classes and their rules: :mod:`trainer.audit.probes`; hostile programs for code domains and
the tampering signatures the run watch looks for: :mod:`trainer.audit.code_probes`; the run and
its tally: :mod:`trainer.audit.runner`. No Django here.
"""
from __future__ import annotations

from typing import Any

from trainer import catalogue
from trainer.audit.runner import AUDITOR_VERSION, AuditReport, audit_domain, default_verify_many, sample_tasks
from trainer.catalogue.jsonl import UploadedSource
from trainer.tasks.base import Task, TaskSource

__all__ = ["AUDITOR_VERSION", "AuditReport", "audit_domain", "default_verify_many", "sample_tasks",
           "source_for_snapshot", "audit_catalogue_domain"]


def source_for_snapshot(slug: str, snapshot: dict[str, Any]) -> TaskSource:
    """The task source a domain version's snapshot describes: an upload's own tasks, else the
    catalogue's source for the slug. ValueError when there is neither."""
    source = snapshot.get("task_source") or {}
    if source.get("family") == "jsonl":
        tasks = [Task(**t) for t in source.get("tasks") or []]
        if not tasks:
            raise ValueError(f"domain {slug!r}: the upload holds no tasks")
        return UploadedSource(slug, tasks)
    try:
        return catalogue.get(slug).source
    except KeyError:
        raise ValueError(f"domain {slug!r}: no task source (not in the trainer's catalogue and not an upload)") from None


def audit_catalogue_domain(slug: str, **kwargs: Any) -> AuditReport:
    """Audit a catalogue domain with its default cascade (benches and tests)."""
    spec = catalogue.get(slug)
    return audit_domain(slug=slug, verifier=spec.verifier_spec, source=spec.source, family=spec.family, **kwargs)
