"""The verifier audit: adversarial probes generated from a domain's own tasks, run through its
real verify path, so that every domain version carries evidence that its reward cannot be gamed.

    from trainer import catalogue
    from trainer.audit import audit_domain
    domain = catalogue.pinned(slug, version, snapshot)  # a control-plane version, as a run pins it
    report = audit_domain(slug=slug, verifier=domain.verifier_spec, source=domain.source,
                          family=domain.family, verify_many=fn, progress=cb)
    report.false_positives, report.to_dict()

Probe classes and their rules: :mod:`trainer.audit.probes`; hostile programs for code domains and
the tampering signatures the run watch looks for: :mod:`trainer.audit.code_probes`; the run and
its tally: :mod:`trainer.audit.runner`. No Django here.
"""
from __future__ import annotations

from typing import Any

from trainer import catalogue
from trainer.audit.runner import AUDITOR_VERSION, AuditReport, audit_domain, default_verify_many, sample_tasks

__all__ = ["AUDITOR_VERSION", "AuditReport", "audit_domain", "default_verify_many", "sample_tasks",
           "audit_catalogue_domain"]


def audit_catalogue_domain(slug: str, **kwargs: Any) -> AuditReport:
    """Audit a catalogue domain with its default cascade (benches and tests)."""
    spec = catalogue.get(slug)
    return audit_domain(slug=slug, verifier=spec.verifier_spec, source=spec.source, family=spec.family, **kwargs)
