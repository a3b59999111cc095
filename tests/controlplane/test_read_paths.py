"""The read paths 20 concurrent clients hit (bench/api_load.py): what they answer, and a number of
queries that does not grow with the run's domains, runs or points."""
from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from controlplane.accounts.models import Membership
from controlplane.runs.models import MetricPoint
from tests import factories

pytestmark = pytest.mark.django_db


def _bearer(world, role="viewer"):
    """A token's headers, once used: its first use of the minute also records ``last_used_at``."""
    _, secret = factories.token(world.users[role], world.team, role)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    assert Client().get("/api/runs", **auth).status_code == 200
    return auth


def _run_with_points(world, n_domains: int, steps: int = 3):
    domains = [factories.domain(f"load-{n_domains}-{i}") for i in range(n_domains)]
    run = factories.run(world.team, by=world.users["member"], domains=domains, state="running")
    at = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=timezone.utc)
    MetricPoint.objects.bulk_create([MetricPoint(run=run, step=s, domain=d.slug, key=f"reward/{d.slug}", value=s / 10, time=at)
                                     for s in range(steps) for d in domains])
    return run


def test_metrics_page_has_the_documented_fields_and_cursor(client, world):
    run = _run_with_points(world, 2)
    auth = _bearer(world)
    first = client.get(f"/api/runs/{run.id}/metrics?after=0&limit=4", **auth)
    assert first.status_code == 200 and first["Content-Type"] == "application/json"
    page = first.json()
    ids = list(MetricPoint.objects.filter(run=run).order_by("id").values_list("id", flat=True))
    assert [p["id"] for p in page["items"]] == ids[:4] and page["next_cursor"] == ids[3]
    point = page["items"][0]
    assert set(point) == {"id", "step", "domain", "key", "value", "time"}
    assert (point["step"], point["domain"], point["key"], point["value"]) == (0, "load-2-0", "reward/load-2-0", 0.0)
    assert point["time"] == "2026-01-02T03:04:05.678Z"  # as ninja's encoder writes datetimes everywhere else
    rest = client.get(f"/api/runs/{run.id}/metrics?after={page['next_cursor']}&limit=100", **auth).json()
    assert [p["id"] for p in rest["items"]] == ids[4:] and rest["next_cursor"] == ids[-1]
    # Past the end: nothing, and the cursor stays where it was asked from.
    assert client.get(f"/api/runs/{run.id}/metrics?after={ids[-1]}", **auth).json() == {"items": [], "next_cursor": ids[-1]}
    only = client.get(f"/api/runs/{run.id}/metrics?after=0&key=reward/load-2-1", **auth).json()["items"]
    assert {p["key"] for p in only} == {"reward/load-2-1"} and len(only) == 3


def test_metrics_of_another_teams_run_are_not_found(client, world):
    run = _run_with_points(world, 1)
    _, secret = factories.token(world.other_users["admin"], world.other, "admin")
    assert client.get(f"/api/runs/{run.id}/metrics", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 404


def _count(client, url, **headers) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, **headers)
    assert response.status_code == 200, (url, response.status_code, response.content[:300])
    return len(ctx.captured_queries)


@pytest.mark.parametrize("path", ["", "/metrics?after=0", "/events", "/trajectories?step=1", "/explain", "/keys",
                                  "/series?key=reward/x,pass_rate/x"])
def test_api_reads_of_a_run_take_queries_independent_of_its_size(client, world, path, django_assert_max_num_queries):
    small, large = _run_with_points(world, 1), _run_with_points(world, 6, steps=20)
    auth = _bearer(world)
    counts = [_count(client, f"/api/runs/{run.id}{path}", **auth) for run in (small, large)]
    assert counts[0] == counts[1], counts
    with django_assert_max_num_queries(7):  # the token (with its role), the run, then the read itself
        client.get(f"/api/runs/{large.id}{path}", **auth)


def test_a_bearer_token_is_read_with_its_owners_role_in_one_query(client, world):
    run = _run_with_points(world, 1)
    _, secret = factories.token(world.users["member"], world.team, "admin")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(f"/api/runs/{run.id}/explain", **auth).status_code == 200
    assert not any("accounts_membership" in q["sql"] and "accounts_apitoken" not in q["sql"] for q in ctx.captured_queries)
    # The token's role is still capped by the owner's current membership (member: may not change priority) ...
    r = client.post(f"/api/runs/{run.id}/priority", data={"priority": 60}, content_type="application/json", **auth)
    assert r.status_code == 403
    # ... and a token whose owner left the team sees nothing of it.
    Membership.objects.filter(user=world.users["member"], team=world.team).delete()
    assert client.get(f"/api/runs/{run.id}/explain", **auth).status_code == 404


def test_runs_list_takes_queries_independent_of_the_number_of_runs(client, world):
    auth = _bearer(world)
    _run_with_points(world, 1)
    one = _count(client, "/api/runs", **auth)
    for n in range(2, 6):
        _run_with_points(world, n)
    assert _count(client, "/api/runs", **auth) == one


def test_pages_read_the_teams_once_and_take_queries_independent_of_the_domains(client, world):
    small, large = _run_with_points(world, 1), _run_with_points(world, 6, steps=20)
    client.force_login(world.users["member"])
    for url in ("/", f"/runs/{small.id}/"):
        with CaptureQueriesContext(connection) as ctx:
            body = client.get(url).content.decode()
        team_reads = [q for q in ctx.captured_queries if re.search(r'FROM "accounts_membership" INNER JOIN "accounts_team"', q["sql"])]
        assert len(team_reads) == 1, [q["sql"] for q in team_reads]
        assert 'data-testid="new-run"' in body or url != "/"  # the member's role still reaches the template
    assert _count(client, f"/runs/{small.id}/") == _count(client, f"/runs/{large.id}/")


def test_the_team_switcher_shows_the_role_in_the_chosen_team(client, world):
    u = world.users["viewer"]
    Membership.objects.create(user=u, team=world.other, role="admin")
    client.force_login(u)
    assert 'data-testid="new-run"' not in client.get("/").content.decode()  # acme, first by slug: viewer
    client.post("/team/", {"team": world.other.slug, "next": "/"})
    assert 'data-testid="new-run"' in client.get("/").content.decode()  # globex: admin
