"""Audits gate every use of a domain version (#43, point 1): a run queued on a version whose audit
has not finished waits in the queue with the reason and starts when the audit passes; a version
whose audit found false positives or failed is refused with the reason (at the start, and for a
run already queued when its audit turns out so); an admin override, audited, lets it through."""
from __future__ import annotations

import pytest

from controlplane import dispatch
from controlplane.accounts.models import AuditLog
from controlplane.common.errors import InvalidInput
from controlplane.domains import services as domain_services
from controlplane.domains.models import AuditStatus, DomainVersion, VerifierAudit
from controlplane.runs import services as run_services
from controlplane.runs.models import Run, RunEvent, RunState
from controlplane.scheduling.models import ResourcePool, TeamQuota
from controlplane.scheduling.services import schedule_tick
from tests import factories
from tests.controlplane.audit_fakes import report


@pytest.fixture
def sent(monkeypatch):
    out = []
    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: out.append((name, args)))
    return out


@pytest.fixture
def gate(world, sent):
    """The world's team may run two CPU runs at once, and ``addition`` has a fresh domain version
    whose audit was just requested (as every new version's is), not yet run."""
    ResourcePool.objects.create(name="cpu", kind="cpu", capacity=4)
    TeamQuota.objects.update_or_create(team=world.team, defaults={"max_gpus": 0, "max_concurrent_runs": 2})
    fresh = factories.domain("fresh", audited=False)
    version = fresh.versions.get()
    audit = domain_services._audit_create(version=version, enqueue=False)
    world.member = factories.actor(world.users["member"])
    world.fresh, world.version, world.audit = fresh, version, audit
    return world


def _queued(w, slugs=("fresh", "addition")) -> Run:
    run = run_services.run_create(actor=w.member, data=factories.run_payload(list(slugs), team="acme"))
    return run_services.run_start(actor=w.member, run=run)


def _state(run: Run) -> tuple[str, dict]:
    run.refresh_from_db()
    return run.state, run.scheduler_note or {}


def test_a_run_waits_on_an_unfinished_audit_with_the_reason_and_starts_when_it_passes(gate):
    run = _queued(gate)
    other = _queued(gate, ("addition",))  # its only version is audited clean: it is not held
    schedule_tick()
    state, note = _state(run)
    assert state == RunState.QUEUED and note["binding"] == "audit" and note["verdict"] == "wait"
    assert note["reason"].startswith("waiting on the verifier audit of fresh v1, queued ") and note["reason"].endswith(" ago")
    assert (note["used"], note["limit"]) == (1, 2)  # one of its two pins cleared
    assert _state(other)[0] == RunState.RUNNING
    domain_services.verifier_audit_start(audit_id=gate.audit.pk)
    domain_services.verifier_audit_progress(audit=VerifierAudit.objects.get(pk=gate.audit.pk), done=3, total=5)
    schedule_tick()
    assert "running for" in _state(run)[1]["reason"] and "3 of 5 tasks" in _state(run)[1]["reason"]
    assert RunEvent.objects.filter(run=run, kind="audit_wait").count() == 1  # once per wait, not per tick
    domain_services.verifier_audit_record(audit=gate.audit, report=report(domain="fresh"))
    schedule_tick()
    state, note = _state(run)
    assert state == RunState.RUNNING and note == {}


def test_a_version_never_audited_gets_its_audit_requested_when_a_run_is_queued_on_it(gate, sent, django_capture_on_commit_callbacks):
    never = factories.domain("never", audited=False)
    assert not VerifierAudit.objects.filter(domain_version__domain=never).exists()
    with django_capture_on_commit_callbacks(execute=True):
        run = _queued(gate, ("never",))
    audit = VerifierAudit.objects.get(domain_version__domain=never)
    assert audit.status == AuditStatus.PENDING and f"run {run.pk}" in audit.note
    assert (domain_services.AUDIT_TASK, (audit.pk,)) in sent
    schedule_tick()
    assert _state(run)[1]["reason"].startswith("waiting on the verifier audit of never v1")


@pytest.mark.parametrize("outcome, words", [
    ({"report": report(domain="fresh", false_positives={"hedge": 2})}, "found 2 false positives in hedge"),
    ({"error": "the sandbox pool was down"}, "its verifier audit failed"),
])
def test_a_failed_or_positive_audit_refuses_the_start_and_holds_a_queued_run_until_an_override(gate, outcome, words):
    run = _queued(gate)
    domain_services.verifier_audit_record(audit=gate.audit, **outcome)
    schedule_tick()
    state, note = _state(run)
    assert state == RunState.QUEUED and note["verdict"] == "refuse" and words in note["reason"], note
    assert RunEvent.objects.filter(run=run, kind="audit_blocked").count() == 1
    draft = run_services.run_create(actor=gate.member, data=factories.run_payload(["addition"], team="acme"))
    draft.run_domains.create(domain=gate.fresh, domain_version=gate.version, weight=1.0)
    with pytest.raises(InvalidInput) as refused:
        run_services.run_start(actor=gate.member, run=draft)
    assert refused.value.errors[0].path == "domains.fresh" and words in refused.value.errors[0].message
    assert Run.objects.get(pk=draft.pk).state == RunState.DRAFT  # nothing changed
    # An admin (of the catalogue: a platform admin) lets it through, audited with the reason.
    domain_services.verifier_audit_override(actor=factories.actor(gate.staff), version=gate.version, reason="checked by hand")
    assert AuditLog.objects.get(action="domain.audit.override").after["reason"] == "checked by hand"
    schedule_tick()
    assert _state(run)[0] == RunState.RUNNING


def test_an_admin_may_let_runs_use_a_version_before_its_audit_finishes(gate):
    run = _queued(gate)
    schedule_tick()
    assert _state(run)[1]["verdict"] == "wait"
    override = domain_services.verifier_audit_override(actor=factories.actor(gate.staff), version=gate.version,
                                                       reason="an urgent fix; the audit runs beside it")
    assert override.audit_id == gate.audit.pk
    log = AuditLog.objects.get(action="domain.audit.override")
    assert log.before["status"] == AuditStatus.PENDING
    schedule_tick()
    assert _state(run)[0] == RunState.RUNNING
    # The audit still runs; when it finds false positives the early override lapses (logged), and
    # the next run on the version is refused until an admin overrides what was found.
    domain_services.verifier_audit_record(audit=gate.audit, report=report(domain="fresh", false_positives={"constant": 1}))
    assert AuditLog.objects.get(action="domain.audit.override_lapsed").after["false_positives"] == 1
    with pytest.raises(InvalidInput):
        _queued(gate, ("fresh",))
    domain_services.verifier_audit_override(actor=factories.actor(gate.staff), version=gate.version, reason="constant 0 is fine")
    assert _queued(gate, ("fresh",)).state == RunState.QUEUED


def test_a_re_audit_of_a_clean_version_does_not_hold_runs_back(gate):
    domain_services.verifier_audit_record(audit=gate.audit, report=report(domain="fresh"))
    domain_services._audit_create(version=gate.version, enqueue=False)  # a re-run waits behind the clean one
    run = _queued(gate)
    schedule_tick()
    assert _state(run)[0] == RunState.RUNNING


def test_resuming_a_paused_run_checks_its_pins_again(gate):
    domain_services.verifier_audit_record(audit=gate.audit, report=report(domain="fresh"))
    run = _queued(gate)
    schedule_tick()
    run.refresh_from_db()
    run.transition(RunState.PAUSED)
    run.save()
    rerun = domain_services._audit_create(version=gate.version, enqueue=False)
    domain_services.verifier_audit_record(audit=rerun, report=report(domain="fresh", false_positives={"hedge": 1}))
    with pytest.raises(InvalidInput) as refused:
        run_services.run_resume(actor=gate.member, run=run)
    assert "1 false positive" in refused.value.errors[0].message
    assert Run.objects.get(pk=run.pk).state == RunState.PAUSED


def test_finishing_an_audit_asks_the_scheduler_for_a_tick(gate, sent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        domain_services.verifier_audit_record(audit=gate.audit, report=report(domain="fresh"))
    assert ("temper.control.schedule_tick", ()) in sent
    assert DomainVersion.objects.get(pk=gate.version.pk)


def test_a_run_queued_before_its_version_had_an_audit_gets_one_requested_by_the_scheduler(gate, sent,
                                                                                         django_capture_on_commit_callbacks):
    never = factories.domain("older", audited=False)
    run = factories.run(gate.team, domains=[never], state="queued")  # queued before audits gated runs
    with django_capture_on_commit_callbacks(execute=True):
        schedule_tick()
    audit = VerifierAudit.objects.get(domain_version__domain=never)
    assert audit.status == AuditStatus.PENDING and (domain_services.AUDIT_TASK, (audit.pk,)) in sent
    state, note = _state(run)
    assert state == RunState.QUEUED and note["binding"] == "audit"
    schedule_tick()
    assert _state(run)[1]["reason"].startswith("waiting on the verifier audit of older v1, queued ")


# --- evaluations: the same gate ------------------------------------------------------------
def _suite_and_version(w, slugs=("fresh", "addition")):
    from controlplane.registry import services as registry

    admin = factories.actor(w.users["admin"])
    version = registry.version_register_base(team=w.team, base_model="/models/tiny")
    suite = registry.suite_save(actor=admin, data={"slug": "gated", "team": w.team.slug,
                                                   "items": [{"domain": s, "tasks": 4} for s in slugs]})
    return admin, version, suite


def test_an_evaluation_waits_on_an_unfinished_audit_and_is_sent_when_it_passes(gate, sent, django_capture_on_commit_callbacks):
    from controlplane.registry import services as registry
    from controlplane.registry.models import EvalState

    admin, version, suite = _suite_and_version(gate)
    held = registry.eval_start(actor=admin, version=version, suite_version=suite)
    assert held.state == EvalState.QUEUED and held.held.startswith("waiting on the verifier audit of fresh v1")
    assert ("temper.eval.run", (held.pk,)) not in sent
    assert registry.eval_claim(eval_run_id=held.pk, worker="w") is None  # a worker sent it anyway: not run
    clear = registry.eval_start(actor=admin, version=version,
                                suite_version=_suite_and_version(gate, ("addition",))[2])
    assert clear.held == ""
    schedule_tick()
    held.refresh_from_db()
    assert held.held and ("temper.eval.run", (held.pk,)) not in sent
    domain_services.verifier_audit_record(audit=gate.audit, report=report(domain="fresh"))
    with django_capture_on_commit_callbacks(execute=True):
        schedule_tick()
    held.refresh_from_db()
    assert held.held == "" and ("temper.eval.run", (held.pk,)) in sent
    assert registry.eval_claim(eval_run_id=held.pk, worker="w").state == EvalState.RUNNING


def test_an_evaluation_on_a_refused_version_is_refused_naming_the_item(gate, sent, django_capture_on_commit_callbacks):
    from controlplane.registry import services as registry
    from controlplane.registry.models import EvalRun

    admin, version, suite = _suite_and_version(gate)
    domain_services.verifier_audit_record(audit=gate.audit, report=report(domain="fresh", false_positives={"hedge": 2}))
    with pytest.raises(InvalidInput) as refused:
        registry.eval_start(actor=admin, version=version, suite_version=suite)
    assert refused.value.errors[0].path == "suite.items[0].domain" and "found 2 false positives" in refused.value.errors[0].message
    assert not EvalRun.objects.exists()  # nothing saved
    # An auto-evaluation (no one to refuse to) is held with the reason until an override.
    auto = registry._eval_create(version=version, suite_version=suite)
    assert "false positives" in auto.held
    domain_services.verifier_audit_override(actor=factories.actor(gate.staff), version=gate.version, reason="checked by hand")
    with django_capture_on_commit_callbacks(execute=True):
        assert registry.eval_holds_release() == 1
    auto.refresh_from_db()
    assert auto.held == "" and ("temper.eval.run", (auto.pk,)) in sent
