"""Tags on runs: set through the API (members and admins), each one checked, audited, shown on
the runs list, which filters and searches by them."""
from __future__ import annotations

import json

from django.test import Client

from controlplane.accounts.models import AuditLog
from controlplane.runs.models import RunEvent, RunTag
from tests import factories


def client_for(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def post(c, url, body):
    return c.post(url, json.dumps(body), content_type="application/json")


def test_tags_set_checked_and_audited(world):
    run = factories.run(world.team, domains=[world.domain], state="completed")
    member = client_for(world.users["member"])
    r = post(member, f"/api/runs/{run.id}/tags", {"tags": ["baseline", "ablation:kl", "baseline"]})
    assert r.status_code == 200, r.content
    assert r.json()["tags"] == ["ablation:kl", "baseline"]
    r = post(member, f"/api/runs/{run.id}/tags", {"tags": ["ok", "Bad Tag", "", "x" * 33]})
    assert r.status_code == 422
    assert [e["path"] for e in r.json()["errors"]] == ["tags[1]", "tags[2]", "tags[3]"]
    r = post(member, f"/api/runs/{run.id}/tags", {"tags": [f"t{i}" for i in range(21)]})
    assert r.status_code == 422 and "at most 20" in r.json()["errors"][0]["message"]
    assert sorted(RunTag.objects.filter(run=run).values_list("name", flat=True)) == ["ablation:kl", "baseline"]

    assert post(client_for(world.users["viewer"]), f"/api/runs/{run.id}/tags", {"tags": ["x"]}).status_code == 403
    assert post(client_for(world.other_users["admin"]), f"/api/runs/{run.id}/tags", {"tags": ["x"]}).status_code == 404
    assert post(member, f"/api/runs/{run.id}/tags", {"tags": ["baseline"], "more": 1}).status_code == 422

    r = post(member, f"/api/runs/{run.id}/tags", {"tags": ["baseline"]})
    assert r.json()["tags"] == ["baseline"]
    audits = list(AuditLog.objects.filter(action="run.tags").order_by("id"))
    assert [a.after["tags"] for a in audits] == [["ablation:kl", "baseline"], ["baseline"]]
    assert RunEvent.objects.filter(run=run, kind="tags").count() == 2


def test_runs_list_filters_and_searches_by_tag(world):
    tagged = factories.run(world.team, domains=[world.domain], name="kl sweep 1")
    plain = factories.run(world.team, domains=[world.domain], name="plain")
    RunTag.objects.create(run=tagged, name="sweep-kl")
    RunTag.objects.create(run=factories.run(world.other, domains=[world.domain], name="theirs"), name="sweep-kl")
    c = client_for(world.users["viewer"])
    ids = [r["id"] for r in c.get("/api/runs?tag=sweep-kl").json()["items"]]
    assert ids == [tagged.id]
    html = c.get("/?tag=sweep-kl").content.decode()
    assert f'data-run="{tagged.id}"' in html and f'data-run="{plain.id}"' not in html
    assert 'data-testid="runs-tag"' in html and 'data-testid="run-tag"' in html
    html = c.get("/?q=SWEEP-KL").content.decode()  # search matches a tag too
    assert f'data-run="{tagged.id}"' in html and f'data-run="{plain.id}"' not in html
    page = c.get(f"/runs/{tagged.id}/").content.decode()
    assert "sweep-kl" in page and 'data-testid="tags-form"' not in page  # viewers read tags, members edit them
    assert 'data-testid="tags-form"' in client_for(world.users["member"]).get(f"/runs/{tagged.id}/").content.decode()
