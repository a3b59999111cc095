"""The registry pages: versions with their aliases, and the comparison with intervals and
highlighted regressions (Django's test client; stable data-testid attributes for browser tests)."""
from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from controlplane.registry import aliases, services
from tests import factories
from tests.controlplane.test_registry_gate import N, evaluated, version


@pytest.fixture
def page(world):
    admin = factories.actor(world.users["admin"])
    sv = services.suite_save(actor=admin, data={"slug": "core", "team": "acme", "items": [
        {"domain": "addition", "tasks": N}, {"domain": "parity", "tasks": N}]})
    run = factories.run(world.team, base_model="/models/tiny")
    first = version(world.team, f"tiny@{run.id}/1")
    last = version(world.team, f"tiny@{run.id}/5")
    first.run = last.run = run
    first.step, last.step = 1, 5
    first.save(); last.save()
    evaluated(first, sv, {"addition": [1.0, 0.0] * (N // 2), "parity": [1.0] * N})
    evaluated(last, sv, {"addition": [1.0] * N, "parity": [1.0, 0.0] * (N // 2)})
    aliases.alias_move(actor=admin, version=first, name="production")
    aliases.alias_move(actor=admin, version=last, name="candidate")
    client = Client()
    client.force_login(world.users["viewer"])
    return client, run, first, last


def test_versions_page_lists_versions_with_aliases(page, world):
    client, run, first, last = page
    html = client.get("/registry/").content.decode()
    assert 'data-testid="registry-versions"' in html and 'data-testid="nav-registry"' in html
    assert f'data-version-name="{first.name}"' in html and f'data-version-name="{last.name}"' in html
    assert 'data-testid="alias-tiny-production"' in html and 'data-testid="alias-tiny-candidate"' in html
    row = html[html.index(f'data-version-name="{last.name}"'):]
    assert "candidate" in row[:row.index("</tr>")]
    assert f'href="/registry/compare/?run={run.id}"' in html
    # Queries do not grow with the number of versions.
    with CaptureQueriesContext(connection) as few:
        client.get("/registry/")
    for step in range(6, 12):
        version(world.team, f"tiny@{run.id}/{step}")
    with CaptureQueriesContext(connection) as many:
        client.get("/registry/")
    assert len(many) == len(few)
    # Another team sees nothing of it.
    other = Client()
    other.force_login(world.other_users["admin"])
    assert first.name not in other.get("/registry/").content.decode()


def test_compare_page_shows_intervals_and_highlights_regressions(page):
    client, run, first, last = page
    for url in (f"/registry/compare/?run={run.id}", f"/registry/compare/?v={first.id}&v={last.id}"):
        html = client.get(url).content.decode()
        assert 'data-testid="compare-table"' in html, html[:2000]
        rows = re.findall(r'<tr data-testid="compare-row" data-layer="(\w+)" data-domain="([\w-]+)">(.*?)</tr>', html, re.S)
        cells = {domain: body for _, domain, body in rows}
        assert set(cells) == {"addition", "parity"}
        # addition improves (0.5 -> 1.0), parity regresses (1.0 -> 0.5): both significant.
        assert 'data-improvement="true"' in cells["addition"] and 'data-testid="improvement"' in cells["addition"]
        assert 'class="regression"' in cells["parity"] and 'data-testid="regression"' in cells["parity"]
        assert 'data-testid="cell-interval"' in cells["addition"] and "ci-bar" in cells["addition"]
        lo, hi = (float(x) for x in re.search(r'data-version-id="%d" data-mean="[^"]+" data-lo="([^"]+)" data-hi="([^"]+)"' % first.id,
                                              cells["addition"]).groups())
        assert lo < 0.5 < hi


def test_compare_page_from_the_base_model(page, world):
    client, run, first, last = page
    base = version(world.team, "tiny")
    base.kind, base.base_model = "base", "/models/tiny"
    base.save()
    last.base_model = first.base_model = "/models/tiny"
    last.save(); first.save()
    html = client.get(f"/registry/compare/?run={run.id}&from=base").content.decode()
    assert "no eval suite version has a completed evaluation" in html  # the base was never evaluated
    evaluated(base, first.eval_runs.get().suite_version, {"addition": [0.0] * N, "parity": [0.0] * N})
    html = client.get(f"/registry/compare/?run={run.id}&from=base").content.decode()
    assert re.findall(r'data-testid="compare-version" data-version-id="(\d+)"', html) == [str(base.id), str(last.id)]
    assert html.count('data-testid="improvement"') == 2


def test_compare_page_explains_what_is_missing(page, world):
    client, run, first, last = page
    html = client.get(f"/registry/compare/?v={first.id}").content.decode()
    assert 'data-testid="compare-error"' in html and "at least two" in html
    lone = version(world.team, "tiny@99/1")
    html = client.get(f"/registry/compare/?v={first.id}&v={lone.id}").content.decode()
    assert "no eval suite version has a completed evaluation" in html
    assert client.get("/registry/compare/?v=999999&v=1").status_code == 200
    anonymous = Client().get("/registry/")
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
