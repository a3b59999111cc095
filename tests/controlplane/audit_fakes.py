"""A stand-in for the auditor (``trainer.audit``) with the contract's shape, for tests of the
control plane's side: it returns a report the test chooses and records how it was called."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainer.catalogue import DomainSpec
from workers import audit as audit_task


def report(*, domain: str = "addition", false_positives: dict[str, int] | None = None, gold_failing: int = 0,
           equivalent_failing: int = 0, masked: int = 0, probes_per_class: int = 10, flagged_constant: str | None = None) -> dict:
    """An ``AuditReport.to_dict()``: classes ``gold``, ``equivalent``, ``hedge``, ``constant`` and
    those named in ``false_positives`` (class -> how many of its probes passed)."""
    false_positives = false_positives or {}
    names = sorted({"gold", "equivalent", "hedge", "constant", *false_positives})
    classes: dict[str, Any] = {}
    for name in names:
        fp = false_positives.get(name, 0)
        fn = gold_failing if name == "gold" else equivalent_failing if name == "equivalent" else 0
        examples = [{"task_id": f"t{i}", "completion": f"\\boxed{{wrong}} or \\boxed{{{i}}}", "outcome": "pass", "score": 1.0,
                     "expect": "no_pass", "note": f"{name} probe passed"} for i in range(fp)]
        examples += [{"task_id": f"g{i}", "completion": f"{i}", "outcome": "fail", "score": 0.0, "expect": "pass",
                      "note": "gold did not pass"} for i in range(fn)]
        classes[name] = {"probes": probes_per_class, "false_positives": fp, "false_negatives": fn, "examples": examples}
    constants = [{"constant": c, "rate": 0.9 if c == flagged_constant else 0.0, "chance": 0.1, "flagged": c == flagged_constant}
                 for c in ("0", "1", "Yes")]
    return {
        "domain": domain, "tasks": 5, "probes": probes_per_class * len(names),
        "false_positives": sum(false_positives.values()), "false_negatives_gold": gold_failing,
        "false_negatives_equivalent": equivalent_failing, "masked": masked, "wall_s": 0.25, "auditor_version": "fake-1",
        "classes": classes, "constant_bias": constants,
    }


@dataclass
class FakeReport:
    data: dict

    def to_dict(self) -> dict:
        return self.data


@dataclass
class FakeAuditor:
    """Installed in place of ``trainer.audit``'s functions where the audit task calls them
    (``workers.audit``); ``reports`` maps a slug to the report it returns."""

    reports: dict[str, dict] = field(default_factory=dict)
    calls: list[dict] = field(default_factory=list)
    fail_with: Exception | None = None
    hang: bool = False
    """Block until interrupted (a task generator that never returns)."""

    def pinned(self, version):
        """The version as the audit task pins it, its task source a marker (test domains are in no catalogue)."""
        snapshot, slug = version.snapshot, version.domain.slug
        if not snapshot.get("task_source"):
            raise ValueError(f"no task source for {slug}")
        return DomainSpec(slug=slug, title=snapshot["title"], kind=snapshot["kind"], family=snapshot.get("family", ""),
                          source=("source", slug), verifier_spec=snapshot["verifier"], version=version.version)

    def audit_domain(self, *, slug, verifier, source, family="", verify_many=None, progress=None):
        self.calls.append({"slug": slug, "verifier": verifier, "source": source, "family": family, "verify_many": verify_many})
        if progress is not None:
            progress(1, 2)
            progress(2, 2)
        if self.hang:
            import threading

            threading.Event().wait()
        if self.fail_with is not None:
            raise self.fail_with
        return FakeReport(self.reports.get(slug) or report(domain=slug))


def install(monkeypatch, auditor: FakeAuditor) -> FakeAuditor:
    monkeypatch.setattr(audit_task, "audit_domain", auditor.audit_domain)
    monkeypatch.setattr(audit_task, "pinned", auditor.pinned)
    return auditor
