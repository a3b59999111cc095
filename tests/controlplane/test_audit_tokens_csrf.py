"""Audit rows for every audited change; token expiry and revocation; CSRF on session writes."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.test import Client

from controlplane.accounts.models import ApiToken, AuditLog
from controlplane.accounts.services import token_create
from controlplane.domains.services import domain_update
from controlplane.runs import services as runs
from controlplane.scheduling.services import pool_set, team_quota_set
from tests import factories


def audit_actions():
    return list(AuditLog.objects.order_by("id").values_list("action", flat=True))


def test_every_audited_change_writes_a_row(world):
    admin = factories.actor(world.users["admin"])
    staff = factories.actor(world.staff)
    run = runs.run_create(actor=admin, data=factories.run_payload(["addition"], team="acme"))
    runs.run_start(actor=admin, run=run)
    run.refresh_from_db(); run.transition("running"); run.save()
    runs.run_pause(actor=admin, run=run)
    runs.run_resume(actor=admin, run=run)
    runs.run_set_priority(actor=admin, run=run, priority=70)
    runs.run_set_weights(actor=admin, run=run, weights={"addition": 3.0})
    runs.run_cancel(actor=admin, run=run)
    domain_update(actor=staff, domain=world.domain, changes={"priority": 80})
    domain_update(actor=staff, domain=world.domain, changes={"verifier": {"stages": [{"type": "exact", "timeout_s": 2.0}]}})
    team_quota_set(actor=staff, team=world.team, changes={"max_gpus": 2})
    pool_set(actor=staff, name="train", data={"kind": "train_gpu", "capacity": 4})
    token_create(actor=admin, team=world.team, name="ci")
    assert audit_actions() == [
        "run.create", "run.queued", "run.paused", "run.resumed", "run.priority", "run.weights", "run.cancelled",
        "domain.quota", "domain.update", "quota.set", "pool.set", "token.create",
    ]
    row = AuditLog.objects.get(action="domain.quota")
    assert row.before == {"priority": 50} and row.after == {"priority": 80} and row.actor_name == "root"
    row = AuditLog.objects.get(action="run.priority")
    assert row.before == {"priority": 50} and row.after == {"priority": 70} and row.team == world.team


def test_a_change_that_changes_nothing_writes_nothing(world):
    staff = factories.actor(world.staff)
    domain_update(actor=staff, domain=world.domain, changes={"priority": world.domain.priority})
    assert audit_actions() == [] and world.domain.versions.count() == 1


def test_domain_edit_makes_a_version_and_a_diff(world):
    staff = factories.actor(world.staff)
    domain_update(actor=staff, domain=world.domain, changes={"max_share": 0.25})
    client = Client()
    client.force_login(world.users["viewer"])
    versions = client.get("/api/domains/addition/versions").json()["items"]
    assert [v["version"] for v in versions] == [2, 1]
    diff = client.get("/api/domains/addition/diff?a=1&b=2").json()
    assert diff["changes"] == [{"path": "max_share", "before": 1.0, "after": 0.25}]


def _bearer(secret):
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def test_tokens_expired_and_revoked_are_refused(world):
    user = world.users["member"]
    _, good = factories.token(user, world.team, "member")
    _, expired = factories.token(user, world.team, "member", expires_in=-timedelta(seconds=1))
    revoked_token, revoked = factories.token(user, world.team, "member", revoked=True)
    client = Client()
    assert client.get("/api/runs", **_bearer(good)).status_code == 200
    assert client.get("/api/runs", **_bearer(expired)).status_code == 401
    assert client.get("/api/runs", **_bearer(revoked)).status_code == 401
    assert client.get("/api/runs", **_bearer("tmp_made_up")).status_code == 401


def test_token_is_shown_once_stored_hashed_and_revocable(world):
    client = Client()
    client.force_login(world.users["member"])
    created = client.post("/api/tokens", json.dumps({"team": "acme", "name": "ci", "role": "viewer"}), content_type="application/json").json()
    secret = created["token"]
    stored = ApiToken.objects.get(pk=created["id"])
    assert secret not in (stored.digest, stored.prefix) and stored.digest != secret
    listed = client.get("/api/tokens").json()["items"]
    assert all("token" not in t for t in listed)
    anon = Client()
    assert anon.get("/api/me", **_bearer(secret)).json()["teams"] == [{"slug": "acme", "name": "Acme", "role": "viewer"}]
    # The token's role caps what it may do: a viewer token cannot create runs.
    r = anon.post("/api/runs", json.dumps(factories.run_payload(["addition"], team="acme")), content_type="application/json", **_bearer(secret))
    assert r.status_code == 403
    assert client.delete(f"/api/tokens/{created['id']}").status_code == 200
    assert anon.get("/api/me", **_bearer(secret)).status_code == 401


def test_token_role_cannot_exceed_own_role(world):
    client = Client()
    client.force_login(world.users["viewer"])
    r = client.post("/api/tokens", json.dumps({"team": "acme", "name": "x", "role": "admin"}), content_type="application/json")
    assert r.status_code == 422 and r.json()["errors"] == [{"path": "role", "message": "cannot be above your own role 'viewer'"}]


def test_token_loses_rights_when_membership_is_downgraded(world):
    user = world.users["member"]
    _, secret = factories.token(user, world.team, "member")
    user.memberships.update(role="viewer")
    r = Client().post("/api/runs", json.dumps(factories.run_payload(["addition"], team="acme")), content_type="application/json", **_bearer(secret))
    assert r.status_code == 403


def test_csrf_is_enforced_on_session_writes(world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.users["member"])
    payload = json.dumps(factories.run_payload(["addition"], team="acme"))
    r = client.post("/api/runs", payload, content_type="application/json")
    assert r.status_code == 403
    client.get("/login/")  # sets the csrftoken cookie
    token = client.cookies["csrftoken"].value
    r = client.post("/api/runs", payload, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert r.status_code == 201
    # Reads need no token.
    assert client.get("/api/runs").status_code == 200


def test_bearer_writes_need_no_csrf(world):
    _, secret = factories.token(world.users["member"], world.team, "member")
    client = Client(enforce_csrf_checks=True)
    r = client.post("/api/runs", json.dumps(factories.run_payload(["addition"], team="acme")), content_type="application/json", **_bearer(secret))
    assert r.status_code == 201


def test_admin_edits_are_audited(world):
    from django.contrib import admin
    from django.test import RequestFactory

    from controlplane.runs.models import Run

    run = factories.run(world.team)
    model_admin = admin.site._registry[Run]
    request = RequestFactory().post("/")
    request.user = world.staff
    Form = model_admin.get_form(request, run, change=True)
    form = Form(instance=run, data={**{name: Form(instance=run).initial.get(name) for name in Form.base_fields}, "priority": 77})
    for name, field in Form.base_fields.items():  # JSON fields come back as text in a posted form
        if field.__class__.__name__ == "JSONField":
            form.data[name] = "{}"
        elif form.data[name] is None:
            form.data[name] = ""
    assert form.is_valid(), form.errors
    model_admin.save_model(request, form.save(commit=False), form, change=True)
    row = AuditLog.objects.get(action="run.admin_change")
    assert row.before["priority"] == 50 and row.after["priority"] == 77 and row.actor_name == "root"
    assert Run.objects.get(pk=run.pk).priority == 77
