"""The verifier audit in the control plane: its state and rules, who may re-run and override it,
that every new domain version gets one, the worker task, the API, the CLI, the pages, and that a
run cannot pin a version whose audit found false positives until an admin overrides it."""
from __future__ import annotations

import io
import json
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone

from controlplane import dispatch
from controlplane.accounts.models import AuditLog
from controlplane.accounts.principal import SYSTEM
from controlplane.common.errors import Conflict, Forbidden, InvalidInput, NotFound
from controlplane.domains import selectors, services
from controlplane.domains.models import AuditStatus, Domain, DomainVersion, VerifierAudit, VerifierAuditOverride
from controlplane.runs import services as run_services
from controlplane.runs.models import RunState
from tests import factories
from tests.controlplane.audit_fakes import FakeAuditor, install, report


@pytest.fixture
def sent(monkeypatch):
    """Tasks sent to the broker, as (name, args)."""
    out = []
    monkeypatch.setattr(dispatch, "send", lambda name, *args, **kw: out.append((name, args)))
    return out


@pytest.fixture(autouse=True)
def _unaudited(monkeypatch):
    """The audits here start from nothing: factories.domain makes its domains (the world's too)
    without the clean audit it records as setup for tests about something else."""
    real = factories.domain
    monkeypatch.setattr(factories, "domain", lambda *args, audited=False, **fields: real(*args, audited=audited, **fields))


def version(domain: Domain) -> DomainVersion:
    return domain.versions.get(version=domain.version)


def audited(domain: Domain, rep: dict | None = None, *, error: str = "") -> VerifierAudit:
    """Request and record an audit of the domain's current version (as the worker would)."""
    audit = services._audit_create(version=version(domain), enqueue=False)
    return services.verifier_audit_record(audit=audit, report=None if error else (rep or report(domain=domain.slug)), error=error)


def client_for(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def post(client: Client, url: str, body=None):
    return client.post(url, json.dumps(body) if body is not None else "", content_type="application/json")


# ----------------------------------------------------------------------------- models and constraints
def _violates(**fields) -> bool:
    try:
        with transaction.atomic():
            VerifierAudit.objects.create(**fields)
    except IntegrityError:
        return True
    return False


def test_the_database_holds_the_audit_rules(world):
    dv = version(world.domain)
    now = timezone.now()
    counts = {"tasks": 1, "probes": 4, "false_positives": 0, "false_negatives_gold": 0, "false_negatives_equivalent": 0, "masked": 0}
    assert _violates(domain_version=dv, status="bogus")
    assert _violates(domain_version=dv, status=AuditStatus.DONE, finished_at=now)  # done without its counts
    assert _violates(domain_version=dv, status=AuditStatus.FAILED, finished_at=now)  # failed without a reason
    assert _violates(domain_version=dv, status=AuditStatus.PENDING, finished_at=now)  # open but finished
    assert _violates(domain_version=dv, status=AuditStatus.DONE, **counts)  # done but never finished
    assert _violates(domain_version=dv, status=AuditStatus.DONE, finished_at=now, **{**counts, "masked": -1})
    assert not _violates(domain_version=dv, status=AuditStatus.DONE, finished_at=now, **counts)
    assert not _violates(domain_version=dv, status=AuditStatus.PENDING)
    assert _violates(domain_version=dv, status=AuditStatus.RUNNING)  # a second open audit of one version
    assert not _violates(domain_version=version(world.domain2), status=AuditStatus.RUNNING)
    done = VerifierAudit.objects.filter(status=AuditStatus.DONE).first()
    with pytest.raises(IntegrityError), transaction.atomic():
        VerifierAuditOverride.objects.create(audit=done, admin_name="root", reason="")
    with pytest.raises(ValueError):
        done.terminate(AuditStatus.RUNNING)


def test_start_is_a_no_op_on_a_finished_audit_and_repeats_a_running_one(world):
    audit = services._audit_create(version=version(world.domain), enqueue=False)
    first = services.verifier_audit_start(audit_id=audit.pk)
    assert first.status == AuditStatus.RUNNING and first.started_at is not None
    # The worker died with it: a redelivered task starts it again.
    assert services.verifier_audit_start(audit_id=audit.pk) is not None
    services.verifier_audit_record(audit=audit, report=report())
    assert services.verifier_audit_start(audit_id=audit.pk) is None
    assert services.verifier_audit_start(audit_id=10**9) is None


# ----------------------------------------------------------------------------- every new version is audited
def test_create_and_edit_request_an_audit_of_each_new_version_after_commit(world, sent, django_capture_on_commit_callbacks):
    staff = factories.actor(world.staff)
    with django_capture_on_commit_callbacks(execute=True):
        d = services.domain_create(actor=staff, data={"slug": "sums", "title": "Sums", "kind": "math",
                                                      "task_source": {"family": "test"}, "verifier": factories.EXACT})
    v1 = VerifierAudit.objects.get(domain_version__domain=d, domain_version__version=1)
    assert v1.status == AuditStatus.PENDING and sent == [("temper.verify.audit", (v1.pk,))]
    with django_capture_on_commit_callbacks(execute=True):
        services.domain_update(actor=staff, domain=d, changes={"priority": 70})
    v2 = VerifierAudit.objects.get(domain_version__domain=d, domain_version__version=2)
    assert sent[-1] == ("temper.verify.audit", (v2.pk,))
    # No change, no version, no audit; a refused change sends nothing either.
    with django_capture_on_commit_callbacks(execute=True):
        services.domain_update(actor=staff, domain=Domain.objects.get(pk=d.pk), changes={"priority": 70})
    with pytest.raises(InvalidInput), django_capture_on_commit_callbacks(execute=True):
        services.domain_update(actor=staff, domain=Domain.objects.get(pk=d.pk), changes={"priority": 0})
    assert len(sent) == 2 and VerifierAudit.objects.filter(domain_version__domain=d).count() == 2


def test_sync_requests_an_audit_of_new_versions_only(db, sent, django_capture_on_commit_callbacks):
    out = io.StringIO()
    with django_capture_on_commit_callbacks(execute=True):
        call_command("domains", "sync", "--only", "builtin-addition", "builtin-parity", "--no-progress", stdout=out)
    audits = VerifierAudit.objects.filter(domain_version__domain__slug__in=["builtin-addition", "builtin-parity"])
    assert sorted(a for _, (a,) in sent) == sorted(audits.values_list("pk", flat=True)) and len(sent) == 2
    assert "2 verifier audits requested" in out.getvalue()
    with django_capture_on_commit_callbacks(execute=True):
        call_command("domains", "sync", "--only", "builtin-addition", "builtin-parity", "--no-progress", stdout=io.StringIO())
    assert len(sent) == 2 and audits.count() == 2


def test_a_jsonl_upload_requests_an_audit(world, sent, django_capture_on_commit_callbacks):
    body = {"team": "acme", "slug": "sums", "title": "Sums", "kind": "math", "verifier": factories.EXACT,
            "jsonl": "\n".join(json.dumps({"prompt": f"{a}+{a}=", "answer": str(2 * a)}) for a in range(3))}
    with django_capture_on_commit_callbacks(execute=True):
        r = post(client_for(world.users["admin"]), "/api/domains/upload", body)
    assert r.status_code == 201, r.content
    audit = VerifierAudit.objects.get(domain_version__domain__slug="sums")
    assert sent == [("temper.verify.audit", (audit.pk,))]
    assert r.json()["audit"]["state"] == "pending"


# ----------------------------------------------------------------------------- services and permissions
def test_who_may_request_a_re_run(world, sent, django_capture_on_commit_callbacks):
    team_dv, global_dv = version(world.team_domain), version(world.domain)
    for role in ("viewer", "member"):
        with pytest.raises(Forbidden):
            services.verifier_audit_request(actor=factories.actor(world.users[role]), version=team_dv)
    with pytest.raises(NotFound):
        services.verifier_audit_request(actor=factories.actor(world.other_users["admin"]), version=team_dv)
    with pytest.raises(Forbidden):  # a team admin does not run the global catalogue
        services.verifier_audit_request(actor=factories.actor(world.users["admin"]), version=global_dv)
    with django_capture_on_commit_callbacks(execute=True):
        a = services.verifier_audit_request(actor=factories.actor(world.users["admin"]), version=team_dv)
        b = services.verifier_audit_request(actor=factories.actor(world.staff), version=global_dv)
    assert sent == [("temper.verify.audit", (a.pk,)), ("temper.verify.audit", (b.pk,))]
    assert AuditLog.objects.filter(action="domain.audit.request", object_id=str(world.team_domain.pk)).count() == 1
    # A second request joins the audit that is waiting, and sends nothing more.
    with django_capture_on_commit_callbacks(execute=True):
        again = services.verifier_audit_request(actor=factories.actor(world.users["admin"]), version=team_dv)
    assert again.pk == a.pk and len(sent) == 2


def test_a_lost_audit_is_failed_and_replaced_by_a_new_request(world, sent):
    dv = version(world.team_domain)
    audit = services._audit_create(version=dv, enqueue=False)
    services.verifier_audit_start(audit_id=audit.pk)
    VerifierAudit.objects.filter(pk=audit.pk).update(started_at=timezone.now() - timedelta(seconds=services.AUDIT_LOST_AFTER_S + 1))
    fresh = services.verifier_audit_request(actor=factories.actor(world.users["admin"]), version=dv, enqueue=False)
    audit.refresh_from_db()
    assert fresh.pk != audit.pk and fresh.status == AuditStatus.PENDING
    assert audit.status == AuditStatus.FAILED and "lost" in audit.error


def test_record_keeps_counts_and_refuses_a_report_of_the_wrong_shape(world):
    audit = audited(world.domain, report(false_positives={"hedge": 2, "constant": 1}, gold_failing=1, masked=3))
    assert (audit.status, audit.false_positives, audit.false_negatives_gold, audit.masked) == (AuditStatus.DONE, 3, 1, 3)
    assert audit.false_positive_classes == ["constant", "hedge"] and audit.finished_at is not None
    assert audit.auditor_version == "fake-1" and audit.report["classes"]["hedge"]["false_positives"] == 2
    # A second result for a finished audit changes nothing.
    again = services.verifier_audit_record(audit=audit, report=report())
    assert again.false_positives == 3
    bad = report()
    del bad["probes"]
    broken = audited(world.domain2, bad)
    assert broken.status == AuditStatus.FAILED and "report.probes" in broken.error and broken.false_positives is None
    negative = audited(world.team_domain, {**report(), "false_positives": -1})
    assert negative.status == AuditStatus.FAILED and "report.false_positives" in negative.error


def test_the_latest_finished_audit_decides(world):
    dv = version(world.domain)
    assert selectors.audit_summary(version=dv).state == "none"
    pending = services._audit_create(version=dv, enqueue=False)
    assert selectors.audit_summary(version=dv).state == "pending"
    services.verifier_audit_record(audit=pending, report=report(false_positives={"hedge": 2}))
    s = selectors.audit_summary(version=dv)
    assert (s.state, s.blocks, s.false_positives, s.classes, s.label) == ("unsafe", True, 2, ["hedge"], "2 false positives")
    # A re-run that waits, or fails, does not lift the block; it is shown beside it.
    rerun = services._audit_create(version=dv, enqueue=False)
    s = selectors.audit_summary(version=dv)
    assert s.blocks and s.rerun_open and "re-audit pending" in s.label
    services.verifier_audit_record(audit=rerun, error="the sandbox pool was down")
    s = selectors.audit_summary(version=dv)
    assert s.blocks and s.latest_status == AuditStatus.FAILED
    clean = services._audit_create(version=dv, enqueue=False)
    services.verifier_audit_record(audit=clean, report=report(gold_failing=2))
    s = selectors.audit_summary(version=dv)
    assert (s.state, s.blocks, s.warning) == ("clean", False, True) and "2 gold failing" in s.label
    # The list annotations say the same as the per-version read.
    annotated = selectors.with_audit_summary(Domain.objects.filter(pk=world.domain.pk)).get()
    assert selectors.domain_audit_summary(annotated) == s


def test_override_rules(world):
    admin, member = factories.actor(world.users["admin"]), factories.actor(world.users["member"])
    dv = version(world.team_domain)
    with pytest.raises(Conflict):  # nothing finished to override
        services.verifier_audit_override(actor=admin, version=dv, reason="known")
    audited(world.team_domain, report())
    with pytest.raises(Conflict):  # a clean audit needs no override
        services.verifier_audit_override(actor=admin, version=dv, reason="known")
    unsafe = audited(world.team_domain, report(false_positives={"constant": 1}))
    with pytest.raises(Forbidden):
        services.verifier_audit_override(actor=member, version=dv, reason="please")
    with pytest.raises(NotFound):
        services.verifier_audit_override(actor=factories.actor(world.other_users["admin"]), version=dv, reason="mine now")
    with pytest.raises(InvalidInput) as exc:
        services.verifier_audit_override(actor=admin, version=dv, reason="   ")
    assert exc.value.errors[0].path == "reason"
    override = services.verifier_audit_override(actor=admin, version=dv, reason="constant 0 is a valid answer for 1 task in 40")
    assert override.audit == unsafe and override.admin_name == "acme-admin"
    log = AuditLog.objects.get(action="domain.audit.override")
    assert log.before["false_positives"] == 1 and log.before["classes"] == ["constant"] and "valid answer" in log.after["reason"]
    assert selectors.audit_summary(version=dv).state == "overridden"
    with pytest.raises(Conflict):
        services.verifier_audit_override(actor=admin, version=dv, reason="again")
    # Global domains: platform admins only.
    audited(world.domain, report(false_positives={"hedge": 1}))
    with pytest.raises(Forbidden):
        services.verifier_audit_override(actor=admin, version=version(world.domain), reason="x")
    services.verifier_audit_override(actor=factories.actor(world.staff), version=version(world.domain), reason="x")
    # The override covers one audit: a later one with false positives blocks again.
    audited(world.team_domain, report(false_positives={"hedge": 1}))
    assert selectors.audit_summary(version=dv).blocks


# ----------------------------------------------------------------------------- runs
def test_a_run_cannot_pin_an_unsafe_version_until_an_admin_overrides(world):
    member = factories.actor(world.users["member"])
    payload = factories.run_payload(["addition", "parity"], team="acme")
    audited(world.domain, report(false_positives={"hedge": 2, "constant": 1}))
    with pytest.raises(InvalidInput) as exc:
        run_services.run_create(actor=member, data=payload)
    [error] = exc.value.errors
    assert error.path == "domains.addition"
    assert "addition v1" in error.message and "3 false positives" in error.message and "constant, hedge" in error.message
    # Listed beside every other problem of the form, not only once the rest is right.
    with pytest.raises(InvalidInput) as exc:
        run_services.run_validate(actor=member, data={**payload, "base_model": "./no-such-model"})
    assert [e.path for e in exc.value.errors] == ["base_model", "domains.addition"]
    # Parity's audit is still pending: that does not block.
    services._audit_create(version=version(world.domain2), enqueue=False)
    services.verifier_audit_override(actor=factories.actor(world.staff), version=version(world.domain), reason="reviewed")
    run = run_services.run_create(actor=member, data=payload)
    assert run.run_domains.count() == 2


def test_start_refuses_a_draft_whose_pinned_version_turned_out_unsafe(world, sent):
    member = factories.actor(world.users["member"])
    pending = services._audit_create(version=version(world.domain), enqueue=False)
    run = run_services.run_create(actor=member, data=factories.run_payload(["addition"], team="acme"))
    services.verifier_audit_record(audit=pending, report=report(false_positives={"hedge": 1}))
    with pytest.raises(InvalidInput) as exc:
        run_services.run_start(actor=member, run=run)
    assert exc.value.errors[0].path == "domains.addition" and "1 false positive " in exc.value.errors[0].message
    run.refresh_from_db()
    assert run.state == RunState.DRAFT
    services.verifier_audit_override(actor=factories.actor(world.staff), version=version(world.domain), reason="reviewed")
    assert run_services.run_start(actor=member, run=run).state == RunState.QUEUED


def test_the_run_api_names_the_domain_version_and_classes(world):
    audited(world.domain, report(false_positives={"hedge": 2}))
    c = client_for(world.users["member"])
    body = factories.run_payload(["addition"], team="acme")
    for url in ("/api/runs/validate", "/api/runs"):
        r = post(c, url, body)
        assert r.status_code == 422
        assert r.json()["errors"] == [{"path": "domains.addition", "message": selectors.audit_blockers(
            versions=[version(world.domain)])[version(world.domain).id]}]
        assert "hedge" in r.json()["errors"][0]["message"]


# ----------------------------------------------------------------------------- API
def test_audit_api_reads(world, django_assert_max_num_queries):
    c = client_for(world.users["viewer"])
    r = c.get("/api/domains/addition/audit")
    assert r.status_code == 200 and r.json()["summary"]["state"] == "none" and r.json()["audit"] is None
    audited(world.domain, report(false_positives={"hedge": 2}))
    services.domain_update(actor=factories.actor(world.staff), domain=world.domain, changes={"priority": 60})  # v2, pending
    current = c.get("/api/domains/addition/audit").json()
    assert current["version"] == 2 and current["summary"]["state"] == "pending" and current["open"]["status"] == "pending"
    v1 = c.get("/api/domains/addition/versions/1/audit").json()
    assert v1["summary"]["state"] == "unsafe" and v1["summary"]["blocks"] and v1["open"] is None
    assert v1["audit"]["false_positive_classes"] == ["hedge"]
    assert v1["audit"]["report"]["classes"]["hedge"]["examples"][0]["expect"] == "no_pass"
    assert c.get("/api/domains/addition/versions/9/audit").status_code == 404
    assert c.get("/api/domains/globex-private/audit").status_code == 404
    # The list and the detail carry the current version's summary; the list in a bounded number of queries.
    audited(world.domain2, report())
    with django_assert_max_num_queries(6):
        rows = {d["slug"]: d["audit"] for d in c.get("/api/domains?limit=100").json()["items"]}
    assert rows["addition"]["state"] == "pending" and rows["parity"]["state"] == "clean" and rows["acme-private"]["state"] == "none"
    assert c.get("/api/domains/parity").json()["audit"]["label"] == "audited clean"
    paths = c.get("/api/openapi.json").json()["paths"]
    assert {"/api/domains/{slug}/audit", "/api/domains/{slug}/versions/{version}/audit",
            "/api/domains/{slug}/audit/override"} <= set(paths)


def test_audit_api_re_run_and_override(world, sent, django_capture_on_commit_callbacks):
    admin, member, other = (client_for(world.users["admin"]), client_for(world.users["member"]), client_for(world.other_users["admin"]))
    assert post(member, "/api/domains/acme-private/audit").status_code == 403
    assert post(other, "/api/domains/acme-private/audit").status_code == 404
    with django_capture_on_commit_callbacks(execute=True):
        r = post(admin, "/api/domains/acme-private/audit", {"note": "after the extract fix"})
    assert r.status_code == 202 and r.json()["open"]["status"] == "pending" and len(sent) == 1
    assert r.json()["open"]["note"] == "after the extract fix"
    assert post(admin, "/api/domains/acme-private/versions/1/audit").status_code == 202  # joins it
    assert VerifierAudit.objects.filter(domain_version__domain=world.team_domain).count() == 1
    services.verifier_audit_record(audit=VerifierAudit.objects.get(domain_version__domain=world.team_domain),
                                   report=report(false_positives={"hedge": 1}))
    assert post(admin, "/api/domains/addition/audit/override", {"reason": "x"}).status_code == 403  # the catalogue's
    assert post(client_for(world.staff), "/api/domains/addition/audit/override", {"reason": "x"}).status_code == 409  # never audited
    assert post(member, "/api/domains/acme-private/audit/override", {"reason": "x"}).status_code == 403
    assert post(other, "/api/domains/acme-private/audit/override", {"reason": "x"}).status_code == 404
    r = post(admin, "/api/domains/acme-private/audit/override", {"reason": ""})
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "reason"
    r = post(admin, "/api/domains/acme-private/audit/override", {})
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "reason"
    r = post(admin, "/api/domains/acme-private/versions/1/audit/override", {"reason": "the hedge probe is a known parser quirk"})
    assert r.status_code == 201
    assert r.json()["summary"]["state"] == "overridden" and r.json()["audit"]["override"]["admin"] == "acme-admin"


# ----------------------------------------------------------------------------- the worker task
def test_the_worker_task_records_the_report(world, monkeypatch):
    from workers.audit import run_audit

    auditor = install(monkeypatch, FakeAuditor(reports={"addition": report(domain="addition", false_positives={"hedge": 1})}))
    audit = services._audit_create(version=version(world.domain), enqueue=False)
    assert run_audit(audit.pk) == "done"
    audit.refresh_from_db()
    assert audit.status == AuditStatus.DONE and audit.false_positives == 1 and (audit.progress_done, audit.progress_total) == (40, 40)
    [call] = auditor.calls
    assert call["slug"] == "addition" and call["verifier"] == factories.EXACT and call["verify_many"] is None
    assert call["source"] == ("source", "addition") and call["family"] == "test"
    assert run_audit(audit.pk) == "skipped" and len(auditor.calls) == 1  # safe to run twice


def test_the_worker_task_end_to_end_through_the_real_auditor(db, sent):
    """``domains sync`` requests the audit; the task runs the trainer's real probes through the
    built-in addition domain's cascade and records a clean report; a broken verifier (one that
    passes everything) is caught and blocks runs."""
    from trainer.audit import AUDITOR_VERSION
    from workers.audit import run_audit

    call_command("domains", "sync", "--only", "builtin-addition", "--no-progress", stdout=io.StringIO())
    audit = VerifierAudit.objects.get(domain_version__domain__slug="builtin-addition")
    assert run_audit(audit.pk) == "done"
    audit.refresh_from_db()
    assert audit.probes > 100 and audit.false_positives == 0 and audit.false_negatives_gold == 0
    assert audit.auditor_version == AUDITOR_VERSION and audit.progress_done == audit.progress_total > 0
    assert set(audit.report["classes"]) >= {"gold", "constant"}
    assert selectors.audit_summary(version=audit.domain_version).state == "clean"

    # A verifier whose pattern matches any answer passes every probe: false positives.
    domain = Domain.objects.get(slug="builtin-addition")
    services.domain_update(actor=SYSTEM, domain=domain, changes={
        "verifier": {"stages": [{"type": "regex", "params": {"pattern": "(?s).*"}}]}})
    lax = VerifierAudit.objects.get(domain_version__domain=domain, domain_version__version=2)
    assert run_audit(lax.pk) == "done"
    lax.refresh_from_db()
    assert lax.false_positives > 0 and lax.false_positive_classes
    team = factories.team("acme")
    member = factories.actor(factories.member(team, "member"))
    with pytest.raises(InvalidInput) as exc:
        run_services.run_create(actor=member, data=factories.run_payload(["builtin-addition"], team="acme"))
    assert exc.value.errors[0].path == "domains.builtin-addition" and "builtin-addition v2" in exc.value.errors[0].message


def test_a_crashing_audit_is_recorded_as_failed(world, monkeypatch):
    from workers.audit import run_audit

    install(monkeypatch, FakeAuditor(fail_with=RuntimeError("the probe generator exploded")))
    audit = services._audit_create(version=version(world.domain), enqueue=False)
    assert run_audit(audit.pk) == "failed"
    audit.refresh_from_db()
    assert audit.status == AuditStatus.FAILED and "the probe generator exploded" in audit.error
    assert not selectors.audit_summary(version=version(world.domain)).blocks


def test_sandbox_cascades_go_through_verify_items_concurrently(monkeypatch, settings):
    import threading

    from trainer.tasks.base import Task
    from workers import audit as audit_worker
    from workers import verify

    threads, sizes = set(), []

    def fake_verify_items(spec, items, max_concurrent_sandboxes=None):
        threads.add(threading.current_thread().name)
        sizes.append(len(items))
        return [{"outcome": "pass" if item["completion"] == item["task"]["answer"] else "fail", "score": 1.0} for item in items]

    from trainer.catalogue import DomainSpec
    from trainer.catalogue.jsonl import UploadedSource

    monkeypatch.setattr(verify, "verify_items", fake_verify_items)
    # The domain's live sandbox quota, as the database would give it (this test has no database:
    # the pin below is not a row): enough slots for every thread.
    monkeypatch.setattr(audit_worker, "domain_quotas", lambda slugs: {s: SimpleNamespace(max_concurrent_sandboxes=64) for s in slugs})

    def pin(verifier):
        return DomainSpec(slug="d", version=1, title="d", kind="code", family="", source=UploadedSource("d", []), verifier_spec=verifier)

    assert audit_worker.verify_path(pin(factories.EXACT)) is None
    verify_many = audit_worker.verify_path(pin({"stages": [{"type": "code_tests"}]}))
    items = [(str(i % 3), Task("d", str(i), "p", answer="1")) for i in range(30)]
    results = verify_many(items)
    assert [r.outcome.value for r in results] == ["pass" if i % 3 == 1 else "fail" for i in range(30)]
    assert sorted(sizes) == sorted([audit_worker.CHUNK] * 3 + [30 - 3 * audit_worker.CHUNK])
    assert all(name.startswith("audit") for name in threads)


def test_the_task_is_registered_under_its_dispatch_name():
    from workers.celery import app

    app.loader.import_default_modules()
    task = app.tasks["temper.verify.audit"]
    assert dispatch.TASK_QUEUES["temper.verify.audit"] == "audit" == task.queue and task.acks_late


# ----------------------------------------------------------------------------- CLI
def test_cli_audit_exit_status_and_examples(world, monkeypatch):
    install(monkeypatch, FakeAuditor(reports={"addition": report(domain="addition", false_positives={"hedge": 2}),
                                              "parity": report(domain="parity")}))
    out = io.StringIO()
    call_command("domains", "audit", "parity", "--no-progress", stdout=out)
    assert "parity" in out.getvalue() and "0 false positives in 0 domains" in out.getvalue()
    out = io.StringIO()
    with pytest.raises(CommandError) as exc:
        call_command("domains", "audit", "addition", "parity", "--no-progress", "-v", "2", stdout=out)
    assert exc.value.returncode == 1 and "addition" in str(exc.value) and "parity" not in str(exc.value)
    text = out.getvalue()
    assert "FALSE POSITIVES" in text and "2 false positives in 1 domains" in text
    assert "addition v1 · hedge: 2 false positives" in text and "expected no_pass, got pass" in text
    assert selectors.audit_summary(version=version(world.domain)).blocks
    with pytest.raises(CommandError, match="no such domain: nope"):
        call_command("domains", "audit", "nope", "--no-progress", stdout=io.StringIO())


def test_cli_audit_failed_audits_exit_2(world, monkeypatch):
    install(monkeypatch, FakeAuditor(fail_with=ValueError("no task source")))
    with pytest.raises(CommandError) as exc:
        call_command("domains", "audit", "parity", "--no-progress", stdout=io.StringIO())
    assert exc.value.returncode == 2


def test_cli_audit_time_limit_fails_a_hanging_domain_and_goes_on(world, monkeypatch):
    install(monkeypatch, FakeAuditor(hang=True))
    out = io.StringIO()
    with pytest.raises(CommandError) as exc:
        call_command("domains", "audit", "parity", "--no-progress", "--timeout", "0.2", stdout=out)
    assert exc.value.returncode == 2 and "parity" in str(exc.value)
    audit = VerifierAudit.objects.get(domain_version__domain=world.domain2)
    assert audit.status == AuditStatus.FAILED and "ran longer than 0.2 s" in audit.error
    assert "ran longer than 0.2 s" in out.getvalue()  # the table's last column


# ----------------------------------------------------------------------------- pages
def test_domain_page_badge_examples_and_admin_controls(world):
    audited(world.team_domain, report(false_positives={"hedge": 2}, flagged_constant="0"))
    admin = client_for(world.users["admin"]).get("/domains/acme-private/").content.decode()
    assert 'data-testid="audit-badge" data-state="unsafe"' in admin and ">2 false positives<" in admin
    assert admin.count('data-testid="audit-example"') == 2 and "hedge probe passed" in admin and "beats chance" in admin
    assert "must not pass · got" in admin
    assert 'id="audit-override"' in admin and 'id="audit-rerun"' in admin
    member = client_for(world.users["member"]).get("/domains/acme-private/").content.decode()
    assert ">2 false positives<" in member and 'id="audit-override"' not in member and 'id="audit-rerun"' not in member
    services.verifier_audit_override(actor=factories.actor(world.users["admin"]), version=version(world.team_domain), reason="ok")
    page = client_for(world.users["admin"]).get("/domains/acme-private/").content.decode()
    assert 'data-state="overridden"' in page and 'id="audit-override"' not in page and "Overridden by <b>acme-admin</b>" in page
    listing = client_for(world.users["member"]).get("/domains/").content.decode()
    assert 'data-testid="audit-acme-private">overridden (2 false positives)<' in listing
    assert 'data-testid="audit-addition">not audited<' in listing


def test_run_form_marks_unsafe_and_pending_domains(world):
    audited(world.domain, report(false_positives={"hedge": 1}))
    services._audit_create(version=version(world.domain2), enqueue=False)
    data = client_for(world.users["member"]).get("/runs/new/").context["form_data"]
    audits = {d["slug"]: d["audit"] for d in data["domains"]}
    assert audits["addition"]["blocks"] and audits["addition"]["classes"] == ["hedge"] and audits["addition"]["version"] == 1
    assert audits["parity"]["state"] == "pending" and not audits["parity"]["blocks"]
    assert audits["acme-private"]["state"] == "none"


def test_a_badge_is_green_only_when_nothing_fails(world):
    """An audit with no false positive but 12 gold answers failing is not "audited clean" in
    green: its badge has its own colour and words, on the domains page, the domain's page and the
    API; a clean audit is green; a pending one is neither."""
    c = client_for(world.users["viewer"])
    audited(world.domain, report(gold_failing=12))
    audited(world.domain2, report())
    listing, detail = c.get("/domains/").content.decode(), c.get("/domains/addition/").content.decode()
    api = c.get("/api/domains/addition").json()["audit"]
    assert api["state"] == "clean" and api["tone"] == "warn" and api["label"] == "no false positives · 12 gold failing"
    assert 'class="badge audit-warn" data-tone="warn" data-testid="audit-addition">no false positives · 12 gold failing' in listing
    assert 'class="badge audit-ok" data-tone="ok" data-testid="audit-parity">audited clean' in listing
    assert 'data-tone="warn"' in detail and "audit-ok" not in detail
    assert c.get("/api/domains/acme-private").json()["audit"]["tone"] == "none"
