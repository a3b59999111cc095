"""The role matrix: every API endpoint x every role x own or other team -> allowed, 403 or 404."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

import pytest
from django.test import Client

from controlplane.runs.models import MetricPoint
from tests import factories

ROLES = ("viewer", "reviewer", "member", "admin")
ALL = set(ROLES)
RUNNERS = {"member", "admin"}
ADMIN = {"admin"}


@dataclass
class Endpoint:
    name: str
    method: str
    path: Callable  # (world, team, run, domain) -> str
    allowed: set  # roles allowed on their own team's objects
    ok: int = 200
    body: Callable | None = None  # (world, team) -> dict
    state: str = "draft"  # the run's state before the call
    other: int = 404  # status on the other team's objects


def _run_body(w, team):
    return factories.run_payload(["addition"], team=team.slug)


ENDPOINTS = [
    Endpoint("me", "get", lambda w, t, r, d: "/api/me", ALL, other=200),
    Endpoint("teams", "get", lambda w, t, r, d: "/api/teams", ALL, other=200),
    Endpoint("quota-get", "get", lambda w, t, r, d: f"/api/teams/{t.slug}/quota", ALL),
    Endpoint("quota-set", "put", lambda w, t, r, d: f"/api/teams/{t.slug}/quota", set(), body=lambda w, t: {"max_gpus": 3}),
    Endpoint("tokens-list", "get", lambda w, t, r, d: "/api/tokens", ALL, other=200),
    Endpoint("token-create", "post", lambda w, t, r, d: "/api/tokens", ALL, ok=201, body=lambda w, t: {"team": t.slug, "name": "ci"}),
    Endpoint("token-revoke-other-user", "delete", lambda w, t, r, d: f"/api/tokens/{w.tokens[t.slug].id}", ADMIN),
    Endpoint("audit", "get", lambda w, t, r, d: "/api/audit", ADMIN, other=None),
    Endpoint("domains-list", "get", lambda w, t, r, d: "/api/domains", ALL, other=200),
    Endpoint("domain-create-team", "post", lambda w, t, r, d: "/api/domains", ADMIN, ok=201,
             body=lambda w, t: {"team": t.slug, "slug": f"new-{t.slug}", "title": "New", "kind": "math",
                                "task_source": {"family": "test"}, "verifier": factories.EXACT}),
    Endpoint("domain-detail", "get", lambda w, t, r, d: f"/api/domains/{d.slug}", ALL),
    Endpoint("domain-update", "patch", lambda w, t, r, d: f"/api/domains/{d.slug}", ADMIN, body=lambda w, t: {"priority": 70}),
    Endpoint("domain-versions", "get", lambda w, t, r, d: f"/api/domains/{d.slug}/versions", ALL),
    Endpoint("domain-diff", "get", lambda w, t, r, d: f"/api/domains/{d.slug}/diff?a=1&b=1", ALL),
    Endpoint("run-validate", "post", lambda w, t, r, d: "/api/runs/validate", RUNNERS, body=_run_body),
    Endpoint("run-estimate", "post", lambda w, t, r, d: "/api/runs/estimate", RUNNERS, body=_run_body),
    Endpoint("run-create", "post", lambda w, t, r, d: "/api/runs", RUNNERS, ok=201, body=_run_body),
    Endpoint("runs-list", "get", lambda w, t, r, d: "/api/runs", ALL, other=200),
    Endpoint("run-detail", "get", lambda w, t, r, d: f"/api/runs/{r.id}", ALL),
    Endpoint("run-start", "post", lambda w, t, r, d: f"/api/runs/{r.id}/start", RUNNERS),
    Endpoint("run-pause", "post", lambda w, t, r, d: f"/api/runs/{r.id}/pause", RUNNERS, state="running"),
    Endpoint("run-resume", "post", lambda w, t, r, d: f"/api/runs/{r.id}/resume", RUNNERS, state="paused"),
    Endpoint("run-cancel", "post", lambda w, t, r, d: f"/api/runs/{r.id}/cancel", RUNNERS, state="queued"),
    Endpoint("run-priority", "post", lambda w, t, r, d: f"/api/runs/{r.id}/priority", ADMIN, body=lambda w, t: {"priority": 80}),
    Endpoint("run-weights", "post", lambda w, t, r, d: f"/api/runs/{r.id}/weights", RUNNERS, body=lambda w, t: {"weights": {"addition": 2.0}}),
    Endpoint("run-yaml-parse", "post", lambda w, t, r, d: "/api/runs/yaml/parse", ALL, body=lambda w, t: {"text": "name: x\n"}, other=200),
    Endpoint("run-yaml-dump", "post", lambda w, t, r, d: "/api/runs/yaml/dump", ALL, body=lambda w, t: {"body": {"name": "x"}}, other=200),
    Endpoint("run-metrics", "get", lambda w, t, r, d: f"/api/runs/{r.id}/metrics?after=0", ALL),
    Endpoint("run-trajectories", "get", lambda w, t, r, d: f"/api/runs/{r.id}/trajectories", ALL),
    Endpoint("run-events", "get", lambda w, t, r, d: f"/api/runs/{r.id}/events", ALL),
]


def _setup(world, state: str):
    world.runs = {}
    world.tokens = {}
    for t, users in ((world.team, world.users), (world.other, world.other_users)):
        run = factories.run(t, by=users["member"], domains=[world.domain], state=state)
        MetricPoint.objects.create(run=run, step=0, domain="addition", key="reward/addition", value=0.5)
        world.runs[t.slug] = run
        # A token of the team's member: only the member and the team's admins may revoke it.
        world.tokens[t.slug], _ = factories.token(users["member"], t, "member")
    return world


def _call(client: Client, ep: Endpoint, world, team, as_user=None):
    run = world.runs[team.slug]
    domain = world.team_domain if team == world.team else world.other_domain
    path = ep.path(world, team, run, domain)
    kwargs = {}
    if ep.body is not None:
        kwargs = {"data": json.dumps(ep.body(world, team)), "content_type": "application/json"}
    return getattr(client, ep.method)(path, **kwargs)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("ep", ENDPOINTS, ids=lambda e: e.name)
def test_own_team(world, ep, role):
    _setup(world, ep.state)
    user = world.users[role]
    if ep.name == "token-revoke-other-user" and role == "member":
        user = factories.member(world.team, "member")  # another member of the same team
    client = Client()
    client.force_login(user)
    response = _call(client, ep, world, world.team)
    expected = ep.ok if role in ep.allowed else 403
    assert response.status_code == expected, (ep.name, role, response.content[:300])
    if expected >= 400:
        assert "detail" in response.json()


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("ep", [e for e in ENDPOINTS if e.other is not None], ids=lambda e: e.name)
def test_other_team_is_invisible(world, ep, role):
    _setup(world, ep.state)
    client = Client()
    client.force_login(world.users[role])
    response = _call(client, ep, world, world.other)
    assert response.status_code == ep.other, (ep.name, role, response.content[:300])
    body = json.dumps(response.json())
    # Nothing of the other team leaks into what the caller may see.
    assert response.status_code != 200 or "globex-private" not in body and f'"id": {world.runs["globex"].id}, "team": "globex"' not in body


@pytest.mark.parametrize("role", ROLES)
def test_lists_show_only_own_team(world, role):
    _setup(world, "draft")
    client = Client()
    client.force_login(world.users[role])
    runs = client.get("/api/runs").json()["items"]
    assert {r["team"] for r in runs} == {"acme"}
    domains = {d["slug"] for d in client.get("/api/domains?limit=100").json()["items"]}
    assert {"addition", "parity", "acme-private"} <= domains and "globex-private" not in domains


def test_platform_admin_edits_the_global_catalogue_and_quotas(world):
    client = Client()
    client.force_login(world.staff)
    assert client.patch("/api/domains/addition", json.dumps({"priority": 90}), content_type="application/json").status_code == 200
    assert client.put("/api/teams/acme/quota", json.dumps({"max_gpus": 4}), content_type="application/json").json()["max_gpus"] == 4
    created = client.post("/api/domains", json.dumps({"slug": "g", "title": "G", "kind": "code", "task_source": {"family": "x"},
                                                    "verifier": factories.EXACT}), content_type="application/json")
    assert created.status_code == 201 and created.json()["team"] is None


@pytest.mark.parametrize("role", ROLES)
def test_team_roles_cannot_edit_the_global_catalogue(world, role):
    client = Client()
    client.force_login(world.users[role])
    r = client.patch("/api/domains/addition", json.dumps({"priority": 90}), content_type="application/json")
    assert r.status_code == 403


def test_anonymous_is_refused(world):
    client = Client()
    for ep in ENDPOINTS:
        if ep.method == "get":
            _setup(world, "draft") if not hasattr(world, "runs") else None
            assert _call(client, ep, world, world.team).status_code == 401, ep.name


def test_members_may_not_raise_priority_above_the_ceiling(world):
    client = Client()
    client.force_login(world.users["member"])
    r = client.post("/api/runs", json.dumps(factories.run_payload(["addition"], team="acme", priority=90)), content_type="application/json")
    assert r.status_code == 422
    assert r.json()["errors"] == [{"path": "priority", "message": "above 50 needs the team admin role"}]
    client.force_login(world.users["admin"])
    r = client.post("/api/runs", json.dumps(factories.run_payload(["addition"], team="acme", priority=90)), content_type="application/json")
    assert r.status_code == 201 and r.json()["priority"] == 90
